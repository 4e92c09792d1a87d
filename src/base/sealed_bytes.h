// The envelope of every file format Strata writes itself (saved sessions,
// stored state objects): a 56-byte header, then the body.
//
//   offset 0   8 bytes   magic (the format's)
//          8   u32       format version
//         12   u32       0 (reserved)
//         16   u64       body length
//         24   32 bytes  SHA-256 of the body
//
// Unseal checks all of it before anything reads the body, so a truncated,
// extended or corrupted file is refused naming the offset.
#ifndef STRATA_BASE_SEALED_BYTES_H_
#define STRATA_BASE_SEALED_BYTES_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

inline constexpr size_t kSealHeaderBytes = 56;

// `magic`: 8 characters.
std::vector<uint8_t> Seal(const char* magic, uint32_t version, std::span<const uint8_t> body);

// The body of `bytes`. DataLoss for a short file, another magic (`kind`
// names the format: "a Strata session"), a body length that does not match
// or a checksum that fails; FailedPrecondition for another version. Errors
// start with `source`.
StatusOr<std::span<const uint8_t>> Unseal(std::span<const uint8_t> bytes, const char* magic,
                                          uint32_t version, const std::string& kind,
                                          const std::string& source);

}  // namespace strata

#endif  // STRATA_BASE_SEALED_BYTES_H_
