// The scheduler's rules on plain numbers, without a model or an engine:
// ordering and fairness, the prefill token budget and the chunking of long
// prompts, decode batch slots, and the memory budget (cache eviction, shorter
// chunks, preemption order, swap-ins, refused swaps, stalls), plus admission
// under a fixed state pool.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/scheduler.h"

namespace strata {
namespace {

WantingRequest Prefill(uint64_t seq, int64_t prompt, int32_t priority = 0) {
  WantingRequest w;
  w.seq = seq;
  w.priority = priority;
  w.kind = StepKind::kPrefill;
  w.cost = static_cast<double>(prompt);
  w.prefill_left = prompt;
  return w;
}

WantingRequest Decode(uint64_t seq, int32_t priority = 0) {
  WantingRequest w;
  w.seq = seq;
  w.priority = priority;
  w.kind = StepKind::kDecode;
  w.cost = 1.0;
  w.tail = 1;
  return w;
}

// With state accounting: `evaluated` tokens of 10 bytes plus 100 bytes.
WantingRequest WithState(WantingRequest w, int64_t evaluated) {
  w.bytes_per_token = 10;
  w.state_bytes = 100 + 10 * static_cast<uint64_t>(evaluated);
  return w;
}

ParkedRequest Parked(int32_t priority, uint64_t state_bytes) {
  ParkedRequest p;
  p.priority = priority;
  p.started = true;
  p.state_bytes = state_bytes;
  return p;
}

ScheduleInput Input(std::vector<WantingRequest> wanting, int64_t chunk = 0) {
  ScheduleInput in;
  in.wanting = std::move(wanting);
  in.max_batch = 64;
  in.prefill_chunk_tokens = chunk;
  return in;
}

// The steps as (request, chunk) pairs, for compact expectations.
std::vector<std::pair<size_t, int64_t>> Steps(const SchedulePlan& plan) {
  std::vector<std::pair<size_t, int64_t>> out;
  for (const ScheduledStep& s : plan.steps) out.emplace_back(s.request, s.chunk);
  return out;
}

std::vector<MemoryAction::Kind> Kinds(const SchedulePlan& plan) {
  std::vector<MemoryAction::Kind> out;
  for (const MemoryAction& a : plan.actions) out.push_back(a.kind);
  return out;
}

using Kind = MemoryAction::Kind;
using StepList = std::vector<std::pair<size_t, int64_t>>;

TEST(SchedulerOrder, PriorityThenDecodeBeforePrefillThenCostThenArrival) {
  std::vector<WantingRequest> w = {Prefill(1, 300),
                                   Prefill(2, 20),
                                   Decode(3),
                                   Prefill(4, 20),
                                   Decode(5, /*priority=*/1),
                                   Prefill(6, 5, /*priority=*/1)};
  const SchedulePlan plan = PlanIteration(Input(w));
  EXPECT_EQ(plan.order, (std::vector<size_t>{4, 5, 2, 1, 3, 0}));
}

TEST(SchedulerOrder, DecodeRowsAreOrderedByArrivalNotCost) {
  std::vector<WantingRequest> w = {Decode(7), Decode(2), Decode(5)};
  w[0].cost = 0.5;
  w[2].cost = 100.0;
  EXPECT_EQ(PlanIteration(Input(w)).order, (std::vector<size_t>{1, 2, 0}));
}

TEST(SchedulerBudget, DecodeRowsTakeBatchSlotsInOrder) {
  ScheduleInput in = Input({Decode(1), Decode(2), Decode(3, /*priority=*/2)});
  in.max_batch = 2;
  const SchedulePlan plan = PlanIteration(in);
  EXPECT_EQ(Steps(plan), (StepList{{2, 0}, {0, 0}}));
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_FALSE(plan.stall.has_value());
}

TEST(SchedulerBudget, PrefillsShareTheIterationsTokenBudget) {
  // 100 tokens for all prefills: the cheaper prompt first, the other gets the rest.
  const SchedulePlan plan = PlanIteration(Input({Prefill(1, 90), Prefill(2, 70)}, /*chunk=*/100));
  EXPECT_EQ(Steps(plan), (StepList{{1, 70}, {0, 30}}));
}

TEST(SchedulerBudget, AutomaticPrefillBudgetFollowsDeviceAndDecoding) {
  EXPECT_EQ(PrefillTokenBudget(0, 0, /*gpu=*/false, /*decoding=*/false), kCpuPrefillChunk);
  EXPECT_EQ(PrefillTokenBudget(0, 0, false, true), kCpuPrefillChunk);
  EXPECT_EQ(PrefillTokenBudget(0, 0, true, false), kGpuPrefillChunk);
  EXPECT_EQ(PrefillTokenBudget(0, 0, true, true), kGpuPrefillWhileDecoding);
  EXPECT_EQ(PrefillTokenBudget(300, 0, true, true), 300);  // capped by the chunk
  EXPECT_EQ(PrefillTokenBudget(300, 40, false, true), 40);
  EXPECT_EQ(PrefillTokenBudget(300, 40, false, false), 300);
  // A decode row in the iteration bounds the prefill beside it.
  WantingRequest gpu_prompt = Prefill(1, 20000);
  gpu_prompt.on_gpu = true;
  EXPECT_EQ(Steps(PlanIteration(Input({gpu_prompt}))), (StepList{{0, kGpuPrefillChunk}}));
  EXPECT_EQ(Steps(PlanIteration(Input({gpu_prompt, Decode(2)}))),
            (StepList{{1, 0}, {0, kGpuPrefillWhileDecoding}}));
}

// Runs iterations until every prompt is in, applying each plan's chunks;
// returns the chunks each request was given, in order.
std::vector<std::vector<int64_t>> ChunksUntilDone(std::vector<WantingRequest> w, int64_t chunk) {
  std::vector<std::vector<int64_t>> chunks(w.size());
  for (int iteration = 0; iteration < 1000; ++iteration) {
    ScheduleInput in = Input({}, chunk);
    std::vector<size_t> index;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].prefill_left == 0) continue;
      index.push_back(i);
      in.wanting.push_back(w[i]);
    }
    if (index.empty()) break;
    for (const ScheduledStep& s : PlanIteration(in).steps) {
      WantingRequest& r = w[index[s.request]];
      r.prefill_left -= s.chunk;
      r.cost = static_cast<double>(r.prefill_left);
      chunks[index[s.request]].push_back(s.chunk);
    }
  }
  return chunks;
}

TEST(SchedulerChunking, LongPromptsAreFedInChunksThatAddUpExactly) {
  // Lengths that are not multiples of 64 (nor of the chunk).
  EXPECT_EQ(ChunksUntilDone({Prefill(1, 1000)}, 0)[0], (std::vector<int64_t>{512, 488}));
  EXPECT_EQ(ChunksUntilDone({Prefill(1, 130)}, 64)[0], (std::vector<int64_t>{64, 64, 2}));
  EXPECT_EQ(ChunksUntilDone({Prefill(1, 63)}, 64)[0], (std::vector<int64_t>{63}));
  EXPECT_EQ(ChunksUntilDone({Prefill(1, 1)}, 64)[0], (std::vector<int64_t>{1}));
}

TEST(SchedulerChunking, AShortPromptOvertakesALongOneAndBothFinish) {
  // Cheaper first: the 45-token prompt is in after the first iteration; the
  // long one takes the rest of every budget and never waits a whole round.
  const auto chunks = ChunksUntilDone({Prefill(1, 333), Prefill(2, 45)}, 100);
  EXPECT_EQ(chunks[1], (std::vector<int64_t>{45}));
  EXPECT_EQ(chunks[0], (std::vector<int64_t>{55, 100, 100, 78}));
}

TEST(SchedulerFairness, EqualRequestsAreServedInArrivalOrder) {
  // Three identical prompts and a budget for one and a half of them.
  const SchedulePlan plan =
      PlanIteration(Input({Prefill(3, 40), Prefill(1, 40), Prefill(2, 40)}, 60));
  EXPECT_EQ(Steps(plan), (StepList{{1, 40}, {2, 20}}));
}

TEST(SchedulerFairness, PrefillsNeverTakeTheDecodeRowsTurn) {
  // However many prompts arrive first, every decoding request gets its row.
  std::vector<WantingRequest> w;
  for (uint64_t i = 1; i <= 5; ++i) w.push_back(Prefill(i, 1000));
  w.push_back(Decode(6));
  w.push_back(Decode(7));
  const SchedulePlan plan = PlanIteration(Input(w, 64));
  ASSERT_GE(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].request, 5u);
  EXPECT_EQ(plan.steps[1].request, 6u);
  EXPECT_EQ(plan.steps[2].chunk, 64);
}

TEST(SchedulerMemory, UnlimitedBudgetNeverEvictsOrPreempts) {
  ScheduleInput in = Input({WithState(Prefill(1, 500), 0), WithState(Decode(2), 900)});
  in.parked = {Parked(-5, 10000)};
  in.cache.bytes = 1 << 20;
  in.cache.evictable = {1 << 20};
  const SchedulePlan plan = PlanIteration(in);
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_EQ(plan.steps.size(), 2u);
}

TEST(SchedulerMemory, CacheEntriesGoFirstLeastRecentlyUsedFirst) {
  // 1000 budget, 700 active, 250 cached in entries of 100 (LRU), 100, 50.
  // A decode row of 10 bytes fits in the 50 left; a 20-token prefill (200)
  // needs 150 more: the two oldest entries go (200 freed).
  ScheduleInput in = Input({WithState(Decode(1), 5), WithState(Prefill(2, 20), 0)});
  in.memory_budget = 1000;
  in.active_bytes = 700;
  in.cache.bytes = 250;
  in.cache.evictable = {100, 100, 50};
  const SchedulePlan plan = PlanIteration(in);
  ASSERT_EQ(Kinds(plan), (std::vector<Kind>{Kind::kEvictCache}));
  EXPECT_EQ(plan.actions[0].bytes, 90u);  // 250 - (200 - 40 left)
  EXPECT_EQ(plan.actions[0].cache_bytes_after, 50u);
  EXPECT_EQ(Steps(plan), (StepList{{0, 0}, {1, 20}}));
}

TEST(SchedulerMemory, APrefillShrinksToWhatFitsBeforePreemptingAnyone) {
  // 1000 budget, 930 active: 70 bytes = 7 tokens of a 50-token prompt.
  ScheduleInput in = Input({WithState(Prefill(1, 50), 0)});
  in.memory_budget = 1000;
  in.active_bytes = 930;
  in.parked = {Parked(0, 500)};
  const SchedulePlan plan = PlanIteration(in);
  EXPECT_EQ(Kinds(plan), (std::vector<Kind>{Kind::kEvictCache}));  // nothing to evict
  EXPECT_EQ(Steps(plan), (StepList{{0, 7}}));
}

TEST(SchedulerMemory, PreemptionTakesParkedStatesOfNoHigherPriorityFirst) {
  // No byte is free. The priority-3 row needs 110 bytes.
  ScheduleInput in =
      Input({WithState(Decode(2, 1), 4), WithState(Decode(1, 3), 10), WithState(Decode(3, 0), 4)});
  in.wanting[1].bytes_per_token = 110;
  in.memory_budget = 1000;
  in.active_bytes = 1000;
  // Parked: one of higher priority (kept), one unstarted (holds nothing),
  // then two of 60 bytes that may go: both go, in list order, and nothing
  // of the wanting requests is touched for it.
  ParkedRequest unstarted = Parked(0, 60);
  unstarted.started = false;
  in.parked = {Parked(9, 500), unstarted, Parked(3, 60), Parked(0, 60)};
  const SchedulePlan plan = PlanIteration(in);
  ASSERT_EQ(Kinds(plan), (std::vector<Kind>{Kind::kEvictCache, Kind::kSwapOut, Kind::kSwapOut,
                                            Kind::kEvictCache}));
  EXPECT_TRUE(plan.actions[1].victim_parked);
  EXPECT_EQ(plan.actions[1].victim, 2u);
  EXPECT_EQ(plan.actions[1].beneficiary, 1u);
  EXPECT_EQ(plan.actions[2].victim, 3u);
  // 120 freed for 110: the priority-1 row takes the 10 left; the last one
  // finds nothing and nobody below it: it waits.
  EXPECT_EQ(Steps(plan), (StepList{{1, 0}, {0, 0}}));
  EXPECT_FALSE(plan.stall.has_value());
}

TEST(SchedulerMemory, WantingVictimsArePreemptedFromTheTailAndComeBackWhenRoomAllows) {
  // Three decode rows of 10 bytes, 15 bytes free: the first fits, the
  // second preempts the third (its 140 bytes), and the third, now swapped,
  // cannot come back this iteration.
  ScheduleInput in =
      Input({WithState(Decode(1), 3), WithState(Decode(2), 3), WithState(Decode(3), 4)});
  in.memory_budget = 1000;
  in.active_bytes = 985;
  in.wanting[1].bytes_per_token = 20;
  const SchedulePlan plan = PlanIteration(in);
  EXPECT_EQ(Steps(plan), (StepList{{0, 0}, {1, 0}}));
  std::vector<Kind> kinds = Kinds(plan);
  ASSERT_GE(kinds.size(), 2u);
  EXPECT_EQ(kinds[1], Kind::kSwapOut);
  EXPECT_FALSE(plan.actions[1].victim_parked);
  EXPECT_EQ(plan.actions[1].victim, 2u);
  EXPECT_EQ(plan.actions[1].bytes, 140u);
  EXPECT_EQ(plan.actions[1].beneficiary, 1u);
  // The next iteration: the swapped one needs its 140 bytes back plus 10.
  ScheduleInput next = Input({WithState(Decode(3), 4)});
  next.wanting[0].swapped = true;
  next.memory_budget = 1000;
  next.active_bytes = 850;
  const SchedulePlan back = PlanIteration(next);
  EXPECT_EQ(Kinds(back), (std::vector<Kind>{Kind::kSwapIn}));
  EXPECT_EQ(Steps(back), (StepList{{0, 0}}));
}

TEST(SchedulerMemory, ARefusedSwapOutIsPlannedAroundAndEarlierActionsStay) {
  ScheduleInput in = Input({WithState(Decode(1, 5), 0)});
  in.wanting[0].bytes_per_token = 100;
  in.memory_budget = 1000;
  in.active_bytes = 1000;
  in.parked = {Parked(0, 80), Parked(0, 80)};
  const SchedulePlan first = PlanIteration(in);
  ASSERT_EQ(Kinds(first), (std::vector<Kind>{Kind::kEvictCache, Kind::kSwapOut, Kind::kSwapOut}));
  // The executor could not move the first parked state (no host memory):
  // the plan goes on with the second alone, which is not enough.
  ActionOutcome refused;
  refused.done = false;
  in.outcomes[1] = refused;
  const SchedulePlan second = PlanIteration(in);
  ASSERT_EQ(Kinds(second), (std::vector<Kind>{Kind::kEvictCache, Kind::kSwapOut, Kind::kSwapOut,
                                              Kind::kEvictCache}));
  EXPECT_EQ(second.actions[0].bytes, first.actions[0].bytes);
  EXPECT_EQ(second.actions[2].victim, 1u);
  EXPECT_TRUE(second.steps.empty());
  ASSERT_TRUE(second.stall.has_value());
  EXPECT_FALSE(second.stall->fails);
}

TEST(SchedulerMemory, ARefusedSwapInKeepsTheRequestWaiting) {
  ScheduleInput in = Input({WithState(Decode(1), 2), WithState(Decode(2), 2)});
  in.wanting[0].swapped = true;
  in.memory_budget = 10000;
  SchedulePlan plan = PlanIteration(in);
  ASSERT_EQ(Kinds(plan), (std::vector<Kind>{Kind::kSwapIn}));
  ActionOutcome refused;
  refused.done = false;
  in.outcomes[0] = refused;
  plan = PlanIteration(in);
  EXPECT_EQ(Steps(plan), (StepList{{1, 0}}));
}

TEST(SchedulerMemory, AReportedCacheReplacesThePlannersModel) {
  // The swap-in gave two cache entries back to the executor's pool: later
  // evictions start from the cache as it really is.
  ScheduleInput in = Input({WithState(Decode(1), 2), WithState(Prefill(2, 30), 0)});
  in.wanting[0].swapped = true;
  in.memory_budget = 1000;
  in.active_bytes = 500;
  in.cache.bytes = 300;
  in.cache.evictable = {100, 100, 100};
  ActionOutcome gave_back;
  gave_back.cache.bytes = 100;
  gave_back.cache.evictable = {100};
  in.outcomes[0] = gave_back;
  const SchedulePlan plan = PlanIteration(in);
  // 1000 - 800 = 200: the swap-in (120 + 10) fits; 70 left for the prompt's
  // 300: the last entry goes (100 freed, 170), then the chunk shrinks to 17.
  ASSERT_EQ(Kinds(plan), (std::vector<Kind>{Kind::kSwapIn, Kind::kEvictCache}));
  EXPECT_EQ(plan.actions[1].cache_bytes_after, 0u);
  EXPECT_EQ(Steps(plan), (StepList{{0, 0}, {1, 17}}));
}

TEST(SchedulerStall, ARequestThatCanNeverFitFailsAndOneThatCanWaits) {
  // 500 budget; a pinned cache of 200 stays. The first request's state
  // (100 + 10 * 30) with its growth exceeds what is left even alone.
  ScheduleInput in = Input({WithState(Decode(1), 30)});
  in.memory_budget = 500;
  in.active_bytes = 400;
  in.cache.bytes = 300;
  in.cache.evictable = {100};
  SchedulePlan plan = PlanIteration(in);
  ASSERT_TRUE(plan.stall.has_value());
  EXPECT_EQ(plan.stall->request, 0u);
  EXPECT_EQ(plan.stall->alone_bytes, 100u + 300u + 10u + 200u);
  EXPECT_TRUE(plan.stall->fails);
  EXPECT_EQ(plan.actions.back().kind, Kind::kEvictCache);
  EXPECT_EQ(plan.actions.back().bytes, 0u);
  // Without the pinned entries it would fit alone: it waits for the
  // memory other requests hold.
  in.active_bytes = 500;
  in.cache.bytes = 100;
  plan = PlanIteration(in);
  ASSERT_TRUE(plan.stall.has_value());
  EXPECT_FALSE(plan.stall->fails);
}

TEST(SchedulerStall, NoStallWithoutABudgetOrWithoutWork) {
  EXPECT_FALSE(PlanIteration(Input({})).stall.has_value());
  ScheduleInput in = Input({});
  in.memory_budget = 1;
  EXPECT_FALSE(PlanIteration(in).stall.has_value());
}

TEST(PoolAdmission, StartsOnlyWhileThePoolHasAState) {
  int a = 0, b = 0;
  PoolAdmission pools;
  pools.CountAdmitted(&a);
  EXPECT_TRUE(pools.MayStart(&a, 2));
  pools.Started(&a);
  EXPECT_FALSE(pools.MayStart(&a, 2));
  EXPECT_TRUE(pools.MayStart(&a, 0));  // no fixed pool
  EXPECT_TRUE(pools.MayStart(&b, 1));  // pools are per model
}

}  // namespace
}  // namespace strata
