// Serving metrics: latency samples (time to first token, time per output
// token, queue time) kept in bounded windows for percentiles, and the
// counters the scheduler maintains (prefix-cache hits, preemptions, memory by
// kind and tier). Snapshot() is what the C ABI getters and the periodic
// callback report.
#ifndef STRATA_ENGINE_METRICS_H_
#define STRATA_ENGINE_METRICS_H_

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "memory/prefix_store.h"

namespace strata {

// Percentiles of one latency, in milliseconds, over the last
// LatencyWindow::kCapacity samples. All zero when there is no sample yet.
struct LatencyPercentiles {
  int64_t count = 0;  // samples ever recorded (not only those in the window)
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};

struct EngineMetrics {
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;
  int64_t requests_running = 0;  // admitted: prefilling or decoding
  int64_t requests_waiting = 0;  // queued, not admitted yet (or preempted)
  int64_t preemptions = 0;       // states moved out of the budget to resume later
  int64_t deadline_misses = 0;
  LatencyPercentiles ttft;   // submit -> first generated token
  LatencyPercentiles tpot;   // between consecutive generated tokens of a request
  LatencyPercentiles queue;  // submit -> first scheduled work
  // Prompt tokens that requests needed evaluated, and how many of them were
  // restored from the prefix cache instead (hit rate = hit / lookup).
  int64_t prefix_lookup_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prefill_tokens = 0;    // tokens run through prefill
  int64_t generated_tokens = 0;
  int64_t decode_steps = 0;      // batched decode launches
  int64_t decode_rows = 0;       // rows over all decode steps (mean batch = rows / steps)
  // Memory by kind and tier, bytes (the model's state_bytes_* accounting).
  uint64_t memory_budget_bytes = 0;          // 0: unlimited
  uint64_t state_resident_bytes = 0;         // live sequence states (device tier)
  uint64_t state_attention_bytes = 0;        //   of which attention rows (grow per token)
  uint64_t state_recurrent_bytes = 0;        //   of which recurrent slots (fixed per sequence)
  uint64_t state_swapped_bytes = 0;          // preempted states moved aside (host tier)
  uint64_t state_active_bytes = 0;           // resident state of sessions running a request (budgeted)
  uint64_t prefix_cache_bytes = 0;           // snapshots held by the prefix cache and marks
  int64_t prefix_cache_entries = 0;
  // Prefix-cache snapshots dropped so that a preempted state had room to
  // come back to the device (snapshots hold no sequence slot, but may hold
  // the cache blocks it needs).
  int64_t prefix_cache_slot_evictions = 0;
  // The disk tier under the prefix cache (EngineOptions::kv_disk_dir);
  // zeros without one.
  TierStats kv_disk;
  // Decode rows whose token was selected by DecodeBatchSample (on the
  // device) vs from logits copied to the host (penalties, min-p, CPU).
  int64_t device_sampled_rows = 0;
  int64_t host_sampled_rows = 0;
  // First tokens after a prefill selected on the device with the prefill's
  // last forward (Model::ForwardSample); the others are host-sampled rows
  // of no decode step, from the prefill's logits.
  int64_t device_first_tokens = 0;
  // Decode steps that carried a prefill chunk (Model::DecodeAndPrefill).
  int64_t steps_with_prefill = 0;
  // Where the scheduler thread's time goes, summed over iterations, in
  // milliseconds: planning (admission with its prefix-cache lookups and
  // restores, budgets, preemption), prefill forwards (prefix-cache
  // snapshots included), batched decode
  // steps (device sampling included), host token sampling, and event
  // delivery and stop rules (detokenizing and tool-call parsing for chat).
  int64_t iterations = 0;
  double schedule_ms = 0, prefill_ms = 0, decode_ms = 0, sample_ms = 0, emit_ms = 0;
  // EngineOptions::num_threads as resolved (0 became the core count), for
  // hosts that report what they ran with.
  int32_t compute_threads = 0;
};

// One statistic of EngineMetrics under a stable dotted name (the C ABI's
// strata_engine_get_stat): names are never reused for another quantity, so
// diagnostics can be added and dropped without touching a frozen struct.
struct NamedStat {
  const char* name;
  double (*get)(const EngineMetrics&);
};

// Every statistic, in a fixed order (strata_engine_list_stats).
std::span<const NamedStat> EngineStats();

// Fixed-capacity ring of samples; thread-compatible (the recorder locks).
class LatencyWindow {
 public:
  static constexpr size_t kCapacity = 4096;
  void Add(double ms);
  LatencyPercentiles Summary() const;

 private:
  std::vector<double> samples_;
  size_t next_ = 0;
  int64_t count_ = 0;
};

// Thread-safety: every method is thread-safe.
class MetricsRecorder {
 public:
  void AddTtft(double ms);
  void AddTpot(double ms);
  void AddQueue(double ms);
  // Fills the latency fields of `m`; the counters are the engine's.
  void FillLatencies(EngineMetrics* m) const;

 private:
  mutable std::mutex mu_;
  LatencyWindow ttft_, tpot_, queue_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_METRICS_H_
