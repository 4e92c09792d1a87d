#include "base/sealed_bytes.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/sha256.h"

namespace strata {

std::vector<uint8_t> Seal(const char* magic, uint32_t version, std::span<const uint8_t> body) {
  std::vector<uint8_t> out;
  out.reserve(kSealHeaderBytes + body.size());
  ByteWriter h(&out);
  h.Raw(magic, 8);
  const uint32_t words[2] = {version, 0};
  h.Raw(words, sizeof(words));
  h.U64(body.size());
  const Sha256Digest sum = Sha256Of(body);
  h.Raw(sum.data(), sum.size());
  h.Raw(body.data(), body.size());
  return out;
}

StatusOr<std::span<const uint8_t>> Unseal(std::span<const uint8_t> bytes, const char* magic,
                                          uint32_t version, const std::string& kind,
                                          const std::string& source) {
  if (bytes.size() < kSealHeaderBytes || std::memcmp(bytes.data(), magic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(
        source, ": not ", kind, " (",
        bytes.size() < kSealHeaderBytes ? "shorter than the " : "no magic in its ",
        kSealHeaderBytes, "-byte header)"));
  }
  uint32_t words[2];
  std::memcpy(words, bytes.data() + 8, sizeof(words));
  if (words[0] != version) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": format version ", words[0], "; this build reads version ", version));
  }
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{bytes[16 + static_cast<size_t>(i)]} << (8 * i);
  if (length != bytes.size() - kSealHeaderBytes) {
    return absl::DataLossError(absl::StrCat(source, ": offset 16: body length ", length, ", but ",
                                            bytes.size() - kSealHeaderBytes,
                                            " bytes follow the header (truncated or extended)"));
  }
  const std::span<const uint8_t> body = bytes.subspan(kSealHeaderBytes);
  const Sha256Digest sum = Sha256Of(body);
  if (std::memcmp(sum.data(), bytes.data() + 24, sum.size()) != 0) {
    return absl::DataLossError(
        absl::StrCat(source, ": offset 24: SHA-256 of the body does not match (corrupted)"));
  }
  return body;
}

}  // namespace strata
