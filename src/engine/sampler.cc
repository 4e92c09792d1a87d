// Sampler implementation. Probabilities are computed in double from
// max-subtracted logits, so large or very negative logits neither overflow nor
// underflow to an all-zero distribution.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"

namespace strata {
namespace {

bool InRange(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

// Greedy choice: the lowest id among the largest logits; NaN ranks below everything.
int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (!found || v > best_value) {
      best = static_cast<int32_t>(i);
      best_value = v;
      found = true;
    }
  }
  return best;
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!InRange(p.temperature, 0.0f, 100.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be in [0, 100], got ", p.temperature));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  if (!InRange(p.top_p, 0.0f, 1.0f) || p.top_p == 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!InRange(p.min_p, 0.0f, 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  if (!InRange(p.repetition_penalty, 0.0f, 100.0f) || p.repetition_penalty == 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be in (0, 100], got ", p.repetition_penalty));
  }
  if (!InRange(p.presence_penalty, -100.0f, 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-100, 100], got ", p.presence_penalty));
  }
  if (!InRange(p.frequency_penalty, -100.0f, 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-100, 100], got ", p.frequency_penalty));
  }
  return OkStatus();
}

void ApplyPenalties(std::span<float> logits, std::span<const int32_t> history,
                    const SamplingParams& p) {
  if (history.empty() ||
      (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f)) {
    return;
  }
  absl::flat_hash_map<int32_t, int32_t> counts;
  for (int32_t t : history) {
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) ++counts[t];
  }
  for (const auto& [token, count] : counts) {
    float& l = logits[static_cast<size_t>(token)];
    // CTRL's rule: shrink the logit towards "less likely" whatever its sign.
    if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + static_cast<float>(count) * p.frequency_penalty;
  }
}

std::vector<std::pair<int32_t, float>> SamplingDistribution(std::span<const float> logits,
                                                            std::span<const int32_t> history,
                                                            const SamplingParams& p) {
  std::vector<float> work(logits.begin(), logits.end());
  ApplyPenalties(work, history, p);
  if (p.temperature == 0.0f) return {{Argmax(work), 1.0f}};

  // Candidates are (id, scaled logit); -inf and NaN logits can never be drawn.
  std::vector<std::pair<int32_t, double>> cand;
  cand.reserve(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    if (std::isfinite(work[i])) {
      cand.emplace_back(static_cast<int32_t>(i), static_cast<double>(work[i]) / p.temperature);
    }
  }
  if (cand.empty()) return {{Argmax(work), 1.0f}};

  // Descending by logit, ties by ascending id, so the order (and thus the draw) is deterministic.
  auto by_logit = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  size_t keep = cand.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), by_logit);
    cand.resize(keep);
  } else {
    std::sort(cand.begin(), cand.end(), by_logit);
  }

  // Softmax relative to the largest logit: exp() of a value <= 0 cannot overflow,
  // and the top candidate always has weight 1, so the sum is >= 1.
  const double max_logit = cand.front().second;
  std::vector<double> prob(cand.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) {
    prob[i] = std::exp(cand[i].second - max_logit);
    sum += prob[i];
  }
  for (double& q : prob) q /= sum;

  // top-p: the shortest prefix whose mass reaches top_p (always at least one token).
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < prob.size()) {
      cum += prob[n++];
      if (cum >= static_cast<double>(p.top_p)) break;
    }
    keep = std::min(keep, n);
  }
  // min-p: relative to the most likely token, which itself always survives.
  if (p.min_p > 0.0f) {
    const double floor = static_cast<double>(p.min_p) * prob[0];
    size_t n = 1;
    while (n < keep && prob[n] >= floor) ++n;
    keep = n;
  }

  double kept_mass = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_mass += prob[i];
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(keep);
  for (size_t i = 0; i < keep; ++i) {
    out.emplace_back(cand[i].first, static_cast<float>(prob[i] / kept_mass));
  }
  return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history) {
  const auto dist = SamplingDistribution(logits, history, params_);
  if (dist.size() == 1) return dist.front().first;
  const double u = NextUniform();
  double cum = 0.0;
  for (const auto& [token, prob] : dist) {
    cum += static_cast<double>(prob);
    if (u < cum) return token;
  }
  // Rounding left the cumulative sum just below 1 and u above it.
  return dist.back().first;
}

}  // namespace strata
