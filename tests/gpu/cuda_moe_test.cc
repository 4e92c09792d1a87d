// CUDA MoE against the CPU backend on random inputs:
//  * MoeRoute vs cpu::RouteSigmoidTopK: indices exact, weights within 1e-6
//    (E from 7 to 1000, k up to 32, with and without bias / renormalisation,
//    exact ties in the scores, NaN and ±inf logits);
//  * MoeForward vs cpu::Moe (the same bf16 expert weights, the router logits
//    computed once by cpu::MatMul and fed to both; no shared expert):
//      tiny odd shapes (E=7, k=2, D=64, I=48; n = 1, 3, 5, 97) and a scalar
//      fallback shape (D=66, I=50), every decode path (fused down+combine for
//      n ≤ 4, grouped GEMV otherwise);
//      a mid shape on the tensor-core grouped GEMM (E=8, k=2, D=256, I=128,
//      n=300);
//      the production shape (E=256, k=8, D=2304, I=1024; n = 1, 8, 64, 2000);
//      skewed routing (a bias of +10 sends every token to one expert) and
//      experts with no tokens (everywhere E > n·k);
//    L2-relative error ≤ 1e-2 (bf16 weights and activations, fp32 output),
//    and a second run, on an explicit stream where the kernels are chained by
//    programmatic dependent launch, gives bit-identical output;
//  * the CUTLASS grouped GEMM (MoeGemmImpl::kCutlass, builds with CUTLASS
//    only) at the production shape for n = 300, 1000, 4099 (odd), skewed
//    routing, and a mid shape where a bias sends every token to 16 of 160
//    experts (144 empty groups), with the same tolerances; the rest of the
//    file runs whatever the tuning entry moe.gemm selects (run it once with
//    STRATA_OPTIONS=moe.gemm=mma for the mma.sync kernels);
//  * batch-invariant mode (MoeArgs::batch_invariant): a token's output row
//    is bit for bit the same in a call of 600 tokens and in calls of 1, 2, 8,
//    16, 17, 64, 97 and 300 tokens taken from the start and the middle of
//    them (E=64, D=256, I=128 and the production shape, k=8);
//  * the shared expert folded into the one-token path (MoeArgs::shared_w13)
//    against cpu::Moe with a shared expert (the production shape and D=1032,
//    I=776), the same bits on a second run; where the fold is refused;
//  * a captured CUDA graph replayed on new inputs equals the eager result;
//  * argument misuse → InvalidArgument naming the field.
// Each case prints max abs / max rel (to max |ref|) / L2-relative error.
#include "backend/cuda/moe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/parallel.h"
#include "backend/cuda/moe_grouped_gemm_sm90.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::Upload;

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(0);
  return pool;
}

// Counter-based uniform in [-scale, scale): parallel generation is reproducible.
float HashUniform(uint64_t seed, uint64_t i, float scale) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * 0x1.0p-24f;  // [0, 1)
  return (2.f * u - 1.f) * scale;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  cpu::ParallelRange(Pool(), static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[i] = F32ToBf16(HashUniform(seed, i, scale));
  });
  return v;
}

std::vector<float> RandomF32(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = HashUniform(seed, i, scale);
  return v;
}

struct Errors {
  double max_abs = 0, max_rel = 0, l2_rel = 0;
};

Errors Compare(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0, max_ref = 0;
  Errors e;
  bool finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    if (!std::isfinite(got[i])) finite = false;
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  e.max_rel = e.max_abs / std::max(max_ref, 1e-30);
  e.l2_rel = std::sqrt(num / std::max(den, 1e-30));
  if (!finite) e.max_abs = e.max_rel = e.l2_rel = std::numeric_limits<double>::infinity();
  return e;
}

// ---------------------------------------------------------------------------
// Routing.

struct RouteCase {
  int64_t E, k, n;
  bool bias, renormalize;
  float scaling;
  int special;  // 0: random; 1: quantised logits (exact ties); 2: NaN/±inf sprinkled
};

struct RouteInputs {
  std::vector<float> logits;  // [n, E]
  std::vector<float> bias;    // [E], empty without c.bias
};

RouteInputs MakeRouteInputs(const RouteCase& c, uint64_t seed) {
  RouteInputs in;
  std::vector<float>& logits = in.logits;
  logits = RandomF32(static_cast<size_t>(c.n * c.E), seed, 4.f);
  if (c.special == 1) {
    for (float& v : logits) v = std::round(v * 2.f) / 2.f;  // ~17 distinct values
  } else if (c.special == 2) {
    for (size_t i = 0; i < logits.size(); ++i) {
      const uint64_t h = static_cast<uint64_t>(HashUniform(seed + 7, i, 1.f) * 1e6f + 1e6f);
      if (h % 13 == 0) logits[i] = std::numeric_limits<float>::quiet_NaN();
      if (h % 17 == 0) logits[i] = std::numeric_limits<float>::infinity();
      if (h % 19 == 0) logits[i] = -std::numeric_limits<float>::infinity();
    }
  }
  if (c.bias) {
    in.bias = RandomF32(static_cast<size_t>(c.E), seed + 1, 0.1f);
    if (c.special == 1) {
      for (float& b : in.bias) b = std::round(b * 20.f) / 20.f;  // ties survive the bias
    }
  }
  return in;
}

void CheckRoute(const RouteCase& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "E=" << c.E << " k=" << c.k << " n=" << c.n
                                  << " bias=" << c.bias << " renorm=" << c.renormalize
                                  << " special=" << c.special);
  const RouteInputs in = MakeRouteInputs(c, seed);
  const std::vector<float>& logits = in.logits;
  const std::vector<float>& bias = in.bias;
  std::vector<int32_t> ref_idx(static_cast<size_t>(c.n * c.k));
  std::vector<float> ref_w(ref_idx.size());
  for (int64_t t = 0; t < c.n; ++t) {
    cpu::RouteSigmoidTopK(logits.data() + t * c.E, c.E, c.bias ? bias.data() : nullptr, c.k,
                          c.renormalize, c.scaling, ref_idx.data() + t * c.k,
                          ref_w.data() + t * c.k);
  }
  DevBuf d_logits(sizeof(float) * logits.size()), d_bias(sizeof(float) * c.E);
  DevBuf d_idx(sizeof(int32_t) * ref_idx.size()), d_w(sizeof(float) * ref_w.size());
  Upload(d_logits, logits);
  if (c.bias) Upload(d_bias, bias);
  MoeShape shape;
  shape.num_experts = c.E;
  shape.top_k = c.k;
  shape.renormalize = c.renormalize;
  shape.routed_scaling = c.scaling;
  Status st = MoeRoute(shape, d_logits.get<float>(), c.bias ? d_bias.get<float>() : nullptr, c.n,
                       d_idx.get<int32_t>(), d_w.get<float>(), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> idx(ref_idx.size());
  std::vector<float> w(ref_w.size());
  Download(idx, d_idx);
  Download(w, d_w);
  int64_t idx_mismatch = 0;
  double max_w_err = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] != ref_idx[i]) {
      if (idx_mismatch++ < 5) {
        ADD_FAILURE() << "token " << i / c.k << " pick " << i % c.k << ": gpu " << idx[i]
                      << " cpu " << ref_idx[i];
      }
      continue;
    }
    if (std::isnan(ref_w[i]) || std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(ref_w[i]) && std::isnan(w[i])) << "pair " << i;
      continue;
    }
    const double err = std::fabs(static_cast<double>(w[i]) - ref_w[i]) /
                       std::max(1.0, std::fabs(static_cast<double>(ref_w[i])));
    max_w_err = std::max(max_w_err, err);
  }
  std::printf("MoeRoute E=%lld k=%lld n=%lld bias=%d renorm=%d special=%d: idx mismatches %lld, "
              "max weight err %.3g\n",
              static_cast<long long>(c.E), static_cast<long long>(c.k),
              static_cast<long long>(c.n), c.bias, c.renormalize, c.special,
              static_cast<long long>(idx_mismatch), max_w_err);
  EXPECT_EQ(idx_mismatch, 0);
  EXPECT_LE(max_w_err, 1e-6);
}

TEST(CudaMoeRoute, MatchesCpuRouting) {
  const RouteCase cases[] = {
      {7, 2, 97, false, true, 1.f, 0},      {7, 2, 5, true, false, 2.446f, 0},
      {256, 8, 2000, true, true, 2.446f, 0}, {256, 8, 300, false, true, 2.446f, 1},
      {256, 8, 300, true, true, 2.446f, 1},  {256, 8, 200, true, true, 2.446f, 2},
      {64, 32, 100, true, true, 1.f, 0},     {33, 32, 50, true, false, 1.f, 1},
      {384, 8, 100, true, true, 2.446f, 0},  {1000, 16, 64, true, true, 1.5f, 0},
      {7, 7, 20, false, true, 1.f, 2},       {1, 1, 3, false, true, 1.f, 0},
  };
  uint64_t seed = 100;
  for (const RouteCase& c : cases) CheckRoute(c, seed++);
}

// One token takes the CTA-wide ranking (RouteTokenCta) where the shape allows
// it; it must pick like the CPU and match the warp routing of the same row
// inside a larger call bit for bit (weights included).
TEST(CudaMoeRoute, OneTokenMatchesCpuAndWarpRoutingBitForBit) {
  const RouteCase cases[] = {
      {256, 8, 1, true, true, 2.446f, 0},  {256, 8, 1, true, true, 2.446f, 1},
      {256, 8, 1, false, true, 2.446f, 2}, {256, 8, 1, true, false, 1.f, 2},
      {7, 2, 1, false, true, 1.f, 0},      {33, 32, 1, true, false, 1.f, 1},
      {64, 32, 1, true, true, 1.f, 0},     {384, 8, 1, true, true, 2.446f, 1},
      {1000, 16, 1, true, true, 1.5f, 0},  {1024, 32, 1, true, true, 1.f, 1},
      {100, 1, 1, false, false, 1.f, 2},   {1, 1, 1, false, true, 1.f, 0},
  };
  uint64_t seed = 500;
  for (const RouteCase& c : cases) {
    CheckRoute(c, seed);  // n = 1 against the CPU
    // The same row as row 1 of a two-token call (warp routing).
    SCOPED_TRACE(testing::Message() << "E=" << c.E << " k=" << c.k << " special=" << c.special);
    const RouteInputs in = MakeRouteInputs(c, seed);
    const std::vector<float>& logits = in.logits;
    std::vector<float> two(2 * static_cast<size_t>(c.E));
    for (int64_t e = 0; e < c.E; ++e) {
      two[e] = -logits[e];
      two[c.E + e] = logits[e];
    }
    MoeShape shape;
    shape.num_experts = c.E;
    shape.top_k = c.k;
    shape.renormalize = c.renormalize;
    shape.routed_scaling = c.scaling;
    DevBuf d_one(sizeof(float) * logits.size()), d_two(sizeof(float) * two.size()),
        d_bias(sizeof(float) * c.E);
    DevBuf d_idx1(sizeof(int32_t) * c.k), d_w1(sizeof(float) * c.k);
    DevBuf d_idx2(sizeof(int32_t) * 2 * c.k), d_w2(sizeof(float) * 2 * c.k);
    Upload(d_one, logits);
    Upload(d_two, two);
    if (c.bias) Upload(d_bias, in.bias);
    const float* b = c.bias ? d_bias.get<float>() : nullptr;
    ASSERT_TRUE(
        MoeRoute(shape, d_one.get<float>(), b, 1, d_idx1.get<int32_t>(), d_w1.get<float>(), nullptr)
            .ok());
    ASSERT_TRUE(
        MoeRoute(shape, d_two.get<float>(), b, 2, d_idx2.get<int32_t>(), d_w2.get<float>(), nullptr)
            .ok());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int32_t> idx1(c.k), idx2(2 * c.k);
    std::vector<float> w1(c.k), w2(2 * c.k);
    Download(idx1, d_idx1);
    Download(idx2, d_idx2);
    Download(w1, d_w1);
    Download(w2, d_w2);
    for (int64_t j = 0; j < c.k; ++j) {
      EXPECT_EQ(idx1[j], idx2[c.k + j]) << "pick " << j;
      uint32_t a, bb;
      std::memcpy(&a, &w1[j], 4);
      std::memcpy(&bb, &w2[c.k + j], 4);
      EXPECT_EQ(a, bb) << "weight bits of pick " << j;
    }
    ++seed;
  }
}

// ---------------------------------------------------------------------------
// MoeForward.

// Stacked expert weights on host and device: w13 [E, 2I, D] (gate rows, then
// up rows), w2 [E, D, I], router [E, D] fp32.
struct Model {
  MoeShape shape;
  std::vector<uint16_t> w13, w2;
  std::vector<float> router;
  std::unique_ptr<DevBuf> d_w13, d_w2;

  Model(int64_t E, int64_t D, int64_t I, int64_t k, uint64_t seed) {
    shape.num_experts = E;
    shape.hidden = D;
    shape.inter = I;
    shape.top_k = k;
    w13 = RandomBf16(static_cast<size_t>(E * 2 * I * D), seed, 1.7f / std::sqrt(float(D)));
    w2 = RandomBf16(static_cast<size_t>(E * D * I), seed + 1, 1.7f / std::sqrt(float(I)));
    router = RandomF32(static_cast<size_t>(E * D), seed + 2, 1.7f / std::sqrt(float(D)));
    d_w13 = std::make_unique<DevBuf>(sizeof(uint16_t) * w13.size());
    d_w2 = std::make_unique<DevBuf>(sizeof(uint16_t) * w2.size());
    Upload(*d_w13, w13);
    Upload(*d_w2, w2);
  }

  cpu::MoeWeights CpuWeights(const float* bias) const {
    const int64_t E = shape.num_experts, D = shape.hidden, I = shape.inter;
    cpu::MoeWeights w;
    w.router = cpu::WeightMatrix{DType::kF32, router.data(), E, D};
    w.score_bias = bias;
    w.routing = shape.softmax ? cpu::MoeRouting::kSoftmax : cpu::MoeRouting::kSigmoid;
    w.num_groups = shape.num_groups;
    w.topk_groups = shape.topk_groups;
    w.top_k = shape.top_k;
    w.renormalize = shape.renormalize;
    w.routed_scaling = shape.routed_scaling;
    w.has_shared = false;
    w.experts.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const uint16_t* g = w13.data() + e * 2 * I * D;
      w.experts[e].gate = cpu::WeightMatrix{DType::kBF16, g, I, D};
      w.experts[e].up = cpu::WeightMatrix{DType::kBF16, g + I * D, I, D};
      w.experts[e].down = cpu::WeightMatrix{DType::kBF16, w2.data() + e * D * I, D, I};
    }
    return w;
  }
};

Model& Production();

struct Inputs {
  std::vector<uint16_t> x;
  std::vector<float> x32, logits, bias;
};

// Random x, optional bias (a +10 on `skew_expert` when >= 0 sends every token
// there), and the router logits the CPU reference computes for itself.
Inputs MakeInputs(const Model& m, int64_t n, uint64_t seed, bool with_bias, int64_t skew_expert) {
  const int64_t E = m.shape.num_experts, D = m.shape.hidden;
  Inputs in;
  in.x = RandomBf16(static_cast<size_t>(n * D), seed, 1.f);
  in.x32.resize(in.x.size());
  for (size_t i = 0; i < in.x.size(); ++i) in.x32[i] = Bf16ToF32(in.x[i]);
  if (with_bias || skew_expert >= 0) {
    in.bias = RandomF32(static_cast<size_t>(E), seed + 1, with_bias ? 0.1f : 0.f);
    if (skew_expert >= 0) in.bias[skew_expert] = 10.f;
  }
  in.logits.resize(static_cast<size_t>(n * E));
  cpu::WeightMatrix router{DType::kF32, m.router.data(), E, D};
  std::vector<float> mm(
      std::max<size_t>(1, cpu::MatMulScratchFloats(n, D, Pool()->num_threads())));
  cpu::MatMul(in.x32.data(), n, router, in.logits.data(), mm.data(), Pool());
  return in;
}

// cpu::Moe of n rows of in.x32 with weights w.
std::vector<float> CpuMoeWith(const cpu::MoeWeights& w, const Model& m, int64_t n,
                              const Inputs& in) {
  const size_t bytes = cpu::MoeScratchBytes(n, m.shape.hidden, w, Pool()->num_threads());
  std::vector<float> scratch(bytes / sizeof(float) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                          ~uintptr_t{63});
  std::vector<float> y(static_cast<size_t>(n * m.shape.hidden));
  cpu::Moe(in.x32.data(), n, w, y.data(), aligned, Pool());
  return y;
}

std::vector<float> CpuMoe(const Model& m, int64_t n, const Inputs& in) {
  return CpuMoeWith(m.CpuWeights(in.bias.empty() ? nullptr : in.bias.data()), m, n, in);
}

// Device copies of one input set plus the output and the workspace.
struct GpuRun {
  DevBuf x, logits, bias, y, ws;
  size_t ws_bytes;
  MoeArgs args;
  GpuRun(const Model& m, int64_t n, const Inputs& in, MoeGemmImpl impl = MoeGemmImpl::kAuto)
      : x(sizeof(uint16_t) * in.x.size()),
        logits(sizeof(float) * in.logits.size()),
        bias(sizeof(float) * std::max<size_t>(1, in.bias.size())),
        y(sizeof(float) * n * m.shape.hidden),
        ws(MoeWorkspaceBytes(m.shape, n)),
        ws_bytes(MoeWorkspaceBytes(m.shape, n)) {
    Load(in);
    args.shape = m.shape;
    args.num_tokens = n;
    args.x = x.get<bf16>();
    args.router_logits = logits.get<float>();
    args.score_bias = in.bias.empty() ? nullptr : bias.get<float>();
    args.w13 = m.d_w13->get<bf16>();
    args.w2 = m.d_w2->get<bf16>();
    args.y = y.get<float>();
    args.gemm_impl = impl;
  }
  void Load(const Inputs& in) {
    Upload(x, in.x);
    Upload(logits, in.logits);
    if (!in.bias.empty()) Upload(bias, in.bias);
  }
  std::vector<float> Run(cudaStream_t stream = nullptr) {
    // Poison y so a kernel that skips an element cannot pass on stale data.
    EXPECT_EQ(cudaMemsetAsync(y.get(), 0xff,
                              sizeof(float) * args.num_tokens * args.shape.hidden, stream),
              cudaSuccess);
    const Status st = MoeForward(args, ws.get(), ws_bytes, stream);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> out(static_cast<size_t>(args.num_tokens * args.shape.hidden));
    Download(out, y);
    return out;
  }
};

void CheckForwardOn(const Model& m, int64_t n, const Inputs& in, const char* label,
                    MoeGemmImpl impl, int64_t skew) {
  SCOPED_TRACE(testing::Message() << label << " n=" << n);
  const std::vector<float> ref = CpuMoe(m, n, in);
  GpuRun run(m, n, in, impl);
  const std::vector<float> got = run.Run();
  const Errors e = Compare(got, ref);
  std::printf(
      "MoeForward %-10s E=%lld k=%lld D=%lld I=%lld n=%-5lld skew=%lld: max abs %.3g, max rel "
      "%.3g, L2 rel %.3g\n",
      label, static_cast<long long>(m.shape.num_experts), static_cast<long long>(m.shape.top_k),
      static_cast<long long>(m.shape.hidden), static_cast<long long>(m.shape.inter),
      static_cast<long long>(n), static_cast<long long>(skew), e.max_abs, e.max_rel, e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  EXPECT_LE(e.max_rel, 5e-2);
  // Again on an explicit stream (kernels chained by programmatic dependent
  // launch there): bit-identical, since the combine sums in k order.
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> again = run.Run(stream);
  cudaStreamDestroy(stream);
  EXPECT_EQ(std::memcmp(got.data(), again.data(), sizeof(float) * got.size()), 0)
      << "second run differs: the combine must be deterministic";
}

void CheckForward(Model& m, int64_t n, uint64_t seed, bool bias, int64_t skew, bool renormalize,
                  float scaling, const char* label, MoeGemmImpl impl = MoeGemmImpl::kAuto) {
  m.shape.renormalize = renormalize;
  m.shape.routed_scaling = scaling;
  CheckForwardOn(m, n, MakeInputs(m, n, seed, bias, skew), label, impl, skew);
}

TEST(CudaMoeForward, TinyOddShapes) {
  Model m(7, 64, 48, 2, 11);
  uint64_t seed = 1000;
  for (int64_t n : {1, 3, 5, 97}) {
    CheckForward(m, n, seed++, false, -1, true, 1.f, "tiny");
    CheckForward(m, n, seed++, true, -1, false, 2.446f, "tiny+bias");
  }
  CheckForward(m, 97, seed++, true, 3, true, 2.446f, "tiny-skew");
  CheckForward(m, 2, seed++, true, 0, true, 2.446f, "tiny-skew");
}

TEST(CudaMoeForward, ScalarFallbackShape) {
  // D and I not multiples of 8 (and D not of 4): scalar loads, scalar combine.
  Model m(5, 66, 50, 3, 12);
  uint64_t seed = 2000;
  for (int64_t n : {1, 4, 33}) CheckForward(m, n, seed++, true, -1, true, 2.446f, "scalar");
}

TEST(CudaMoeForward, MidShapeGroupedGemm) {
  // n·k = 600 > 512 rows with D % 128 == 0 and I % 64 == 0: tensor-core path.
  Model m(8, 256, 128, 2, 13);
  CheckForward(m, 300, 3000, true, -1, true, 2.446f, "mid-gemm");
  CheckForward(m, 300, 3001, true, 5, true, 2.446f, "mid-skew");  // 300 rows in one expert
  CheckForward(m, 257, 3002, false, -1, false, 1.f, "mid-gemm");
  CheckForward(m, 200, 3003, true, -1, true, 2.446f, "mid-gemv");  // 400 rows: GEMV
}

Model& Production() {
  static Model* m = new Model(256, 2304, 1024, 8, 14);
  return *m;
}

TEST(CudaMoeForward, ProductionShapeDecode) {
  Model& m = Production();
  uint64_t seed = 4000;
  for (int64_t n : {1, 8, 64}) CheckForward(m, n, seed++, true, -1, true, 2.446f, "prod");
  CheckForward(m, 64, seed++, true, 17, true, 2.446f, "prod-skew");  // 64 rows in one expert
}

TEST(CudaMoeForward, ProductionShapePrefill) {
  Model& m = Production();
  CheckForward(m, 2000, 5000, true, -1, true, 2.446f, "prod");
  CheckForward(m, 2000, 5001, true, 200, true, 2.446f, "prod-skew");  // 2000 rows in one expert
}

TEST(CudaMoeForward, CutlassGroupedGemm) {
  if (!MoeSm90GemmAvailable()) GTEST_SKIP() << "built without CUTLASS";
  Model& m = Production();
  uint64_t seed = 7000;
  for (int64_t n : {300, 1000, 4099}) {
    CheckForward(m, n, seed++, true, -1, true, 2.446f, "cutlass", MoeGemmImpl::kCutlass);
  }
  CheckForward(m, 1000, seed++, true, 33, true, 2.446f, "cutlass-skew", MoeGemmImpl::kCutlass);
  CheckForward(m, 523, seed++, false, -1, false, 1.f, "cutlass", MoeGemmImpl::kCutlass);
  // 16 of 160 experts take every token (a +10 bias each): 144 groups of zero
  // rows between and after the busy ones.
  Model mid(160, 256, 192, 4, 17);
  mid.shape.renormalize = true;
  mid.shape.routed_scaling = 2.446f;
  for (int64_t n : {129, 700}) {
    Inputs in = MakeInputs(mid, n, seed++, true, -1);
    for (int64_t e = 3; e < 160; e += 10) in.bias[static_cast<size_t>(e)] += 10.f;
    CheckForwardOn(mid, n, in, "cutlass-empty", MoeGemmImpl::kCutlass, -1);
  }
}

// Batch-invariant mode: the rows of tokens [off, off + n) of a 600-token
// input, run as a call of their own, must equal bit for bit those rows of the
// 600-token call (routing, the grouped GEMM tiles and the combine all
// computed per row whatever else is in the call). The 600-token call is
// also checked against the CPU, so the mode computes the right thing.
void CheckBatchInvariant(Model& m, uint64_t seed) {
  constexpr int64_t kAll = 600;
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const int64_t D = m.shape.hidden, E = m.shape.num_experts;
  const Inputs in = MakeInputs(m, kAll, seed, true, -1);
  auto run = [&](int64_t off, int64_t n) {
    Inputs sub;
    sub.x.assign(in.x.begin() + off * D, in.x.begin() + (off + n) * D);
    sub.logits.assign(in.logits.begin() + off * E, in.logits.begin() + (off + n) * E);
    sub.bias = in.bias;
    GpuRun r(m, n, sub);
    r.args.batch_invariant = true;
    r.ws_bytes = MoeWorkspaceBytes(m.shape, n, /*batch_invariant=*/true);
    EXPECT_LE(r.ws_bytes, MoeWorkspaceBytes(m.shape, n));  // bf16: the same size
    return r.Run();
  };
  const std::vector<float> all = run(0, kAll);
  const Errors e = Compare(all, CpuMoe(m, kAll, in));
  std::printf("MoeForward batch-invariant E=%lld D=%lld I=%lld n=%lld: L2 rel %.3g vs CPU\n",
              static_cast<long long>(E), static_cast<long long>(D),
              static_cast<long long>(m.shape.inter), static_cast<long long>(kAll), e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  for (int64_t off : {int64_t{0}, int64_t{151}}) {
    for (int64_t n : {1, 2, 8, 16, 17, 64, 97, 300}) {
      const std::vector<float> part = run(off, n);
      size_t differ = 0;
      for (int64_t i = 0; i < n * D; ++i) {
        differ += std::memcmp(&part[i], &all[off * D + i], sizeof(float)) != 0 ? 1 : 0;
      }
      EXPECT_EQ(differ, 0u) << "tokens [" << off << ", " << off + n << ") alone differ from the "
                            << kAll << "-token call in " << differ << " of " << n * D << " outputs";
    }
  }
}

// A single token takes the planless path (MoeParams::direct) with bf16
// experts; every row of a 2-, 3- or 4-token call takes the planned grouped
// GEMV with the same per-row arithmetic, so each token alone must give that
// row's bits exactly.
void CheckOneTokenMatchesPlannedRows(Model& m, uint64_t seed) {
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const int64_t D = m.shape.hidden, E = m.shape.num_experts;
  constexpr int64_t kAll = 4;
  const Inputs in = MakeInputs(m, kAll, seed, true, -1);
  auto slice = [&](int64_t off, int64_t n) {
    Inputs sub;
    sub.x.assign(in.x.begin() + off * D, in.x.begin() + (off + n) * D);
    sub.x32.assign(in.x32.begin() + off * D, in.x32.begin() + (off + n) * D);
    sub.logits.assign(in.logits.begin() + off * E, in.logits.begin() + (off + n) * E);
    sub.bias = in.bias;
    return sub;
  };
  auto run = [&](int64_t off, int64_t n) {
    GpuRun r(m, n, slice(off, n));
    return r.Run();
  };
  const std::vector<float> all = run(0, kAll);
  const Errors e = Compare(all, CpuMoe(m, kAll, in));
  EXPECT_LE(e.l2_rel, 1e-2);
  for (int64_t t = 0; t < kAll; ++t) {
    const std::vector<float> one = run(t, 1);
    const Errors e1 = Compare(one, CpuMoe(m, 1, slice(t, 1)));
    EXPECT_LE(e1.l2_rel, 1e-2) << "token " << t << " alone against the CPU";
    size_t differ = 0;
    for (int64_t i = 0; i < D; ++i) {
      differ += std::memcmp(&one[i], &all[t * D + i], sizeof(float)) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differ, 0u) << "token " << t << " alone differs from its row of the " << kAll
                          << "-token call in " << differ << " of " << D << " outputs";
  }
}

TEST(CudaMoeForward, OneTokenMatchesPlannedRowsBitForBit) {
  Model mid(64, 256, 128, 8, 28);
  CheckOneTokenMatchesPlannedRows(mid, 9100);
  Model odd(37, 136, 72, 5, 29);
  CheckOneTokenMatchesPlannedRows(odd, 9101);
  // I = 768: the fused down+combine splits each row's k range at 512 (two
  // warps per row, uneven halves).
  Model split(40, 264, 768, 6, 30);
  CheckOneTokenMatchesPlannedRows(split, 9103);
  CheckOneTokenMatchesPlannedRows(Production(), 9102);
}

// A random shared expert ([2I, D] gate|up and [D, I] down, bf16) on host and
// device.
struct SharedExpert {
  std::vector<uint16_t> w13, w2;
  DevBuf d_w13, d_w2;
  SharedExpert(int64_t D, int64_t I, uint64_t seed)
      : w13(RandomBf16(static_cast<size_t>(2 * I * D), seed + 7, 1.7f / std::sqrt(float(D)))),
        w2(RandomBf16(static_cast<size_t>(D * I), seed + 8, 1.7f / std::sqrt(float(I)))),
        d_w13(sizeof(uint16_t) * w13.size()),
        d_w2(sizeof(uint16_t) * w2.size()) {
    Upload(d_w13, w13);
    Upload(d_w2, w2);
  }
};

// The shared expert folded into the one-token path (MoeArgs::shared_w13):
// y = Σ_k w_k E_k(x) + S(x) against cpu::Moe with the shared expert, the
// same bits on a second run, and the fold refused (InvalidArgument) or not
// offered (MoeFoldsSharedExpert) where the one-token kernels cannot take it.
void CheckFoldedShared(Model& m, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "D=" << m.shape.hidden << " I=" << m.shape.inter);
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const int64_t D = m.shape.hidden, I = m.shape.inter;
  const SharedExpert se(D, I, seed);
  const std::vector<uint16_t>& sw13 = se.w13;
  const std::vector<uint16_t>& sw2 = se.w2;
  const DevBuf& d_sw13 = se.d_w13;
  const DevBuf& d_sw2 = se.d_w2;
  const Inputs in = MakeInputs(m, 1, seed, true, -1);
  cpu::MoeWeights w = m.CpuWeights(in.bias.data());
  w.has_shared = true;
  w.shared.gate = cpu::WeightMatrix{DType::kBF16, sw13.data(), I, D};
  w.shared.up = cpu::WeightMatrix{DType::kBF16, sw13.data() + I * D, I, D};
  w.shared.down = cpu::WeightMatrix{DType::kBF16, sw2.data(), D, I};
  const std::vector<float> ref = CpuMoeWith(w, m, 1, in);

  GpuRun run(m, 1, in);
  run.args.shared_w13 = d_sw13.get<bf16>();
  run.args.shared_w2 = d_sw2.get<bf16>();
  ASSERT_TRUE(MoeFoldsSharedExpert(run.args));
  const std::vector<float> got = run.Run();
  const Errors e = Compare(got, ref);
  std::printf(
      "MoeForward folded shared expert D=%lld I=%lld: max abs %.3g, max rel %.3g, L2 rel "
      "%.3g\n",
      static_cast<long long>(D), static_cast<long long>(I), e.max_abs, e.max_rel, e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  EXPECT_LE(e.max_rel, 5e-2);
  // The shared expert's share is really there: without it the error is large.
  run.args.shared_w13 = run.args.shared_w2 = nullptr;
  EXPECT_GT(Compare(run.Run(), ref).l2_rel, 5e-2);
  run.args.shared_w13 = d_sw13.get<bf16>();
  run.args.shared_w2 = d_sw2.get<bf16>();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> again = run.Run(stream);
  cudaStreamDestroy(stream);
  EXPECT_EQ(std::memcmp(got.data(), again.data(), sizeof(float) * got.size()), 0);
}

TEST(CudaMoeForward, FoldedSharedExpertMatchesCpuAtProductionShape) {
  CheckFoldedShared(Production(), 9200);
}

TEST(CudaMoeForward, FoldedSharedExpertMatchesCpuAtOddShape) {
  // D = 1032: five steps of 256 per row (the six-step gate|up kernel), a
  // partial last step; I = 776: the down rows' halves split at 512, uneven,
  // with a partial last chunk.
  Model odd(40, 1032, 776, 6, 31);
  CheckFoldedShared(odd, 9201);
}

TEST(CudaMoeForward, BatchInvariantRows) {
  Model mid(64, 256, 128, 8, 18);
  CheckBatchInvariant(mid, 9000);
  CheckBatchInvariant(Production(), 9001);
}

// Captures run's MoeForward on `stream`, loads `next` into its buffers and
// replays the graph once: y of the replay in *y.
void CaptureAndReplay(GpuRun& run, const Inputs& next, cudaStream_t stream,
                      std::vector<float>* y) {
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = MoeForward(run.args, run.ws.get(), run.ws_bytes, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  run.Load(next);
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  y->resize(static_cast<size_t>(run.args.num_tokens * run.args.shape.hidden));
  Download(*y, run.y);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The layer enqueues no host synchronisation: capture it, replay on new
// inputs written into the same buffers, and compare with an eager run.
void CheckGraph(Model& m, int64_t n, uint64_t seed, MoeGemmImpl impl = MoeGemmImpl::kAuto) {
  SCOPED_TRACE(testing::Message() << "graph n=" << n);
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const Inputs a = MakeInputs(m, n, seed, true, -1);
  const Inputs b = MakeInputs(m, n, seed + 1, true, -1);
  GpuRun run(m, n, a, impl);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<float> replayed;
  ASSERT_NO_FATAL_FAILURE(CaptureAndReplay(run, b, stream, &replayed));
  const std::vector<float> eager = run.Run(stream);
  EXPECT_EQ(std::memcmp(replayed.data(), eager.data(), sizeof(float) * eager.size()), 0);
  const Errors e = Compare(replayed, CpuMoe(m, n, b));
  std::printf("MoeForward graph replay n=%lld: L2 rel %.3g vs CPU\n", static_cast<long long>(n),
              e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  cudaStreamDestroy(stream);
}

TEST(CudaMoeForward, CapturedGraphReplaysOnNewInputs) {
  Model tiny(7, 64, 48, 2, 15);
  CheckGraph(tiny, 1, 6000);
  CheckGraph(tiny, 8, 6001);
  CheckGraph(Production(), 1, 6003);
  CheckGraph(tiny, 97, 6002);
  Model mid(8, 256, 128, 2, 16);
  CheckGraph(mid, 300, 6004);
  if (MoeSm90GemmAvailable()) CheckGraph(Production(), 1000, 6006, MoeGemmImpl::kCutlass);
}

// MoeArgs::router_w: MoeForward runs the router itself (at one token on the
// direct path inside the router's kernel, GemvRoute). Against the caller's
// Gemm into router_logits then MoeForward: the same logits and the same y,
// bit for bit, with and without the folded shared expert, eager and
// captured.
void CheckRouterInside(Model& m, int64_t n, uint64_t seed, bool fold) {
  SCOPED_TRACE(testing::Message() << "router inside n=" << n << " fold=" << fold
                                  << " E=" << m.shape.num_experts << " D=" << m.shape.hidden);
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const int64_t E = m.shape.num_experts, D = m.shape.hidden, I = m.shape.inter;
  auto ctx_or = BlasContext::Create();
  ASSERT_TRUE(ctx_or.ok()) << ctx_or.status();
  std::unique_ptr<BlasContext> ctx = std::move(*ctx_or);
  std::vector<uint16_t> router(m.router.size());
  for (size_t i = 0; i < router.size(); ++i) router[i] = F32ToBf16(m.router[i]);
  DevBuf d_router(sizeof(uint16_t) * router.size());
  Upload(d_router, router);
  const SharedExpert se(D, I, seed);
  const std::vector<uint16_t>& sw13 = se.w13;
  const std::vector<uint16_t>& sw2 = se.w2;
  const DevBuf& d_sw13 = se.d_w13;
  const DevBuf& d_sw2 = se.d_w2;
  const Inputs in = MakeInputs(m, n, seed, true, -1);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // The caller's way: Gemm into router_logits, then MoeForward.
  GpuRun ref(m, n, in);
  if (fold) {
    ref.args.shared_w13 = d_sw13.get<bf16>();
    ref.args.shared_w2 = d_sw2.get<bf16>();
    ASSERT_TRUE(MoeFoldsSharedExpert(ref.args));
  }
  GemmArgs g;
  g.m = n;
  g.n = E;
  g.k = D;
  g.x = ref.x.get();
  g.w = d_router.get<bf16>();
  g.y = ref.logits.get();
  g.y_type = ActType::kF32;
  ASSERT_TRUE(Gemm(*ctx, g, stream).ok());
  const std::vector<float> want = ref.Run(stream);
  std::vector<float> want_logits(static_cast<size_t>(n * E));
  Download(want_logits, ref.logits);

  GpuRun got_run(m, n, in);
  got_run.args.shared_w13 = ref.args.shared_w13;
  got_run.args.shared_w2 = ref.args.shared_w2;
  got_run.args.router_w = d_router.get<bf16>();
  got_run.args.blas = ctx.get();
  CUDA_OK(cudaMemset(got_run.logits.get(), 0xff, sizeof(float) * n * E));
  const std::vector<float> got = got_run.Run(stream);
  std::vector<float> got_logits(static_cast<size_t>(n * E));
  Download(got_logits, got_run.logits);
  EXPECT_EQ(std::memcmp(want_logits.data(), got_logits.data(), 4 * want_logits.size()), 0)
      << "router logits differ from the caller's Gemm";
  EXPECT_EQ(std::memcmp(want.data(), got.data(), 4 * want.size()), 0) << "y differs";
  // y is not trivially equal: routing really picked (some y far from 0).
  double norm = 0;
  for (float v : got) norm += static_cast<double>(v) * v;
  EXPECT_GT(norm, 0.0);

  // Captured and replayed on new inputs in the same buffers.
  const Inputs in2 = MakeInputs(m, n, seed + 100, true, -1);
  std::vector<float> replayed;
  ASSERT_NO_FATAL_FAILURE(CaptureAndReplay(got_run, in2, stream, &replayed));
  ref.Load(in2);
  ASSERT_TRUE(Gemm(*ctx, g, stream).ok());
  const std::vector<float> want2 = ref.Run(stream);
  EXPECT_EQ(std::memcmp(want2.data(), replayed.data(), 4 * want2.size()), 0)
      << "graph replay differs";
  EXPECT_NE(std::memcmp(want.data(), want2.data(), 4 * want.size()), 0);
  cudaStreamDestroy(stream);
}

TEST(CudaMoeForward, RouterInsideMoeForwardGivesTheCallersBits) {
  Model& prod = Production();
  // One token: the fused router+route kernel where the GPU allows it.
  auto ctx = BlasContext::Create();
  ASSERT_TRUE(ctx.ok());
  EXPECT_TRUE(GemvRouteFuses(**ctx, prod.shape.num_experts, prod.shape.hidden));
  CheckRouterInside(prod, 1, 9300, /*fold=*/false);
  CheckRouterInside(prod, 1, 9301, /*fold=*/true);
  CheckRouterInside(prod, 3, 9302, /*fold=*/false);   // Gemm, then the usual routing
  CheckRouterInside(prod, 40, 9303, /*fold=*/false);  // cuBLASLt logits
  Model odd(37, 136, 72, 5, 32);                      // no direct path: Gemm + route kernel
  CheckRouterInside(odd, 1, 9304, /*fold=*/false);
}

// MoeArgs::accumulate: y += the result. Against the plain call's result r
// and the starting y0: y0 + r bit for bit (the add AddRmsNorm makes with r
// as its delta), on every kernel that writes y: the one-token down+combine
// (with and without the folded shared expert), the fused combine of a few
// tokens, the combine kernel (vectorised and scalar), eager and captured.
void CheckAccumulate(Model& m, int64_t n, uint64_t seed, bool fold, MoeGemmImpl impl,
                     const char* label) {
  SCOPED_TRACE(testing::Message() << "accumulate " << label << " n=" << n << " fold=" << fold);
  m.shape.renormalize = true;
  m.shape.routed_scaling = 2.446f;
  const int64_t D = m.shape.hidden, I = m.shape.inter;
  const SharedExpert se(D, I, seed);
  const Inputs in = MakeInputs(m, n, seed, true, -1);
  GpuRun run(m, n, in, impl);
  if (fold) {
    run.args.shared_w13 = se.d_w13.get<bf16>();
    run.args.shared_w2 = se.d_w2.get<bf16>();
    ASSERT_TRUE(MoeFoldsSharedExpert(run.args));
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<float> r = run.Run(stream);
  // A residual-like y0 (larger than r, so the add rounds).
  const std::vector<float> y0 = RandomF32(r.size(), seed + 50, 40.f);
  std::vector<float> want(r.size());
  for (size_t i = 0; i < r.size(); ++i) want[i] = y0[i] + r[i];

  run.args.accumulate = true;
  Upload(run.y, y0);
  ASSERT_TRUE(MoeForward(run.args, run.ws.get(), run.ws_bytes, stream).ok());
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> got(r.size());
  Download(got, run.y);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), 4 * want.size()), 0) << "eager y0 + r differs";
  size_t moved = 0;
  for (size_t i = 0; i < got.size(); ++i) moved += got[i] != y0[i];
  EXPECT_GT(moved, got.size() / 2) << "the result was not added";

  // Captured once, replayed twice: each replay adds r again.
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = MoeForward(run.args, run.ws.get(), run.ws_bytes, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  Upload(run.y, y0);
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  Download(got, run.y);
  for (size_t i = 0; i < r.size(); ++i) want[i] = (y0[i] + r[i]) + r[i];
  EXPECT_EQ(std::memcmp(want.data(), got.data(), 4 * want.size()), 0) << "replays differ";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CudaMoeForward, AccumulateAddsTheResultIntoYBitForBit) {
  Model& prod = Production();
  CheckAccumulate(prod, 1, 9400, /*fold=*/true, MoeGemmImpl::kAuto, "one token");
  CheckAccumulate(prod, 1, 9401, /*fold=*/false, MoeGemmImpl::kAuto, "one token");
  CheckAccumulate(prod, 3, 9402, false, MoeGemmImpl::kAuto, "fused combine");
  CheckAccumulate(prod, 40, 9403, false, MoeGemmImpl::kAuto, "combine kernel");
  Model mid(8, 256, 128, 2, 13);
  CheckAccumulate(mid, 300, 9404, false, MoeGemmImpl::kAuto, "grouped GEMM");
  Model scalar(5, 66, 50, 3, 12);  // D % 4 != 0: the scalar combine
  CheckAccumulate(scalar, 33, 9405, false, MoeGemmImpl::kAuto, "scalar combine");
  CheckAccumulate(scalar, 1, 9406, false, MoeGemmImpl::kAuto, "scalar one token");
}

// ---------------------------------------------------------------------------
// Misuse.

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), testing::HasSubstr(field)) << st;
}

TEST(CudaMoeMisuse, RouteArguments) {
  DevBuf logits(sizeof(float) * 64), idx(sizeof(int32_t) * 64), w(sizeof(float) * 64);
  MoeShape s;
  s.num_experts = 8;
  s.top_k = 2;
  auto route = [&](const MoeShape& shape, const float* l, int64_t n, int32_t* i, float* wt) {
    return MoeRoute(shape, l, nullptr, n, i, wt, nullptr);
  };
  EXPECT_TRUE(route(s, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()).ok());
  ExpectInvalid(route(s, nullptr, 4, idx.get<int32_t>(), w.get<float>()), "router_logits");
  ExpectInvalid(route(s, logits.get<float>(), 4, nullptr, w.get<float>()), "idx");
  ExpectInvalid(route(s, logits.get<float>(), 4, idx.get<int32_t>(), nullptr), "weight");
  ExpectInvalid(route(s, logits.get<float>(), -1, idx.get<int32_t>(), w.get<float>()),
                "num_tokens");
  MoeShape bad = s;
  bad.top_k = 0;
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()), "top_k");
  bad.top_k = 9;
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()), "top_k");
  bad = s;
  bad.num_experts = 0;
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()),
                "num_experts");
  bad.num_experts = 2048;
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()),
                "num_experts");
  bad = s;
  bad.num_experts = 64;
  bad.top_k = 33;
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()), "top_k");
  bad = s;
  bad.routed_scaling = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(route(bad, logits.get<float>(), 4, idx.get<int32_t>(), w.get<float>()),
                "routed_scaling");
  CUDA_OK(cudaDeviceSynchronize());
}

TEST(CudaMoeMisuse, ForwardArguments) {
  Model m(4, 64, 32, 2, 17);
  const Inputs in = MakeInputs(m, 3, 7000, false, -1);
  GpuRun run(m, 3, in);
  EXPECT_TRUE(MoeForward(run.args, run.ws.get(), run.ws_bytes, nullptr).ok());
  auto with = [&](auto edit) {
    MoeArgs a = run.args;
    edit(a);
    return MoeForward(a, run.ws.get(), run.ws_bytes, nullptr);
  };
  ExpectInvalid(with([](MoeArgs& a) { a.x = nullptr; }), "x");
  ExpectInvalid(with([](MoeArgs& a) { a.router_logits = nullptr; }), "router_logits");
  ExpectInvalid(with([](MoeArgs& a) { a.w13 = nullptr; }), "w13");
  ExpectInvalid(with([](MoeArgs& a) { a.w2 = nullptr; }), "w2");
  ExpectInvalid(with([&](MoeArgs& a) { a.router_w = run.args.w13; }), "blas");
  ExpectInvalid(with([](MoeArgs& a) { a.y = nullptr; }), "y");
  ExpectInvalid(with([](MoeArgs& a) { a.num_tokens = -2; }), "num_tokens");
  ExpectInvalid(with([](MoeArgs& a) { a.shape.hidden = 0; }), "hidden");
  ExpectInvalid(with([](MoeArgs& a) { a.shape.inter = 0; }), "inter");
  ExpectInvalid(with([](MoeArgs& a) { a.shape.top_k = 5; }), "top_k");
  ExpectInvalid(with([](MoeArgs& a) { a.shape.num_experts = 0; }), "num_experts");
  // A workspace sized for fewer tokens, none at all, or misaligned.
  ExpectInvalid(MoeForward(run.args, run.ws.get(), MoeWorkspaceBytes(m.shape, 2), nullptr),
                "workspace_bytes");
  ExpectInvalid(MoeForward(run.args, nullptr, run.ws_bytes, nullptr), "workspace");
  DevBuf big(run.ws_bytes + 512);
  ExpectInvalid(MoeForward(run.args, big.get<char>() + 16, run.ws_bytes, nullptr), "aligned");
  // Zero tokens is a no-op, whatever the pointers.
  MoeArgs none;
  none.shape = m.shape;
  EXPECT_TRUE(MoeForward(none, nullptr, 0, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
}

TEST(CudaMoeMisuse, SharedExpertFoldOnlyWhereTheOneTokenKernelsTakeIt) {
  Model m(16, 1032, 64, 4, 32);
  const std::vector<uint16_t> sw(static_cast<size_t>(2 * 64 * 1032), 0);
  DevBuf d_sw13(sizeof(uint16_t) * sw.size()), d_sw2(sizeof(uint16_t) * sw.size());
  Upload(d_sw13, sw);
  Upload(d_sw2, sw);
  for (const int64_t n : {int64_t{1}, int64_t{2}}) {
    GpuRun run(m, n, MakeInputs(m, n, 7100, false, -1));
    run.args.shared_w13 = d_sw13.get<bf16>();
    run.args.shared_w2 = d_sw2.get<bf16>();
    EXPECT_EQ(MoeFoldsSharedExpert(run.args), n == 1) << "n=" << n;
    if (n == 2) ExpectInvalid(MoeForward(run.args, run.ws.get(), run.ws_bytes, nullptr), "shared");
    MoeArgs half = run.args;
    half.shared_w2 = nullptr;  // one of the two alone
    EXPECT_FALSE(MoeFoldsSharedExpert(half));
    ExpectInvalid(MoeForward(half, run.ws.get(), run.ws_bytes, nullptr), "shared");
    half.shared_w2 = run.args.shared_w2;
    half.shared_w13 = d_sw13.get<bf16>() + 1;  // misaligned
    EXPECT_FALSE(MoeFoldsSharedExpert(half));
    half.shared_w13 = run.args.shared_w13;
    half.batch_invariant = true;
    EXPECT_FALSE(MoeFoldsSharedExpert(half));
  }
  // Rows too short for the one-group gate|up kernel.
  Model narrow(16, 256, 64, 4, 33);
  GpuRun run(narrow, 1, MakeInputs(narrow, 1, 7101, false, -1));
  run.args.shared_w13 = d_sw13.get<bf16>();
  run.args.shared_w2 = d_sw2.get<bf16>();
  EXPECT_FALSE(MoeFoldsSharedExpert(run.args));
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace strata::cuda
