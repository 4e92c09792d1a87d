// Sampler: each filter's effect on known logits, penalties, numerics, seeded
// reproducibility and the empirical distribution under a fixed seed.
#include "engine/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

SamplingParams Temp(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

// Logits whose softmax is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<float>& probs) {
  std::vector<float> out;
  for (float q : probs) out.push_back(std::log(q));
  return out;
}

std::map<int32_t, float> AsMap(const std::vector<std::pair<int32_t, float>>& d) {
  return std::map<int32_t, float>(d.begin(), d.end());
}

TEST(Sampler, GreedyPicksArgmaxAndLowestIdOnTies) {
  Sampler s(Temp(0.0f));
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits, {}), 1);
  const std::vector<float> with_nan = {std::nanf(""), -5.0f, -7.0f};
  EXPECT_EQ(s.Sample(with_nan, {}), 1);
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  for (float t : {1.0f, 0.5f, 2.0f}) {
    auto d = AsMap(SamplingDistribution(logits, {}, Temp(t)));
    double z = 0;
    for (float l : logits) z += std::exp(l / t);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(d[i], std::exp(logits[i] / t) / z, 1e-6) << "t=" << t;
  }
}

TEST(Sampler, DistributionIsSortedByProbability) {
  auto d = SamplingDistribution(LogitsOf({0.2f, 0.5f, 0.3f}), {}, Temp(1.0f));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].first, 1);
  EXPECT_EQ(d[1].first, 2);
  EXPECT_EQ(d[2].first, 0);
}

TEST(Sampler, TopKKeepsTheKMostLikelyRenormalised) {
  SamplingParams p = Temp(1.0f);
  p.top_k = 2;
  auto d = AsMap(SamplingDistribution(LogitsOf({0.1f, 0.4f, 0.2f, 0.3f}), {}, p));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[1], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(d[3], 0.3 / 0.7, 1e-6);
}

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  SamplingParams p = Temp(1.0f);
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3
  auto d = AsMap(SamplingDistribution(LogitsOf({0.5f, 0.3f, 0.2f}), {}, p));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(d[1], 0.3 / 0.8, 1e-6);
  p.top_p = 0.4f;
  d = AsMap(SamplingDistribution(LogitsOf({0.5f, 0.3f, 0.2f}), {}, p));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NEAR(d[0], 1.0, 1e-6);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  SamplingParams p = Temp(1.0f);
  p.min_p = 0.5f;  // floor 0.25: keeps 0.5 and 0.3, drops 0.2
  auto d = AsMap(SamplingDistribution(LogitsOf({0.5f, 0.3f, 0.2f}), {}, p));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.count(2), 0u);
  p.min_p = 1.0f;  // only the best survives
  EXPECT_EQ(SamplingDistribution(LogitsOf({0.5f, 0.3f, 0.2f}), {}, p).size(), 1u);
}

TEST(Sampler, RepetitionPenaltyShrinksSeenLogitsTowardsUnlikely) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  const std::vector<int32_t> history = {0, 1, 1};
  ApplyPenalties(logits, history, p);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[1], -4.0f);  // negative: multiplied (once, not per occurrence)
  EXPECT_FLOAT_EQ(logits[2], 1.0f);   // unseen: untouched
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtract) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> history = {2, 2, 2, 0, 99, -1};  // out-of-vocabulary ids are ignored
  ApplyPenalties(logits, history, p);
  EXPECT_FLOAT_EQ(logits[0], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.75f);
}

TEST(Sampler, PenaltiesChangeTheGreedyChoice) {
  SamplingParams p = Temp(0.0f);
  p.repetition_penalty = 3.0f;
  Sampler s(p);
  const std::vector<float> logits = {3.0f, 2.0f};
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(s.Sample(logits, {}), 0);
  EXPECT_EQ(s.Sample(logits, history), 1);  // 3 / 3 = 1 < 2
}

TEST(Sampler, SoftmaxIsStableForExtremeLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1000.0f, 999.0f, -1e30f, -inf};
  auto d = AsMap(SamplingDistribution(logits, {}, Temp(1.0f)));
  EXPECT_EQ(d.count(3), 0u);  // -inf can never be drawn
  double sum = 0;
  for (auto& [id, q] : d) {
    EXPECT_TRUE(std::isfinite(q));
    sum += q;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(d[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  // Everything impossible: fall back to the greedy answer instead of failing.
  Sampler s(Temp(1.0f));
  const std::vector<float> none = {-inf, -inf};
  EXPECT_EQ(s.Sample(none, {}), 0);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(32, 0.0f);  // uniform over 32 tokens
  auto run = [&](uint64_t seed) {
    SamplingParams p = Temp(1.0f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits, {}));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, EmpiricalFrequenciesMatchTheDistribution) {
  SamplingParams p = Temp(1.0f);
  p.seed = 12345;
  Sampler s(p);
  const std::vector<float> logits = LogitsOf({0.5f, 0.3f, 0.2f});
  std::vector<int> counts(3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.Sample(logits, {}))];
  // Standard deviation of each frequency is <= 0.0036; 0.02 is over 5 sigma.
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(Sampler, TopKOneIsGreedyWhateverTheSeed) {
  SamplingParams p = Temp(5.0f);
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    Sampler s(p);
    EXPECT_EQ(s.Sample(std::vector<float>{0.1f, 0.3f, 0.2f}, {}), 1);
  }
}

TEST(Sampler, ValidateRejectsOutOfRangeValues) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  auto bad = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    return absl::IsInvalidArgument(ValidateSamplingParams(p));
  };
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = std::nanf(""); }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = -0.1f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.presence_penalty = 1000; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.frequency_penalty = std::numeric_limits<float>::infinity(); }));
}

}  // namespace
}  // namespace strata
