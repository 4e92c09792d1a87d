// CUDA GEMM against the CPU backend (cpu::MatMul on the same bf16 weights and
// the same — bf16-rounded or raw fp32 — activations), on random inputs:
//  * the streaming kernel (m ≤ 16): mma fast path and the scalar fallback
//    (k or ldw not a multiple of 8, misaligned pointers), bf16 and fp32 x,
//    bf16 and fp32 y, alpha/beta, ldx/ldw/ldy strides (padding left intact);
//  * the cuBLASLt path (m = 17, 300): same checks;
//  * the production shapes of Kimi-Linear-48B-A3B at m = 1, 3, 16 (and the
//    cuBLASLt path at m = 17, 300);
//  * every decode weight shape of Kimi-Linear-48B-A3B at m = 1, 2, 5, 8, 16
//    (poisoned y, beta ≠ 0 accumulation, back-to-back launches, fp32 x), each
//    run twice: the result must not depend on timing;
//  * corner shapes of the k split (partial tiles and k blocks, short and
//    long k);
//  * StridedBatchedGemm in both W layouts;
//  * argument misuse → InvalidArgument naming the field; m = 0 is a no-op;
//  * capture in a CUDA graph and replay gives the eager result;
//  * GemvRoute (the router GEMV with one-token routing in its kernel): its
//    logits are Gemm's bits and its picks and weights MoeRoute's on those
//    logits, eager, captured and back to back; misuse is refused.
// All with batch-invariant mode off (the default); cuda_gemm_invariant_test
// covers it.
// Each case prints max abs / max rel (to max |ref|) / L2-relative error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::Compare;
using op_test::DevBuf;
using op_test::Errors;

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937_64& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = F32ToBf16(u(rng));
  return v;
}

std::vector<float> RandomF32(size_t n, std::mt19937_64& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& f : v) f = u(rng);
  return v;
}

class CudaGemmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ctx = BlasContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx).release();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  static void TearDownTestSuite() {
    delete ctx_;
    ctx_ = nullptr;
    cudaStreamDestroy(stream_);
  }
  static BlasContext* ctx_;
  static cudaStream_t stream_;
};
BlasContext* CudaGemmTest::ctx_ = nullptr;
cudaStream_t CudaGemmTest::stream_ = nullptr;

struct GemmCase {
  int64_t m, n, k;
  int64_t ldx = 0, ldw = 0, ldy = 0;
  ActType x_type = ActType::kBf16;
  ActType y_type = ActType::kBf16;
  float alpha = 1.f, beta = 0.f;
  size_t w_offset = 0, x_offset = 0;  // bytes added to the device pointers
  bool device_weights = false;        // big W: random on the device, then downloaded
  // Launches of Gemm back to back without a sync (beta must be 1 when > 1:
  // y = y0 + repeats · alpha · x·Wᵀ), which checks that consecutive launches
  // overlapped by PDL still read each other's y in order.
  int repeats = 1;
  bool check_repeat = false;  // run again from the same y0: bit-identical y
};

std::string Describe(const GemmCase& c) {
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "m=%lld n=%lld k=%lld ldx=%lld ldw=%lld ldy=%lld x=%s y=%s a=%g b=%g woff=%zu "
      "xoff=%zu rep=%d",
      static_cast<long long>(c.m), static_cast<long long>(c.n), static_cast<long long>(c.k),
      static_cast<long long>(c.ldx), static_cast<long long>(c.ldw), static_cast<long long>(c.ldy),
      c.x_type == ActType::kBf16 ? "bf16" : "f32", c.y_type == ActType::kBf16 ? "bf16" : "f32",
      c.alpha, c.beta, c.w_offset, c.x_offset, c.repeats);
  return buf;
}

// Runs one case through Gemm and checks it against cpu::MatMul.
void RunGemmCase(BlasContext& ctx, cudaStream_t stream, const GemmCase& c, uint64_t seed) {
  SCOPED_TRACE(Describe(c));
  std::mt19937_64 rng(seed);
  const int64_t ldx = c.ldx ? c.ldx : c.k;
  const int64_t ldw = c.ldw ? c.ldw : c.k;
  const int64_t ldy = c.ldy ? c.ldy : c.n;
  const bool x_f32 = c.x_type == ActType::kF32;
  const bool y_f32 = c.y_type == ActType::kF32;

  // W: [n, ldw] bf16 bits.
  std::vector<uint16_t> w_host;
  DevBuf w_dev(static_cast<size_t>(c.n * ldw) * 2, c.w_offset);
  if (c.device_weights) {
    ASSERT_TRUE(FillRandomBf16(w_dev.get<bf16>(), c.n * ldw, seed, 1.f, stream).ok());
    w_host.resize(static_cast<size_t>(c.n * ldw));
    CUDA_OK(cudaMemcpyAsync(w_host.data(), w_dev.get(), w_host.size() * 2, cudaMemcpyDeviceToHost,
                            stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    double ss = 0;
    for (size_t i = 0; i < w_host.size(); i += 97) ss += std::fabs(Bf16ToF32(w_host[i]));
    ASSERT_GT(ss, 0.1 * static_cast<double>(w_host.size() / 97)) << "device-filled W is ~zero";
  } else {
    w_host = RandomBf16(static_cast<size_t>(c.n * ldw), rng);
    CUDA_OK(cudaMemcpy(w_dev.get(), w_host.data(), w_host.size() * 2, cudaMemcpyHostToDevice));
  }
  // x: [m, ldx], and its fp32 view (exactly what the GPU multiplies) packed.
  std::vector<float> x_packed(static_cast<size_t>(c.m * c.k));
  DevBuf x_dev(static_cast<size_t>(std::max<int64_t>(c.m, 1) * ldx) * (x_f32 ? 4 : 2), c.x_offset);
  if (x_f32) {
    std::vector<float> x = RandomF32(static_cast<size_t>(c.m * ldx), rng);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.k; ++j) x_packed[i * c.k + j] = x[i * ldx + j];
    CUDA_OK(cudaMemcpy(x_dev.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(c.m * ldx), rng);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.k; ++j) x_packed[i * c.k + j] = Bf16ToF32(x[i * ldx + j]);
    CUDA_OK(cudaMemcpy(x_dev.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  }
  // y: beta == 0 starts as NaN everywhere (it must not be read, and the
  // padding columns must stay NaN); beta != 0 starts random.
  const size_t y_elems = static_cast<size_t>(c.m * ldy);
  std::vector<float> y0 =
      c.beta != 0.f ? RandomF32(y_elems, rng) : std::vector<float>(y_elems, std::nanf(""));
  DevBuf y_dev(y_elems * (y_f32 ? 4 : 2));
  auto upload_y0 = [&]() {
    if (y_f32) {
      CUDA_OK(cudaMemcpy(y_dev.get(), y0.data(), y_elems * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> yb(y_elems);
      for (size_t i = 0; i < y_elems; ++i) yb[i] = F32ToBf16(y0[i]);
      CUDA_OK(cudaMemcpy(y_dev.get(), yb.data(), y_elems * 2, cudaMemcpyHostToDevice));
    }
  };
  upload_y0();
  ASSERT_TRUE(c.repeats == 1 || c.beta == 1.f) << "repeats > 1 needs beta == 1";

  GemmArgs a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x = x_dev.get();
  a.x_type = c.x_type;
  a.ldx = c.ldx;
  a.w = w_dev.get<bf16>();
  a.ldw = c.ldw;
  a.y = y_dev.get();
  a.y_type = c.y_type;
  a.ldy = c.ldy;
  a.alpha = c.alpha;
  a.beta = c.beta;
  auto run = [&]() {
    for (int r = 0; r < c.repeats; ++r) {
      const Status st = Gemm(ctx, a, stream);
      ASSERT_TRUE(st.ok()) << st;
    }
    CUDA_OK(cudaStreamSynchronize(stream));
  };
  // Raw bytes of y (bit-exact comparisons) and their fp32 view.
  auto download = [&](std::vector<uint8_t>* raw, std::vector<float>* as_f32) {
    raw->resize(y_elems * (y_f32 ? 4 : 2));
    CUDA_OK(cudaMemcpy(raw->data(), y_dev.get(), raw->size(), cudaMemcpyDeviceToHost));
    as_f32->resize(y_elems);
    for (size_t i = 0; i < y_elems; ++i) {
      if (y_f32) {
        std::memcpy(&(*as_f32)[i], raw->data() + 4 * i, 4);
      } else {
        uint16_t b;
        std::memcpy(&b, raw->data() + 2 * i, 2);
        (*as_f32)[i] = Bf16ToF32(b);
      }
    }
  };
  run();
  std::vector<uint8_t> y_raw;
  std::vector<float> y;
  download(&y_raw, &y);
  if (c.check_repeat) {
    upload_y0();
    run();
    std::vector<uint8_t> y2_raw;
    std::vector<float> y2;
    download(&y2_raw, &y2);
    EXPECT_EQ(std::memcmp(y_raw.data(), y2_raw.data(), y_raw.size()), 0)
        << "two runs of the same product differ: the result depends on timing";
  }

  // Reference: cpu::MatMul on packed W and x.
  std::vector<uint16_t> w_packed(static_cast<size_t>(c.n * c.k));
  for (int64_t r = 0; r < c.n; ++r)
    std::memcpy(&w_packed[r * c.k], &w_host[r * ldw], static_cast<size_t>(c.k) * 2);
  cpu::WeightMatrix wm{DType::kBF16, w_packed.data(), c.n, c.k};
  ThreadPool* pool = ThreadPool::Default();
  std::vector<float> scratch(
      std::max<size_t>(cpu::MatMulScratchFloats(c.m, c.k, pool->num_threads()), 1));
  std::vector<float> ref(static_cast<size_t>(c.m * c.n));
  cpu::MatMul(x_packed.data(), c.m, wm, ref.data(), scratch.data(), pool);

  std::vector<float> got(ref.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      ref[i * c.n + j] = c.repeats * c.alpha * ref[i * c.n + j] +
                         (c.beta != 0.f ? c.beta * y0[i * ldy + j] : 0.f);
      got[i * c.n + j] = y[i * ldy + j];
    }
    // Padding columns keep their initial value (NaN when beta == 0).
    for (int64_t j = c.n; j < ldy; ++j) {
      const float before = y0[i * ldy + j], after = y[i * ldy + j];
      const bool kept = std::isnan(before) ? std::isnan(after)
                                            : (y_f32 ? after == before
                                                     : after == Bf16ToF32(F32ToBf16(before)));
      ASSERT_TRUE(kept) << "padding of y row " << i << " col " << j << " was written";
    }
  }
  const Errors e = Compare(got, ref);
  // bf16 outputs: one rounding of the result; fp32 outputs: accumulation
  // order (and x's hi/lo split for fp32 x) only.
  const double tol = y_f32 ? 5e-4 : 1e-2;
  std::printf("[gemm] %-100s max_abs=%.3e max_rel=%.3e l2_rel=%.3e (tol %.0e)\n",
              Describe(c).c_str(), e.max_abs, e.max_rel, e.l2_rel, tol);
  EXPECT_LE(e.l2_rel, tol);
  EXPECT_LE(e.max_rel, y_f32 ? 5e-3 : 3e-2);
}

TEST_F(CudaGemmTest, SmallMFastPathTinyOddShapes) {
  uint64_t seed = 1;
  for (int64_t m : {1, 2, 3, 7, 8, 9, 16}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
             {7, 24}, {37, 40}, {50, 64}, {129, 136}, {3, 8}}) {
      for (ActType yt : {ActType::kBf16, ActType::kF32}) {
        GemmCase c{m, n, k};
        c.y_type = yt;
        RunGemmCase(*ctx_, stream_, c, seed++);
      }
    }
  }
}

TEST_F(CudaGemmTest, SmallMFp32ActivationsKeepFp32Precision) {
  uint64_t seed = 100;
  for (int64_t m : {1, 3, 9, 16}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{37, 40}, {64, 2304}}) {
      GemmCase c{m, n, k};
      c.x_type = ActType::kF32;
      c.y_type = ActType::kF32;
      RunGemmCase(*ctx_, stream_, c, seed++);
      c.y_type = ActType::kBf16;
      RunGemmCase(*ctx_, stream_, c, seed++);
    }
  }
}

TEST_F(CudaGemmTest, SmallMFallbackForOddKAndMisalignment) {
  uint64_t seed = 200;
  for (int64_t m : {1, 3, 16}) {
    for (ActType xt : {ActType::kBf16, ActType::kF32}) {
      GemmCase odd_k{m, 19, 27};  // k % 8 != 0
      odd_k.x_type = xt;
      odd_k.y_type = ActType::kF32;
      RunGemmCase(*ctx_, stream_, odd_k, seed++);
      GemmCase odd_ldw{m, 21, 48};  // ldw % 8 != 0
      odd_ldw.ldw = 51;
      odd_ldw.x_type = xt;
      RunGemmCase(*ctx_, stream_, odd_ldw, seed++);
      GemmCase mis_w{m, 33, 64};  // W 2 bytes off 16-byte alignment
      mis_w.w_offset = 2;
      mis_w.x_type = xt;
      RunGemmCase(*ctx_, stream_, mis_w, seed++);
      GemmCase mis_x{m, 33, 64};  // x 4 bytes off
      mis_x.x_offset = 4;
      mis_x.x_type = xt;
      mis_x.y_type = ActType::kF32;
      RunGemmCase(*ctx_, stream_, mis_x, seed++);
    }
  }
}

TEST_F(CudaGemmTest, StridesAlphaBetaOnBothPaths) {
  uint64_t seed = 300;
  for (int64_t m : {1, 3, 16, 17, 300}) {
    GemmCase c{m, 40, 64};
    c.ldx = 72;
    c.ldw = 80;
    c.ldy = 48;
    c.y_type = ActType::kF32;
    c.alpha = 0.75f;
    c.beta = -1.5f;
    RunGemmCase(*ctx_, stream_, c, seed++);
    c.beta = 0.f;  // padding of y (cols 40..47) must stay untouched
    c.alpha = 2.f;
    RunGemmCase(*ctx_, stream_, c, seed++);
    c.y_type = ActType::kBf16;
    RunGemmCase(*ctx_, stream_, c, seed++);
    GemmCase odd{m, 37, 45};  // odd k with strides: fallback / cuBLASLt odd alignment
    odd.ldx = 47;
    odd.ldw = 46;
    odd.ldy = 39;
    odd.y_type = ActType::kF32;
    odd.beta = 1.f;
    RunGemmCase(*ctx_, stream_, odd, seed++);
  }
}

TEST_F(CudaGemmTest, LargeMCublasLt) {
  uint64_t seed = 400;
  for (int64_t m : {17, 64, 300}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{37, 40}, {129, 88}, {256, 512}}) {
      for (ActType yt : {ActType::kBf16, ActType::kF32}) {
        GemmCase c{m, n, k};
        c.y_type = yt;
        RunGemmCase(*ctx_, stream_, c, seed++);
      }
    }
    GemmCase mis{m, 64, 96};  // 2-byte aligned W: cuBLASLt must pick a compatible algorithm
    mis.w_offset = 2;
    RunGemmCase(*ctx_, stream_, mis, seed++);
  }
}

// Kimi-Linear-48B-A3B: fused KDA q|k|v (and MLA-sized) projection, o_proj,
// dense gate|up, the LM head; decode batch sizes and the cuBLASLt switch.
TEST_F(CudaGemmTest, ProductionShapes) {
  uint64_t seed = 500;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {4096 * 3, 2304}, {2304, 4096}, {9216 * 2, 2304}, {2304, 9216}};
  for (auto [n, k] : shapes) {
    for (int64_t m : {1, 3, 16, 17, 300}) {
      GemmCase c{m, n, k};
      c.device_weights = true;
      RunGemmCase(*ctx_, stream_, c, seed++);
    }
  }
  for (int64_t m : {1, 16}) {
    GemmCase head{m, 163840, 2304};
    head.device_weights = true;
    head.y_type = ActType::kF32;  // logits
    RunGemmCase(*ctx_, stream_, head, seed++);
  }
  GemmCase router{1, 256, 2304};  // fp32 router logits from bf16 x
  router.y_type = ActType::kF32;
  RunGemmCase(*ctx_, stream_, router, seed++);
}

// Every weight shape of a Kimi-Linear-48B-A3B decode step (model-spec §2.1:
// D = 2304, 32 heads × 128, MLA r = 512 + dr = 64, 256 experts, shared
// expert I = 1024, dense I = 9216, vocab 163840), as the executor calls them
// (output type, accumulate into the fp32 residual, the gate projections'
// strided x), at the decode batch sizes; each one also run twice from the
// same inputs, which must give bit-identical outputs.
struct DecodeShape {
  const char* what;
  int64_t n, k;
  ActType y_type;
  float beta;
  int64_t ldx;
};
const DecodeShape kDecodeShapes[] = {
    {"kda in_proj q|k|v|f_a|g_a|b", 12576, 2304, ActType::kBf16, 0.f, 0},
    {"kda f_b (x = proj + off_fa)", 4096, 128, ActType::kF32, 0.f, 12576},
    {"kda g_b", 4096, 128, ActType::kBf16, 0.f, 12576},
    {"kda/mla o_proj (+= h)", 2304, 4096, ActType::kF32, 1.f, 0},
    {"mla q_proj", 6144, 2304, ActType::kBf16, 0.f, 0},
    {"mla kv_a_proj", 576, 2304, ActType::kBf16, 0.f, 0},
    {"moe router (fp32 logits)", 256, 2304, ActType::kF32, 0.f, 0},
    {"shared expert gate|up", 2048, 2304, ActType::kBf16, 0.f, 0},
    {"shared expert down (+= h)", 2304, 1024, ActType::kF32, 1.f, 0},
    {"dense gate|up", 18432, 2304, ActType::kBf16, 0.f, 0},
    {"dense down (+= h)", 2304, 9216, ActType::kF32, 1.f, 0},
    {"lm_head", 163840, 2304, ActType::kF32, 0.f, 0},
};

TEST_F(CudaGemmTest, KimiLinearDecodeShapesDeterministic) {
  uint64_t seed = 900;
  for (const DecodeShape& d : kDecodeShapes) {
    SCOPED_TRACE(d.what);
    for (int64_t m : {1, 2, 5, 8, 16}) {
      GemmCase c{m, d.n, d.k};
      c.y_type = d.y_type;
      c.beta = d.beta;
      c.ldx = d.ldx;
      c.device_weights = d.n * d.k > (int64_t{1} << 22);
      c.check_repeat = true;
      RunGemmCase(*ctx_, stream_, c, seed++);
    }
  }
}

// fp32 x and the beta ≠ 0 / alpha ≠ 1 epilogue on decode shapes, and three
// back-to-back accumulating launches (no sync in between).
TEST_F(CudaGemmTest, DecodeShapesFp32XAlphaBetaAndBackToBack) {
  uint64_t seed = 1000;
  for (const DecodeShape& d : kDecodeShapes) {
    if (d.n * d.k > (int64_t{1} << 25)) continue;  // the LM head and dense MLP: covered above
    SCOPED_TRACE(d.what);
    for (int64_t m : {1, 5, 16}) {
      GemmCase c{m, d.n, d.k};
      c.x_type = ActType::kF32;
      c.y_type = ActType::kF32;
      c.alpha = 0.5f;
      c.beta = -0.75f;
      c.ldx = d.ldx;
      c.device_weights = d.n * d.k > (int64_t{1} << 22);
      c.check_repeat = true;
      RunGemmCase(*ctx_, stream_, c, seed++);
      GemmCase acc{m, d.n, d.k};
      acc.y_type = ActType::kF32;
      acc.beta = 1.f;
      acc.repeats = 3;
      acc.ldx = d.ldx;
      acc.device_weights = c.device_weights;
      RunGemmCase(*ctx_, stream_, acc, seed++);
    }
  }
}

// Shapes at the corners of the GEMV's division of work: a single tile, n not
// a multiple of 16 (partial last tile), k not a multiple of 32 (partial last
// k block), k of one or two k blocks, k groups that end inside an unrolled
// step; both N tiles.
TEST_F(CudaGemmTest, SmallMCorners) {
  uint64_t seed = 1100;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 8},      {16, 32},    {17, 2056},  {100, 4104}, {333, 2304}, {1000, 520},
      {4099, 136}, {5, 33 * 32}, {2111, 64},  {64, 40000}, {3000, 24},  {131, 7000}};
  for (auto [n, k] : shapes) {
    for (int64_t m : {1, 3, 8, 9, 16}) {
      GemmCase c{m, n, k};
      c.y_type = m % 2 ? ActType::kF32 : ActType::kBf16;
      c.check_repeat = true;
      RunGemmCase(*ctx_, stream_, c, seed++);
    }
    GemmCase f{9, n, k};
    f.x_type = ActType::kF32;
    f.y_type = ActType::kF32;
    f.beta = 1.f;
    f.repeats = 2;
    RunGemmCase(*ctx_, stream_, f, seed++);
  }
}

TEST_F(CudaGemmTest, StridedBatchedBothLayouts) {
  uint64_t seed = 600;
  struct B {
    int64_t count, m, n, k;
    bool transpose_w;
    ActType y_type;
  };
  for (const B& b :
       {B{3, 5, 24, 40, false, ActType::kF32}, B{3, 5, 24, 40, true, ActType::kF32},
        B{4, 17, 33, 20, true, ActType::kBf16}, B{2, 1, 7, 9, false, ActType::kBf16},
        B{32, 4, 512, 128, false, ActType::kBf16}, B{32, 4, 128, 512, true, ActType::kF32}}) {
    SCOPED_TRACE(testing::Message() << "count=" << b.count << " m=" << b.m << " n=" << b.n
                                    << " k=" << b.k << " transpose_w=" << b.transpose_w);
    std::mt19937_64 rng(seed++);
    const bool y_f32 = b.y_type == ActType::kF32;
    // Padded strides so batch i's matrices are not adjacent.
    const int64_t ldx = b.k + 3, ldy = b.n + 2;
    const int64_t w_rows = b.transpose_w ? b.k : b.n;
    const int64_t w_cols = b.transpose_w ? b.n : b.k;
    const int64_t ldw = w_cols + 5;
    const int64_t sx = b.m * ldx + 11, sw = w_rows * ldw + 7, sy = b.m * ldy + 13;
    std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(b.count * sx), rng);
    std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(b.count * sw), rng);
    std::vector<float> y0 = RandomF32(static_cast<size_t>(b.count * sy), rng);
    const float alpha = 1.25f, beta = y_f32 ? 0.5f : 0.f;
    DevBuf xd(x.size() * 2), wd(w.size() * 2), yd(y0.size() * 4);
    CUDA_OK(cudaMemcpy(xd.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
    if (y_f32) {
      CUDA_OK(cudaMemcpy(yd.get(), y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> yb(y0.size());
      for (size_t i = 0; i < yb.size(); ++i) yb[i] = F32ToBf16(y0[i]);
      CUDA_OK(cudaMemcpy(yd.get(), yb.data(), yb.size() * 2, cudaMemcpyHostToDevice));
    }
    StridedBatchedGemmArgs a;
    a.g.m = b.m;
    a.g.n = b.n;
    a.g.k = b.k;
    a.g.x = xd.get();
    a.g.ldx = ldx;
    a.g.w = wd.get<bf16>();
    a.g.ldw = ldw;
    a.g.y = yd.get();
    a.g.y_type = b.y_type;
    a.g.ldy = ldy;
    a.g.alpha = alpha;
    a.g.beta = beta;
    a.count = b.count;
    a.stride_x = sx;
    a.stride_w = sw;
    a.stride_y = sy;
    a.transpose_w = b.transpose_w;
    const Status st = StridedBatchedGemm(*ctx_, a, stream_);
    ASSERT_TRUE(st.ok()) << st;
    CUDA_OK(cudaStreamSynchronize(stream_));
    std::vector<float> y(y0.size());
    if (y_f32) {
      CUDA_OK(cudaMemcpy(y.data(), yd.get(), y.size() * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> yb(y0.size());
      CUDA_OK(cudaMemcpy(yb.data(), yd.get(), yb.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < yb.size(); ++i) y[i] = Bf16ToF32(yb[i]);
    }
    std::vector<float> got, ref;
    for (int64_t i = 0; i < b.count; ++i) {
      // W_i as [n, k] row-major for cpu::MatMul.
      std::vector<uint16_t> wp(static_cast<size_t>(b.n * b.k));
      for (int64_t r = 0; r < b.n; ++r)
        for (int64_t q = 0; q < b.k; ++q)
          wp[r * b.k + q] = b.transpose_w ? w[i * sw + q * ldw + r] : w[i * sw + r * ldw + q];
      std::vector<float> xp(static_cast<size_t>(b.m * b.k));
      for (int64_t r = 0; r < b.m; ++r)
        for (int64_t q = 0; q < b.k; ++q) xp[r * b.k + q] = Bf16ToF32(x[i * sx + r * ldx + q]);
      std::vector<float> yr(static_cast<size_t>(b.m * b.n));
      std::vector<float> scratch(std::max<size_t>(cpu::MatMulScratchFloats(b.m, b.k, 1), 1));
      cpu::MatMul(xp.data(), b.m, cpu::WeightMatrix{DType::kBF16, wp.data(), b.n, b.k}, yr.data(),
                  scratch.data(), nullptr);
      for (int64_t r = 0; r < b.m; ++r) {
        for (int64_t q = 0; q < b.n; ++q) {
          const int64_t yi = i * sy + r * ldy + q;
          ref.push_back(alpha * yr[r * b.n + q] + beta * y0[yi]);
          got.push_back(y[yi]);
        }
      }
    }
    const Errors e = Compare(got, ref);
    const double tol = y_f32 ? 5e-4 : 1e-2;
    std::printf(
        "[strided] count=%lld m=%lld n=%lld k=%lld tw=%d max_abs=%.3e max_rel=%.3e "
        "l2_rel=%.3e\n",
        static_cast<long long>(b.count), static_cast<long long>(b.m), static_cast<long long>(b.n),
        static_cast<long long>(b.k), b.transpose_w, e.max_abs, e.max_rel, e.l2_rel);
    EXPECT_LE(e.l2_rel, tol);
  }
}

TEST_F(CudaGemmTest, MisuseIsInvalidArgument) {
  DevBuf xb(1 << 16), wb(1 << 16), yb(1 << 16);
  GemmArgs ok;
  ok.m = 2;
  ok.n = 8;
  ok.k = 16;
  ok.x = xb.get();
  ok.w = wb.get<bf16>();
  ok.y = yb.get();
  ok.y_type = ActType::kF32;
  ASSERT_TRUE(Gemm(*ctx_, ok, stream_).ok());
  CUDA_OK(cudaStreamSynchronize(stream_));

  struct Bad {
    const char* field;
    void (*mutate)(GemmArgs&);
  };
  const Bad bad[] = {
      {"m must", [](GemmArgs& a) { a.m = -1; }},
      {"n must", [](GemmArgs& a) { a.n = 0; }},
      {"k must", [](GemmArgs& a) { a.k = 0; }},
      {"x is null", [](GemmArgs& a) { a.x = nullptr; }},
      {"w is null", [](GemmArgs& a) { a.w = nullptr; }},
      {"y is null", [](GemmArgs& a) { a.y = nullptr; }},
      {"ldx", [](GemmArgs& a) { a.ldx = 15; }},
      {"ldw", [](GemmArgs& a) { a.ldw = 3; }},
      {"ldy", [](GemmArgs& a) { a.ldy = 7; }},
      {"beta",
       [](GemmArgs& a) {
         a.beta = 1.f;
         a.y_type = ActType::kBf16;
       }},
      {"x_type",
       [](GemmArgs& a) {
         a.x_type = ActType::kF32;
         a.m = 17;
       }},
      {"x_type", [](GemmArgs& a) { a.x_type = static_cast<ActType>(7); }},
      {"y_type", [](GemmArgs& a) { a.y_type = static_cast<ActType>(7); }},
  };
  for (const Bad& b : bad) {
    GemmArgs a = ok;
    b.mutate(a);
    const Status st = Gemm(*ctx_, a, stream_);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << b.field << ": " << st;
    EXPECT_NE(std::string(st.message()).find(b.field), std::string::npos) << st;
  }
  GemmArgs none = ok;
  none.m = 0;  // nothing to do
  EXPECT_TRUE(Gemm(*ctx_, none, stream_).ok());

  StridedBatchedGemmArgs sb;
  sb.g = ok;
  sb.count = 2;
  sb.stride_x = 32;
  sb.stride_w = 128;
  sb.stride_y = 16;
  EXPECT_TRUE(StridedBatchedGemm(*ctx_, sb, stream_).ok());
  StridedBatchedGemmArgs s1 = sb;
  s1.count = -1;
  EXPECT_EQ(StridedBatchedGemm(*ctx_, s1, stream_).code(), absl::StatusCode::kInvalidArgument);
  StridedBatchedGemmArgs s2 = sb;
  s2.stride_w = -4;
  EXPECT_EQ(StridedBatchedGemm(*ctx_, s2, stream_).code(), absl::StatusCode::kInvalidArgument);
  StridedBatchedGemmArgs s3 = sb;
  s3.g.x_type = ActType::kF32;
  EXPECT_EQ(StridedBatchedGemm(*ctx_, s3, stream_).code(), absl::StatusCode::kInvalidArgument);
  StridedBatchedGemmArgs s4 = sb;
  s4.transpose_w = true;
  s4.g.ldw = 4;  // < n
  const Status st4 = StridedBatchedGemm(*ctx_, s4, stream_);
  EXPECT_EQ(st4.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st4.message()).find("ldw"), std::string::npos) << st4;
  CUDA_OK(cudaStreamSynchronize(stream_));
}

// ---------------------------------------------------------------------------
// GemvRoute: the router GEMV with the routing in its kernel.

struct GemvRouteCase {
  int64_t n, k, top_k;
  bool bias, renormalize;
  float scaling;
  bool ties;  // W and x on a coarse grid: many exactly equal logits
};

// One fused call against Gemm then MoeRoute on the same stream: logits,
// picks and weights bit for bit. `graph`: the fused call is captured and
// replayed (twice) instead of run eagerly. Returns false when the shape does
// not fuse on this GPU (after checking that GemvRoute says so).
bool CheckGemvRoute(BlasContext& ctx, cudaStream_t stream, const GemvRouteCase& c, uint64_t seed,
                    bool graph) {
  SCOPED_TRACE(testing::Message() << "n=" << c.n << " k=" << c.k << " top_k=" << c.top_k << " bias="
                                  << c.bias << " ties=" << c.ties << " graph=" << graph);
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(c.n * c.k), rng, 0.05f);
  std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(c.k), rng, 1.f);
  if (c.ties) {  // multiples of 1/8 and 1/4: short exact sums
    std::uniform_int_distribution<int> q(-1, 1);
    for (auto& v : w) v = F32ToBf16(0.125f * static_cast<float>(q(rng)));
    for (auto& v : x) v = F32ToBf16(0.25f * static_cast<float>(q(rng)));
  }
  std::vector<float> bias = RandomF32(static_cast<size_t>(c.n), rng, 0.1f);
  if (c.ties) {
    for (float& b : bias) b = std::round(b * 20.f) / 20.f;
  }
  DevBuf wd(w.size() * 2), xd(x.size() * 2), bd(bias.size() * 4);
  DevBuf y_ref(static_cast<size_t>(c.n) * 4), y_got(static_cast<size_t>(c.n) * 4);
  DevBuf idx_ref(static_cast<size_t>(c.top_k) * 4), wt_ref(static_cast<size_t>(c.top_k) * 4);
  DevBuf idx_got(static_cast<size_t>(c.top_k) * 4), wt_got(static_cast<size_t>(c.top_k) * 4);
  EXPECT_EQ(cudaMemcpy(wd.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(xd.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(bd.get(), bias.data(), bias.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  // Poison the outputs: a skipped element cannot pass on stale data.
  EXPECT_EQ(cudaMemset(y_got.get(), 0xff, static_cast<size_t>(c.n) * 4), cudaSuccess);
  EXPECT_EQ(cudaMemset(idx_got.get(), 0xff, static_cast<size_t>(c.top_k) * 4), cudaSuccess);
  EXPECT_EQ(cudaMemset(wt_got.get(), 0xff, static_cast<size_t>(c.top_k) * 4), cudaSuccess);

  GemmArgs a;
  a.m = 1;
  a.n = c.n;
  a.k = c.k;
  a.x = xd.get();
  a.w = wd.get<bf16>();
  a.y_type = ActType::kF32;
  a.y = y_ref.get();
  EXPECT_TRUE(Gemm(ctx, a, stream).ok());
  MoeShape shape;
  shape.num_experts = c.n;
  shape.top_k = c.top_k;
  shape.renormalize = c.renormalize;
  shape.routed_scaling = c.scaling;
  const float* b = c.bias ? bd.get<float>() : nullptr;
  const Status rs = MoeRoute(shape, y_ref.get<float>(), b, 1, idx_ref.get<int32_t>(),
                             wt_ref.get<float>(), stream);
  EXPECT_TRUE(rs.ok()) << rs;

  GemvRouting r;
  r.bias = b;
  r.top_k = c.top_k;
  r.renormalize = c.renormalize;
  r.routed_scaling = c.scaling;
  r.idx = idx_got.get<int32_t>();
  r.weight = wt_got.get<float>();
  a.y = y_got.get();
  if (!GemvRouteFuses(ctx, c.n, c.k)) {
    const Status st = GemvRoute(ctx, a, r, stream);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return false;
  }
  if (graph) {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const Status st = GemvRoute(ctx, a, r, stream);
    EXPECT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
    EXPECT_TRUE(st.ok()) << st;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    for (int rep = 0; rep < 2; ++rep) EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  } else {
    const Status st = GemvRoute(ctx, a, r, stream);
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> yr(static_cast<size_t>(c.n)), yg(yr.size()), wr(c.top_k), wg(c.top_k);
  std::vector<int32_t> ir(c.top_k), ig(c.top_k);
  EXPECT_EQ(cudaMemcpy(yr.data(), y_ref.get(), yr.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(yg.data(), y_got.get(), yg.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(ir.data(), idx_ref.get(), ir.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(ig.data(), idx_got.get(), ig.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(wr.data(), wt_ref.get(), wr.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(wg.data(), wt_got.get(), wg.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(yr.data(), yg.data(), yr.size() * 4), 0) << "logits differ from Gemm's";
  EXPECT_EQ(ir, ig) << "picks differ from MoeRoute's";
  EXPECT_EQ(std::memcmp(wr.data(), wg.data(), wr.size() * 4), 0) << "weights differ";
  // The logits really tie where asked to (else the case tests nothing more).
  if (c.ties) {
    std::vector<float> sorted = yr;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_NE(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  }
  std::printf("[route] n=%lld k=%lld top_k=%lld bias=%d ties=%d graph=%d: picks %d %d %d ...\n",
              static_cast<long long>(c.n), static_cast<long long>(c.k),
              static_cast<long long>(c.top_k), c.bias, c.ties, graph, ig[0],
              c.top_k > 1 ? ig[1] : -1, c.top_k > 2 ? ig[2] : -1);
  return true;
}

TEST_F(CudaGemmTest, GemvRouteGivesGemmLogitsAndMoeRoutePicksBitForBit) {
  // The plan gives one tile per CTA (S = 8) from k = 2048 on.
  const GemvRouteCase cases[] = {
      {256, 2304, 8, true, true, 2.446f, false},  // Kimi-Linear-48B's router
      {256, 2304, 8, false, true, 2.446f, true}, {256, 2304, 8, true, false, 1.f, true},
      {200, 2048, 6, true, true, 1.5f, false},  // a partial last tile
      {72, 2056, 32, true, true, 1.f, false},   // top_k = 32, a partial k block
      {16, 2048, 4, false, true, 1.f, false},   // a cluster of one CTA
      {37, 4096, 5, true, true, 2.f, true},     // odd n, longer k
      {64, 512, 4, true, true, 1.f, false},     // k split 2: not fused, refused
  };
  uint64_t seed = 900;
  int fused = 0;
  for (const GemvRouteCase& c : cases) {
    fused += CheckGemvRoute(*ctx_, stream_, c, seed, /*graph=*/false) ? 1 : 0;
    CheckGemvRoute(*ctx_, stream_, c, seed, /*graph=*/true);
    ++seed;
  }
  // On the H200 the shape it exists for fuses (else this test checks only
  // the refusal).
  EXPECT_TRUE(GemvRouteFuses(*ctx_, 256, 2304));
  std::printf("[route] %d of %zu shapes fused\n", fused, std::size(cases));
}

// Back to back on one stream (PDL lets each call launch while the previous
// one routes): every call routes its own logits, not a neighbour's.
TEST_F(CudaGemmTest, GemvRouteBackToBackRoutesEachCallsOwnLogits) {
  const int64_t n = 256, k = 2304, top_k = 8;
  if (!GemvRouteFuses(*ctx_, n, k)) GTEST_FAIL() << "Kimi's router shape does not fuse";
  std::mt19937_64 rng(950);
  constexpr int kCalls = 4;
  std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(kCalls * n * k), rng, 0.05f);
  std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(k), rng, 1.f);
  DevBuf wd(w.size() * 2), xd(x.size() * 2), y(static_cast<size_t>(kCalls * n) * 4),
      idx(static_cast<size_t>(kCalls * top_k) * 4), wt(static_cast<size_t>(kCalls * top_k) * 4),
      idx_ref(static_cast<size_t>(top_k) * 4), wt_ref(static_cast<size_t>(top_k) * 4);
  CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(xd.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  GemmArgs a;
  a.m = 1;
  a.n = n;
  a.k = k;
  a.x = xd.get();
  a.y_type = ActType::kF32;
  for (int i = 0; i < kCalls; ++i) {
    a.w = wd.get<bf16>() + static_cast<size_t>(i) * n * k;
    a.y = y.get<float>() + i * n;
    GemvRouting r;
    r.top_k = top_k;
    r.routed_scaling = 2.446f;
    r.idx = idx.get<int32_t>() + i * top_k;
    r.weight = wt.get<float>() + i * top_k;
    ASSERT_TRUE(GemvRoute(*ctx_, a, r, stream_).ok());
  }
  CUDA_OK(cudaStreamSynchronize(stream_));
  MoeShape shape;
  shape.num_experts = n;
  shape.top_k = top_k;
  shape.routed_scaling = 2.446f;
  std::vector<int32_t> got(static_cast<size_t>(kCalls * top_k)), ref(top_k);
  CUDA_OK(cudaMemcpy(got.data(), idx.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  int distinct_first = 0;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(MoeRoute(shape, y.get<float>() + i * n, nullptr, 1, idx_ref.get<int32_t>(),
                         wt_ref.get<float>(), stream_)
                    .ok());
    CUDA_OK(cudaStreamSynchronize(stream_));
    CUDA_OK(cudaMemcpy(ref.data(), idx_ref.get(), ref.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), got.begin() + i * top_k)) << "call " << i;
    if (i > 0 && got[i * top_k] != got[(i - 1) * top_k]) ++distinct_first;
  }
  EXPECT_GT(distinct_first, 0) << "the calls' weights should route differently";
}

TEST_F(CudaGemmTest, GemvRouteMisuseIsRefused) {
  DevBuf xb(1 << 16), wb(1 << 21), yb(1 << 16), ib(1 << 10), tb(1 << 10);
  GemmArgs ok;
  ok.m = 1;
  ok.n = 64;
  ok.k = 2048;
  ok.x = xb.get();
  ok.w = wb.get<bf16>();
  ok.y = yb.get();
  ok.y_type = ActType::kF32;
  GemvRouting r;
  r.top_k = 4;
  r.idx = ib.get<int32_t>();
  r.weight = tb.get<float>();
  CUDA_OK(cudaMemset(xb.get(), 0x3c, 1 << 16));
  CUDA_OK(cudaMemset(wb.get(), 0x3c, 1 << 21));
  ASSERT_TRUE(GemvRouteFuses(*ctx_, ok.n, ok.k));
  ASSERT_TRUE(GemvRoute(*ctx_, ok, r, stream_).ok());
  CUDA_OK(cudaStreamSynchronize(stream_));
  struct Bad {
    const char* what;
    absl::StatusCode code;
    void (*mutate)(GemmArgs&, GemvRouting&);
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  const Bad bad[] = {
      {"m = 2", kInvalid, [](GemmArgs& a, GemvRouting&) { a.m = 2; }},
      {"bf16 y", kInvalid, [](GemmArgs& a, GemvRouting&) { a.y_type = ActType::kBf16; }},
      {"fp32 x", kInvalid, [](GemmArgs& a, GemvRouting&) { a.x_type = ActType::kF32; }},
      {"beta", kInvalid, [](GemmArgs& a, GemvRouting&) { a.beta = 1.f; }},
      {"early trigger", kInvalid, [](GemmArgs& a, GemvRouting&) { a.early_trigger = true; }},
      {"x null", kInvalid, [](GemmArgs& a, GemvRouting&) { a.x = nullptr; }},
      {"top_k 0", kInvalid, [](GemmArgs&, GemvRouting& q) { q.top_k = 0; }},
      {"top_k 33", kInvalid, [](GemmArgs&, GemvRouting& q) { q.top_k = 33; }},
      {"top_k > n", kInvalid,
       [](GemmArgs& a, GemvRouting& q) {
         a.n = 3;
         q.top_k = 4;
       }},
      {"idx null", kInvalid, [](GemmArgs&, GemvRouting& q) { q.idx = nullptr; }},
      {"weight null", kInvalid, [](GemmArgs&, GemvRouting& q) { q.weight = nullptr; }},
      {"scaling inf", kInvalid,
       [](GemmArgs&, GemvRouting& q) {
         q.routed_scaling = std::numeric_limits<float>::infinity();
       }},
      {"n > 256", kPrecondition, [](GemmArgs& a, GemvRouting&) { a.n = 257; }},
      {"k % 8", kPrecondition, [](GemmArgs& a, GemvRouting&) { a.k = 2050; }},
      {"k split 2", kPrecondition, [](GemmArgs& a, GemvRouting&) { a.k = 512; }},
      {"misaligned x", kPrecondition,
       [](GemmArgs& a, GemvRouting&) { a.x = static_cast<const char*>(a.x) + 2; }},
  };
  for (const Bad& b : bad) {
    GemmArgs a = ok;
    GemvRouting q = r;
    b.mutate(a, q);
    const Status st = GemvRoute(*ctx_, a, q, stream_);
    EXPECT_EQ(st.code(), b.code) << b.what << ": " << st;
  }
  CUDA_OK(cudaStreamSynchronize(stream_));
}

// Decode is captured in a CUDA graph: both paths must enqueue on the stream
// only, with their plans made before capture (or during it without syncing).
TEST_F(CudaGemmTest, CapturedInCudaGraphMatchesEager) {
  std::mt19937_64 rng(700);
  for (int64_t m : {1, 16, 300}) {
    SCOPED_TRACE(m);
    const int64_t n = 2304, k = 4096;
    std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(n * k), rng);
    std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(m * k), rng);
    DevBuf wd(w.size() * 2), xd(x.size() * 2), y_eager(static_cast<size_t>(m * n) * 4),
        y_graph(static_cast<size_t>(m * n) * 4);
    CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(xd.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.x = xd.get();
    a.w = wd.get<bf16>();
    a.y_type = ActType::kF32;
    a.y = y_eager.get();
    ASSERT_TRUE(Gemm(*ctx_, a, stream_).ok());
    CUDA_OK(cudaStreamSynchronize(stream_));

    // Same shape as the eager call: its plan exists, the capture only enqueues.
    a.y = y_graph.get();
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const Status st = Gemm(*ctx_, a, stream_);
    CUDA_OK(cudaStreamEndCapture(stream_, &graph));
    ASSERT_TRUE(st.ok()) << st;
    cudaGraphExec_t exec = nullptr;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) CUDA_OK(cudaGraphLaunch(exec, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    std::vector<float> ye(static_cast<size_t>(m * n)), yg(ye.size());
    CUDA_OK(cudaMemcpy(ye.data(), y_eager.get(), ye.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(yg.data(), y_graph.get(), yg.size() * 4, cudaMemcpyDeviceToHost));
    const Errors e = Compare(yg, ye);
    std::printf("[graph] m=%lld eager vs replay l2_rel=%.3e\n", static_cast<long long>(m),
                e.l2_rel);
    if (m <= kGemvMaxRows) {
      EXPECT_EQ(std::memcmp(ye.data(), yg.data(), ye.size() * 4), 0) << "streaming kernel is "
                                                                        "deterministic";
    } else {
      EXPECT_LE(e.l2_rel, 1e-6);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// A cuBLASLt shape first seen inside a capture: planning (heuristic query)
// is host-only work, so capturing still succeeds and the replay is right.
TEST_F(CudaGemmTest, CublasLtPlannedDuringCapture) {
  std::mt19937_64 rng(800);
  const int64_t m = 77, n = 96, k = 136, ldy = 101;  // a shape no other test plans
  std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(n * k), rng);
  std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(m * k), rng);
  DevBuf wd(w.size() * 2), xd(x.size() * 2), yd(static_cast<size_t>(m * ldy) * 4);
  CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(xd.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(yd.get(), 0, static_cast<size_t>(m * ldy) * 4));
  GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = xd.get();
  a.w = wd.get<bf16>();
  a.y = yd.get();
  a.y_type = ActType::kF32;
  a.ldy = ldy;
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const Status st = Gemm(*ctx_, a, stream_);
  CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  std::vector<float> y(static_cast<size_t>(m * ldy));
  CUDA_OK(cudaMemcpy(y.data(), yd.get(), y.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<float> xp(x.size());
  for (size_t i = 0; i < x.size(); ++i) xp[i] = Bf16ToF32(x[i]);
  std::vector<float> ref(static_cast<size_t>(m * n));
  std::vector<float> scratch(std::max<size_t>(cpu::MatMulScratchFloats(m, k, 1), 1));
  cpu::MatMul(xp.data(), m, cpu::WeightMatrix{DType::kBF16, w.data(), n, k}, ref.data(),
              scratch.data(), nullptr);
  std::vector<float> got(ref.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) got[i * n + j] = y[i * ldy + j];
  const Errors e = Compare(got, ref);
  std::printf("[graph-plan] m=%lld n=%lld k=%lld l2_rel=%.3e\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), e.l2_rel);
  EXPECT_LE(e.l2_rel, 5e-4);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace strata::cuda
