// MLA restricted to per-query selected cache rows (DeepSeek Sparse Attention)
// and with an explicit softmax scale, both kernel forms (expanded prefill and
// absorbed), against a plain double-precision expanded reference on random
// inputs; plus the LayerNorm the indexer's keys go through.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/norm.h"
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

struct Problem {
  MlaDims d;
  int64_t past, T;
  std::vector<float> q, cache, kv_b;
  std::vector<int32_t> rows, counts;
  int64_t stride;
};

// Random selection per query: a random subset (at most `k`) of its causal
// rows, ascending; k >= past + T selects everything.
Problem MakeProblem(int64_t H, int64_t past, int64_t T, int64_t k, float scale, uint64_t seed) {
  Problem p;
  p.d = MlaDims{H, 16, 8, 12, 24};
  p.d.softmax_scale = scale;
  p.past = past;
  p.T = T;
  p.q = RandomVec(static_cast<size_t>(T * H * p.d.q_dim()), seed);
  p.cache = RandomVec(static_cast<size_t>((past + T) * p.d.cache_dim()), seed + 1);
  p.kv_b = RandomVec(static_cast<size_t>(H * p.d.kv_b_rows_per_head() * p.d.kv_rank), seed + 2, 0.3f);
  p.stride = k;
  p.rows.assign(static_cast<size_t>(T * k), -1);
  p.counts.assign(static_cast<size_t>(T), 0);
  std::mt19937_64 rng(seed + 3);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = past + t + 1;
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int64_t c = std::min(k, n);
    std::sort(all.begin(), all.begin() + c);
    std::copy(all.begin(), all.begin() + c, p.rows.begin() + t * k);
    p.counts[static_cast<size_t>(t)] = static_cast<int32_t>(c);
  }
  return p;
}

std::vector<double> Reference(const Problem& p) {
  const MlaDims& d = p.d;
  const int64_t H = d.num_heads, r = d.kv_rank, cd = d.cache_dim(), per = d.kv_b_rows_per_head();
  std::vector<double> out(static_cast<size_t>(p.T * H * d.v_dim));
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* q = p.q.data() + (t * H + h) * d.q_dim();
      std::vector<double> sc;
      std::vector<std::vector<double>> vals;
      for (int64_t j = 0; j < p.counts[static_cast<size_t>(t)]; ++j) {
        const int64_t s = p.rows[static_cast<size_t>(t * p.stride + j)];
        const float* row = p.cache.data() + s * cd;
        double score = 0;
        for (int64_t i = 0; i < d.nope_dim; ++i) {
          double k = 0;
          for (int64_t c = 0; c < r; ++c) k += p.kv_b[static_cast<size_t>((h * per + i) * r + c)] * row[c];
          score += q[i] * k;
        }
        for (int64_t i = 0; i < d.rope_dim; ++i) score += q[d.nope_dim + i] * row[r + i];
        sc.push_back(score * d.softmax_scale);
        std::vector<double> v(static_cast<size_t>(d.v_dim));
        for (int64_t i = 0; i < d.v_dim; ++i) {
          for (int64_t c = 0; c < r; ++c) {
            v[static_cast<size_t>(i)] += p.kv_b[static_cast<size_t>((h * per + d.nope_dim + i) * r + c)] * row[c];
          }
        }
        vals.push_back(v);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < sc.size(); ++j) {
        for (int64_t i = 0; i < d.v_dim; ++i) {
          out[static_cast<size_t>((t * H + h) * d.v_dim + i)] += sc[j] / sum * vals[j][static_cast<size_t>(i)];
        }
      }
    }
  }
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
  double scale = 1e-30, worst = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  EXPECT_LE(worst / scale, 2e-5) << what;
}

struct Shape {
  int64_t heads, past, tokens, k;
};

class MlaSparseTest : public ::testing::TestWithParam<Shape> {};

TEST_P(MlaSparseTest, BothFormsAttendToExactlyTheSelectedRows) {
  const Shape s = GetParam();
  Problem p = MakeProblem(s.heads, s.past, s.tokens, s.k, 0.37f, 5 + static_cast<uint64_t>(s.past));
  const WeightMatrix kv_b{DType::kF32, p.kv_b.data(), s.heads * p.d.kv_b_rows_per_head(), p.d.kv_rank};
  const MlaSelection sel{p.rows.data(), p.counts.data(), p.stride};
  const std::vector<double> ref = Reference(p);
  ThreadPool pool(3);
  std::vector<float> out(ref.size());
  std::vector<float> scratch(MlaPrefillScratchFloats(p.d, p.T, pool.num_threads()));
  MlaPrefill(p.d, p.q.data(), p.T, p.cache.data(), p.past, kv_b, out.data(), scratch.data(), &pool, &sel);
  ExpectClose(out, ref, "MlaPrefill with selection");
  std::vector<float> out2(ref.size());
  std::vector<float> scratch2(MlaAbsorbedScratchFloats(p.d, p.T));
  MlaAbsorbed(p.d, p.q.data(), p.T, p.cache.data(), p.past, kv_b, out2.data(), scratch2.data(), &pool, &sel);
  ExpectClose(out2, ref, "MlaAbsorbed with selection");

  // The same rows read from 16-row blocks give the same bits in both forms.
  const testing_util::PagedRows paged(p.cache, p.d.cache_dim());
  std::vector<float> paged_out(ref.size());
  MlaPrefill(p.d, p.q.data(), p.T, paged.view(), p.past, kv_b, paged_out.data(), scratch.data(),
             &pool, &sel);
  EXPECT_EQ(paged_out, out);
  MlaAbsorbed(p.d, p.q.data(), p.T, paged.view(), p.past, kv_b, paged_out.data(), scratch2.data(),
              &pool, &sel);
  EXPECT_EQ(paged_out, out2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaSparseTest,
                         ::testing::Values(Shape{3, 0, 150, 20},    // prefill, selection spans blocks
                                           Shape{5, 300, 1, 48},    // decode over 2+ key blocks
                                           Shape{1, 140, 7, 130},   // continuation, k > block
                                           Shape{7, 10, 5, 3}));    // tiny k

TEST(MlaSparseTest, SelectingEveryCausalRowEqualsDenseAttention) {
  const int64_t T = 70, past = 90, k = past + T;
  Problem p = MakeProblem(3, past, T, k, 0.29f, 99);
  const WeightMatrix kv_b{DType::kF32, p.kv_b.data(), 3 * p.d.kv_b_rows_per_head(), p.d.kv_rank};
  const MlaSelection sel{p.rows.data(), p.counts.data(), p.stride};
  ThreadPool pool(2);
  for (bool absorbed : {false, true}) {
    std::vector<float> dense(static_cast<size_t>(T * 3 * p.d.v_dim)), sparse(dense.size());
    std::vector<float> scratch(std::max(MlaPrefillScratchFloats(p.d, T, 2), MlaAbsorbedScratchFloats(p.d, T)));
    auto run = [&](float* out, const MlaSelection* s) {
      if (absorbed) {
        MlaAbsorbed(p.d, p.q.data(), T, p.cache.data(), past, kv_b, out, scratch.data(), &pool, s);
      } else {
        MlaPrefill(p.d, p.q.data(), T, p.cache.data(), past, kv_b, out, scratch.data(), &pool, s);
      }
    };
    run(dense.data(), nullptr);
    run(sparse.data(), &sel);
    EXPECT_EQ(dense, sparse) << (absorbed ? "absorbed" : "expanded");
  }
}

TEST(MlaSparseTest, ZeroScaleMeansTheKimiDefault) {
  MlaDims d{2, 16, 8, 12, 24};
  Problem p = MakeProblem(2, 4, 3, 7, 0.f, 3);
  p.d.softmax_scale = 1.f / std::sqrt(24.f);
  const std::vector<double> ref = Reference(p);
  p.d.softmax_scale = 0.f;  // the default: (dn + dr)^-1/2 = 24^-1/2
  const WeightMatrix kv_b{DType::kF32, p.kv_b.data(), 2 * d.kv_b_rows_per_head(), d.kv_rank};
  std::vector<float> out(ref.size()), scratch(MlaAbsorbedScratchFloats(p.d, 3));
  MlaAbsorbed(p.d, p.q.data(), 3, p.cache.data(), 4, kv_b, out.data(), scratch.data(), nullptr);
  ExpectClose(out, ref, "default scale");
}

TEST(MlaSparseTest, SparseCostsCountAtMostTopKKeysPerQuery) {
  const MlaDims d{128, 128, 64, 128, 512};
  EXPECT_LT(MlaAbsorbedCost(d, 1, 100000, 2048), MlaAbsorbedCost(d, 1, 100000) / 10);
  EXPECT_EQ(MlaPrefillCost(d, 100, 10, 4096), MlaPrefillCost(d, 100, 10));  // k above every count
}

TEST(LayerNormTest, MatchesReference) {
  const int64_t rows = 37, dim = 48;
  const std::vector<float> x = RandomVec(static_cast<size_t>(rows * dim), 1, 3.f);
  const std::vector<float> w = RandomVec(dim, 2), b = RandomVec(dim, 3);
  std::vector<float> y(x.size());
  ThreadPool pool(3);
  LayerNorm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, y.data(), &pool);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[static_cast<size_t>(r * dim + i)];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double c = x[static_cast<size_t>(r * dim + i)] - mean;
      var += c * c;
    }
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double want = (x[static_cast<size_t>(r * dim + i)] - mean) / std::sqrt(var + 1e-6) * w[static_cast<size_t>(i)] +
                          b[static_cast<size_t>(i)];
      EXPECT_NEAR(y[static_cast<size_t>(r * dim + i)], want, 1e-5 * (1 + std::abs(want)));
    }
  }
  // In place.
  std::vector<float> z = x;
  LayerNorm(z.data(), rows, dim, w.data(), b.data(), 1e-6f, z.data(), nullptr);
  EXPECT_EQ(z, y);
}

}  // namespace
}  // namespace strata::cpu
