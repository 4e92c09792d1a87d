// The argument checks every executor's Model::Forward makes before any work,
// so that all of them reject a call with the same status and message.
#ifndef STRATA_MODEL_FORWARD_CHECKS_H_
#define STRATA_MODEL_FORWARD_CHECKS_H_

#include <cstdint>
#include <span>

#include "base/status.h"

namespace strata {

// InvalidArgument for no tokens or a token id outside [0, vocab);
// OutOfRange when `tokens` on top of `past` exceed the state's `capacity`.
Status CheckForwardTokens(std::span<const int32_t> tokens, int64_t vocab, int64_t past,
                          int64_t capacity);

}  // namespace strata

#endif  // STRATA_MODEL_FORWARD_CHECKS_H_
