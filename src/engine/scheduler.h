// Scheduler: the policy of one continuous-batching iteration as a pure
// function. A snapshot of the requests that want work (their phase, token
// counts, priority and state bytes), of the parked ones, and of the memory
// budget goes in; a plan comes out: which decode rows and prefill chunks run,
// which cache bytes are evicted, which states are preempted (swapped out)
// and which come back (swapped in). No model, session, lock or clock is
// involved, so every rule is unit-tested on plain numbers
// (tests/unit/scheduler_plan_test.cc); Engine::RunIteration executes plans.
//
// The plan is shaped for a batched executor: decode rows (one token each)
// and prefill chunks (token counts) are listed apart, each already within
// the iteration's batch, token and byte budgets, so an executor that runs
// prefill chunks and decode rows in one forward can take the approved steps
// as one ragged batch without asking the scheduler anything else.
#ifndef STRATA_ENGINE_SCHEDULER_H_
#define STRATA_ENGINE_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace strata {

// What a request needs from this iteration.
enum class StepKind {
  kPrefill,  // evaluate prompt tokens (and an unevaluated tail)
  kDecode,   // one batched decode row: the pending token
  kSample,   // its logits are ready: select a token, no compute
};

// A runnable, admitted request that wants work this iteration.
struct WantingRequest {
  uint64_t seq = 0;      // arrival order (unique)
  int32_t priority = 0;  // higher first, preempted last
  StepKind kind = StepKind::kPrefill;
  double cost = 0.0;             // effective cost: cheaper prefills first
  int64_t prefill_left = 0;      // prompt tokens still to feed
  int64_t tail = 0;              // history tokens its state has not consumed
  uint64_t state_bytes = 0;      // bytes of its state now (what a swap moves)
  uint64_t bytes_per_token = 0;  // growth per evaluated token
  bool swapped = false;          // preempted earlier: must come back first
  bool on_gpu = false;           // its model runs on a GPU (automatic budgets)
};

// An admitted request that cannot run now (its events wait to be polled, or
// it waits for tool results): its state is the first to preempt.
struct ParkedRequest {
  int32_t priority = 0;
  bool started = false;  // holds a state (an unstarted one holds nothing)
  bool swapped = false;
  uint64_t state_bytes = 0;
};

// The prefix cache as the budget sees it: its bytes, and the bytes of the
// entries it may drop, in the order it drops them (least recently used
// first; pinned entries are not listed).
struct CacheView {
  uint64_t bytes = 0;
  std::vector<uint64_t> evictable;
};

// A memory action of the plan, to be applied in plan order.
struct MemoryAction {
  enum class Kind {
    kEvictCache,  // drop unpinned cache entries until the cache holds `bytes`
    kSwapOut,     // preempt `victim`: its state leaves the budget (`bytes`)
    kSwapIn,      // bring `beneficiary`'s preempted state back (`bytes`)
  };
  Kind kind = Kind::kEvictCache;
  uint64_t bytes = 0;
  bool victim_parked = false;  // kSwapOut: `victim` indexes parked, else wanting
  size_t victim = 0;
  size_t beneficiary = 0;          // index into wanting of the request it makes room for
  uint64_t cache_bytes_after = 0;  // predicted cache size once applied
};

// What applying action number N of a plan really did, where it differed from
// the plan's assumption (done, and the cache at cache_bytes_after). A swap
// can be refused (no pinned host memory, no free device slot) and a swap-in
// may give cache slots back; the scheduler then plans again with the facts,
// which leaves actions before N unchanged.
struct ActionOutcome {
  bool done = true;
  CacheView cache;  // the cache after the action
};

struct ScheduleInput {
  std::vector<WantingRequest> wanting;
  std::vector<ParkedRequest> parked;
  uint64_t memory_budget = 0;  // bytes; 0: unlimited
  uint64_t active_bytes = 0;   // resident state of the sessions running requests
  CacheView cache;
  int32_t max_batch = 1;                      // decode rows per iteration, >= 1
  int64_t prefill_chunk_tokens = 0;           // 0: automatic by device
  int64_t prefill_tokens_while_decoding = 0;  // 0: automatic by device
  std::map<size_t, ActionOutcome> outcomes;   // by action number
};

// An approved step: `request` indexes wanting.
struct ScheduledStep {
  size_t request = 0;
  StepKind kind = StepKind::kPrefill;
  int64_t chunk = 0;  // kPrefill: prompt tokens to feed (the tail comes along)
};

// Nothing fit the budget. The first request in schedule order then either
// can never run (its state alone, with the pinned cache, exceeds the budget:
// it fails) or waits for memory that other requests or the host hold.
struct Stall {
  size_t request = 0;
  uint64_t alone_bytes = 0;
  bool fails = false;
};

struct SchedulePlan {
  std::vector<size_t> order;          // wanting, in schedule order
  std::vector<MemoryAction> actions;  // in application order
  std::vector<ScheduledStep> steps;   // approved, in schedule order
  std::optional<Stall> stall;
};

// Automatic prefill budgets (EngineOptions::prefill_chunk_tokens and
// prefill_tokens_while_decoding at 0).
inline constexpr int64_t kCpuPrefillChunk = 512;
inline constexpr int64_t kGpuPrefillChunk = 8192;
inline constexpr int64_t kGpuPrefillWhileDecoding = 2048;

// Prompt tokens all prefills together may feed this iteration: the chunk,
// or, when a decode step runs too, the stall decoding requests accept.
int64_t PrefillTokenBudget(int64_t chunk_tokens, int64_t while_decoding_tokens, bool gpu,
                           bool decoding);

// The rules, in order:
//  1. Order: priority (higher first); then decode rows and ready samples
//     before prefills; among prefills the cheaper effective cost first;
//     then arrival.
//  2. In that order each request takes what fits: a decode row while batch
//     slots remain, a prefill chunk while prefill tokens remain; its bytes
//     (growth, plus its state when it must swap in) come from the budget.
//  3. Short of bytes: evict unpinned cache entries; then a prefill shrinks
//     its chunk to what fits (still progress); then parked states of no
//     higher priority are preempted, then those of lower-ranked wanting
//     requests, lowest first. Still short: the request waits.
//  4. No request fit at all: the plan stalls (see Stall).
SchedulePlan PlanIteration(const ScheduleInput& input);

// Admission under a model's fixed pool of sequence states: a request starts
// only while its model's pool has a state for it beyond the admitted
// (started, resident) requests'. Models are opaque keys.
class PoolAdmission {
 public:
  // A resident, started request of the model with pool `capacity` (<= 0:
  // unbounded).
  void CountAdmitted(const void* model);
  bool MayStart(const void* model, int64_t capacity) const;
  void Started(const void* model) { CountAdmitted(model); }

 private:
  std::map<const void*, int64_t> admitted_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_SCHEDULER_H_
