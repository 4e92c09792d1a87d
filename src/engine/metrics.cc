// Latency windows and their percentiles.
#include "engine/metrics.h"

#include <algorithm>
#include <cmath>

namespace strata {

void LatencyWindow::Add(double ms) {
  if (samples_.size() < kCapacity) {
    samples_.push_back(ms);
  } else {
    samples_[next_] = ms;
  }
  next_ = (next_ + 1) % kCapacity;
  ++count_;
}

LatencyPercentiles LatencyWindow::Summary() const {
  LatencyPercentiles p;
  p.count = count_;
  if (samples_.empty()) return p;
  std::vector<double> s = samples_;
  std::sort(s.begin(), s.end());
  // Nearest-rank percentiles: the smallest sample with at least q of them at or below it.
  auto rank = [&](double q) {
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(s.size())));
    return s[std::min(s.size() - 1, k == 0 ? 0 : k - 1)];
  };
  double sum = 0;
  for (double v : s) sum += v;
  p.mean_ms = sum / static_cast<double>(s.size());
  p.p50_ms = rank(0.50);
  p.p90_ms = rank(0.90);
  p.p99_ms = rank(0.99);
  p.max_ms = s.back();
  return p;
}

void MetricsRecorder::AddTtft(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Add(ms);
}

void MetricsRecorder::AddTpot(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  tpot_.Add(ms);
}

void MetricsRecorder::AddQueue(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.Add(ms);
}

void MetricsRecorder::FillLatencies(EngineMetrics* m) const {
  std::lock_guard<std::mutex> lock(mu_);
  m->ttft = ttft_.Summary();
  m->tpot = tpot_.Summary();
  m->queue = queue_.Summary();
}


std::span<const NamedStat> EngineStats() {
  // A table of captureless lambdas: one line per statistic, nothing to keep in sync by hand.
#define STAT(name, expr) \
  NamedStat { name, [](const EngineMetrics& m) { return static_cast<double>(expr); } }
  static const NamedStat kStats[] = {
    STAT("requests.submitted", m.requests_submitted),
    STAT("requests.finished", m.requests_finished),
    STAT("requests.running", m.requests_running),
    STAT("requests.waiting", m.requests_waiting),
    STAT("requests.preemptions", m.preemptions),
    STAT("requests.deadline_misses", m.deadline_misses),
    STAT("ttft.count", m.ttft.count),
    STAT("ttft.mean_ms", m.ttft.mean_ms),
    STAT("ttft.p50_ms", m.ttft.p50_ms),
    STAT("ttft.p90_ms", m.ttft.p90_ms),
    STAT("ttft.p99_ms", m.ttft.p99_ms),
    STAT("ttft.max_ms", m.ttft.max_ms),
    STAT("tpot.count", m.tpot.count),
    STAT("tpot.mean_ms", m.tpot.mean_ms),
    STAT("tpot.p50_ms", m.tpot.p50_ms),
    STAT("tpot.p90_ms", m.tpot.p90_ms),
    STAT("tpot.p99_ms", m.tpot.p99_ms),
    STAT("tpot.max_ms", m.tpot.max_ms),
    STAT("queue.count", m.queue.count),
    STAT("queue.mean_ms", m.queue.mean_ms),
    STAT("queue.p50_ms", m.queue.p50_ms),
    STAT("queue.p90_ms", m.queue.p90_ms),
    STAT("queue.p99_ms", m.queue.p99_ms),
    STAT("queue.max_ms", m.queue.max_ms),
    STAT("prefix_cache.lookup_tokens", m.prefix_lookup_tokens),
    STAT("prefix_cache.hit_tokens", m.prefix_hit_tokens),
    STAT("tokens.prefill", m.prefill_tokens),
    STAT("tokens.generated", m.generated_tokens),
    STAT("decode.steps", m.decode_steps),
    STAT("decode.rows", m.decode_rows),
    STAT("decode.steps_with_prefill", m.steps_with_prefill),
    STAT("memory.budget_bytes", m.memory_budget_bytes),
    STAT("memory.state_resident_bytes", m.state_resident_bytes),
    STAT("memory.state_attention_bytes", m.state_attention_bytes),
    STAT("memory.state_recurrent_bytes", m.state_recurrent_bytes),
    STAT("memory.state_swapped_bytes", m.state_swapped_bytes),
    STAT("memory.state_active_bytes", m.state_active_bytes),
    STAT("memory.prefix_cache_bytes", m.prefix_cache_bytes),
    STAT("prefix_cache.entries", m.prefix_cache_entries),
    STAT("prefix_cache.slot_evictions", m.prefix_cache_slot_evictions),
    STAT("kv_tiers.disk.hits", m.kv_disk.hits),
    STAT("kv_tiers.disk.hit_tokens", m.kv_disk.hit_tokens),
    STAT("kv_tiers.disk.misses", m.kv_disk.misses),
    STAT("kv_tiers.disk.rejected_objects", m.kv_disk.rejected_objects),
    STAT("kv_tiers.disk.errors", m.kv_disk.errors),
    STAT("kv_tiers.disk.objects_written", m.kv_disk.objects_written),
    STAT("kv_tiers.disk.bytes_written", m.kv_disk.bytes_written),
    STAT("kv_tiers.disk.bytes_read", m.kv_disk.bytes_read),
    STAT("kv_tiers.disk.bytes_held", m.kv_disk.bytes_held),
    STAT("sampling.device_rows", m.device_sampled_rows),
    STAT("sampling.host_rows", m.host_sampled_rows),
    STAT("sampling.device_first_tokens", m.device_first_tokens),
    STAT("scheduler.iterations", m.iterations),
    STAT("scheduler.schedule_ms", m.schedule_ms),
    STAT("scheduler.prefill_ms", m.prefill_ms),
    STAT("scheduler.decode_ms", m.decode_ms),
    STAT("scheduler.sample_ms", m.sample_ms),
    STAT("scheduler.emit_ms", m.emit_ms),
    STAT("engine.compute_threads", m.compute_threads),
  };
#undef STAT
  return kStats;
}

}  // namespace strata
