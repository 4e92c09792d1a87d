// The stop rules shared by token and chat requests: end tokens (EOS before
// stop tokens) and the limits (max_tokens before the context cap).
#include "engine/stop_rules.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(StopRules, EndTokens) {
  GenerationParams p;
  p.stop_tokens = {7, 9};
  EXPECT_EQ(EndTokenReason(p, /*eos_token=*/9, 9), FinishReason::kEos);
  EXPECT_EQ(EndTokenReason(p, 9, 7), FinishReason::kStopToken);
  EXPECT_EQ(EndTokenReason(p, 9, 8), FinishReason::kNone);
  EXPECT_EQ(EndTokenReason(p, -1, 8), FinishReason::kNone);  // a model without EOS
  p.stop_at_eos = false;
  EXPECT_EQ(EndTokenReason(p, 9, 9), FinishReason::kStopToken);  // still a stop token
  p.stop_tokens.clear();
  EXPECT_EQ(EndTokenReason(p, 9, 9), FinishReason::kNone);
}

TEST(StopRules, ContextCap) {
  GenerationParams p;
  EXPECT_EQ(ContextCap(p, 4096), 4096);
  p.max_context_tokens = 100;
  EXPECT_EQ(ContextCap(p, 4096), 100);
  EXPECT_EQ(ContextCap(p, 50), 50);  // never beyond the session's
}

TEST(StopRules, Limits) {
  GenerationParams p;
  p.max_tokens = 3;
  EXPECT_EQ(LimitReason(p, 2, 10, 100), FinishReason::kNone);
  EXPECT_EQ(LimitReason(p, 3, 10, 100), FinishReason::kMaxTokens);
  EXPECT_EQ(LimitReason(p, 3, 100, 100), FinishReason::kMaxTokens);  // max_tokens first
  EXPECT_EQ(LimitReason(p, 2, 100, 100), FinishReason::kContextFull);
  p.max_tokens = 0;  // until the context is full
  EXPECT_EQ(LimitReason(p, 1000, 99, 100), FinishReason::kNone);
  EXPECT_EQ(LimitReason(p, 1000, 100, 100), FinishReason::kContextFull);
}

}  // namespace
}  // namespace strata
