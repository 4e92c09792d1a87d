// Qwen3-Next's additions to the shared CPU ops, each against a plain
// double-precision reference on random (never zero) inputs: softmax top-k
// routing (with and without renormalisation), the sigmoid-gated shared
// expert in Moe (batched and single-token paths), and the SiLU-gated RMSNorm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "base/dtype.h"
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

// A weight matrix stored in `dtype` plus its exact fp32 values for references.
struct TestWeight {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  WeightMatrix view() const { return {dtype, bytes.data(), rows, cols}; }
};

TestWeight MakeWeight(DType dtype, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  TestWeight w{dtype, rows, cols, {}, RandomVec(static_cast<size_t>(rows * cols), seed, scale)};
  w.bytes.resize(static_cast<size_t>(rows * cols) * DTypeSize(dtype));
  for (size_t i = 0; i < w.values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
    } else {
      const uint16_t h = F32ToBf16(w.values[i]);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.values[i] = Bf16ToF32(h);
    }
  }
  return w;
}

// Asserts max |a − ref| ≤ tol · max |ref|.
void ExpectClose(const float* a, const std::vector<double>& ref, double tol, const char* what) {
  double scale = 1e-30, worst = 0;
  size_t at = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
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

// Softmax over all experts in double; the top-k by probability (stable: ties
// to the lower index), weights renormalised over the chosen ones on request.
void RefSoftmaxRoute(const std::vector<double>& logits, int64_t k, bool renorm,
                     std::vector<int>* idx, std::vector<double>* wt) {
  const int64_t E = static_cast<int64_t>(logits.size());
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(E);
  double denom = 0;
  for (int64_t e = 0; e < E; ++e) denom += p[e] = std::exp(logits[e] - mx);
  for (double& x : p) x /= denom;
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  idx->assign(order.begin(), order.begin() + k);
  double total = 0;
  for (int64_t j = 0; j < k; ++j) total += p[order[j]];
  wt->clear();
  for (int64_t j = 0; j < k; ++j) wt->push_back(p[order[j]] / (renorm ? total : 1.0));
}

TEST(MoeSoftmaxTest, RoutingMatchesSortedSoftmax) {
  for (int64_t E : {5, 16, 64}) {
    for (int64_t K : {1, 2, 4}) {
      for (bool renorm : {true, false}) {
        const auto logits = RandomVec(E, 100 + E * 7 + K, 2.f);
        std::vector<int32_t> idx(K);
        std::vector<float> wt(K);
        RouteSoftmaxTopK(logits.data(), E, K, renorm, 1.f, idx.data(), wt.data());
        std::vector<int> want_idx;
        std::vector<double> want_wt;
        RefSoftmaxRoute(std::vector<double>(logits.begin(), logits.end()), K, renorm, &want_idx,
                        &want_wt);
        for (int64_t j = 0; j < K; ++j) {
          EXPECT_EQ(idx[j], want_idx[j]) << "E=" << E << " K=" << K << " j=" << j;
          EXPECT_NEAR(wt[j], want_wt[j], 2e-6 * want_wt[j] + 1e-9) << "E=" << E << " K=" << K;
        }
        if (renorm) {
          double sum = 0;
          for (float w : wt) sum += w;
          EXPECT_NEAR(sum, 1.0, 1e-6);
        }
      }
    }
  }
}

TEST(MoeSoftmaxTest, RoutedScalingMultipliesTheWeights) {
  const auto logits = RandomVec(9, 7, 1.5f);
  std::vector<int32_t> i1(3), i2(3);
  std::vector<float> w1(3), w2(3);
  RouteSoftmaxTopK(logits.data(), 9, 3, true, 1.f, i1.data(), w1.data());
  RouteSoftmaxTopK(logits.data(), 9, 3, true, 2.5f, i2.data(), w2.data());
  EXPECT_EQ(i1, i2);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(w2[j], 2.5f * w1[j], 1e-6);
}

TEST(MoeSoftmaxTest, TiesGoToTheLowerIndexAndNanRanksLast) {
  std::vector<float> logits = {0.5f, 1.0f, std::nanf(""), 1.0f, -0.25f, 1.0f};
  std::vector<int32_t> idx(5);
  std::vector<float> wt(5);
  RouteSoftmaxTopK(logits.data(), 6, 5, false, 1.f, idx.data(), wt.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 3, 5, 0, 4}));
  for (float w : wt) EXPECT_TRUE(std::isfinite(w));
  EXPECT_EQ(wt[0], wt[1]);
  EXPECT_EQ(wt[1], wt[2]);
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

// Qwen3-Next's sparse block: softmax routing + sigmoid(shared_gate·x)·Shared(x).
TEST(MoeSoftmaxTest, SoftmaxMoeWithGatedSharedExpertMatchesNaiveLoop) {
  const int64_t D = 44, I = 20, Is = 28, E = 7, K = 3;
  for (bool renorm : {true, false}) {
    for (int64_t n : {1, 2, 67}) {
      const TestWeight router = MakeWeight(DType::kBF16, E, D, 200, 0.3f);
      std::vector<TestWeight> g, u, dn;
      for (int64_t e = 0; e <= E; ++e) {  // index E is the shared expert
        const int64_t inter = e == E ? Is : I;
        g.push_back(MakeWeight(DType::kBF16, inter, D, 210 + e, 0.2f));
        u.push_back(MakeWeight(DType::kBF16, inter, D, 230 + e, 0.2f));
        dn.push_back(MakeWeight(DType::kBF16, D, inter, 250 + e, 0.2f));
      }
      const TestWeight shared_gate = MakeWeight(DType::kF32, 1, D, 270, 0.3f);
      MoeWeights w;
      w.routing = MoeRouting::kSoftmax;
      w.router = router.view();
      for (int64_t e = 0; e < E; ++e) w.experts.push_back({g[e].view(), u[e].view(), dn[e].view()});
      w.has_shared = true;
      w.shared = {g[E].view(), u[E].view(), dn[E].view()};
      w.shared_gate = shared_gate.view();
      w.top_k = K;
      w.renormalize = renorm;
      const auto x = RandomVec(n * D, 300 + n);
      std::vector<uint8_t> scratch(MoeScratchBytes(n, D, w, Pool()->num_threads()) + 64);
      void* aligned =
          reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
      std::vector<float> y(n * D);
      Moe(x.data(), n, w, y.data(), aligned, Pool());

      std::vector<double> ref(n * D, 0.0);
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x.data() + t * D;
        std::vector<double> logits(E);
        for (int64_t e = 0; e < E; ++e) {
          for (int64_t c = 0; c < D; ++c)
            logits[e] += static_cast<double>(router.values[e * D + c]) * xt[c];
        }
        std::vector<int> idx;
        std::vector<double> wt;
        RefSoftmaxRoute(logits, K, renorm, &idx, &wt);
        for (int64_t j = 0; j < K; ++j) {
          const auto ye = RefSwiGlu(xt, g[idx[j]], u[idx[j]], dn[idx[j]]);
          for (int64_t c = 0; c < D; ++c) ref[t * D + c] += wt[j] * ye[c];
        }
        double gl = 0;
        for (int64_t c = 0; c < D; ++c) gl += static_cast<double>(shared_gate.values[c]) * xt[c];
        const double sg = 1 / (1 + std::exp(-gl));
        const auto ys = RefSwiGlu(xt, g[E], u[E], dn[E]);
        for (int64_t c = 0; c < D; ++c) ref[t * D + c] += sg * ys[c];
      }
      ExpectClose(y.data(), ref, 2e-5, renorm ? "Moe softmax renorm" : "Moe softmax");
    }
  }
}

// Without a shared gate the shared expert is added as is (Kimi): a gate whose
// logit is huge (sigmoid = 1) must give the same result as no gate at all.
TEST(MoeSoftmaxTest, SaturatedSharedGateEqualsNoGate) {
  const int64_t D = 16, I = 8, E = 4, K = 2, n = 5;
  const TestWeight router = MakeWeight(DType::kF32, E, D, 400, 0.3f);
  std::vector<TestWeight> g, u, dn;
  for (int64_t e = 0; e <= E; ++e) {
    g.push_back(MakeWeight(DType::kF32, I, D, 410 + e, 0.2f));
    u.push_back(MakeWeight(DType::kF32, I, D, 420 + e, 0.2f));
    dn.push_back(MakeWeight(DType::kF32, D, I, 430 + e, 0.2f));
  }
  MoeWeights w;
  w.routing = MoeRouting::kSoftmax;
  w.router = router.view();
  for (int64_t e = 0; e < E; ++e) w.experts.push_back({g[e].view(), u[e].view(), dn[e].view()});
  w.has_shared = true;
  w.shared = {g[E].view(), u[E].view(), dn[E].view()};
  w.top_k = K;
  const auto x = RandomVec(n * D, 440);
  // gate·x = 1e4·Σx: make Σx positive for every token.
  std::vector<float> xs = x;
  for (int64_t t = 0; t < n; ++t) {
    double s = 0;
    for (int64_t c = 0; c < D; ++c) s += xs[t * D + c];
    if (s < 1) xs[t * D] += static_cast<float>(1 - s);
  }
  std::vector<float> ones(D, 1e4f);
  std::vector<uint8_t> scratch(MoeScratchBytes(n, D, w, Pool()->num_threads()) + 64);
  void* aligned =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
  std::vector<float> plain(n * D), gated(n * D);
  Moe(xs.data(), n, w, plain.data(), aligned, Pool());
  w.shared_gate = {DType::kF32, ones.data(), 1, D};
  Moe(xs.data(), n, w, gated.data(), aligned, Pool());
  EXPECT_EQ(plain, gated);
}

TEST(NormSiluTest, GatedRmsNormSiluMatchesReference) {
  const int64_t rows = 37, dim = 24;
  const float eps = 1e-6f;
  const auto x = RandomVec(rows * dim, 500, 2.f);
  const auto gate = RandomVec(rows * dim, 501, 1.5f);
  const auto w = RandomVec(dim, 502, 0.3f);
  std::vector<float> wp(dim);
  for (int64_t i = 0; i < dim; ++i) wp[i] = 1.f + w[i];
  std::vector<float> y(rows * dim);
  GatedRmsNormSilu(x.data(), gate.data(), rows, dim, wp.data(), eps, y.data(), Pool());
  std::vector<double> ref(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double s = 1 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const double gv = gate[r * dim + i];
      ref[r * dim + i] = wp[i] * x[r * dim + i] * s * gv / (1 + std::exp(-gv));
    }
  }
  ExpectClose(y.data(), ref, 1e-6, "GatedRmsNormSilu");
  // In place (y aliases x), as the GDN mixer calls it.
  std::vector<float> inplace = x;
  GatedRmsNormSilu(inplace.data(), gate.data(), rows, dim, wp.data(), eps, inplace.data(), Pool());
  EXPECT_EQ(inplace, y);
}

}  // namespace
}  // namespace strata::cpu
