#include "base/sha256.h"

#include <openssl/evp.h>

#include <new>

namespace strata {

// An EVP context; its allocation failing is an allocation failure like any
// other (bad_alloc), which the C ABI reports as out of memory.
struct Sha256::Ctx {
  Ctx() : md(EVP_MD_CTX_new()) {
    if (md == nullptr || EVP_DigestInit_ex(md, EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
  }
  ~Ctx() { EVP_MD_CTX_free(md); }
  EVP_MD_CTX* md;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;

Sha256& Sha256::Update(std::span<const uint8_t> bytes) {
  EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
  return *this;
}

Sha256& Sha256::Update(std::string_view text) {
  EVP_DigestUpdate(ctx_->md, text.data(), text.size());
  return *this;
}

Sha256& Sha256::UpdateU64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return Update(std::span<const uint8_t>(b, 8));
}

Sha256Digest Sha256::Finish() {
  Sha256Digest d{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md, d.data(), &n);
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);
  return d;
}

Sha256Digest Sha256Of(std::span<const uint8_t> bytes) { return Sha256().Update(bytes).Finish(); }

std::string ToHex(const Sha256Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    s[2 * i] = kHex[digest[i] >> 4];
    s[2 * i + 1] = kHex[digest[i] & 15];
  }
  return s;
}

}  // namespace strata
