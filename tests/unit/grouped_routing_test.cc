// DeepSeek's group-limited sigmoid routing (RouteSigmoidGroupedTopK and the
// MoE block with num_groups > 1) against a transcription of transformers 5.17's
// DeepseekV32TopkRouter in double precision, on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "base/thread_pool.h"

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

// transformers: group score = sum of the two largest biased scores; keep the
// topk_group best groups; mask the rest with -inf; top_k experts; weights =
// unbiased scores, renormalised, times the routed scaling.
struct Route {
  std::set<int32_t> experts;
  std::vector<double> weight_of;  // by expert
};
Route Reference(const float* logits, int64_t E, const float* bias, int64_t G, int64_t TG, int64_t K,
                bool renorm, double scaling) {
  std::vector<double> s(static_cast<size_t>(E)), b(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    s[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    b[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + bias[e];
  }
  const int64_t per = E / G;
  std::vector<std::pair<double, int64_t>> groups;
  for (int64_t g = 0; g < G; ++g) {
    std::vector<double> v(b.begin() + g * per, b.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    groups.push_back({-(v[0] + v[1]), g});
  }
  std::sort(groups.begin(), groups.end());
  std::vector<bool> keep(static_cast<size_t>(G), false);
  for (int64_t j = 0; j < TG; ++j) keep[static_cast<size_t>(groups[static_cast<size_t>(j)].second)] = true;
  std::vector<std::pair<double, int64_t>> cand;
  for (int64_t e = 0; e < E; ++e) {
    if (keep[static_cast<size_t>(e / per)]) cand.push_back({-b[static_cast<size_t>(e)], e});
  }
  std::sort(cand.begin(), cand.end());
  Route r;
  r.weight_of.assign(static_cast<size_t>(E), 0.0);
  double total = 0;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t e = cand[static_cast<size_t>(j)].second;
    r.experts.insert(static_cast<int32_t>(e));
    total += s[static_cast<size_t>(e)];
  }
  for (int32_t e : r.experts) {
    r.weight_of[static_cast<size_t>(e)] =
        s[static_cast<size_t>(e)] / (renorm ? total + 1e-20 : 1.0) * scaling;
  }
  return r;
}

TEST(GroupedRoutingTest, MatchesTransformersRouterOnRandomTokens) {
  const int64_t E = 32, G = 8, TG = 3, K = 5;
  const std::vector<float> bias = RandomVec(E, 7, 0.1f);
  int differs_from_plain = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> logits = RandomVec(E, 100 + seed);
    std::vector<int32_t> idx(K);
    std::vector<float> w(K);
    RouteSigmoidGroupedTopK(logits.data(), E, bias.data(), G, TG, K, true, 2.5f, idx.data(), w.data());
    const Route ref = Reference(logits.data(), E, bias.data(), G, TG, K, true, 2.5);
    EXPECT_EQ(std::set<int32_t>(idx.begin(), idx.end()), ref.experts) << "seed " << seed;
    for (int64_t j = 0; j < K; ++j) {
      EXPECT_NEAR(w[static_cast<size_t>(j)], ref.weight_of[static_cast<size_t>(idx[static_cast<size_t>(j)])], 1e-6);
    }
    // Picks come in descending biased score.
    for (int64_t j = 1; j < K; ++j) {
      auto biased = [&](int32_t e) { return 1.f / (1.f + std::exp(-logits[static_cast<size_t>(e)])) + bias[static_cast<size_t>(e)]; };
      EXPECT_GE(biased(idx[static_cast<size_t>(j - 1)]), biased(idx[static_cast<size_t>(j)]));
    }
    std::vector<int32_t> plain(K);
    std::vector<float> pw(K);
    RouteSigmoidTopK(logits.data(), E, bias.data(), K, true, 2.5f, plain.data(), pw.data());
    differs_from_plain += std::set<int32_t>(plain.begin(), plain.end()) != ref.experts;
  }
  // The group limit must actually change choices on random tokens.
  EXPECT_GT(differs_from_plain, 20);
}

TEST(GroupedRoutingTest, OneGroupOrAllGroupsEqualsPlainRouting) {
  const int64_t E = 12, K = 3;
  const std::vector<float> bias = RandomVec(E, 9, 0.1f);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> logits = RandomVec(E, 300 + seed);
    std::vector<int32_t> a(K), b(K), c(K);
    std::vector<float> wa(K), wb(K), wc(K);
    RouteSigmoidTopK(logits.data(), E, bias.data(), K, false, 1.f, a.data(), wa.data());
    RouteSigmoidGroupedTopK(logits.data(), E, bias.data(), 1, 1, K, false, 1.f, b.data(), wb.data());
    RouteSigmoidGroupedTopK(logits.data(), E, bias.data(), 4, 4, K, false, 1.f, c.data(), wc.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
    EXPECT_EQ(wa, wb);
    EXPECT_EQ(wa, wc);
  }
}

TEST(GroupedRoutingTest, MoeBlockUsesGroupLimitedRouting) {
  const int64_t D = 24, I = 8, E = 8, K = 2, n = 9;
  auto matrix = [](std::vector<float>& store, int64_t rows, int64_t cols, uint64_t seed) {
    store = RandomVec(static_cast<size_t>(rows * cols), seed, 1.f / std::sqrt(static_cast<float>(cols)));
    return WeightMatrix{DType::kF32, store.data(), rows, cols};
  };
  std::vector<std::vector<float>> stores(3 * E + 4);
  MoeWeights w;
  w.router = matrix(stores[0], E, D, 1);
  const std::vector<float> bias = RandomVec(E, 2, 0.1f);
  w.score_bias = bias.data();
  for (int64_t e = 0; e < E; ++e) {
    SwiGluWeights s;
    s.gate = matrix(stores[static_cast<size_t>(1 + 3 * e)], I, D, 10 + e);
    s.up = matrix(stores[static_cast<size_t>(2 + 3 * e)], I, D, 30 + e);
    s.down = matrix(stores[static_cast<size_t>(3 + 3 * e)], D, I, 50 + e);
    w.experts.push_back(s);
  }
  w.top_k = K;
  w.renormalize = true;
  w.routed_scaling = 2.5f;
  w.num_groups = 4;
  w.topk_groups = 2;
  const std::vector<float> x = RandomVec(static_cast<size_t>(n * D), 77);
  ThreadPool pool(3);
  for (int64_t tokens : {n, int64_t{1}}) {  // batched and single-token paths
    std::vector<float> y(static_cast<size_t>(tokens * D));
    std::vector<uint8_t> scratch(MoeScratchBytes(tokens, D, w, pool.num_threads()) + 64);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    Moe(x.data(), tokens, w, y.data(), aligned, &pool);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* xt = x.data() + t * D;
      std::vector<float> logits(E);
      for (int64_t e = 0; e < E; ++e) logits[static_cast<size_t>(e)] = DotRow(w.router, e, xt);
      const Route r = Reference(logits.data(), E, bias.data(), 4, 2, K, true, 2.5);
      std::vector<double> ref(D, 0.0);
      for (int32_t e : r.experts) {
        const SwiGluWeights& s = w.experts[static_cast<size_t>(e)];
        std::vector<double> h(I);
        for (int64_t i = 0; i < I; ++i) {
          const double g = DotRow(s.gate, i, xt), u = DotRow(s.up, i, xt);
          h[static_cast<size_t>(i)] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t j = 0; j < D; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < I; ++i) {
            acc += static_cast<double>(stores[static_cast<size_t>(3 + 3 * e)][static_cast<size_t>(j * I + i)]) *
                   h[static_cast<size_t>(i)];
          }
          ref[static_cast<size_t>(j)] += r.weight_of[static_cast<size_t>(e)] * acc;
        }
      }
      for (int64_t j = 0; j < D; ++j) {
        EXPECT_NEAR(y[static_cast<size_t>(t * D + j)], ref[static_cast<size_t>(j)], 1e-4)
            << "tokens " << tokens << " t " << t << " j " << j;
      }
    }
  }
}

}  // namespace
}  // namespace strata::cpu
