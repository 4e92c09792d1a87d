// RoPE schedules and application (backend/cpu/rope_yarn.h) against plain
// double-precision references of model-spec §1.6 / §3.3.1 on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/rope_yarn.h"
#include "base/thread_pool.h"

namespace strata::cpu {
namespace {

std::vector<float> RandomVec(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (x == 0.f) x = 0.5f;
  }
  return v;
}

// model-spec §3.3.1 in double.
std::vector<double> YarnReference(int64_t dim, double base, double factor, double original,
                                  double beta_fast, double beta_slow) {
  auto corr = [&](double rot) {
    return dim * std::log(original / (rot * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(corr(beta_fast)), 0.0);
  const double high = std::min(std::ceil(corr(beta_slow)), static_cast<double>(dim - 1));
  std::vector<double> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double inv = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    out.push_back(inv * (1 - ramp) + inv / factor * ramp);
  }
  return out;
}

TEST(RopeYarnTest, DefaultScheduleIsInverseThetaPowers) {
  RopeParams p;
  p.theta = 10000.0;
  p.dim = 64;
  const std::vector<float> inv = RopeInvFreq(p);
  ASSERT_EQ(inv.size(), 32u);
  for (size_t i = 0; i < inv.size(); ++i) {
    EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * static_cast<double>(i) / 64.0),
                3e-7 * std::pow(10000.0, -2.0 * static_cast<double>(i) / 64.0));
  }
  EXPECT_EQ(RopeAttentionFactor(p), 1.0);
}

TEST(RopeYarnTest, PublishedDeepSeekScheduleMatchesSpec) {
  // DeepSeek-V3.2-Exp: dim 64, factor 40, original 4096, beta 32/1: frequencies
  // 0..10 keep their value, 23..31 are divided by 40 (model-spec §3.3.1).
  RopeParams p;
  p.type = RopeType::kYarn;
  p.theta = 10000.0;
  p.dim = 64;
  p.factor = 40;
  p.original_max_position = 4096;
  p.mscale = 1.0;
  p.mscale_all_dim = 1.0;
  const std::vector<float> inv = RopeInvFreq(p);
  const std::vector<double> ref = YarnReference(64, 10000.0, 40, 4096, 32, 1);
  ASSERT_EQ(inv.size(), ref.size());
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(inv[i], ref[i], 1e-6 * ref[i]) << i;
  const double plain10 = std::pow(10000.0, -20.0 / 64.0);
  EXPECT_NEAR(inv[10], plain10, 1e-6 * plain10);
  const double scaled23 = std::pow(10000.0, -46.0 / 64.0) / 40.0;
  EXPECT_NEAR(inv[23], scaled23, 1e-6 * scaled23);
  // cos/sin are not scaled (mscale == mscale_all_dim); the softmax factor is.
  EXPECT_DOUBLE_EQ(RopeAttentionFactor(p), 1.0);
  EXPECT_NEAR(YarnGetMscale(40, 1.0), 1.3688879, 1e-7);
}

TEST(RopeYarnTest, AttentionFactorVariants) {
  RopeParams p;
  p.type = RopeType::kYarn;
  p.factor = 16;
  p.dim = 32;
  p.mscale = 1.0;
  p.mscale_all_dim = 0.8;
  EXPECT_NEAR(RopeAttentionFactor(p), (0.1 * std::log(16.0) + 1) / (0.08 * std::log(16.0) + 1), 1e-15);
  p.mscale_all_dim = 0;  // absent: mscale(s, 1)
  EXPECT_NEAR(RopeAttentionFactor(p), 0.1 * std::log(16.0) + 1, 1e-15);
  p.attention_factor = 0.75;  // given explicitly
  EXPECT_EQ(RopeAttentionFactor(p), 0.75);
  EXPECT_EQ(YarnGetMscale(0.5, 1.0), 1.0);
}

TEST(RopeYarnTest, UntruncatedAndDegenerateRanges) {
  RopeParams p;
  p.type = RopeType::kYarn;
  p.dim = 16;
  p.factor = 4;
  p.original_max_position = 64;
  p.truncate = false;
  const std::vector<float> inv = RopeInvFreq(p);
  // Untruncated bounds, clamped to [0, dim − 1].
  auto corr = [&](double rot) { return 16 * std::log(64 / (rot * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const double low = std::max(corr(32), 0.0), high = std::min(corr(1), 15.0);
  for (int i = 0; i < 8; ++i) {
    const double base = std::pow(10000.0, -2.0 * i / 16.0);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(inv[static_cast<size_t>(i)], base * (1 - ramp) + base / 4 * ramp, 1e-6 * base) << i;
  }
}

TEST(RopeYarnTest, CosSinUseFp32AnglesAndTheAttentionFactor) {
  const std::vector<float> inv = {1.f, 0.37f, 0.01f};
  std::vector<float> c(3 * 5), s(3 * 5);
  RopeCosSin(inv.data(), 3, 1000, 5, 0.5f, c.data(), s.data());
  for (int t = 0; t < 5; ++t) {
    for (int i = 0; i < 3; ++i) {
      const float angle = static_cast<float>(1000 + t) * inv[static_cast<size_t>(i)];
      EXPECT_FLOAT_EQ(c[static_cast<size_t>(t * 3 + i)], static_cast<float>(std::cos(double{angle})) * 0.5f);
      EXPECT_FLOAT_EQ(s[static_cast<size_t>(t * 3 + i)], static_cast<float>(std::sin(double{angle})) * 0.5f);
    }
  }
}

class ApplyRopeTest : public ::testing::TestWithParam<RopeLayout> {};

TEST_P(ApplyRopeTest, MatchesReferenceOnEveryHeadAndLeavesTheRestAlone) {
  const RopeLayout layout = GetParam();
  const int64_t T = 7, H = 3, head = 20, offset = 6, half = 5;  // rotary slice [6, 16)
  std::vector<float> x = RandomVec(static_cast<size_t>(T * H * head), 11);
  const std::vector<float> orig = x;
  const std::vector<float> inv = {1.f, 0.3f, 0.1f, 0.03f, 0.01f};
  std::vector<float> c(static_cast<size_t>(T * half)), s(static_cast<size_t>(T * half));
  RopeCosSin(inv.data(), half, 40, T, 1.f, c.data(), s.data());
  ThreadPool pool(3);
  ApplyRope(layout, x.data(), T, H, H * head, head, offset, half, c.data(), s.data(), &pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* o = orig.data() + (t * H + h) * head;
      const float* y = x.data() + (t * H + h) * head;
      for (int64_t j = 0; j < head; ++j) {
        if (j < offset || j >= offset + 2 * half) EXPECT_EQ(y[j], o[j]);
      }
      for (int64_t i = 0; i < half; ++i) {
        const double ang = (40.0 + static_cast<double>(t)) * inv[static_cast<size_t>(i)];
        double a, b;  // the pair
        if (layout == RopeLayout::kHalfSplit) {
          a = o[offset + i];
          b = o[offset + i + half];
        } else {
          a = o[offset + 2 * i];
          b = o[offset + 2 * i + 1];
        }
        const double ra = a * std::cos(ang) - b * std::sin(ang);
        const double rb = b * std::cos(ang) + a * std::sin(ang);
        // Both layouts write [first of pairs | second of pairs].
        EXPECT_NEAR(y[offset + i], ra, 2e-5) << t << " " << h << " " << i;
        EXPECT_NEAR(y[offset + i + half], rb, 2e-5) << t << " " << h << " " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ApplyRopeTest,
                         ::testing::Values(RopeLayout::kHalfSplit, RopeLayout::kInterleaved));

TEST(RopeYarnTest, InterleavedDotProductsDependOnlyOnRelativePosition) {
  // q at position p and k at position p − d: q·k is a function of d only.
  const int64_t half = 4;
  const std::vector<float> inv = {1.f, 0.2f, 0.05f, 0.01f};
  const std::vector<float> q0 = RandomVec(8, 3), k0 = RandomVec(8, 4);
  auto rotated_dot = [&](int64_t pq, int64_t pk) {
    std::vector<float> q = q0, k = k0, c(half), s(half);
    RopeCosSin(inv.data(), half, pq, 1, 1.f, c.data(), s.data());
    ApplyRope(RopeLayout::kInterleaved, q.data(), 1, 1, 8, 8, 0, half, c.data(), s.data(), nullptr);
    RopeCosSin(inv.data(), half, pk, 1, 1.f, c.data(), s.data());
    ApplyRope(RopeLayout::kInterleaved, k.data(), 1, 1, 8, 8, 0, half, c.data(), s.data(), nullptr);
    double d = 0;
    for (int i = 0; i < 8; ++i) d += static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
    return d;
  };
  EXPECT_NEAR(rotated_dot(10, 7), rotated_dot(50, 47), 1e-4);
  EXPECT_GT(std::abs(rotated_dot(10, 7) - rotated_dot(10, 9)), 1e-3);
}

}  // namespace
}  // namespace strata::cpu
