// Stop rules: when a generated token ends a request, one set of rules for
// token-level and chat requests alike. The engine applies them after each
// selected token: the end-token rule before the token is delivered (an end
// token is not shown), the limit rules after.
#ifndef STRATA_ENGINE_STOP_RULES_H_
#define STRATA_ENGINE_STOP_RULES_H_

#include <cstdint>

#include "engine/request.h"

namespace strata {

// kEos for the model's EOS token (`eos_token` >= 0, when stop_at_eos), else
// kStopToken for one of params.stop_tokens (a chat request's include the
// template's end-of-turn tokens), else kNone.
FinishReason EndTokenReason(const GenerationParams& params, int32_t eos_token, int32_t token);

// The history length at which a request ends with kContextFull: its own
// max_context_tokens when set, never beyond the session's context.
int64_t ContextCap(const GenerationParams& params, int64_t session_context_tokens);

// After a delivered token: kMaxTokens once max_tokens (> 0) tokens are
// generated, else kContextFull once the history reaches `context_cap`, else
// kNone.
FinishReason LimitReason(const GenerationParams& params, int64_t num_generated,
                         int64_t history_tokens, int64_t context_cap);

}  // namespace strata

#endif  // STRATA_ENGINE_STOP_RULES_H_
