// Token sampling from one row of logits: penalties over the token history,
// then greedy or temperature sampling with top-k, top-p and min-p filters.
// Deterministic for a given seed on every platform (no std distributions).
#ifndef STRATA_ENGINE_SAMPLER_H_
#define STRATA_ENGINE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; relative to the most likely token
  float repetition_penalty = 1.0f;  // 1: off (CTRL-style: divide positive, multiply negative logits)
  float presence_penalty = 0.0f;    // subtracted once per distinct token seen
  float frequency_penalty = 0.0f;   // subtracted once per occurrence
  uint64_t seed = 0;
};

// InvalidArgument naming the field when a value is outside its documented range
// (NaN included).
Status ValidateSamplingParams(const SamplingParams& params);

// Applies the three penalties in place to `logits` for every token of
// `history` (ids outside the row are ignored).
void ApplyPenalties(std::span<float> logits, std::span<const int32_t> history,
                    const SamplingParams& params);

// The distribution the sampler draws from, after penalties and filters:
// (token id, probability) pairs sorted by probability (descending, then id
// ascending), summing to 1. With temperature 0 it holds the argmax only.
std::vector<std::pair<int32_t, float>> SamplingDistribution(std::span<const float> logits,
                                                            std::span<const int32_t> history,
                                                            const SamplingParams& params);

// Stateful sampler: owns the random generator of one request.
// Not thread-safe; one per request.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token. `logits` has one entry per vocabulary id (non-empty).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  // Uniform in [0, 1) from the top 53 bits: std::uniform_real_distribution is
  // implementation-defined, mt19937_64's output sequence is not.
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_SAMPLER_H_
