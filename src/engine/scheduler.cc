// Scheduler: ordering, budgets, eviction and preemption over a snapshot.
#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace strata {
namespace {

// The plan under construction: the budget left and the memory actions so
// far, with the facts the executor reported for earlier actions.
class Planner {
 public:
  explicit Planner(const ScheduleInput& in)
      : in_(in),
        cache_(in.cache),
        wanting_swapped_(in.wanting.size()),
        parked_swapped_(in.parked.size()),
        preempted_(in.wanting.size(), false) {
    for (size_t i = 0; i < in.wanting.size(); ++i) wanting_swapped_[i] = in.wanting[i].swapped;
    for (size_t i = 0; i < in.parked.size(); ++i) parked_swapped_[i] = in.parked[i].swapped;
    avail_ = limited() ? static_cast<int64_t>(in.memory_budget) -
                             static_cast<int64_t>(in.active_bytes + in.cache.bytes)
                       : std::numeric_limits<int64_t>::max();
  }

  bool limited() const { return in_.memory_budget != 0; }
  int64_t avail() const { return avail_; }
  void Spend(int64_t bytes) { avail_ -= bytes; }
  bool swapped(size_t wanting) const { return wanting_swapped_[wanting]; }
  bool preempted(size_t wanting) const { return preempted_[wanting]; }
  uint64_t cache_bytes() const { return cache_.bytes; }
  std::vector<MemoryAction> TakeActions() { return std::move(actions_); }

  // Drops evictable entries, least recently used first, until the cache
  // holds at most `target` bytes; credits what it freed.
  void EvictTo(uint64_t target, size_t beneficiary) {
    MemoryAction a{MemoryAction::Kind::kEvictCache, target};
    a.beneficiary = beneficiary;
    uint64_t freed = 0;
    if (const ActionOutcome* o = Reported()) {
      freed = cache_.bytes > o->cache.bytes ? cache_.bytes - o->cache.bytes : 0;
      cache_ = o->cache;
    } else {
      size_t dropped = 0;
      while (cache_.bytes > target && dropped < cache_.evictable.size()) {
        freed += cache_.evictable[dropped];
        cache_.bytes -= cache_.evictable[dropped++];
      }
      cache_.evictable.erase(cache_.evictable.begin(),
                             cache_.evictable.begin() + static_cast<std::ptrdiff_t>(dropped));
    }
    Record(a);
    avail_ += static_cast<int64_t>(freed);
  }

  // Preempts a parked or wanting request's state; false when refused.
  bool SwapOut(bool parked, size_t victim, uint64_t bytes, size_t beneficiary) {
    MemoryAction a{MemoryAction::Kind::kSwapOut, bytes, parked, victim, beneficiary};
    const bool done = Apply(a);
    if (!done) return false;
    (parked ? parked_swapped_ : wanting_swapped_)[victim] = true;
    if (!parked) preempted_[victim] = true;
    avail_ += static_cast<int64_t>(bytes);
    return true;
  }

  // Brings a preempted wanting request back; false when refused.
  bool SwapIn(size_t request) {
    MemoryAction a{MemoryAction::Kind::kSwapIn, in_.wanting[request].state_bytes};
    a.beneficiary = request;
    if (!Apply(a)) return false;
    wanting_swapped_[request] = false;
    return true;
  }

  bool parked_swapped(size_t parked) const { return parked_swapped_[parked]; }

 private:
  const ActionOutcome* Reported() const {
    auto it = in_.outcomes.find(actions_.size());
    return it == in_.outcomes.end() ? nullptr : &it->second;
  }
  // A swap: done unless reported otherwise; the cache is what was reported.
  bool Apply(MemoryAction& a) {
    bool done = true;
    if (const ActionOutcome* o = Reported()) {
      done = o->done;
      cache_ = o->cache;
    }
    Record(a);
    return done;
  }
  void Record(MemoryAction& a) {
    a.cache_bytes_after = cache_.bytes;
    actions_.push_back(a);
  }

  const ScheduleInput& in_;
  CacheView cache_;
  int64_t avail_ = 0;
  std::vector<bool> wanting_swapped_, parked_swapped_, preempted_;
  std::vector<MemoryAction> actions_;
};

std::vector<size_t> ScheduleOrder(const std::vector<WantingRequest>& wanting) {
  std::vector<size_t> order(wanting.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const WantingRequest& a = wanting[x];
    const WantingRequest& b = wanting[y];
    if (a.priority != b.priority) return a.priority > b.priority;
    const bool ad = a.kind != StepKind::kPrefill, bd = b.kind != StepKind::kPrefill;
    if (ad != bd) return ad;
    if (!ad && a.cost != b.cost) return a.cost < b.cost;
    return a.seq < b.seq;
  });
  return order;
}

}  // namespace

int64_t PrefillTokenBudget(int64_t chunk_tokens, int64_t while_decoding_tokens, bool gpu,
                           bool decoding) {
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : gpu ? kGpuPrefillChunk : kCpuPrefillChunk;
  if (!decoding) return chunk;
  const int64_t while_decoding = while_decoding_tokens > 0 ? while_decoding_tokens
                                 : gpu                     ? kGpuPrefillWhileDecoding
                                                           : chunk;
  return std::min(chunk, while_decoding);
}

SchedulePlan PlanIteration(const ScheduleInput& in) {
  SchedulePlan plan;
  plan.order = ScheduleOrder(in.wanting);
  Planner p(in);
  bool gpu = false, decoding = false;
  for (const WantingRequest& w : in.wanting) {
    gpu = gpu || w.on_gpu;
    decoding = decoding || w.kind == StepKind::kDecode;
  }
  int64_t prefill_left =
      PrefillTokenBudget(in.prefill_chunk_tokens, in.prefill_tokens_while_decoding, gpu, decoding);
  int32_t batch_left = in.max_batch;
  const std::vector<size_t>& order = plan.order;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const size_t i = order[pos];
    const WantingRequest& w = in.wanting[i];
    const int64_t per_token = static_cast<int64_t>(w.bytes_per_token);
    int64_t chunk = 0, grow_tokens = 0;
    if (w.kind == StepKind::kDecode) {
      if (batch_left == 0) continue;
      grow_tokens = 1;
    } else if (w.kind == StepKind::kPrefill) {
      if (prefill_left <= 0) continue;
      chunk = std::min(prefill_left, w.prefill_left);
      grow_tokens = chunk + w.tail;
    }
    const int64_t swap_in = p.swapped(i) ? static_cast<int64_t>(w.state_bytes) : 0;
    auto need = [&] { return swap_in + grow_tokens * per_token; };
    auto short_of_bytes = [&] { return p.limited() && need() > p.avail(); };
    if (short_of_bytes()) {
      const uint64_t wanted = static_cast<uint64_t>(need() - p.avail());
      p.EvictTo(p.cache_bytes() - std::min(p.cache_bytes(), wanted), i);
    }
    if (short_of_bytes() && w.kind == StepKind::kPrefill && per_token > 0) {
      // A shorter chunk that fits still makes progress.
      const int64_t fit = (p.avail() - swap_in) / per_token - w.tail;
      if (fit >= 1) {
        chunk = std::min(chunk, fit);
        grow_tokens = chunk + w.tail;
      }
    }
    // Parked states go first (they cannot run now anyway), then those of
    // lower-ranked wanting requests, lowest first.
    for (size_t q = 0; q < in.parked.size() && short_of_bytes(); ++q) {
      const ParkedRequest& v = in.parked[q];
      if (p.parked_swapped(q) || !v.started || v.priority > w.priority) continue;
      p.SwapOut(/*parked=*/true, q, v.state_bytes, i);
    }
    for (size_t k = order.size(); short_of_bytes() && k-- > pos + 1;) {
      const size_t j = order[k];
      if (p.preempted(j) || p.swapped(j)) continue;
      p.SwapOut(/*parked=*/false, j, in.wanting[j].state_bytes, i);
    }
    if (short_of_bytes()) continue;  // waits
    // A preempted state comes back only where the executor has room for it.
    if (p.swapped(i) && !p.SwapIn(i)) continue;
    plan.steps.push_back({i, w.kind, chunk});
    p.Spend(need());
    if (w.kind == StepKind::kDecode) --batch_left;
    if (w.kind == StepKind::kPrefill) prefill_left -= chunk;
  }
  if (p.limited() && !order.empty() && plan.steps.empty()) {
    // Nothing fits. Everything in the cache but pinned entries can go; if the
    // first request's state alone still exceeds the budget it never will fit.
    const WantingRequest& first = in.wanting[order[0]];
    const int64_t grow = first.kind == StepKind::kDecode    ? 1
                         : first.kind == StepKind::kPrefill ? std::max<int64_t>(1, first.tail)
                                                            : 0;
    p.EvictTo(0, order[0]);
    Stall stall;
    stall.request = order[0];
    stall.alone_bytes =
        first.state_bytes + first.bytes_per_token * static_cast<uint64_t>(grow) + p.cache_bytes();
    stall.fails = stall.alone_bytes > in.memory_budget;
    plan.stall = stall;
  }
  plan.actions = p.TakeActions();
  return plan;
}

void PoolAdmission::CountAdmitted(const void* model) { ++admitted_[model]; }

bool PoolAdmission::MayStart(const void* model, int64_t capacity) const {
  if (capacity <= 0) return true;
  auto it = admitted_.find(model);
  return it == admitted_.end() || it->second < capacity;
}

}  // namespace strata
