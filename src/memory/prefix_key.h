// Content addresses of token prefixes under a model: the keys stored state
// objects are filed by in every tier, so two processes (or hosts) with the
// same model and the same prefix name it alike, and no other prefix or
// model can share its key.
//
// The chain: h_0 = SHA-256 of the fingerprint; h_i = SHA-256(h_{i-1} ||
// block i's 64 token ids, int32 little-endian). The key of n = 64q + r
// tokens is h_q for r = 0, else SHA-256(h_q || r || the r ids). One pass
// gives the keys of every block boundary of a prompt.
#ifndef STRATA_MEMORY_PREFIX_KEY_H_
#define STRATA_MEMORY_PREFIX_KEY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "memory/fingerprint.h"

namespace strata {

inline constexpr int64_t kPrefixKeyBlock = 64;

// The key of all of `tokens`.
Sha256Digest PrefixKey(const ModelFingerprint& model, std::span<const int32_t> tokens);

// The keys of the prefixes of 64, 128, ... tokens of `tokens`, in order.
std::vector<Sha256Digest> BlockPrefixKeys(const ModelFingerprint& model,
                                          std::span<const int32_t> tokens);

// PrefixKey(model, tokens) from `blocks`, BlockPrefixKeys(model, tokens),
// without hashing the full blocks again.
Sha256Digest PrefixKeyFromBlocks(const ModelFingerprint& model, std::span<const Sha256Digest> blocks,
                                 std::span<const int32_t> tokens);

}  // namespace strata

#endif  // STRATA_MEMORY_PREFIX_KEY_H_
