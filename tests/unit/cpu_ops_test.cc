// CPU op tests: every kernel against a plain double-precision reference on
// random (never zero) inputs, with a multi-threaded pool so partitioning is
// exercised even on small machines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "base/dtype.h"
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

// A weight matrix stored in `dtype` plus its exact fp32 values for references.
struct TestWeight {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored elements decode to
  WeightMatrix view() const { return {dtype, bytes.data(), rows, cols}; }
};

TestWeight MakeWeight(DType dtype, int64_t rows, int64_t cols, uint64_t seed, float scale = 1.f) {
  TestWeight w{dtype, rows, cols, {}, RandomVec(static_cast<size_t>(rows * cols), seed, scale)};
  w.bytes.resize(static_cast<size_t>(rows * cols) * DTypeSize(dtype));
  for (size_t i = 0; i < w.values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(w.values[i]) : F32ToF16(w.values[i]);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.values[i] = dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    }
  }
  return w;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Asserts max |a − ref| ≤ tol · max |ref|.
void ExpectClose(const float* a, const std::vector<double>& ref, double tol, const char* what) {
  const double scale = std::max(MaxAbs(ref), 1e-30);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(a[i]) - ref[i]);
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  EXPECT_LE(worst / scale, tol) << what << ": worst at " << at << " got " << a[at] << " want "
                                << ref[at];
}

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(3);
  return pool;
}

std::vector<double> RefMatMul(const std::vector<float>& x, int64_t n, const TestWeight& w) {
  std::vector<double> y(static_cast<size_t>(n * w.rows));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w.rows; ++j) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c)
        s += static_cast<double>(x[i * w.cols + c]) * w.values[j * w.cols + c];
      y[i * w.rows + j] = s;
    }
  return y;
}

struct MatMulCase {
  DType dtype;
  int64_t n, m, k;
};

class MatMulTest : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulTest, MatchesDoubleReference) {
  const MatMulCase c = GetParam();
  const TestWeight w = MakeWeight(c.dtype, c.m, c.k, 7 + c.m);
  const std::vector<float> x = RandomVec(static_cast<size_t>(c.n * c.k), 11 + c.n);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), Pool()}) {
    const int threads = pool ? pool->num_threads() : 1;
    std::vector<float> scratch(MatMulScratchFloats(c.n, c.k, threads) + 1);
    std::vector<float> y(static_cast<size_t>(c.n * c.m), std::nanf(""));
    MatMul(x.data(), c.n, w.view(), y.data(), scratch.data(), pool);
    ExpectClose(y.data(), RefMatMul(x, c.n, w), 2e-6, "MatMul");
  }
}

std::vector<MatMulCase> MatMulCases() {
  std::vector<MatMulCase> out;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t n : {1, 3, 70}) {
      out.push_back({t, n, 37, 83});   // odd sizes: every tail path
      out.push_back({t, n, 96, 256});  // vector-friendly sizes
      out.push_back({t, n, 5, 2304});  // few rows, long rows
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, MatMulTest, ::testing::ValuesIn(MatMulCases()),
                         [](const auto& info) {
                           const MatMulCase& c = info.param;
                           return std::string(DTypeName(c.dtype)) + "_n" + std::to_string(c.n) +
                                  "_m" + std::to_string(c.m) + "_k" + std::to_string(c.k);
                         });

TEST(MatMulTest, RowHelpers) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const TestWeight w = MakeWeight(t, 4, 45, 3);
    const std::vector<float> x = RandomVec(45, 4);
    for (int64_t r = 0; r < 4; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < 45; ++c) dot += static_cast<double>(w.values[r * 45 + c]) * x[c];
      const float got = DotRow(w.view(), r, x.data());
      EXPECT_NEAR(got, dot, 1e-5 * (1 + std::abs(dot)));
      std::vector<float> y = x;
      AxpyRow(w.view(), r, 0.75f, y.data());
      std::vector<float> row(45);
      RowToF32(w.view(), r, row.data());
      for (int64_t c = 0; c < 45; ++c) {
        EXPECT_EQ(row[c], w.values[r * 45 + c]);
        EXPECT_NEAR(y[c], x[c] + 0.75 * w.values[r * 45 + c], 1e-6);
      }
    }
  }
}

TEST(NormTest, RmsNormMatchesReference) {
  const int64_t rows = 5, dim = 67;
  const auto x = RandomVec(rows * dim, 1, 3.f);
  const auto w = RandomVec(dim, 2);
  std::vector<float> y(rows * dim);
  RmsNorm(x.data(), rows, dim, w.data(), 1e-5f, y.data(), Pool());
  std::vector<double> ref(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double s = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) ref[r * dim + i] = w[i] * x[r * dim + i] * s;
  }
  ExpectClose(y.data(), ref, 1e-6, "RmsNorm");
  // In place gives the same.
  std::vector<float> z = x;
  RmsNorm(z.data(), rows, dim, w.data(), 1e-5f, z.data(), Pool());
  ExpectClose(z.data(), ref, 1e-6, "RmsNorm in place");
}

TEST(NormTest, GatedRmsNormMatchesReference) {
  const int64_t rows = 9, dim = 32;
  const auto x = RandomVec(rows * dim, 3, 2.f);
  const auto g = RandomVec(rows * dim, 4, 2.f);
  const auto w = RandomVec(dim, 5);
  std::vector<float> y(rows * dim);
  GatedRmsNormSigmoid(x.data(), g.data(), rows, dim, w.data(), 1e-5f, y.data(), Pool());
  std::vector<double> ref(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double s = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(g[r * dim + i])));
      ref[r * dim + i] = w[i] * x[r * dim + i] * s * sig;
    }
  }
  ExpectClose(y.data(), ref, 1e-6, "GatedRmsNorm");
}

TEST(ConvTest, MatchesReferenceAndCarriesWindow) {
  const int64_t T = 11, C = 70, K = 4;
  const auto x = RandomVec(T * C, 6);
  const auto w = RandomVec(C * K, 7);
  const auto window0 = RandomVec((K - 1) * C, 8);  // a non-empty history
  // Reference over the concatenated history.
  std::vector<double> ref(T * C);
  auto input = [&](int64_t t, int64_t c) -> double {
    return t < 0 ? window0[(K - 1 + t) * C + c] : x[t * C + c];
  };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double a = 0;
      for (int64_t j = 0; j < K; ++j) a += w[c * K + j] * input(t - (K - 1) + j, c);
      ref[t * C + c] = a / (1 + std::exp(-a));
    }
  // All at once.
  std::vector<float> win = window0, y(T * C);
  CausalConv1dSilu(x.data(), T, C, w.data(), K, win.data(), y.data(), Pool());
  ExpectClose(y.data(), ref, 1e-6, "conv all");
  for (int64_t r = 0; r < K - 1; ++r)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(win[r * C + c], x[(T - (K - 1) + r) * C + c]);
  // In pieces of 1, 2 and 8 tokens (shorter than the window, too).
  std::vector<float> win2 = window0, y2(T * C);
  int64_t t0 = 0;
  for (int64_t len : {1, 2, 8}) {
    CausalConv1dSilu(x.data() + t0 * C, len, C, w.data(), K, win2.data(), y2.data() + t0 * C,
                     Pool());
    t0 += len;
  }
  ExpectClose(y2.data(), ref, 1e-6, "conv pieces");
  EXPECT_EQ(win, win2);
}

// Naive expanded MLA over `total` tokens; returns [T, H, dv] for the last T queries.
std::vector<double> RefMla(const MlaDims& d, const std::vector<float>& q, int64_t T,
                           const std::vector<float>& cache, int64_t past, const TestWeight& kvb) {
  const int64_t H = d.num_heads, cd = d.cache_dim(), ph = d.kv_b_rows_per_head();
  const int64_t total = past + T;
  std::vector<double> k(total * H * d.nope_dim), v(total * H * d.v_dim);
  for (int64_t s = 0; s < total; ++s)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < ph; ++i) {
        double a = 0;
        for (int64_t j = 0; j < d.kv_rank; ++j)
          a += kvb.values[(h * ph + i) * d.kv_rank + j] * static_cast<double>(cache[s * cd + j]);
        if (i < d.nope_dim)
          k[(s * H + h) * d.nope_dim + i] = a;
        else
          v[(s * H + h) * d.v_dim + i - d.nope_dim] = a;
      }
  std::vector<double> out(T * H * d.v_dim, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.q_dim()));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (t * H + h) * d.q_dim();
      std::vector<double> sc(past + t + 1);
      double mx = -1e300;
      for (int64_t s = 0; s <= past + t; ++s) {
        double a = 0;
        for (int64_t i = 0; i < d.nope_dim; ++i) a += qh[i] * k[(s * H + h) * d.nope_dim + i];
        for (int64_t i = 0; i < d.rope_dim; ++i)
          a += qh[d.nope_dim + i] * static_cast<double>(cache[s * cd + d.kv_rank + i]);
        sc[s] = a * scale;
        mx = std::max(mx, sc[s]);
      }
      double l = 0;
      for (auto& e : sc) l += (e = std::exp(e - mx));
      for (int64_t s = 0; s <= past + t; ++s)
        for (int64_t i = 0; i < d.v_dim; ++i)
          out[(t * H + h) * d.v_dim + i] += sc[s] / l * v[(s * H + h) * d.v_dim + i];
    }
  return out;
}

class MlaTest : public ::testing::TestWithParam<DType> {
 protected:
  MlaDims d{/*num_heads=*/3, /*nope_dim=*/16, /*rope_dim=*/8, /*v_dim=*/12, /*kv_rank=*/24};
};

TEST_P(MlaTest, PrefillMatchesExpandedReference) {
  const TestWeight kvb =
      MakeWeight(GetParam(), d.num_heads * d.kv_b_rows_per_head(), d.kv_rank, 21, 0.3f);
  // past + T spans two key blocks, with a partial last block.
  for (int64_t past : {0, 137}) {
    const int64_t T = past == 0 ? 140 : 9;
    const auto cache = RandomVec((past + T) * d.cache_dim(), 22, 1.5f);
    const auto q = RandomVec(T * d.num_heads * d.q_dim(), 23, 1.5f);
    std::vector<float> scratch(MlaPrefillScratchFloats(d, T, Pool()->num_threads()));
    std::vector<float> out(T * d.num_heads * d.v_dim);
    MlaPrefill(d, q.data(), T, cache.data(), past, kvb.view(), out.data(), scratch.data(), Pool());
    ExpectClose(out.data(), RefMla(d, q, T, cache, past, kvb), 1e-5, "MlaPrefill");
    // The same rows read from 16-row blocks give the same bits.
    const testing_util::PagedRows paged(cache, d.cache_dim());
    std::vector<float> out_paged(out.size());
    MlaPrefill(d, q.data(), T, paged.view(), past, kvb.view(), out_paged.data(), scratch.data(),
               Pool());
    EXPECT_EQ(out_paged, out);
  }
}

TEST_P(MlaTest, AbsorbedDecodeEqualsExpandedLastToken) {
  const TestWeight kvb =
      MakeWeight(GetParam(), d.num_heads * d.kv_b_rows_per_head(), d.kv_rank, 31, 0.3f);
  const int64_t context = 150;
  const auto cache = RandomVec(context * d.cache_dim(), 32, 1.5f);
  const auto q = RandomVec(d.num_heads * d.q_dim(), 33, 1.5f);
  std::vector<float> pre_scratch(MlaPrefillScratchFloats(d, 1, Pool()->num_threads()));
  std::vector<float> expanded(d.num_heads * d.v_dim), absorbed(d.num_heads * d.v_dim);
  MlaPrefill(d, q.data(), 1, cache.data(), context - 1, kvb.view(), expanded.data(),
             pre_scratch.data(), Pool());
  std::vector<float> dec_scratch(MlaAbsorbedScratchFloats(d, 1));
  MlaAbsorbed(d, q.data(), 1, cache.data(), context - 1, kvb.view(), absorbed.data(),
              dec_scratch.data(), Pool());
  const auto ref = RefMla(d, q, 1, cache, context - 1, kvb);
  ExpectClose(absorbed.data(), ref, 1e-5, "absorbed decode vs reference");
  std::vector<double> exp_d(expanded.begin(), expanded.end());
  ExpectClose(absorbed.data(), exp_d, 1e-5, "absorbed decode vs MlaPrefill");
}

TEST_P(MlaTest, AbsorbedMultiTokenMatchesReference) {
  const TestWeight kvb =
      MakeWeight(GetParam(), d.num_heads * d.kv_b_rows_per_head(), d.kv_rank, 41, 0.3f);
  // Fresh (past 0) and continuing over more than one key block.
  for (int64_t past : {0, 200}) {
    const int64_t T = past == 0 ? 140 : 7;
    const auto cache = RandomVec((past + T) * d.cache_dim(), 42, 1.5f);
    const auto q = RandomVec(T * d.num_heads * d.q_dim(), 43, 1.5f);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), Pool()}) {
      std::vector<float> scratch(MlaAbsorbedScratchFloats(d, T));
      std::vector<float> out(T * d.num_heads * d.v_dim);
      MlaAbsorbed(d, q.data(), T, cache.data(), past, kvb.view(), out.data(), scratch.data(), pool);
      ExpectClose(out.data(), RefMla(d, q, T, cache, past, kvb), 1e-5, "MlaAbsorbed");
      const testing_util::PagedRows paged(cache, d.cache_dim());
      std::vector<float> out_paged(out.size());
      MlaAbsorbed(d, q.data(), T, paged.view(), past, kvb.view(), out_paged.data(),
                  scratch.data(), pool);
      EXPECT_EQ(out_paged, out);
    }
  }
  // The cost model prefers expansion for fresh prefill and absorption for decode.
  EXPECT_LT(MlaPrefillCost(d, 100, 0), MlaAbsorbedCost(d, 100, 0));
  EXPECT_LT(MlaAbsorbedCost(d, 1, 1000), MlaPrefillCost(d, 1, 1000));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MlaTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(MoeTest, RoutingMatchesSort) {
  const int64_t E = 16, K = 4;
  const auto logits = RandomVec(E, 41, 2.f);
  const auto bias = RandomVec(E, 42, 0.3f);
  for (bool renorm : {true, false}) {
    std::vector<int32_t> idx(K);
    std::vector<float> wt(K);
    RouteSigmoidTopK(logits.data(), E, bias.data(), K, renorm, 2.5f, idx.data(), wt.data());
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    auto sig = [&](int e) { return 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))); };
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return sig(a) + bias[a] > sig(b) + bias[b]; });
    double total = 0;
    for (int j = 0; j < K; ++j) total += sig(order[j]);
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(idx[j], order[j]);
      const double want = sig(order[j]) / (renorm ? total + 1e-20 : 1.0) * 2.5;
      EXPECT_NEAR(wt[j], want, 1e-6 * want);
    }
  }
}

TEST(MoeTest, RoutingWithNanStillPicksDistinctExperts) {
  std::vector<float> logits = RandomVec(6, 43);
  logits[1] = std::nanf("");
  logits[4] = std::nanf("");
  std::vector<int32_t> idx(5);
  std::vector<float> wt(5);
  RouteSigmoidTopK(logits.data(), 6, nullptr, 5, true, 1.f, idx.data(), wt.data());
  std::vector<int32_t> sorted = idx;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  for (int32_t e : idx) {
    EXPECT_GE(e, 0);
    EXPECT_LT(e, 6);
  }
  EXPECT_NE(idx[0], 1);  // finite scores rank before NaN ones
  EXPECT_NE(idx[0], 4);
}

std::vector<double> RefSwiGlu(const float* x, const TestWeight& g, const TestWeight& u,
                              const TestWeight& dn) {
  const int64_t I = g.rows, D = g.cols;
  std::vector<double> h(I), y(D, 0.0);
  for (int64_t i = 0; i < I; ++i) {
    double a = 0, b = 0;
    for (int64_t c = 0; c < D; ++c) {
      a += static_cast<double>(g.values[i * D + c]) * x[c];
      b += static_cast<double>(u.values[i * D + c]) * x[c];
    }
    h[i] = a / (1 + std::exp(-a)) * b;
  }
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < I; ++i) y[j] += dn.values[j * I + i] * h[i];
  return y;
}

TEST(MoeTest, MoeMatchesNaiveLoop) {
  const int64_t D = 40, I = 24, E = 6, K = 2;
  for (int64_t n : {1, 3, 70}) {
    const TestWeight router = MakeWeight(DType::kBF16, E, D, 50, 0.3f);
    const auto bias = RandomVec(E, 51, 0.2f);
    std::vector<TestWeight> g, u, dn;
    for (int64_t e = 0; e <= E; ++e) {  // index E is the shared expert (2·I wide)
      const int64_t inter = e == E ? 2 * I : I;
      g.push_back(MakeWeight(DType::kBF16, inter, D, 60 + e, 0.2f));
      u.push_back(MakeWeight(DType::kBF16, inter, D, 70 + e, 0.2f));
      dn.push_back(MakeWeight(DType::kBF16, D, inter, 80 + e, 0.2f));
    }
    MoeWeights w;
    w.router = router.view();
    w.score_bias = bias.data();
    for (int64_t e = 0; e < E; ++e) w.experts.push_back({g[e].view(), u[e].view(), dn[e].view()});
    w.has_shared = true;
    w.shared = {g[E].view(), u[E].view(), dn[E].view()};
    w.top_k = K;
    w.renormalize = true;
    w.routed_scaling = 2.446f;
    const auto x = RandomVec(n * D, 90 + n);
    std::vector<uint8_t> scratch(MoeScratchBytes(n, D, w, Pool()->num_threads()) + 64);
    void* aligned =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    std::vector<float> y(n * D);
    Moe(x.data(), n, w, y.data(), aligned, Pool());

    std::vector<double> ref(n * D, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * D;
      std::vector<double> s(E), b(E);
      for (int64_t e = 0; e < E; ++e) {
        double l = 0;
        for (int64_t c = 0; c < D; ++c) l += static_cast<double>(router.values[e * D + c]) * xt[c];
        s[e] = 1 / (1 + std::exp(-l));
        b[e] = s[e] + bias[e];
      }
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int p, int q) { return b[p] > b[q]; });
      double total = 0;
      for (int j = 0; j < K; ++j) total += s[order[j]];
      for (int j = 0; j < K; ++j) {
        const int e = order[j];
        const auto ye = RefSwiGlu(xt, g[e], u[e], dn[e]);
        for (int64_t c = 0; c < D; ++c) ref[t * D + c] += s[e] / (total + 1e-20) * 2.446 * ye[c];
      }
      const auto ys = RefSwiGlu(xt, g[E], u[E], dn[E]);
      for (int64_t c = 0; c < D; ++c) ref[t * D + c] += ys[c];
    }
    ExpectClose(y.data(), ref, 2e-5, "Moe");
  }
}

TEST(MoeTest, SwiGluMatchesReference) {
  const int64_t D = 33, I = 50, n = 4;
  const TestWeight g = MakeWeight(DType::kF16, I, D, 1), u = MakeWeight(DType::kF16, I, D, 2),
                   dn = MakeWeight(DType::kF16, D, I, 3);
  const auto x = RandomVec(n * D, 4);
  std::vector<float> scratch(SwiGluScratchFloats(n, D, I, Pool()->num_threads())), y(n * D);
  SwiGlu(x.data(), n, {g.view(), u.view(), dn.view()}, y.data(), scratch.data(), Pool());
  std::vector<double> ref;
  for (int64_t t = 0; t < n; ++t) {
    const auto r = RefSwiGlu(x.data() + t * D, g, u, dn);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  ExpectClose(y.data(), ref, 1e-5, "SwiGlu");
}

}  // namespace
}  // namespace strata::cpu
