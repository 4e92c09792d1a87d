// KdaDecodeFused (backend/cuda/kda.h) against the unfused decode chain it
// replaces: CausalConvSiluDecode, the two gate products (computed on the host
// in double: fp32 decay pre-activation, bf16 output gate, as the GEMVs store
// them), KdaDecode and GatedRmsNormSigmoid, each already checked against the
// CPU backend in its own test. Random non-zero inputs; several steps over a
// slot pool at batch 1 and 5, the production shape (H = 32, dk = dv = 128,
// rank 128, conv 4), an odd head count with rank 64 and conv 2, a padding
// row (negative slot), CUDA-graph replay, and argument checks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/norm.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::RandomBf16;
using op_test::RandomF32;
using op_test::Upload;

struct Case {
  int64_t heads, rank, conv;
};

// Both paths' buffers for `slots` pool entries and up to `batch` rows.
struct Fixture {
  Case c;
  int64_t batch, pool_slots, C, ld, dk = 128;
  std::vector<uint16_t> f_b, g_b;
  std::vector<float> conv_w, dt_bias, neg_exp_a, o_norm;
  DevBuf d_proj, d_conv_w, d_f_b, d_g_b, d_dt_bias, d_nea, d_onorm, d_slots;
  // Per path: window pool, state pool, output; the reference's scratch.
  DevBuf win_f, win_r, st_f, st_r, y_f, y_r, qkv, graw, gate, o;

  Fixture(Case cs, int64_t b, int64_t slots, std::mt19937& rng)
      : c(cs),
        batch(b),
        pool_slots(slots),
        C(cs.heads * 128),
        ld(3 * cs.heads * 128 + 2 * cs.rank + cs.heads + 8 - cs.heads % 8),
        d_proj(sizeof(uint16_t) * b * ld),
        d_conv_w(sizeof(float) * 3 * C * cs.conv),
        d_f_b(sizeof(uint16_t) * C * cs.rank),
        d_g_b(sizeof(uint16_t) * C * cs.rank),
        d_dt_bias(sizeof(float) * C),
        d_nea(sizeof(float) * cs.heads),
        d_onorm(sizeof(float) * 128),
        d_slots(sizeof(int32_t) * b),
        win_f(sizeof(float) * slots * (cs.conv - 1) * 3 * C),
        win_r(sizeof(float) * slots * (cs.conv - 1) * 3 * C),
        st_f(sizeof(float) * slots * C * 128),
        st_r(sizeof(float) * slots * C * 128),
        y_f(sizeof(uint16_t) * b * C),
        y_r(sizeof(uint16_t) * b * C),
        qkv(sizeof(uint16_t) * b * 3 * C),
        graw(sizeof(float) * b * C),
        gate(sizeof(uint16_t) * b * C),
        o(sizeof(uint16_t) * b * C) {
    const float ra = 1.7f / std::sqrt(static_cast<float>(cs.rank));
    f_b = RandomBf16(C * cs.rank, ra, rng);
    g_b = RandomBf16(C * cs.rank, ra, rng);
    conv_w = RandomF32(3 * C * cs.conv, 0.6f, rng);
    dt_bias = RandomF32(C, 0.5f, rng);
    neg_exp_a = RandomF32(cs.heads, 1.f, rng);
    for (float& a : neg_exp_a) a = -std::exp(a);
    o_norm = RandomF32(128, 1.f, rng);
    Upload(d_conv_w, conv_w);
    Upload(d_f_b, f_b);
    Upload(d_g_b, g_b);
    Upload(d_dt_bias, dt_bias);
    Upload(d_nea, neg_exp_a);
    Upload(d_onorm, o_norm);
    // Both paths start from the same random windows and states.
    const std::vector<float> w0 = RandomF32(slots * (cs.conv - 1) * 3 * C, 1.f, rng);
    Upload(win_f, w0);
    Upload(win_r, w0);
    const std::vector<float> s0 = RandomF32(slots * C * 128, 0.3f, rng);
    Upload(st_f, s0);
    Upload(st_r, s0);
  }

  KdaShape Shape() const { return KdaShape{c.heads, dk, dk, 0.f}; }

  KdaDecodeFusedArgs Args(int64_t n) {
    KdaDecodeFusedArgs a;
    a.shape = Shape();
    a.batch = n;
    a.proj = d_proj.get<bf16>();
    a.ld_proj = ld;
    a.off_fa = 3 * C;
    a.off_ga = 3 * C + c.rank;
    a.off_beta = 3 * C + 2 * c.rank;
    a.rank = c.rank;
    a.conv_w = d_conv_w.get<float>();
    a.conv_kernel = c.conv;
    a.window_pool = win_f.get<float>();
    a.f_b = d_f_b.get<bf16>();
    a.g_b = d_g_b.get<bf16>();
    a.dt_bias = d_dt_bias.get<float>();
    a.neg_exp_a = d_nea.get<float>();
    a.o_norm = d_onorm.get<float>();
    a.eps = 1e-6f;
    a.state_pool = st_f.get<float>();
    a.slots = d_slots.get<int32_t>();
    a.out = y_f.get<bf16>();
    return a;
  }

  // The unfused chain on the reference buffers (rows with slot ≥ 0 only).
  void Reference(const std::vector<uint16_t>& proj, int64_t n, cudaStream_t stream) {
    ASSERT_TRUE(CausalConvSiluDecode(d_proj.get(), ActType::kBf16, ld, n, 3 * C,
                                     d_conv_w.get<float>(), c.conv, win_r.get<float>(),
                                     d_slots.get<int32_t>(), qkv.get<bf16>(), stream)
                    .ok());
    std::vector<float> g(n * C);
    std::vector<uint16_t> gt(n * C);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t ch = 0; ch < C; ++ch) {
        double fs = 0, gs = 0;
        for (int64_t r = 0; r < c.rank; ++r) {
          fs += double(Bf16ToF32(f_b[ch * c.rank + r])) * Bf16ToF32(proj[b * ld + 3 * C + r]);
          gs += double(Bf16ToF32(g_b[ch * c.rank + r])) *
                Bf16ToF32(proj[b * ld + 3 * C + c.rank + r]);
        }
        g[b * C + ch] = static_cast<float>(fs);
        gt[b * C + ch] = F32ToBf16(static_cast<float>(gs));
      }
    }
    Upload(graw, g);
    Upload(gate, gt);
    KdaDecodeArgs a;
    a.shape = Shape();
    a.batch = n;
    a.q = qkv.get<bf16>();
    a.k = qkv.get<bf16>() + C;
    a.v = qkv.get<bf16>() + 2 * C;
    a.ld_qkv = 3 * C;
    a.gates.g_raw = graw.get();
    a.gates.g_type = ActType::kF32;
    a.gates.ld_g = C;
    a.gates.beta_raw = d_proj.get<bf16>() + 3 * C + 2 * c.rank;
    a.gates.beta_type = ActType::kBf16;
    a.gates.ld_beta = ld;
    a.gates.neg_exp_a = d_nea.get<float>();
    a.gates.dt_bias = d_dt_bias.get<float>();
    a.state_pool = st_r.get<float>();
    a.slots = d_slots.get<int32_t>();
    a.out = o.get();
    a.out_type = ActType::kBf16;
    ASSERT_TRUE(KdaDecode(a, stream).ok());
    ASSERT_TRUE(GatedRmsNormSigmoid(o.get(), ActType::kBf16, gate.get(), ActType::kBf16,
                                    n * c.heads, dk, d_onorm.get<float>(), 1e-6f, y_r.get<bf16>(),
                                    stream)
                    .ok());
  }
};

double L2Rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> Bf16Vec(const DevBuf& d, size_t n) {
  const std::vector<uint16_t> h = Download<uint16_t>(d, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = Bf16ToF32(h[i]);
  return f;
}

// Steps of n rows on slots `slots` (distinct, ≥ 0): outputs, windows and
// states of both paths after every step.
void CheckSteps(Case cs, const std::vector<int32_t>& slots, int steps, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "H=" << cs.heads << " rank=" << cs.rank << " conv=" << cs.conv
                                  << " batch=" << slots.size());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t n = static_cast<int64_t>(slots.size());
  Fixture f(cs, n, 7, rng);
  Upload(f.d_slots, slots);
  for (int s = 0; s < steps; ++s) {
    const std::vector<uint16_t> proj = RandomBf16(n * f.ld, 1.f, rng);
    Upload(f.d_proj, proj);
    f.Reference(proj, n, nullptr);
    ASSERT_TRUE(KdaDecodeFused(f.Args(n), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> yf = Bf16Vec(f.y_f, n * f.C), yr = Bf16Vec(f.y_r, n * f.C);
    const double ey = L2Rel(yf, yr);
    const size_t wn = 7 * (cs.conv - 1) * 3 * f.C, sn = 7 * f.C * 128;
    const std::vector<float> wf = Download<float>(f.win_f, wn), wr = Download<float>(f.win_r, wn);
    const std::vector<float> sf = Download<float>(f.st_f, sn), sr = Download<float>(f.st_r, sn);
    const double es = L2Rel(sf, sr);
    std::printf("step %d: out L2 rel %.3g, state L2 rel %.3g\n", s, ey, es);
    // bf16 outputs: the gate products and the norm sum in another order, so
    // an output may round to the neighbouring bf16 value.
    EXPECT_LE(ey, 4e-3) << "step " << s;
    EXPECT_LE(es, 1e-5) << "step " << s;
    EXPECT_EQ(std::memcmp(wf.data(), wr.data(), sizeof(float) * wn), 0)
        << "conv windows differ at step " << s;
  }
}

TEST(KdaDecodeFused, MatchesUnfusedChainAtProductionShape) {
  CheckSteps({32, 128, 4}, {3}, 3, 1);
  CheckSteps({32, 128, 4}, {6, 0, 2, 5, 1}, 3, 2);
}

TEST(KdaDecodeFused, MatchesUnfusedChainAtOddHeadsRank64Conv2) {
  CheckSteps({3, 64, 2}, {1}, 3, 3);
  CheckSteps({5, 192, 3}, {4, 2, 6}, 2, 4);
}

TEST(KdaDecodeFused, PaddingRowIsZeroAndTouchesNoState) {
  std::mt19937 rng(5);
  Fixture f({4, 128, 4}, 2, 3, rng);
  Upload(f.d_slots, std::vector<int32_t>{-1, 2});
  Upload(f.d_proj, RandomBf16(2 * f.ld, 1.f, rng));
  const size_t wn = 3 * 3 * 3 * f.C, sn = 3 * f.C * 128;
  const std::vector<float> w0 = Download<float>(f.win_f, wn), s0 = Download<float>(f.st_f, sn);
  ASSERT_TRUE(KdaDecodeFused(f.Args(2), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = Bf16Vec(f.y_f, 2 * f.C);
  for (int64_t i = 0; i < f.C; ++i) ASSERT_EQ(y[i], 0.f) << i;
  double live = 0;
  for (int64_t i = f.C; i < 2 * f.C; ++i) live += std::fabs(y[i]);
  EXPECT_GT(live, 0.0);
  const std::vector<float> w1 = Download<float>(f.win_f, wn), s1 = Download<float>(f.st_f, sn);
  // Slots 0 and 1 belong to no row: unchanged; slot 2 moved.
  const size_t wslot = 3 * 3 * f.C, sslot = f.C * 128;
  EXPECT_EQ(std::memcmp(w0.data(), w1.data(), sizeof(float) * 2 * wslot), 0);
  EXPECT_EQ(std::memcmp(s0.data(), s1.data(), sizeof(float) * 2 * sslot), 0);
  EXPECT_NE(std::memcmp(s0.data() + 2 * sslot, s1.data() + 2 * sslot, sizeof(float) * sslot), 0);
}

// Captured on a stream (cluster launch with PDL inside a graph), replayed
// on new inputs: the replay equals an eager call from the same state. Both
// read the state before their PDL wait (state_before_wait, as the executor
// asks: nothing before them on the stream writes it).
TEST(KdaDecodeFused, GraphReplayMatchesEager) {
  std::mt19937 rng(6);
  Fixture f({32, 128, 4}, 2, 4, rng);
  Upload(f.d_slots, std::vector<int32_t>{1, 3});
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  KdaDecodeFusedArgs args = f.Args(2);
  args.state_before_wait = true;
  const Status st = KdaDecodeFused(args, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const size_t wn = 4 * 3 * 3 * f.C, sn = 4 * f.C * 128;
  const std::vector<float> w0 = Download<float>(f.win_f, wn), s0 = Download<float>(f.st_f, sn);
  Upload(f.d_proj, RandomBf16(2 * f.ld, 1.f, rng));
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<uint16_t> replayed = Download<uint16_t>(f.y_f, 2 * f.C);
  Upload(f.win_f, w0);
  Upload(f.st_f, s0);
  ASSERT_TRUE(KdaDecodeFused(args, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<uint16_t> eager = Download<uint16_t>(f.y_f, 2 * f.C);
  EXPECT_EQ(replayed, eager);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(KdaDecodeFused, RejectsUnsupportedArguments) {
  std::mt19937 rng(7);
  Fixture f({2, 128, 4}, 1, 1, rng);
  auto expect_invalid = [&](KdaDecodeFusedArgs a, const char* what) {
    EXPECT_FALSE(KdaDecodeFusedSupported(a)) << what;
    const Status st = KdaDecodeFused(a, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what << ": " << st;
  };
  KdaDecodeFusedArgs a = f.Args(1);
  EXPECT_TRUE(KdaDecodeFusedSupported(a));
  a.shape.key_dim = 64;
  expect_invalid(a, "dk 64");
  a = f.Args(1);
  a.rank = 96;
  expect_invalid(a, "rank 96");
  a = f.Args(1);
  a.conv_kernel = 5;
  expect_invalid(a, "conv 5");
  a = f.Args(1);
  a.off_fa += 1;
  expect_invalid(a, "misaligned f_a");
  a = f.Args(1);
  a.off_beta = a.ld_proj;
  expect_invalid(a, "beta past the row");
  a = f.Args(1);
  a.proj = nullptr;
  expect_invalid(a, "null proj");
  a = f.Args(0);
  EXPECT_EQ(KdaDecodeFused(a, nullptr).code(), absl::StatusCode::kInvalidArgument);
  a = f.Args(1);
  a.o_norm = nullptr;
  EXPECT_EQ(KdaDecodeFused(a, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda
