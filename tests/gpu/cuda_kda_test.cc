// KDA on the GPU (backend/cuda/kda.h) against the CPU backend on random
// inputs: q, k, v ~ N(0, 1) rounded to bf16, g_raw ~ N(0, 1), beta_raw ~
// N(0, 1), A_log ~ U(−1, 1), dt_bias ~ N(0, 0.5); the CPU reference runs on the
// same bf16 values with the gates computed on the host as the device does.
// Prefill at small odd shapes and the production shape (H = 32, dk = dv = 128),
// T = 1, continuation across calls, prefill then batched decode over a slot
// pool, decode alone on both kernels, strong decays, CUDA-graph replay of a
// decode step, the recurrent (batch-invariant) prefill's bit-exact invariance
// to call splits and to decoding the tail (alone or batched), and argument
// checks. Each comparison prints the L2-relative and max-abs errors.
#include "backend/cuda/kda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kda.h"
#include "base/thread_pool.h"
#include "base/tuning.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DeviceArray;
using op_test::ExpectSameBits;
using op_test::RoundBf16;
using op_test::ToBf16;
using op_test::ToFloat;

constexpr double kBf16Tolerance = 1e-2;  // bf16 activations (L2-relative)
constexpr double kF32Tolerance = 1e-4;   // fp32 decode path (L2-relative)

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct Dims {
  int64_t heads;
  int64_t dk;
  int64_t dv;
};

std::string DimsName(const Dims& d) { return absl::StrCat("H", d.heads, "_dk", d.dk, "_dv", d.dv); }
void PrintTo(const Dims& d, std::ostream* os) { *os << DimsName(d); }

// Per-head gate parameters.
struct HeadParams {
  std::vector<float> neg_exp_a;  // [H]
  std::vector<float> dt_bias;    // [H·dk]
};

HeadParams MakeHeadParams(const Dims& d, std::mt19937& rng) {
  std::uniform_real_distribution<float> a_log(-1.f, 1.f);
  std::normal_distribution<float> bias(0.f, 0.5f);
  HeadParams hp;
  for (int64_t h = 0; h < d.heads; ++h) hp.neg_exp_a.push_back(-std::exp(a_log(rng)));
  for (int64_t i = 0; i < d.heads * d.dk; ++i) hp.dt_bias.push_back(bias(rng));
  return hp;
}

enum class GateDraw { kNormal, kStrong };

// Rows [rows, H, d] of inputs; values already rounded as the device sees them.
struct Inputs {
  int64_t rows = 0;
  Dims dims{};
  ActType g_type = ActType::kF32;
  std::vector<float> q, k, v;       // bf16-exact
  std::vector<float> g_raw;         // bf16-exact when g_type is bf16
  std::vector<float> beta_raw;      // fp32
  std::vector<float> g, beta;       // host gates for the CPU reference
};

Inputs MakeInputs(int64_t rows, const Dims& d, const HeadParams& hp, ActType g_type,
                  std::mt19937& rng, GateDraw draw = GateDraw::kNormal) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  Inputs in;
  in.rows = rows;
  in.dims = d;
  in.g_type = g_type;
  const int64_t nk = rows * d.heads * d.dk, nv = rows * d.heads * d.dv;
  for (int64_t i = 0; i < nk; ++i) in.q.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < nk; ++i) in.k.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < nv; ++i) in.v.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < nk; ++i) {
    float x = normal(rng);
    if (draw == GateDraw::kStrong) {
      // Decays of −20…−100 per token (softplus in its linear range) next to
      // near-zero ones: the chunk's cumulative decay spans hundreds of nats.
      const float pick = unit(rng);
      if (pick < 0.15f) {
        x = 25.f + 40.f * unit(rng);
      } else if (pick < 0.3f) {
        x = -12.f - 6.f * unit(rng);
      }
    }
    in.g_raw.push_back(g_type == ActType::kBf16 ? RoundBf16(x) : x);
  }
  for (int64_t i = 0; i < rows * d.heads; ++i) in.beta_raw.push_back(normal(rng));
  in.g.resize(nk);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t c = 0; c < d.dk; ++c) {
        const int64_t i = (r * d.heads + h) * d.dk + c;
        const float x = in.g_raw[i] + hp.dt_bias[h * d.dk + c];
        const float softplus = x > 20.f ? x : std::log1p(std::exp(x));
        in.g[i] = hp.neg_exp_a[h] * softplus;
      }
    }
  }
  for (float x : in.beta_raw) in.beta.push_back(1.f / (1.f + std::exp(-x)));
  return in;
}

std::vector<float> RandomState(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<float> s(n);
  for (float& x : s) x = normal(rng);
  return s;
}

// ---------------------------------------------------------------------------
// Errors.

void ExpectClose(const std::string& label, const std::vector<float>& got,
                 const std::vector<float>& want, double tolerance) {
  op_test::ExpectCloseL2("[kda]", label, got, want, tolerance);
}

// ---------------------------------------------------------------------------
// CPU reference.

cpu::KdaArgs CpuArgs(const Inputs& in, int64_t r0, int64_t len, float* state, float* out) {
  const Dims& d = in.dims;
  cpu::KdaArgs a;
  a.num_tokens = len;
  a.num_heads = d.heads;
  a.key_dim = d.dk;
  a.value_dim = d.dv;
  a.q = in.q.data() + r0 * d.heads * d.dk;
  a.k = in.k.data() + r0 * d.heads * d.dk;
  a.v = in.v.data() + r0 * d.heads * d.dv;
  a.g = in.g.data() + r0 * d.heads * d.dk;
  a.beta = in.beta.data() + r0 * d.heads;
  a.state = state;
  a.out = out;
  return a;
}

// Rows [r0, r0 + len) through cpu::KdaChunked; returns out [len, H, dv].
std::vector<float> CpuChunked(const Inputs& in, int64_t r0, int64_t len, std::vector<float>* state) {
  ThreadPool* pool = ThreadPool::Default();
  const Dims& d = in.dims;
  std::vector<float> out(len * d.heads * d.dv);
  const size_t bytes =
      cpu::KdaChunkedWorkspaceBytes(len, d.heads, d.dk, d.dv, pool->num_threads());
  std::vector<char> ws(bytes + 64);
  void* aligned = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  const Status st =
      cpu::KdaChunked(CpuArgs(in, r0, len, state->data(), out.data()), aligned, bytes, pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Rows [r0, r0 + len) of one sequence through cpu::KdaRecurrent; returns out
// [len, H, dv].
std::vector<float> CpuRecurrent(const Inputs& in, int64_t r0, int64_t len, std::vector<float>* state) {
  const Dims& d = in.dims;
  std::vector<float> out(len * d.heads * d.dv);
  const Status st = cpu::KdaRecurrent(CpuArgs(in, r0, len, state->data(), out.data()), nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// One token (row r) of one sequence through cpu::KdaRecurrent.
std::vector<float> CpuRecurrentRow(const Inputs& in, int64_t r, float* state) {
  const Dims& d = in.dims;
  std::vector<float> out(d.heads * d.dv);
  const Status st = cpu::KdaRecurrent(CpuArgs(in, r, 1, state, out.data()), nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// ---------------------------------------------------------------------------
// Device side.

// All inputs of `in` on the device. With `fused`, q, k and v live in one
// [rows, 3·H·dk] buffer (the conv output layout) and need dk = dv.
struct DeviceInputs {
  DeviceInputs(const Inputs& in, const HeadParams& hp, bool fused)
      : dims(in.dims),
        fused(fused),
        qkv(fused ? in.rows * 3 * in.dims.heads * in.dims.dk : 0),
        q(fused ? 0 : in.q.size()),
        k(fused ? 0 : in.k.size()),
        v(fused ? 0 : in.v.size()),
        g_f32(in.g_type == ActType::kF32 ? in.g_raw.size() : 0),
        g_bf16(in.g_type == ActType::kBf16 ? in.g_raw.size() : 0),
        beta(in.beta_raw.size()),
        neg_exp_a(hp.neg_exp_a.size()),
        dt_bias(hp.dt_bias.size()),
        g_type(in.g_type) {
    bool ok = true;
    if (fused) {
      const int64_t w = dims.heads * dims.dk;
      std::vector<float> packed(in.rows * 3 * w);
      for (int64_t r = 0; r < in.rows; ++r) {
        std::copy_n(in.q.begin() + r * w, w, packed.begin() + r * 3 * w);
        std::copy_n(in.k.begin() + r * w, w, packed.begin() + r * 3 * w + w);
        std::copy_n(in.v.begin() + r * w, w, packed.begin() + r * 3 * w + 2 * w);
      }
      ok &= qkv.Upload(ToBf16(packed));
    } else {
      ok &= q.Upload(ToBf16(in.q)) && k.Upload(ToBf16(in.k)) && v.Upload(ToBf16(in.v));
    }
    if (g_type == ActType::kF32) {
      ok &= g_f32.Upload(in.g_raw);
    } else {
      ok &= g_bf16.Upload(ToBf16(in.g_raw));
    }
    ok &= beta.Upload(in.beta_raw) && neg_exp_a.Upload(hp.neg_exp_a) && dt_bias.Upload(hp.dt_bias);
    uploaded = ok;
  }

  int64_t ld() const { return fused ? 3 * dims.heads * dims.dk : 0; }
  const bf16* QRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() : q.get() + r * dims.heads * dims.dk;
  }
  const bf16* KRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() + dims.heads * dims.dk : k.get() + r * dims.heads * dims.dk;
  }
  const bf16* VRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() + 2 * dims.heads * dims.dk
                 : v.get() + r * dims.heads * dims.dv;
  }
  KdaGates GatesFrom(int64_t r) const {
    KdaGates g;
    g.g_type = g_type;
    g.g_raw = g_type == ActType::kF32
                  ? static_cast<const void*>(g_f32.get() + r * dims.heads * dims.dk)
                  : static_cast<const void*>(g_bf16.get() + r * dims.heads * dims.dk);
    g.beta_raw = beta.get() + r * dims.heads;
    g.beta_type = ActType::kF32;
    g.neg_exp_a = neg_exp_a.get();
    g.dt_bias = dt_bias.get();
    return g;
  }

  Dims dims;
  bool fused;
  DeviceArray<bf16> qkv, q, k, v;
  DeviceArray<float> g_f32;
  DeviceArray<bf16> g_bf16;
  DeviceArray<float> beta, neg_exp_a, dt_bias;
  ActType g_type;
  bool uploaded = false;
};

KdaShape ShapeOf(const Dims& d) {
  KdaShape s;
  s.num_heads = d.heads;
  s.key_dim = d.dk;
  s.value_dim = d.dv;
  return s;
}

std::vector<float> DownloadOut(const DeviceArray<float>& out_f32, const DeviceArray<bf16>& out_bf16,
                               ActType type, size_t n) {
  return type == ActType::kF32 ? out_f32.Download(n) : ToFloat(out_bf16.Download(n));
}

// Rows [r0, r0 + len) through KdaPrefill continuing the device `state`;
// returns out as fp32.
// With `recurrent`, the batch-invariant path, given no workspace (it needs none).
std::vector<float> GpuPrefill(const DeviceInputs& dev, int64_t r0, int64_t len, float* state,
                              ActType out_type, Status* status, bool recurrent = false) {
  const Dims& d = dev.dims;
  const size_t n_out = len * d.heads * d.dv;
  DeviceArray<float> out_f32(out_type == ActType::kF32 ? n_out : 0);
  DeviceArray<bf16> out_bf16(out_type == ActType::kBf16 ? n_out : 0);
  KdaPrefillArgs a;
  a.shape = ShapeOf(d);
  a.num_tokens = len;
  a.q = dev.QRow(r0);
  a.k = dev.KRow(r0);
  a.v = dev.VRow(r0);
  a.ld_qkv = dev.ld();
  a.gates = dev.GatesFrom(r0);
  a.state = state;
  a.out_type = out_type;
  a.out = out_type == ActType::kF32 ? static_cast<void*>(out_f32.get())
                                    : static_cast<void*>(out_bf16.get());
  a.recurrent = recurrent;
  const size_t ws_bytes = recurrent ? 0 : KdaPrefillWorkspaceBytes(a.shape, len);
  DeviceArray<char> ws(ws_bytes);
  *status = KdaPrefill(a, recurrent ? nullptr : ws.get(), ws_bytes, nullptr);
  if (status->ok() && cudaDeviceSynchronize() != cudaSuccess) {
    *status = absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  }
  if (!status->ok()) return {};
  return DownloadOut(out_f32, out_bf16, out_type, n_out);
}

// ---------------------------------------------------------------------------
// Prefill against cpu::KdaChunked.

struct PrefillCase {
  Dims dims;
  int64_t tokens;
  bool fused = false;
  ActType g_type = ActType::kF32;
  ActType out_type = ActType::kBf16;
  GateDraw draw = GateDraw::kNormal;
};

std::string PrefillName(const ::testing::TestParamInfo<PrefillCase>& info) {
  const PrefillCase& c = info.param;
  return absl::StrCat(DimsName(c.dims), "_T", c.tokens, c.fused ? "_fused" : "",
                      c.g_type == ActType::kBf16 ? "_gbf16" : "",
                      c.out_type == ActType::kF32 ? "_outf32" : "",
                      c.draw == GateDraw::kStrong ? "_strong" : "");
}

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << PrefillName({c, 0}); }

class KdaPrefillTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(KdaPrefillTest, MatchesCpuChunkedFromRandomState) {
  const PrefillCase& c = GetParam();
  std::mt19937 rng(1234 + static_cast<uint32_t>(c.tokens * 7 + c.dims.dk));
  const HeadParams hp = MakeHeadParams(c.dims, rng);
  const Inputs in = MakeInputs(c.tokens, c.dims, hp, c.g_type, rng, c.draw);
  const size_t n_state = c.dims.heads * c.dims.dk * c.dims.dv;
  std::vector<float> state = RandomState(n_state, rng);

  DeviceInputs dev(in, hp, c.fused);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_state(n_state);
  ASSERT_TRUE(d_state.Upload(state));
  Status st;
  const std::vector<float> got = GpuPrefill(dev, 0, c.tokens, d_state.get(), c.out_type, &st);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> got_state = d_state.Download(n_state);

  const std::vector<float> want = CpuChunked(in, 0, c.tokens, &state);
  const std::string name = PrefillName({c, 0});
  ExpectClose(name + " out", got, want, kBf16Tolerance);
  ExpectClose(name + " state", got_state, state, kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaPrefillTest,
    ::testing::Values(PrefillCase{{3, 48, 48}, 150}, PrefillCase{{5, 32, 32}, 201},
                      PrefillCase{{4, 24, 24}, 97}, PrefillCase{{3, 48, 48}, 1},
                      PrefillCase{{4, 128, 128}, 1},
                      PrefillCase{{5, 32, 32}, 201, false, ActType::kBf16, ActType::kF32},
                      PrefillCase{{4, 64, 40}, 130}, PrefillCase{{3, 40, 128}, 77},
                      PrefillCase{{3, 48, 48}, 150, false, ActType::kF32, ActType::kBf16,
                                  GateDraw::kStrong},
                      PrefillCase{{32, 128, 128}, 300, true, ActType::kF32, ActType::kBf16,
                                  GateDraw::kStrong},
                      PrefillCase{{32, 128, 128}, 1000, true},
                      PrefillCase{{32, 128, 128}, 4096, true, ActType::kBf16},
                      // Production shape at lengths around the 64-token chunk,
                      // and one pass boundary plus a 3-token tail (4099).
                      PrefillCase{{32, 128, 128}, 1, true}, PrefillCase{{32, 128, 128}, 63, true},
                      PrefillCase{{32, 128, 128}, 65, true},
                      PrefillCase{{32, 128, 128}, 200, true, ActType::kBf16, ActType::kF32},
                      PrefillCase{{32, 128, 128}, 4099, true, ActType::kBf16}),
    PrefillName);

// The prefill paths (the default bf16 one and the reference, kda.prefill=tf32)
// against the CPU from a random state, and against each other.
class KdaPrefillPathsTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(KdaPrefillPathsTest, AllPathsMatchCpuAndEachOther) {
  const PrefillCase& c = GetParam();
  std::mt19937 rng(4321 + static_cast<uint32_t>(c.tokens * 3 + c.dims.dv));
  const HeadParams hp = MakeHeadParams(c.dims, rng);
  const Inputs in = MakeInputs(c.tokens, c.dims, hp, c.g_type, rng, c.draw);
  const size_t n_state = c.dims.heads * c.dims.dk * c.dims.dv;
  const std::vector<float> state0 = RandomState(n_state, rng);
  std::vector<float> state = state0;
  const std::vector<float> want = CpuChunked(in, 0, c.tokens, &state);

  DeviceInputs dev(in, hp, c.fused);
  ASSERT_TRUE(dev.uploaded);
  constexpr int kPaths = 2;
  std::vector<float> outs[kPaths], states[kPaths];
  const char* paths[kPaths] = {"kda.prefill=bf16", "kda.prefill=tf32"};
  for (int i = 0; i < kPaths; ++i) {
    const tuning::ScopedOptions path(paths[i]);
    ASSERT_TRUE(path.status().ok()) << path.status();
    DeviceArray<float> d_state(n_state);
    ASSERT_TRUE(d_state.Upload(state0));
    Status st;
    outs[i] = GpuPrefill(dev, 0, c.tokens, d_state.get(), c.out_type, &st);
    ASSERT_TRUE(st.ok()) << st;
    states[i] = d_state.Download(n_state);
    const std::string name = absl::StrCat(PrefillName({c, 0}), " ", paths[i]);
    ExpectClose(name + " out", outs[i], want, kBf16Tolerance);
    ExpectClose(name + " state", states[i], state, kBf16Tolerance);
  }
  for (int i = 1; i < kPaths; ++i) {
    const std::string name = absl::StrCat(PrefillName({c, 0}), " default vs ", paths[i]);
    ExpectClose(name + " out", outs[0], outs[i], kBf16Tolerance);
    ExpectClose(name + " state", states[0], states[i], kBf16Tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaPrefillPathsTest,
    ::testing::Values(PrefillCase{{4, 24, 24}, 97}, PrefillCase{{3, 40, 128}, 77},
                      PrefillCase{{32, 128, 128}, 65, true},
                      PrefillCase{{32, 128, 128}, 300, true, ActType::kF32, ActType::kBf16,
                                  GateDraw::kStrong},
                      PrefillCase{{32, 128, 128}, 2113, true, ActType::kBf16, ActType::kF32}),
    PrefillName);

// A random initial state carried through calls of 1, 63, 65, 200 and 4099
// tokens (so the GPU's chunk boundaries fall mid-chunk of the reference's):
// the outputs and the final state match one CPU call over all 4428 rows.
TEST(KdaOddLengthsTest, CallsOfOddLengthsContinueARandomState) {
  const Dims d{32, 128, 128};
  std::mt19937 rng(2024);
  const HeadParams hp = MakeHeadParams(d, rng);
  const int64_t lengths[] = {1, 63, 65, 200, 4099};
  int64_t total = 0;
  for (int64_t len : lengths) total += len;
  const Inputs in = MakeInputs(total, d, hp, ActType::kBf16, rng);
  const size_t n_state = d.heads * d.dk * d.dv;
  std::vector<float> state = RandomState(n_state, rng);

  DeviceInputs dev(in, hp, /*fused=*/true);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_state(n_state);
  ASSERT_TRUE(d_state.Upload(state));
  std::vector<float> got;
  int64_t r0 = 0;
  for (int64_t len : lengths) {
    Status st;
    const std::vector<float> part = GpuPrefill(dev, r0, len, d_state.get(), ActType::kBf16, &st);
    ASSERT_TRUE(st.ok()) << st << " at row " << r0;
    got.insert(got.end(), part.begin(), part.end());
    r0 += len;
  }
  const std::vector<float> want = CpuChunked(in, 0, total, &state);
  ExpectClose("H32_dk128_dv128 1+63+65+200+4099 out", got, want, kBf16Tolerance);
  ExpectClose("H32_dk128_dv128 1+63+65+200+4099 state", d_state.Download(n_state), state,
              kBf16Tolerance);
}

// Two calls (130 then 71 tokens) continue the state exactly like one call.
class KdaContinuationTest : public ::testing::TestWithParam<Dims> {};

TEST_P(KdaContinuationTest, TwoPrefillsMatchOneCpuCall) {
  const Dims d = GetParam();
  std::mt19937 rng(99);
  const HeadParams hp = MakeHeadParams(d, rng);
  const int64_t first = 130, second = 71;
  const Inputs in = MakeInputs(first + second, d, hp, ActType::kF32, rng);
  const size_t n_state = d.heads * d.dk * d.dv;
  std::vector<float> state(n_state, 0.f);

  DeviceInputs dev(in, hp, /*fused=*/d.dk == d.dv);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_state(n_state);
  ASSERT_TRUE(d_state.Upload(state));
  Status st;
  std::vector<float> got = GpuPrefill(dev, 0, first, d_state.get(), ActType::kF32, &st);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> got_first_state = d_state.Download(n_state);
  const std::vector<float> got2 = GpuPrefill(dev, first, second, d_state.get(), ActType::kF32, &st);
  ASSERT_TRUE(st.ok()) << st;
  got.insert(got.end(), got2.begin(), got2.end());
  const std::vector<float> got_state = d_state.Download(n_state);

  std::vector<float> mid_state(n_state, 0.f);
  CpuChunked(in, 0, first, &mid_state);
  const std::vector<float> want = CpuChunked(in, 0, first + second, &state);
  ExpectClose(DimsName(d) + " 130+71 out", got, want, kBf16Tolerance);
  ExpectClose(DimsName(d) + " state after 130", got_first_state, mid_state, kBf16Tolerance);
  ExpectClose(DimsName(d) + " state after 130+71", got_state, state, kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdaContinuationTest,
                         ::testing::Values(Dims{4, 48, 48}, Dims{5, 32, 32}, Dims{32, 128, 128}),
                         [](const ::testing::TestParamInfo<Dims>& i) { return DimsName(i.param); });

// ---------------------------------------------------------------------------
// Decode against cpu::KdaRecurrent.

struct DecodeCase {
  Dims dims;
  int64_t batch;
  ActType out_type = ActType::kF32;
};

std::string DecodeName(const ::testing::TestParamInfo<DecodeCase>& info) {
  return absl::StrCat(DimsName(info.param.dims), "_B", info.param.batch,
                      info.param.out_type == ActType::kBf16 ? "_outbf16" : "");
}

// A state pool with more slots than rows; row b uses slot SlotOf(b), so rows
// land out of order and some slots are never touched.
int32_t SlotOf(int64_t b, int64_t batch) { return static_cast<int32_t>(batch - b); }

// Runs `steps` decode steps for `batch` rows on the device (pool slots
// SlotOf) and on the CPU (per-row states), comparing every step's output and
// the final pool (untouched slots must stay bit-identical).
void CheckDecodeSteps(const DecodeCase& c, int steps, std::mt19937& rng) {
  const Dims& d = c.dims;
  const HeadParams hp = MakeHeadParams(d, rng);
  const int64_t n_slots = c.batch + 2;
  const size_t slot_elems = d.heads * d.dk * d.dv;
  std::vector<float> pool = RandomState(n_slots * slot_elems, rng);
  std::vector<int32_t> slots;
  for (int64_t b = 0; b < c.batch; ++b) slots.push_back(SlotOf(b, c.batch));

  DeviceArray<float> d_pool(pool.size());
  ASSERT_TRUE(d_pool.Upload(pool));
  DeviceArray<int32_t> d_slots(slots.size());
  ASSERT_TRUE(d_slots.Upload(slots));
  const double tol = c.out_type == ActType::kF32 ? kF32Tolerance : kBf16Tolerance;

  for (int step = 0; step < steps; ++step) {
    const Inputs in = MakeInputs(c.batch, d, hp, ActType::kF32, rng);
    DeviceInputs dev(in, hp, /*fused=*/false);
    ASSERT_TRUE(dev.uploaded);
    const size_t n_out = c.batch * d.heads * d.dv;
    DeviceArray<float> out_f32(n_out);
    DeviceArray<bf16> out_bf16(n_out);
    KdaDecodeArgs a;
    a.shape = ShapeOf(d);
    a.batch = c.batch;
    a.q = dev.QRow(0);
    a.k = dev.KRow(0);
    a.v = dev.VRow(0);
    a.gates = dev.GatesFrom(0);
    a.state_pool = d_pool.get();
    a.slots = d_slots.get();
    a.out_type = c.out_type;
    a.out = c.out_type == ActType::kF32 ? static_cast<void*>(out_f32.get())
                                        : static_cast<void*>(out_bf16.get());
    const Status st = KdaDecode(a, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = DownloadOut(out_f32, out_bf16, c.out_type, n_out);

    // Row b of the batch is a one-token sequence whose state is its slot.
    std::vector<float> want;
    for (int64_t b = 0; b < c.batch; ++b) {
      const std::vector<float> o = CpuRecurrentRow(in, b, pool.data() + slots[b] * slot_elems);
      want.insert(want.end(), o.begin(), o.end());
    }
    ExpectClose(absl::StrCat(DecodeName({c, 0}), " step ", step, " out"), got, want, tol);
  }
  const std::vector<float> got_pool = d_pool.Download(pool.size());
  ASSERT_EQ(got_pool.size(), pool.size());
  for (int64_t b = 0; b < c.batch; ++b) {
    const size_t off = slots[b] * slot_elems;
    ExpectClose(absl::StrCat(DecodeName({c, 0}), " state of row ", b),
                std::vector<float>(got_pool.begin() + off, got_pool.begin() + off + slot_elems),
                std::vector<float>(pool.begin() + off, pool.begin() + off + slot_elems),
                kF32Tolerance);
  }
  // Slot 0 and the last slot are not in the batch.
  for (int64_t s : {int64_t{0}, n_slots - 1}) {
    EXPECT_TRUE(std::equal(pool.begin() + s * slot_elems, pool.begin() + (s + 1) * slot_elems,
                           got_pool.begin() + s * slot_elems))
        << "slot " << s << " changed";
  }
}

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << DecodeName({c, 0}); }

class KdaDecodeTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(KdaDecodeTest, MatchesCpuRecurrentOverThreeSteps) {
  std::mt19937 rng(4321 + static_cast<uint32_t>(GetParam().batch));
  CheckDecodeSteps(GetParam(), 3, rng);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaDecodeTest,
    ::testing::Values(DecodeCase{{32, 128, 128}, 1}, DecodeCase{{32, 128, 128}, 64},
                      DecodeCase{{32, 128, 128}, 3, ActType::kBf16},
                      DecodeCase{{4, 128, 96}, 3},   // fast kernel, 3 column slices
                      DecodeCase{{4, 128, 72}, 2},   // dv not a multiple of 32: generic
                      DecodeCase{{5, 32, 32}, 3}, DecodeCase{{3, 24, 24}, 2},
                      DecodeCase{{4, 48, 48}, 5}, DecodeCase{{3, 40, 56}, 4}),
    DecodeName);

// ---------------------------------------------------------------------------
// Prefill then decode: three sequences of different lengths prefilled into
// slots 2, 0, 3 of a pool of 4 from different random states, then five decode
// steps with the batch rows in that slot order.

class KdaPrefillThenDecodeTest : public ::testing::TestWithParam<Dims> {};

TEST_P(KdaPrefillThenDecodeTest, ThreeSlotsFiveSteps) {
  const Dims d = GetParam();
  std::mt19937 rng(777);
  const HeadParams hp = MakeHeadParams(d, rng);
  const size_t slot_elems = d.heads * d.dk * d.dv;
  const std::vector<int32_t> slots = {2, 0, 3};
  const std::vector<int64_t> lengths = {37, 130, 64};
  std::vector<float> pool = RandomState(4 * slot_elems, rng);

  DeviceArray<float> d_pool(pool.size());
  ASSERT_TRUE(d_pool.Upload(pool));
  DeviceArray<int32_t> d_slots(slots.size());
  ASSERT_TRUE(d_slots.Upload(slots));

  for (size_t b = 0; b < slots.size(); ++b) {
    const Inputs in = MakeInputs(lengths[b], d, hp, ActType::kF32, rng);
    DeviceInputs dev(in, hp, /*fused=*/d.dk == d.dv);
    ASSERT_TRUE(dev.uploaded);
    Status st;
    const std::vector<float> got =
        GpuPrefill(dev, 0, lengths[b], d_pool.get() + slots[b] * slot_elems, ActType::kBf16, &st);
    ASSERT_TRUE(st.ok()) << st;
    std::vector<float> state(pool.begin() + slots[b] * slot_elems,
                             pool.begin() + (slots[b] + 1) * slot_elems);
    const std::vector<float> want = CpuChunked(in, 0, lengths[b], &state);
    std::copy(state.begin(), state.end(), pool.begin() + slots[b] * slot_elems);
    ExpectClose(absl::StrCat(DimsName(d), " prefill seq ", b, " (T=", lengths[b], ") out"), got,
                want, kBf16Tolerance);
  }

  const int64_t batch = static_cast<int64_t>(slots.size());
  for (int step = 0; step < 5; ++step) {
    const Inputs in = MakeInputs(batch, d, hp, ActType::kF32, rng);
    DeviceInputs dev(in, hp, /*fused=*/d.dk == d.dv);
    ASSERT_TRUE(dev.uploaded);
    const size_t n_out = batch * d.heads * d.dv;
    DeviceArray<bf16> out(n_out);
    KdaDecodeArgs a;
    a.shape = ShapeOf(d);
    a.batch = batch;
    a.q = dev.QRow(0);
    a.k = dev.KRow(0);
    a.v = dev.VRow(0);
    a.ld_qkv = dev.ld();
    a.gates = dev.GatesFrom(0);
    a.state_pool = d_pool.get();
    a.slots = d_slots.get();
    a.out = out.get();
    const Status st = KdaDecode(a, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<float> want;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<float> o = CpuRecurrentRow(in, b, pool.data() + slots[b] * slot_elems);
      want.insert(want.end(), o.begin(), o.end());
    }
    ExpectClose(absl::StrCat(DimsName(d), " decode step ", step, " out"),
                ToFloat(out.Download(n_out)), want, kBf16Tolerance);
  }
  const std::vector<float> got_pool = d_pool.Download(pool.size());
  for (int32_t s : slots) {
    ExpectClose(absl::StrCat(DimsName(d), " final state of slot ", s),
                std::vector<float>(got_pool.begin() + s * slot_elems,
                                   got_pool.begin() + (s + 1) * slot_elems),
                std::vector<float>(pool.begin() + s * slot_elems, pool.begin() + (s + 1) * slot_elems),
                kBf16Tolerance);
  }
  EXPECT_TRUE(std::equal(pool.begin() + slot_elems, pool.begin() + 2 * slot_elems,
                         got_pool.begin() + slot_elems))
      << "slot 1 is not in the batch and must not change";
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdaPrefillThenDecodeTest,
                         ::testing::Values(Dims{4, 48, 48}, Dims{32, 128, 128}),
                         [](const ::testing::TestParamInfo<Dims>& i) { return DimsName(i.param); });

// ---------------------------------------------------------------------------
// A decode step captured in a CUDA graph replays exactly like eager launches
// (the op enqueues on its stream only and allocates nothing).

TEST(KdaDecodeGraph, ReplayMatchesEagerSteps) {
  const Dims d{32, 128, 128};
  const int64_t batch = 4;
  std::mt19937 rng(55);
  const HeadParams hp = MakeHeadParams(d, rng);
  const Inputs in = MakeInputs(batch, d, hp, ActType::kF32, rng);
  DeviceInputs dev(in, hp, /*fused=*/true);
  ASSERT_TRUE(dev.uploaded);
  const size_t slot_elems = d.heads * d.dk * d.dv;
  const std::vector<float> pool = RandomState(batch * slot_elems, rng);
  const std::vector<int32_t> slots = {1, 3, 0, 2};
  DeviceArray<float> pool_eager(pool.size()), pool_graph(pool.size());
  ASSERT_TRUE(pool_eager.Upload(pool));
  ASSERT_TRUE(pool_graph.Upload(pool));
  DeviceArray<int32_t> d_slots(slots.size());
  ASSERT_TRUE(d_slots.Upload(slots));
  const size_t n_out = batch * d.heads * d.dv;
  DeviceArray<float> out_eager(n_out), out_graph(n_out);

  KdaDecodeArgs a;
  a.shape = ShapeOf(d);
  a.batch = batch;
  a.q = dev.QRow(0);
  a.k = dev.KRow(0);
  a.v = dev.VRow(0);
  a.ld_qkv = dev.ld();
  a.gates = dev.GatesFrom(0);
  a.slots = d_slots.get();
  a.out_type = ActType::kF32;

  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  a.state_pool = pool_eager.get();
  a.out = out_eager.get();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(KdaDecode(a, stream).ok());

  a.state_pool = pool_graph.get();
  a.out = out_graph.get();
  cudaGraph_t graph;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status captured = KdaDecode(a, stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));

  EXPECT_EQ(out_eager.Download(n_out), out_graph.Download(n_out));
  EXPECT_EQ(pool_eager.Download(pool.size()), pool_graph.Download(pool.size()));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---------------------------------------------------------------------------
// Recurrent (batch-invariant) prefill, KdaPrefillArgs::recurrent: the bits of
// the outputs and of the final state must not depend on how [0, T) is split
// into calls, nor on whether the tail runs as decode steps (alone or in a
// batch with other sequences); and it must still compute KDA (tolerance
// against the CPU and the chunked path).

struct InvariantCase {
  Dims dims;
  bool fused = false;
  ActType g_type = ActType::kF32;
  ActType out_type = ActType::kBf16;
};

std::string InvariantName(const ::testing::TestParamInfo<InvariantCase>& info) {
  const InvariantCase& c = info.param;
  return absl::StrCat(DimsName(c.dims), c.fused ? "_fused" : "",
                      c.g_type == ActType::kBf16 ? "_gbf16" : "",
                      c.out_type == ActType::kF32 ? "_outf32" : "");
}

void PrintTo(const InvariantCase& c, std::ostream* os) { *os << InvariantName({c, 0}); }

constexpr int64_t kInvariantLengths[] = {1, 7, 64, 97, 203, 300};

struct PrefillResult {
  std::vector<float> out;    // [T, H, dv]
  std::vector<float> state;  // [H, dk, dv]
};

// Recurrent prefill of rows [0, cuts.back()) from `state0`, one call per
// [cuts[i], cuts[i+1]).
PrefillResult RecurrentInCalls(const DeviceInputs& dev, const std::vector<float>& state0,
                               const std::vector<int64_t>& cuts, ActType out_type) {
  PrefillResult r;
  DeviceArray<float> d_state(state0.size());
  EXPECT_TRUE(d_state.Upload(state0));
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Status st;
    const std::vector<float> part =
        GpuPrefill(dev, cuts[i], cuts[i + 1] - cuts[i], d_state.get(), out_type, &st, true);
    EXPECT_TRUE(st.ok()) << st << " in the call at row " << cuts[i];
    if (!st.ok()) return {};
    r.out.insert(r.out.end(), part.begin(), part.end());
  }
  r.state = d_state.Download(state0.size());
  return r;
}

// Cut points 0 < ... < T: the given interior ones that fall inside.
std::vector<int64_t> Cuts(int64_t T, std::vector<int64_t> interior) {
  std::vector<int64_t> cuts = {0};
  for (int64_t c : interior) {
    if (c > 0 && c < T) cuts.push_back(c);
  }
  cuts.push_back(T);
  return cuts;
}

class KdaRecurrentPrefillTest : public ::testing::TestWithParam<InvariantCase> {};

TEST_P(KdaRecurrentPrefillTest, SplitsIntoCallsGiveIdenticalBits) {
  const InvariantCase& c = GetParam();
  for (int64_t T : kInvariantLengths) {
    SCOPED_TRACE(absl::StrCat("T = ", T));
    std::mt19937 rng(31 + static_cast<uint32_t>(T * 5 + c.dims.dv));
    const HeadParams hp = MakeHeadParams(c.dims, rng);
    const Inputs in = MakeInputs(T, c.dims, hp, c.g_type, rng);
    const std::vector<float> state0 =
        RandomState(c.dims.heads * c.dims.dk * c.dims.dv, rng);
    DeviceInputs dev(in, hp, c.fused);
    ASSERT_TRUE(dev.uploaded);

    const PrefillResult one = RecurrentInCalls(dev, state0, Cuts(T, {}), c.out_type);
    const PrefillResult three = RecurrentInCalls(dev, state0, Cuts(T, {97, 203}), c.out_type);
    std::vector<int64_t> every(T - 1);
    for (int64_t i = 1; i < T; ++i) every[i - 1] = i;
    const PrefillResult singles = RecurrentInCalls(dev, state0, Cuts(T, every), c.out_type);
    // Cuts off the 64-token grid and at it.
    const PrefillResult odd = RecurrentInCalls(dev, state0, Cuts(T, {1, 3, 64, 65, 130}), c.out_type);

    const std::string name = absl::StrCat(InvariantName({c, 0}), " T=", T);
    ExpectSameBits(name + " out, 0|97|203 vs one call", three.out, one.out);
    ExpectSameBits(name + " state, 0|97|203 vs one call", three.state, one.state);
    ExpectSameBits(name + " out, one token a call vs one call", singles.out, one.out);
    ExpectSameBits(name + " state, one token a call vs one call", singles.state, one.state);
    ExpectSameBits(name + " out, 0|1|3|64|65|130 vs one call", odd.out, one.out);
    ExpectSameBits(name + " state, 0|1|3|64|65|130 vs one call", odd.state, one.state);
    // The state moved: a kernel that skipped the update would pass the above.
    EXPECT_NE(std::memcmp(one.state.data(), state0.data(), state0.size() * sizeof(float)), 0)
        << name;
  }
}

// Rows [0, rows) of `base` with row `row` replaced by row `src_row` of `src`
// (the device-visible inputs only: q, k, v, g_raw, beta_raw).
Inputs WithRow(Inputs base, int64_t row, const Inputs& src, int64_t src_row) {
  const Dims& d = base.dims;
  const int64_t nk = d.heads * d.dk, nv = d.heads * d.dv;
  std::copy_n(src.q.begin() + src_row * nk, nk, base.q.begin() + row * nk);
  std::copy_n(src.k.begin() + src_row * nk, nk, base.k.begin() + row * nk);
  std::copy_n(src.g_raw.begin() + src_row * nk, nk, base.g_raw.begin() + row * nk);
  std::copy_n(src.v.begin() + src_row * nv, nv, base.v.begin() + row * nv);
  std::copy_n(src.beta_raw.begin() + src_row * d.heads, d.heads,
              base.beta_raw.begin() + row * d.heads);
  return base;
}

TEST_P(KdaRecurrentPrefillTest, PrefillThenDecodeGivesIdenticalBits) {
  const InvariantCase& c = GetParam();
  const Dims& d = c.dims;
  const int64_t n_state = d.heads * d.dk * d.dv;
  const int64_t n_row = d.heads * d.dv;
  for (int64_t T : kInvariantLengths) {
    SCOPED_TRACE(absl::StrCat("T = ", T));
    std::mt19937 rng(57 + static_cast<uint32_t>(T * 3 + d.dk));
    const HeadParams hp = MakeHeadParams(d, rng);
    const Inputs in = MakeInputs(T, d, hp, c.g_type, rng);
    const std::vector<float> state0 = RandomState(n_state, rng);
    DeviceInputs dev(in, hp, c.fused);
    ASSERT_TRUE(dev.uploaded);
    const PrefillResult want = RecurrentInCalls(dev, state0, Cuts(T, {}), c.out_type);
    ASSERT_EQ(want.out.size(), static_cast<size_t>(T * n_row));
    const int64_t p = T / 3;  // 0 for T = 1: decode only
    const std::string name = absl::StrCat(InvariantName({c, 0}), " T=", T, " p=", p);

    // Batch 1 (the sequence alone), then batch 5 with the sequence in row 2
    // (slot 4) of a pool of 7 random states and the other rows' tokens random.
    for (const int64_t batch : {int64_t{1}, int64_t{5}}) {
      const std::vector<int32_t> slots =
          batch == 1 ? std::vector<int32_t>{0} : std::vector<int32_t>{2, 6, 4, 0, 5};
      const int64_t row = batch == 1 ? 0 : 2;
      const int64_t n_slots = batch == 1 ? 1 : 7;
      std::vector<float> pool = RandomState(n_slots * n_state, rng);
      std::copy(state0.begin(), state0.end(), pool.begin() + slots[row] * n_state);
      DeviceArray<float> d_pool(pool.size());
      ASSERT_TRUE(d_pool.Upload(pool));
      DeviceArray<int32_t> d_slots(slots.size());
      ASSERT_TRUE(d_slots.Upload(slots));
      float* seq_state = d_pool.get() + slots[row] * n_state;

      std::vector<float> got;
      if (p > 0) {
        Status st;
        got = GpuPrefill(dev, 0, p, seq_state, c.out_type, &st, true);
        ASSERT_TRUE(st.ok()) << st;
      }
      const size_t n_out = batch * n_row;
      DeviceArray<float> out_f32(n_out);
      DeviceArray<bf16> out_bf16(n_out);
      for (int64_t t = p; t < T; ++t) {
        const Inputs step =
            WithRow(MakeInputs(batch, d, hp, c.g_type, rng), row, in, t);
        DeviceInputs step_dev(step, hp, c.fused);
        ASSERT_TRUE(step_dev.uploaded);
        KdaDecodeArgs a;
        a.shape = ShapeOf(d);
        a.batch = batch;
        a.q = step_dev.QRow(0);
        a.k = step_dev.KRow(0);
        a.v = step_dev.VRow(0);
        a.ld_qkv = step_dev.ld();
        a.gates = step_dev.GatesFrom(0);
        a.state_pool = d_pool.get();
        a.slots = d_slots.get();
        a.out_type = c.out_type;
        a.out = c.out_type == ActType::kF32 ? static_cast<void*>(out_f32.get())
                                            : static_cast<void*>(out_bf16.get());
        const Status st = KdaDecode(a, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_CUDA(cudaDeviceSynchronize());
        const std::vector<float> o = DownloadOut(out_f32, out_bf16, c.out_type, n_out);
        ASSERT_EQ(o.size(), n_out);
        got.insert(got.end(), o.begin() + row * n_row, o.begin() + (row + 1) * n_row);
      }
      const std::vector<float> got_pool = d_pool.Download(pool.size());
      ASSERT_EQ(got_pool.size(), pool.size());
      const std::string label = absl::StrCat(name, " decode batch ", batch);
      ExpectSameBits(label + " out", got, want.out);
      ExpectSameBits(label + " state",
                     std::vector<float>(got_pool.begin() + slots[row] * n_state,
                                        got_pool.begin() + (slots[row] + 1) * n_state),
                     want.state);
    }
  }
}

// Still KDA: against the CPU chunked form (as the chunked path is held), the
// CPU token recurrence with fp32 outputs (the same algorithm, so tighter),
// and the GPU's chunked path, from a random state; strong decays included.
TEST_P(KdaRecurrentPrefillTest, MatchesCpuAndChunkedPath) {
  const InvariantCase& c = GetParam();
  const Dims& d = c.dims;
  for (const GateDraw draw : {GateDraw::kNormal, GateDraw::kStrong}) {
    for (int64_t T : {int64_t{97}, int64_t{300}}) {
      SCOPED_TRACE(absl::StrCat("T = ", T, draw == GateDraw::kStrong ? " strong" : ""));
      std::mt19937 rng(91 + static_cast<uint32_t>(T + d.dv));
      const HeadParams hp = MakeHeadParams(d, rng);
      const Inputs in = MakeInputs(T, d, hp, c.g_type, rng, draw);
      const std::vector<float> state0 = RandomState(d.heads * d.dk * d.dv, rng);
      DeviceInputs dev(in, hp, c.fused);
      ASSERT_TRUE(dev.uploaded);
      const PrefillResult rec = RecurrentInCalls(dev, state0, Cuts(T, {}), c.out_type);
      ASSERT_FALSE(rec.out.empty());

      DeviceArray<float> d_state(state0.size());
      ASSERT_TRUE(d_state.Upload(state0));
      Status st;
      const std::vector<float> chunked_out =
          GpuPrefill(dev, 0, T, d_state.get(), c.out_type, &st, /*recurrent=*/false);
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<float> chunked_state = d_state.Download(state0.size());

      std::vector<float> cpu_chunked_state = state0, cpu_rec_state = state0;
      const std::vector<float> cpu_chunked = CpuChunked(in, 0, T, &cpu_chunked_state);
      const std::vector<float> cpu_rec = CpuRecurrent(in, 0, T, &cpu_rec_state);

      const std::string name = absl::StrCat(InvariantName({c, 0}), " T=", T,
                                            draw == GateDraw::kStrong ? " strong" : "", " recurrent");
      ExpectClose(name + " out vs cpu chunked", rec.out, cpu_chunked, kBf16Tolerance);
      ExpectClose(name + " state vs cpu chunked", rec.state, cpu_chunked_state, kBf16Tolerance);
      // fp32 arithmetic in the same order up to the reductions: only bf16
      // output rounding separates the two.
      ExpectClose(name + " out vs cpu recurrent", rec.out, cpu_rec,
                  c.out_type == ActType::kF32 ? 10 * kF32Tolerance : kBf16Tolerance);
      ExpectClose(name + " state vs cpu recurrent", rec.state, cpu_rec_state, 10 * kF32Tolerance);
      ExpectClose(name + " out vs gpu chunked", rec.out, chunked_out, kBf16Tolerance);
      ExpectClose(name + " state vs gpu chunked", rec.state, chunked_state, kBf16Tolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaRecurrentPrefillTest,
    ::testing::Values(
        // Production: fast variant, fused conv-output layout.
        InvariantCase{{32, 128, 128}, true},
        InvariantCase{{4, 128, 128}, false, ActType::kBf16, ActType::kF32},
        InvariantCase{{4, 128, 96}},  // fast, three column slices
        // Generic variant: dk != 128, dv not a multiple of 32, odd sizes.
        InvariantCase{{4, 64, 64}, true}, InvariantCase{{4, 128, 72}},
        InvariantCase{{3, 40, 56}, false, ActType::kBf16, ActType::kF32}),
    InvariantName);

// ---------------------------------------------------------------------------
// Argument checks (nothing is launched on bad input).

class KdaArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(buf_.get() != nullptr);
    ASSERT_CUDA(cudaMemset(buf_.get(), 0, sizeof(float) << 16));
    // Zeros: read-only inputs at the start, state and out in their own ranges,
    // so the valid baseline is a well-defined launch.
    const bf16* b16 = reinterpret_cast<const bf16*>(buf_.get());
    float* state = buf_.get() + (1 << 14);
    float* out = buf_.get() + (1 << 15);
    prefill_.shape = ShapeOf(dims_);
    prefill_.num_tokens = 10;
    prefill_.q = prefill_.k = prefill_.v = b16;
    prefill_.gates.g_raw = buf_.get();
    prefill_.gates.beta_raw = buf_.get();
    prefill_.gates.neg_exp_a = buf_.get();
    prefill_.gates.dt_bias = buf_.get();
    prefill_.state = state;
    prefill_.out = out;
    decode_.shape = ShapeOf(dims_);
    decode_.batch = 2;
    decode_.q = decode_.k = decode_.v = b16;
    decode_.gates = prefill_.gates;
    decode_.state_pool = state;
    decode_.slots = reinterpret_cast<const int32_t*>(buf_.get());  // slot 0
    decode_.out = out;
    ws_bytes_ = KdaPrefillWorkspaceBytes(prefill_.shape, prefill_.num_tokens);
  }

  Status Prefill(const KdaPrefillArgs& a) { return KdaPrefill(a, ws_.get(), ws_bytes_, nullptr); }

  void ExpectInvalid(const Status& st, const std::string& field) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(field), std::string::npos)
        << "message should name " << field << ": " << st;
  }

  Dims dims_{4, 32, 32};
  DeviceArray<float> buf_{1 << 16};
  DeviceArray<char> ws_{KdaPrefillWorkspaceBytes(ShapeOf(Dims{4, 32, 32}), 10)};
  size_t ws_bytes_ = 0;
  KdaPrefillArgs prefill_;
  KdaDecodeArgs decode_;
};

TEST_F(KdaArgsTest, PrefillRejectsBadArguments) {
  {
    KdaPrefillArgs a = prefill_;
    a.q = nullptr;
    ExpectInvalid(Prefill(a), "q");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.gates.g_raw = nullptr;
    ExpectInvalid(Prefill(a), "g_raw");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.gates.dt_bias = nullptr;
    ExpectInvalid(Prefill(a), "dt_bias");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.state = nullptr;
    ExpectInvalid(Prefill(a), "state");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.num_tokens = 0;
    ExpectInvalid(Prefill(a), "num_tokens");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.shape.key_dim = 0;
    ExpectInvalid(Prefill(a), "key_dim");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.shape.num_heads = -1;
    ExpectInvalid(Prefill(a), "num_heads");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.shape.scale = std::nanf("");
    ExpectInvalid(Prefill(a), "scale");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.ld_qkv = 4 * 32 - 1;
    ExpectInvalid(Prefill(a), "ld_qkv");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.gates.ld_g = 5;
    ExpectInvalid(Prefill(a), "ld_g");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.gates.ld_beta = 3;
    ExpectInvalid(Prefill(a), "ld_beta");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.out_type = static_cast<ActType>(7);
    ExpectInvalid(Prefill(a), "out_type");
  }
  {
    KdaPrefillArgs a = prefill_;
    a.gates.g_type = static_cast<ActType>(-1);
    ExpectInvalid(Prefill(a), "g_type");
  }
  ExpectInvalid(KdaPrefill(prefill_, ws_.get(), ws_bytes_ - 1, nullptr), "workspace_bytes");
  ExpectInvalid(KdaPrefill(prefill_, nullptr, ws_bytes_, nullptr), "workspace");
  ExpectInvalid(KdaPrefill(prefill_, ws_.get() + 4, ws_bytes_, nullptr), "aligned");
  {
    KdaPrefillArgs a = prefill_;
    a.shape.key_dim = 256;
    EXPECT_EQ(Prefill(a).code(), absl::StatusCode::kUnimplemented);
  }
  {
    // The recurrent path checks the same arguments and needs no workspace.
    KdaPrefillArgs a = prefill_;
    a.recurrent = true;
    EXPECT_TRUE(KdaPrefill(a, nullptr, 0, nullptr).ok());
    a.state = nullptr;
    ExpectInvalid(KdaPrefill(a, nullptr, 0, nullptr), "state");
    a = prefill_;
    a.recurrent = true;
    a.gates.beta_raw = nullptr;
    ExpectInvalid(KdaPrefill(a, nullptr, 0, nullptr), "beta_raw");
  }
  // The baseline is valid (the checks above failed for their own field).
  EXPECT_TRUE(Prefill(prefill_).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(KdaArgsTest, DecodeRejectsBadArguments) {
  {
    KdaDecodeArgs a = decode_;
    a.slots = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "slots");
  }
  {
    KdaDecodeArgs a = decode_;
    a.state_pool = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "state_pool");
  }
  {
    KdaDecodeArgs a = decode_;
    a.batch = 0;
    ExpectInvalid(KdaDecode(a, nullptr), "batch");
  }
  {
    KdaDecodeArgs a = decode_;
    a.k = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "k");
  }
  {
    KdaDecodeArgs a = decode_;
    a.gates.beta_raw = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "beta_raw");
  }
  {
    KdaDecodeArgs a = decode_;
    a.gates.neg_exp_a = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "neg_exp_a");
  }
  {
    KdaDecodeArgs a = decode_;
    a.out = nullptr;
    ExpectInvalid(KdaDecode(a, nullptr), "out");
  }
  {
    KdaDecodeArgs a = decode_;
    a.shape.value_dim = 129;
    EXPECT_EQ(KdaDecode(a, nullptr).code(), absl::StatusCode::kUnimplemented);
  }
  EXPECT_TRUE(KdaDecode(decode_, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(KdaWorkspace, SizedPerPassOfChunks) {
  const KdaShape prod = ShapeOf(Dims{32, 128, 128});
  const size_t one = KdaPrefillWorkspaceBytes(prod, 1);
  EXPECT_GT(one, 0u);
  EXPECT_EQ(one % 256, 0u);
  EXPECT_EQ(KdaPrefillWorkspaceBytes(prod, 64), one);
  EXPECT_EQ(KdaPrefillWorkspaceBytes(prod, 65), 2 * one);
  // Long prompts run in passes, so the workspace stops growing.
  EXPECT_EQ(KdaPrefillWorkspaceBytes(prod, 32768), KdaPrefillWorkspaceBytes(prod, 131072));
  EXPECT_EQ(KdaPrefillWorkspaceBytes(prod, 0), 0u);
  EXPECT_EQ(KdaPrefillWorkspaceBytes(ShapeOf(Dims{32, 256, 128}), 10), 0u);
}

}  // namespace
}  // namespace strata::cuda
