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

}  // namespace strata
