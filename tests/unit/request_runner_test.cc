// The per-request state machine on its own: the transitions of a token
// request and of a chat request's rounds, the feed and its snapshot points,
// token selection state and the metrics bookkeeping.
#include "engine/request_runner.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

using State = RequestRunner::State;

TEST(RequestRunner, ATokenRequestGeneratesOnceItsPromptIsFed) {
  RequestRunner run{SamplingParams{}};
  EXPECT_EQ(run.state(), State::kQueued);
  EXPECT_FALSE(run.started());
  run.StartPrompt({5, 6, 7, 8, 9});
  EXPECT_EQ(run.state(), State::kPrefilling);
  EXPECT_TRUE(run.started());
  EXPECT_EQ(run.history(), (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(std::vector<int32_t>(run.NextTokens(2).begin(), run.NextTokens(2).end()),
            (std::vector<int32_t>{5, 6}));
  run.Fed(2);
  EXPECT_EQ(run.prefill_left(), 3u);
  EXPECT_EQ(run.NextTokens(3)[0], 7);
  run.Fed(3);
  EXPECT_EQ(run.state(), State::kGenerating);
  run.Selected(42);
  EXPECT_EQ(run.sample_step(), 1u);
  EXPECT_EQ(run.history().back(), 42);
  run.Finish();
  EXPECT_EQ(run.state(), State::kFinished);
}

TEST(RequestRunner, AnEmptyPromptGoesStraightToGenerating) {
  RequestRunner run{SamplingParams{}};
  run.StartPrompt({});
  EXPECT_EQ(run.state(), State::kGenerating);
}

TEST(RequestRunner, AChatRoundEndsOnlyAtEndRoundAndTheFirstIsMarked) {
  RequestRunner run{SamplingParams{}};
  run.StartRound({1, 2, 3, 4}, {3, 4});
  EXPECT_TRUE(run.chat_round());
  run.Fed(2);
  // The suffix is in, but the round's end is the engine's to mark.
  EXPECT_EQ(run.state(), State::kPrefilling);
  EXPECT_TRUE(run.EndRound());
  EXPECT_EQ(run.state(), State::kGenerating);
  EXPECT_EQ(run.history(), (std::vector<int32_t>{1, 2, 3, 4}));
  run.AwaitTools();
  EXPECT_EQ(run.state(), State::kAwaitingTools);
  run.BeginRender();
  EXPECT_EQ(run.state(), State::kRendering);
  // The next round, with nothing new to feed, still passes through kPrefilling.
  run.StartRound({1, 2, 3, 4, 5}, {});
  EXPECT_EQ(run.state(), State::kPrefilling);
  EXPECT_FALSE(run.EndRound());
  EXPECT_EQ(run.history().size(), 5u);
}

TEST(RequestRunner, SnapshotPointsAreReachedInOrder) {
  RequestRunner run{SamplingParams{}};
  run.StartPrompt(std::vector<int32_t>(300, 1));
  run.SetSnapshotPoints({64, 128, 256});
  EXPECT_EQ(run.NextSnapshotAfter(0), 64);
  EXPECT_EQ(run.NextSnapshotAfter(64), 128);
  EXPECT_EQ(run.NextSnapshotAfter(200), 256);
  EXPECT_EQ(run.NextSnapshotAfter(256), -1);
}

TEST(RequestRunner, MetricsBookkeeping) {
  RequestRunner run{SamplingParams{}};
  EXPECT_TRUE(run.FirstScheduled());
  EXPECT_FALSE(run.FirstScheduled());
  const auto t0 = RequestRunner::Clock::now();
  bool first = false;
  EXPECT_DOUBLE_EQ(run.TokenInterval(t0 + std::chrono::milliseconds(5), t0, &first), 5.0);
  EXPECT_TRUE(first);
  EXPECT_DOUBLE_EQ(run.TokenInterval(t0 + std::chrono::milliseconds(7), t0, &first), 2.0);
  EXPECT_FALSE(first);
}

}  // namespace
}  // namespace strata
