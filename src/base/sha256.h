// SHA-256 (OpenSSL's libcrypto): the digest of saved sessions and stored
// state objects, whose integrity must hold across processes and machines.
#ifndef STRATA_BASE_SHA256_H_
#define STRATA_BASE_SHA256_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace strata {

using Sha256Digest = std::array<uint8_t, 32>;

// An incremental digest. Not thread-safe.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& Update(std::span<const uint8_t> bytes);
  Sha256& Update(std::string_view text);
  // Adds `v` as 8 little-endian bytes (lengths and counts in digests).
  Sha256& UpdateU64(uint64_t v);
  // The digest of everything added; the object then starts over.
  Sha256Digest Finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Sha256Digest Sha256Of(std::span<const uint8_t> bytes);
// Lowercase hexadecimal, 64 characters.
std::string ToHex(const Sha256Digest& digest);

}  // namespace strata

#endif  // STRATA_BASE_SHA256_H_
