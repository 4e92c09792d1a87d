// The bytes a sequence's state holds by the model's accounting
// (ModelInfo::state_bytes_per_token and _per_sequence): attention rows grow
// with the tokens consumed, recurrent matrices and conv tails do not. One
// definition for the engine's budget, the prefix cache's entries and the
// ledger's counters, so the three always agree.
#ifndef STRATA_MEMORY_STATE_BYTES_H_
#define STRATA_MEMORY_STATE_BYTES_H_

#include <algorithm>
#include <cstdint>

#include "model/model.h"

namespace strata {

// A state's bytes split by how they grow.
struct StateUse {
  uint64_t attention = 0;  // per-token rows (attention caches)
  uint64_t recurrent = 0;  // fixed per sequence (recurrent state, conv tails)

  uint64_t total() const { return attention + recurrent; }
  friend bool operator==(const StateUse&, const StateUse&) = default;
};

// The use of a state that has consumed `tokens` tokens (negative counts as 0).
inline StateUse StateUseOf(const ModelInfo& info, int64_t tokens) {
  return {info.state_bytes_per_token * static_cast<uint64_t>(std::max<int64_t>(0, tokens)),
          info.state_bytes_per_sequence};
}

// StateUseOf(info, tokens).total().
inline uint64_t StateBytes(const ModelInfo& info, int64_t tokens) {
  return StateUseOf(info, tokens).total();
}

}  // namespace strata

#endif  // STRATA_MEMORY_STATE_BYTES_H_
