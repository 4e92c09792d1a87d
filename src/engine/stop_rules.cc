// Stop rules: end tokens and length limits.
#include "engine/stop_rules.h"

#include <algorithm>

namespace strata {

FinishReason EndTokenReason(const GenerationParams& params, int32_t eos_token, int32_t token) {
  if (params.stop_at_eos && eos_token >= 0 && token == eos_token) return FinishReason::kEos;
  if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), token) !=
      params.stop_tokens.end()) {
    return FinishReason::kStopToken;
  }
  return FinishReason::kNone;
}

int64_t ContextCap(const GenerationParams& params, int64_t session_context_tokens) {
  const int64_t own = params.max_context_tokens;
  return own > 0 ? std::min(own, session_context_tokens) : session_context_tokens;
}

FinishReason LimitReason(const GenerationParams& params, int64_t num_generated,
                         int64_t history_tokens, int64_t context_cap) {
  if (params.max_tokens > 0 && num_generated >= params.max_tokens) return FinishReason::kMaxTokens;
  if (history_tokens >= context_cap) return FinishReason::kContextFull;
  return FinishReason::kNone;
}

}  // namespace strata
