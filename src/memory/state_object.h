// The stored state object: what a storage tier (disk, remote) holds for one
// prefix-cache entry, the hybrid unit whole: the attention rows of the
// prefix and the recurrent state at its end (one Model::SaveCheckpoint), the
// logits after it, and the exact tokens.
//
// The envelope of base/sealed_bytes.h (magic "STRATAKV", version
// kStateObjectVersion), then: the model fingerprint (memory/fingerprint.h,
// which carries the state's region layout), the key (32 bytes), the token
// range [0, n) and the n token ids, the session context the checkpoint
// restores into, the logits, the checkpoint. An object is refused (a
// counted miss, never used) when its envelope fails, when it was made by
// another model, or when its key is not the one asked for or not the key of
// its own tokens.
#ifndef STRATA_MEMORY_STATE_OBJECT_H_
#define STRATA_MEMORY_STATE_OBJECT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"
#include "memory/fingerprint.h"

namespace strata {

inline constexpr uint32_t kStateObjectVersion = 1;

struct StoredPrefix {
  std::vector<int32_t> tokens;      // the prefix, from token 0
  int64_t max_context = 0;          // of the state the checkpoint was made from
  std::vector<float> logits;        // after the last token ([vocab] or empty)
  std::vector<uint8_t> checkpoint;  // Model::SaveCheckpoint
};

std::vector<uint8_t> EncodeStateObject(const ModelFingerprint& model, const StoredPrefix& p);

// DataLoss for a damaged object or one whose key does not match (its name,
// or its tokens); FailedPrecondition for another model's (naming the field).
StatusOr<StoredPrefix> DecodeStateObject(std::span<const uint8_t> bytes,
                                         const ModelFingerprint& expected,
                                         const Sha256Digest& key, const std::string& source);

// The body parser alone (for the fuzz target): `model` and `key` receive the
// body's; the key is not checked against the tokens.
StatusOr<StoredPrefix> DecodeStateObjectBody(std::span<const uint8_t> body, ModelFingerprint* model,
                                             Sha256Digest* key, const std::string& source);

}  // namespace strata

#endif  // STRATA_MEMORY_STATE_OBJECT_H_
