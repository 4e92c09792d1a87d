// The lightning indexer's scoring and causal top-k (backend/cpu/indexer.h)
// against a plain double-precision reference on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/indexer.h"
#include "base/thread_pool.h"
#include "paged_rows.h"

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

struct Case {
  int64_t heads, dim, top_k, past, tokens;
};

class IndexerTest : public ::testing::TestWithParam<Case> {};

TEST_P(IndexerTest, ScoresAndSelectionMatchReference) {
  const Case c = GetParam();
  const int64_t T = c.tokens, P = c.past, N = P + T, H = c.heads, d = c.dim, K = c.top_k;
  const std::vector<float> q = RandomVec(static_cast<size_t>(T * H * d), 1);
  const std::vector<float> w = RandomVec(static_cast<size_t>(T * H), 2);
  const std::vector<float> keys = RandomVec(static_cast<size_t>(N * d), 3);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  std::vector<int32_t> rows(static_cast<size_t>(T * K)), counts(static_cast<size_t>(T));
  std::vector<float> scores(static_cast<size_t>(T * N));
  ThreadPool pool(3);
  std::vector<float> scratch(IndexerScratchFloats(T, N, pool.num_threads()));
  IndexerTopK({H, d, K}, q.data(), w.data(), T, keys.data(), P, scale, rows.data(), counts.data(),
              scores.data(), scratch.data(), &pool);
  {
    // The same keys read from 16-row blocks select the same rows with the same scores.
    const testing_util::PagedRows paged(keys, d);
    std::vector<int32_t> paged_rows(rows.size()), paged_counts(counts.size());
    std::vector<float> paged_scores(scores.size());
    IndexerTopK({H, d, K}, q.data(), w.data(), T, paged.view(), P, scale, paged_rows.data(),
                paged_counts.data(), paged_scores.data(), scratch.data(), &pool);
    EXPECT_EQ(paged_rows, rows);
    EXPECT_EQ(paged_counts, counts);
    EXPECT_EQ(paged_scores, scores);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = P + t + 1;
    std::vector<double> ref(static_cast<size_t>(n));
    double row_scale = 0;
    for (int64_t s = 0; s < n; ++s) {
      double acc = 0;
      for (int64_t h = 0; h < H; ++h) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) {
          dot += static_cast<double>(q[static_cast<size_t>((t * H + h) * d + i)]) *
                 keys[static_cast<size_t>(s * d + i)];
        }
        acc += w[static_cast<size_t>(t * H + h)] * std::max(0.0, dot * scale);
      }
      ref[static_cast<size_t>(s)] = acc;
      row_scale = std::max(row_scale, std::abs(acc));
    }
    for (int64_t s = 0; s < N; ++s) {
      const float got = scores[static_cast<size_t>(t * N + s)];
      if (s < n) {
        EXPECT_NEAR(got, ref[static_cast<size_t>(s)], 1e-5 * std::max(row_scale, 1.0)) << t << "," << s;
      } else {
        EXPECT_EQ(got, -INFINITY) << "future key " << s << " of query " << t;
      }
    }
    // Selection: the min(K, n) largest reference scores, ascending positions.
    const int64_t k = std::min(K, n);
    ASSERT_EQ(counts[static_cast<size_t>(t)], k) << t;
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return ref[static_cast<size_t>(a)] > ref[static_cast<size_t>(b)];
    });
    std::vector<int32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());
    const std::vector<int32_t> got(rows.begin() + t * K, rows.begin() + t * K + k);
    EXPECT_EQ(got, want) << "query " << t;
    for (int64_t j = k; j < K; ++j) EXPECT_EQ(rows[static_cast<size_t>(t * K + j)], -1);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerTest,
    ::testing::Values(Case{3, 16, 8, 0, 40},      // prefill: early queries keep every key
                      Case{5, 24, 12, 30, 9},     // continuation over a cache
                      Case{1, 8, 4, 70, 1},       // decode
                      Case{7, 32, 64, 10, 20},    // top_k above every query's key count
                      Case{4, 128, 16, 200, 3}));  // the published head width

TEST(IndexerTest, TiesGoToTheLowerPositionAndNaNRanksLast) {
  // One head, weight 1, q = e0: the score of key s is ReLU(keys[s][0]).
  const int64_t d = 8, N = 6, K = 3;
  std::vector<float> q(d, 0.f), w = {1.f}, keys(N * d, 0.f);
  q[0] = 1.f;
  const float vals[N] = {0.5f, 2.f, NAN, 0.5f, 0.5f, -3.f};  // positions 0, 3, 4 tie at 0.5
  for (int64_t s = 0; s < N; ++s) keys[static_cast<size_t>(s * d)] = vals[s];
  std::vector<int32_t> rows(K), counts(1);
  std::vector<float> scratch(IndexerScratchFloats(1, N, 1));
  IndexerTopK({1, d, K}, q.data(), w.data(), 1, keys.data(), N - 1, 1.f, rows.data(), counts.data(),
              nullptr, scratch.data(), nullptr);
  EXPECT_EQ(counts[0], K);
  EXPECT_EQ(rows, (std::vector<int32_t>{0, 1, 3}));
}

}  // namespace
}  // namespace strata::cpu
