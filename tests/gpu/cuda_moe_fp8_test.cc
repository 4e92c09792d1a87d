// MoeForward on FP8 block-scaled experts (MoeArgs::fp8) against MoeForward on
// the same experts dequantised on the host (fp32 code · scale, rounded to
// bf16: what the loader does for bf16 uploads and what cuda_moe_test checks
// against the CPU). Random e4m3 codes (NaN codes excluded) and random
// non-zero scales; tokens 1, 3, 17, 64, 300 so every path runs:
//   decode GEMV with 16-byte activations and 8-byte code loads (or the scalar
//   fallback), the fused
//   down+combine (n ≤ 4), the scalar fallback (scale blocks 20 columns wide),
//   and the prefill path (n·k > 512 with D % 128 == 0, I % 64 == 0) that
//   dequantises experts into the workspace scratch before the grouped GEMM,
//   in one chunk and (at a larger expert size) in several.
// Intermediate sizes 192 and 72 are not multiples of the 128-column block,
// so w2's last scale column is partial; the 8-row scale groups are the
// loader's layout, the 128×128 case the checkpoint's own.
// The FP8 kernels round each weight to the bf16 the host produces and keep
// the bf16 kernels' summation order, so the outputs agree to fp32
// accumulation noise (in practice bit for bit; each case prints how many
// outputs differ). The bound, 1e-5 of max |y|, is far below what one wrong
// scale or code gives (O(1) relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/parallel.h"
#include "backend/cuda/moe.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Upload;

ThreadPool* Pool() {
  static ThreadPool* pool = new ThreadPool(0);
  return pool;
}

uint64_t Mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale).
float HashUniform(uint64_t seed, uint64_t i, float scale) {
  const float u = static_cast<float>(Mix(seed, i) >> 40) * 0x1.0p-24f;
  return (2.f * u - 1.f) * scale;
}

struct Fp8Case {
  int64_t E, k, D, I;
  int64_t block_rows, block_cols;
};

// Host FP8 experts in MoeFp8Experts' layout and their bf16 dequantisation in
// the bf16 layout.
struct Experts {
  std::vector<uint8_t> w13, w2;
  std::vector<float> s13, s2;
  std::vector<uint16_t> b13, b2;
};

void FillCodes(std::vector<uint8_t>& v, uint64_t seed) {
  cpu::ParallelRange(Pool(), static_cast<int64_t>(v.size()), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint8_t c = static_cast<uint8_t>(Mix(seed, i) >> 56);
      if ((c & 0x7f) == 0x7f) c ^= 1;  // 0x7f / 0xff are e4m3fn's NaNs
      v[i] = c;
    }
  });
}

void FillScales(std::vector<float>& v, uint64_t seed) {
  // Positive, spread over 3 octaves around 2^-9 (weights up to ~3).
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::ldexp(1.f + 0.5f * HashUniform(seed, i, 1.f), -9 + static_cast<int>(Mix(seed + 1, i) % 3));
  }
}

// One expert matrix [rows, cols] with scales [*, ceil(cols / bc)] per br rows.
void Dequant(const uint8_t* w, const float* s, int64_t rows, int64_t cols, int64_t br, int64_t bc,
             uint16_t* out) {
  const int64_t sc = (cols + bc - 1) / bc;
  cpu::ParallelRange(Pool(), rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = F8E4M3ToF32(w[r * cols + c]) * s[(r / br) * sc + c / bc];
        out[r * cols + c] = F32ToBf16(v);
      }
    }
  });
}

Experts MakeExperts(const Fp8Case& c, uint64_t seed) {
  Experts x;
  const int64_t sr13 = 2 * c.I / c.block_rows;
  const int64_t sc_d = (c.D + c.block_cols - 1) / c.block_cols;
  const int64_t sr2 = (c.D + c.block_rows - 1) / c.block_rows;
  const int64_t sc_i = (c.I + c.block_cols - 1) / c.block_cols;
  x.w13.resize(static_cast<size_t>(c.E * 2 * c.I * c.D));
  x.w2.resize(static_cast<size_t>(c.E * c.D * c.I));
  x.s13.resize(static_cast<size_t>(c.E * sr13 * sc_d));
  x.s2.resize(static_cast<size_t>(c.E * sr2 * sc_i));
  FillCodes(x.w13, seed);
  FillCodes(x.w2, seed + 10);
  FillScales(x.s13, seed + 20);
  FillScales(x.s2, seed + 30);
  x.b13.resize(x.w13.size());
  x.b2.resize(x.w2.size());
  for (int64_t e = 0; e < c.E; ++e) {
    Dequant(x.w13.data() + e * 2 * c.I * c.D, x.s13.data() + e * sr13 * sc_d, 2 * c.I, c.D,
            c.block_rows, c.block_cols, x.b13.data() + e * 2 * c.I * c.D);
    Dequant(x.w2.data() + e * c.D * c.I, x.s2.data() + e * sr2 * sc_i, c.D, c.I, c.block_rows,
            c.block_cols, x.b2.data() + e * c.D * c.I);
  }
  return x;
}

MoeShape ShapeOf(const Fp8Case& c, bool fp8) {
  MoeShape s;
  s.num_experts = c.E;
  s.hidden = c.D;
  s.inter = c.I;
  s.top_k = c.k;
  s.renormalize = true;
  s.routed_scaling = 2.5f;
  s.fp8_experts = fp8;
  return s;
}

void RunCase(const Fp8Case& c, const std::vector<int64_t>& tokens, uint64_t seed) {
  const Experts x = MakeExperts(c, seed);
  DevBuf d_w13(x.w13.size()), d_w2(x.w2.size());
  DevBuf d_s13(sizeof(float) * x.s13.size()), d_s2(sizeof(float) * x.s2.size());
  DevBuf d_b13(sizeof(uint16_t) * x.b13.size()), d_b2(sizeof(uint16_t) * x.b2.size());
  Upload(d_w13, x.w13);
  Upload(d_w2, x.w2);
  Upload(d_s13, x.s13);
  Upload(d_s2, x.s2);
  Upload(d_b13, x.b13);
  Upload(d_b2, x.b2);
  const int64_t max_n = *std::max_element(tokens.begin(), tokens.end());
  const MoeShape s_fp8 = ShapeOf(c, true), s_bf16 = ShapeOf(c, false);
  const size_t ws_fp8 = MoeWorkspaceBytes(s_fp8, max_n);
  const size_t ws_bf16 = MoeWorkspaceBytes(s_bf16, max_n);
  ASSERT_GT(ws_fp8, 0u);
  DevBuf d_ws_fp8(ws_fp8), d_ws_bf16(ws_bf16);
  DevBuf d_x(sizeof(uint16_t) * max_n * c.D), d_logits(sizeof(float) * max_n * c.E);
  DevBuf d_bias(sizeof(float) * c.E);
  DevBuf d_y_fp8(sizeof(float) * max_n * c.D), d_y_bf16(sizeof(float) * max_n * c.D);

  for (const int64_t n : tokens) {
    SCOPED_TRACE(testing::Message() << "E=" << c.E << " k=" << c.k << " D=" << c.D
                                    << " I=" << c.I << " block " << c.block_rows << "x"
                                    << c.block_cols << " n=" << n);
    std::vector<uint16_t> xh(static_cast<size_t>(n * c.D));
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = F32ToBf16(HashUniform(seed + 40 + n, i, 1.f));
    std::vector<float> logits(static_cast<size_t>(n * c.E));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = HashUniform(seed + 50 + n, i, 3.f);
    std::vector<float> bias(static_cast<size_t>(c.E));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = HashUniform(seed + 60, i, 0.1f);
    Upload(d_x, xh);
    Upload(d_logits, logits);
    Upload(d_bias, bias);

    MoeArgs a;
    a.num_tokens = n;
    a.x = d_x.get<bf16>();
    a.router_logits = d_logits.get<float>();
    a.score_bias = d_bias.get<float>();

    MoeArgs ref_args = a;
    ref_args.shape = s_bf16;
    ref_args.w13 = d_b13.get<bf16>();
    ref_args.w2 = d_b2.get<bf16>();
    ref_args.y = d_y_bf16.get<float>();

    MoeArgs fp8_args = a;
    fp8_args.shape = s_fp8;
    fp8_args.fp8.w13 = d_w13.get<uint8_t>();
    fp8_args.fp8.w13_scale = d_s13.get<float>();
    fp8_args.fp8.w2 = d_w2.get<uint8_t>();
    fp8_args.fp8.w2_scale = d_s2.get<float>();
    fp8_args.fp8.block_rows = c.block_rows;
    fp8_args.fp8.block_cols = c.block_cols;
    fp8_args.y = d_y_fp8.get<float>();

    const size_t ybytes = sizeof(float) * n * c.D;
    // Poison both outputs so a skipped element cannot match on stale data.
    ASSERT_EQ(cudaMemset(d_y_fp8.get(), 0xff, ybytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_y_bf16.get(), 0xff, ybytes), cudaSuccess);
    Status st = MoeForward(ref_args, d_ws_bf16.get(), ws_bf16, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    st = MoeForward(fp8_args, d_ws_fp8.get(), ws_fp8, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> ref(static_cast<size_t>(n * c.D)), got(ref.size());
    ASSERT_EQ(cudaMemcpy(ref.data(), d_y_bf16.get(), ybytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_y_fp8.get(), ybytes, cudaMemcpyDeviceToHost), cudaSuccess);

    double max_ref = 0, max_abs = 0;
    size_t differ = 0;
    bool finite = true;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) finite = false;
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
      const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
      max_abs = std::max(max_abs, d);
      if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0) ++differ;
    }
    std::printf(
        "MoeForward fp8 E=%lld k=%lld D=%lld I=%lld block %lldx%lld n=%-4lld: max |y| %.4g, "
        "max abs diff %.3g, %zu of %zu outputs differ from the bf16 path\n",
        static_cast<long long>(c.E), static_cast<long long>(c.k), static_cast<long long>(c.D),
        static_cast<long long>(c.I), static_cast<long long>(c.block_rows),
        static_cast<long long>(c.block_cols), static_cast<long long>(n), max_ref, max_abs, differ,
        ref.size());
    ASSERT_TRUE(finite);
    ASSERT_GT(max_ref, 0.0);
    EXPECT_LE(max_abs, 1e-5 * max_ref);
  }
}

const std::vector<int64_t> kTokens = {1, 3, 17, 64, 300};

TEST(CudaMoeFp8, LoaderLayoutMatchesDequantisedBf16OnEveryPath) {
  // D % 128 == 0 and I % 64 == 0: n = 300 (600 rows) takes the grouped GEMM.
  RunCase({8, 2, 256, 192, 8, 128}, kTokens, 101);
}

TEST(CudaMoeFp8, PartialColumnBlocksOnTheGemvPath) {
  // D = 200 and I = 72: partial blocks along both k dimensions; the GEMM
  // cannot take the shape, so 900 rows stay on the GEMV.
  RunCase({7, 3, 200, 72, 8, 128}, kTokens, 202);
}

TEST(CudaMoeFp8, CheckpointBlocksMatchDequantisedBf16) {
  RunCase({16, 4, 384, 256, 128, 128}, kTokens, 303);
}

TEST(CudaMoeFp8, ScalarFallbackWithNarrowScaleBlocks) {
  // Scale blocks 20 columns wide cannot serve 8 codes per load.
  RunCase({5, 2, 66, 48, 8, 20}, {1, 3, 17}, 404);
}

TEST(CudaMoeFp8, PrefillDequantisesInSeveralChunks) {
  // 3·I·D·2 bytes = 48 MiB per expert: 10 experts per 512 MiB chunk, so
  // E = 24 takes three chunks.
  const Fp8Case c{24, 4, 4096, 2048, 8, 128};
  const int64_t per_expert = 3 * c.I * c.D * 2;
  ASSERT_LT(kMoeFp8ScratchBytes / per_expert, c.E);
  RunCase(c, {1, 300}, 505);
}

TEST(CudaMoeFp8, WorkspaceHoldsTheDequantisationScratch) {
  const Fp8Case c{8, 2, 256, 192, 8, 128};
  // Decode sizes never dequantise; prefill sizes hold all 8 experts (small).
  EXPECT_EQ(MoeWorkspaceBytes(ShapeOf(c, true), 4), MoeWorkspaceBytes(ShapeOf(c, false), 4));
  // At prefill sizes the FP8 workspace holds the bf16 copy of all 8 experts
  // plus the fp32 expert rows. (The bf16 layer's workspace is no baseline:
  // it also holds the CUTLASS grouped GEMM's arrays, which FP8 never uses.)
  const size_t deq = size_t{8} * 3 * 192 * 256 * 2;
  const size_t yrows = sizeof(float) * 300 * 2 * 256;
  EXPECT_GE(MoeWorkspaceBytes(ShapeOf(c, true), 300), deq + yrows);
  EXPECT_GT(MoeWorkspaceBytes(ShapeOf(c, true), 300), MoeWorkspaceBytes(ShapeOf(c, true), 4) + deq);
}

TEST(CudaMoeFp8, MisuseIsInvalidArgument) {
  const Fp8Case c{8, 2, 256, 192, 8, 128};
  DevBuf buf(1 << 20), ws(MoeWorkspaceBytes(ShapeOf(c, true), 4));
  MoeArgs a;
  a.shape = ShapeOf(c, true);
  a.num_tokens = 1;
  a.x = buf.get<bf16>();
  a.router_logits = buf.get<float>();
  a.y = buf.get<float>();
  a.fp8.w13 = buf.get<uint8_t>();
  a.fp8.w2 = buf.get<uint8_t>();
  a.fp8.w13_scale = buf.get<float>();
  a.fp8.w2_scale = buf.get<float>();
  a.fp8.block_rows = 8;
  a.fp8.block_cols = 128;
  const size_t bytes = MoeWorkspaceBytes(a.shape, 4);

  MoeArgs b = a;
  b.shape.fp8_experts = false;  // FP8 weights, bf16 workspace plan
  EXPECT_EQ(MoeForward(b, ws.get(), bytes, nullptr).code(), absl::StatusCode::kInvalidArgument);
  b = a;
  b.fp8.block_rows = 128;  // 192 rows of gate would share scale rows with up
  EXPECT_EQ(MoeForward(b, ws.get(), bytes, nullptr).code(), absl::StatusCode::kInvalidArgument);
  b = a;
  b.fp8.w2_scale = nullptr;
  EXPECT_EQ(MoeForward(b, ws.get(), bytes, nullptr).code(), absl::StatusCode::kInvalidArgument);
  b = a;
  b.w13 = buf.get<bf16>();  // both kinds at once
  EXPECT_EQ(MoeForward(b, ws.get(), bytes, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda
