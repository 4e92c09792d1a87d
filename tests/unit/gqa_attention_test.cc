// Gated-attention building blocks of Qwen3-Next against plain double
// references on random (never zero) inputs: causal GQA over a K/V cache
// (prefill, continuation, decode; several key blocks; odd head counts; the
// cache contiguous or paged) and the partial half-split RoPE.
#include "backend/cpu/gqa_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/rope.h"
#include "base/thread_pool.h"
#include "paged_rows.h"

namespace strata::cpu {
namespace {

std::vector<float> RandomVec(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (x == 0.f) x = 0.5f * scale;
  }
  return v;
}

double RelErr(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(3);
  return pool;
}

// Softmax attention in double with transformers' repeat_kv head mapping.
std::vector<double> RefAttention(const GqaDims& d, const std::vector<float>& q, int64_t T,
                                 const std::vector<float>& k, const std::vector<float>& v,
                                 int64_t past, double scale) {
  const int64_t H = d.num_heads, Hkv = d.num_kv_heads, hd = d.head_dim, G = H / Hkv;
  std::vector<double> out(T * H * hd, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / G;
      const int64_t n = past + t + 1;
      std::vector<double> s(n);
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i) {
          dot += static_cast<double>(q[(t * H + h) * hd + i]) * k[(j * Hkv + kvh) * hd + i];
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < hd; ++i) {
          out[(t * H + h) * hd + i] += s[j] / sum * v[(j * Hkv + kvh) * hd + i];
        }
      }
    }
  }
  return out;
}

using AttnCase = std::tuple<GqaDims, int64_t, int64_t>;  // dims, T, past

class GqaAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(GqaAttentionTest, MatchesDoubleReference) {
  const auto [d, T, past] = GetParam();
  const int64_t total = past + T;
  const auto q = RandomVec(T * d.num_heads * d.head_dim, 1 + T, 1.5f);
  const auto k = RandomVec(total * d.num_kv_heads * d.head_dim, 2 + total, 1.5f);
  const auto v = RandomVec(total * d.num_kv_heads * d.head_dim, 3 + total);
  const float scale = 1.f / std::sqrt(static_cast<float>(d.head_dim));
  std::vector<float> out(T * d.num_heads * d.head_dim);
  ASSERT_TRUE(
      GqaAttention(d, q.data(), T, k.data(), v.data(), past, scale, out.data(), Pool()).ok());
  const auto ref = RefAttention(d, q, T, k, v, past, scale);
  EXPECT_LE(RelErr(out.data(), ref), 2e-6);

  // The same rows read from 16-row blocks give the same bits.
  const int64_t stride = d.num_kv_heads * d.head_dim;
  const testing_util::PagedRows pk(k, stride), pv(v, stride);
  std::vector<float> paged(out.size());
  ASSERT_TRUE(
      GqaAttention(d, q.data(), T, pk.view(), pv.view(), past, scale, paged.data(), Pool()).ok());
  EXPECT_EQ(paged, out);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GqaAttentionTest,
    ::testing::Values(AttnCase{{6, 3, 32}, 150, 0},    // prefill, two key blocks
                      AttnCase{{5, 1, 48}, 1, 200},    // decode, one KV head
                      AttnCase{{3, 3, 16}, 37, 130},   // continuation across a block edge
                      AttnCase{{16, 2, 256}, 1, 129},  // published head shape, decode
                      AttnCase{{4, 2, 20}, 300, 0}),   // three key blocks, odd hd
    [](const auto& info) {
      const GqaDims d = std::get<0>(info.param);
      return "H" + std::to_string(d.num_heads) + "_Hkv" + std::to_string(d.num_kv_heads) + "_hd" +
             std::to_string(d.head_dim) + "_T" + std::to_string(std::get<1>(info.param)) + "_past" +
             std::to_string(std::get<2>(info.param));
    });

// Prefill then decode over the same cache gives the prefill's own rows.
TEST(GqaAttentionTest, DecodeRowsEqualPrefillRows) {
  const GqaDims d{6, 2, 24};
  const int64_t T = 140;
  const auto q = RandomVec(T * 6 * 24, 11);
  const auto k = RandomVec(T * 2 * 24, 12);
  const auto v = RandomVec(T * 2 * 24, 13);
  std::vector<float> all(T * 6 * 24), one(6 * 24);
  ASSERT_TRUE(GqaAttention(d, q.data(), T, k.data(), v.data(), 0, 0.2f, all.data(), Pool()).ok());
  for (int64_t t : {0, 1, 127, 128, 139}) {
    ASSERT_TRUE(
        GqaAttention(d, q.data() + t * 6 * 24, 1, k.data(), v.data(), t, 0.2f, one.data(), Pool())
            .ok());
    const std::vector<double> want(all.begin() + t * 6 * 24, all.begin() + (t + 1) * 6 * 24);
    EXPECT_LE(RelErr(one.data(), want), 1e-6) << "t=" << t;
  }
}

TEST(GqaAttentionTest, BadArgumentsAreErrors) {
  std::vector<float> x(64, 1.f), out(64);
  EXPECT_FALSE(
      GqaAttention({4, 3, 4}, x.data(), 1, x.data(), x.data(), 0, 1.f, out.data(), Pool()).ok());
  EXPECT_FALSE(
      GqaAttention({4, 2, 0}, x.data(), 1, x.data(), x.data(), 0, 1.f, out.data(), Pool()).ok());
  EXPECT_FALSE(
      GqaAttention({4, 2, 4}, x.data(), 0, x.data(), x.data(), 0, 1.f, out.data(), Pool()).ok());
  EXPECT_FALSE(
      GqaAttention({4, 2, 4}, nullptr, 1, x.data(), x.data(), 0, 1.f, out.data(), Pool()).ok());
}

TEST(RopeTest, InverseFrequenciesFollowTheDefaultRope) {
  for (auto [dim, theta] : {std::pair<int64_t, double>{8, 1e4}, {64, 5e6}, {24, 1e6}}) {
    const std::vector<float> inv = RopeInverseFrequencies(dim, theta);
    ASSERT_EQ(inv.size(), static_cast<size_t>(dim / 2));
    EXPECT_EQ(inv[0], 1.f);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double want =
          1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(dim));
      EXPECT_NEAR(inv[i], want, 1e-6 * want) << "dim " << dim << " i " << i;
    }
  }
}

// Half-split rotation of the first r dims, the rest untouched, every head.
TEST(RopeTest, PartialHalfSplitMatchesReference) {
  const int64_t T = 9, H = 3, hd = 20, r = 8;
  const int64_t first = 1000;  // large positions: angles far from zero
  const std::vector<float> inv = RopeInverseFrequencies(r, 1e4);
  const auto x0 = RandomVec(T * H * hd, 21);
  std::vector<float> x = x0;
  ApplyRopeHalfSplit(x.data(), T, H, hd, r, first, inv.data(), Pool());
  std::vector<double> ref(x0.begin(), x0.end());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* a = x0.data() + (t * H + h) * hd;
      double* y = ref.data() + (t * H + h) * hd;
      for (int64_t i = 0; i < r / 2; ++i) {
        const double ang = static_cast<double>(static_cast<float>(first + t) * inv[i]);
        y[i] = a[i] * std::cos(ang) - a[i + r / 2] * std::sin(ang);
        y[i + r / 2] = a[i + r / 2] * std::cos(ang) + a[i] * std::sin(ang);
      }
    }
  }
  EXPECT_LE(RelErr(x.data(), ref), 1e-6);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = r; i < hd; ++i) {
        const int64_t at = (t * H + h) * hd + i;
        EXPECT_EQ(x[at], x0[at]);
      }
}

// RoPE makes q·k depend on the position difference only.
TEST(RopeTest, DotProductsDependOnRelativePosition) {
  const int64_t hd = 16, r = 16;
  const std::vector<float> inv = RopeInverseFrequencies(r, 1e4);
  const auto q0 = RandomVec(hd, 31), k0 = RandomVec(hd, 32);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    std::vector<float> q = q0, k = k0;
    ApplyRopeHalfSplit(q.data(), 1, 1, hd, r, pq, inv.data(), nullptr);
    ApplyRopeHalfSplit(k.data(), 1, 1, hd, r, pk, inv.data(), nullptr);
    double s = 0;
    for (int64_t i = 0; i < hd; ++i) s += static_cast<double>(q[i]) * k[i];
    return s;
  };
  EXPECT_NEAR(dot_at(7, 3), dot_at(107, 103), 1e-4);
  EXPECT_GT(std::abs(dot_at(7, 3) - dot_at(7, 4)), 1e-3);
}

}  // namespace
}  // namespace strata::cpu
