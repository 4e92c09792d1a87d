// Gated DeltaNet (Qwen3-Next) on the GPU: the KDA kernels with per-head gates
// (KdaGates::per_head) and more value than q/k heads (KdaShape::num_qk_heads)
// against the CPU backend (cpu::KdaChunked / cpu::KdaRecurrent with
// g_per_head, q/k repeated per value-head group on the host as qwen3_next.cc
// does). Random inputs: q, k, v ~ N(0, 1) rounded to bf16, a ~ N(0, 1),
// b ~ N(0, 1), A_log ~ U(−1, 1), dt_bias ~ N(0, 0.5); the host computes the
// gates the way the model does (g = −exp(A_log)·softplus(a + dt_bias),
// β = sigmoid(b)). q/k/v come in the conv-output layout
// [T, 2·Hk·dk + Hv·dv] and b/a in one [T, 2·Hv] buffer (strided reads), or
// packed. Lengths not multiples of 64, continuation across calls from a
// random state, decode batches over a slot pool on both decode kernels, and
// the recurrent (batch-invariant) prefill's bit-exact split/decode invariance.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kda.h"
#include "backend/cuda/kda.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DeviceArray;
using op_test::ExpectSameBits;
using op_test::RoundBf16;
using op_test::ToBf16;
using op_test::ToFloat;

constexpr double kTolerance = 1e-2;  // bf16 activations (L2-relative)

// Also: the reference is not all zeros (a GDN output that is 0 everywhere
// would match a kernel that writes nothing).
void ExpectClose(const std::string& label, const std::vector<float>& got,
                 const std::vector<float>& want, double tolerance) {
  op_test::ExpectCloseL2("[gdn]", label, got, want, tolerance);
  EXPECT_TRUE(op_test::Compare(got, want).ref_nonzero) << label << ": reference is all zeros";
}

struct GdnDims {
  int64_t hk, hv, dk, dv;
  int64_t rho() const { return hv / hk; }
  int64_t Width() const { return 2 * hk * dk + hv * dv; }  // conv output row
};

std::string DimsName(const GdnDims& d) {
  return absl::StrCat("Hk", d.hk, "_Hv", d.hv, "_dk", d.dk, "_dv", d.dv);
}

// One sequence's inputs (rows tokens), bf16-exact where the device reads bf16.
struct GdnInputs {
  GdnDims d{};
  int64_t rows = 0;
  std::vector<float> q, k;  // [rows, Hk, dk]
  std::vector<float> v;     // [rows, Hv, dv]
  std::vector<float> a, b;  // [rows, Hv] raw gate inputs
  std::vector<float> neg_exp_a, dt_bias;  // [Hv]
  // Host reference forms: q/k repeated to [rows, Hv, dk], g and β [rows, Hv].
  std::vector<float> q_rep, k_rep, g, beta;
};

GdnInputs MakeInputs(const GdnDims& d, int64_t rows, std::mt19937& rng, bool a_bf16) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::normal_distribution<float> bias(0.f, 0.5f);
  std::uniform_real_distribution<float> a_log(-1.f, 1.f);
  GdnInputs in;
  in.d = d;
  in.rows = rows;
  for (int64_t i = 0; i < rows * d.hk * d.dk; ++i) in.q.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < rows * d.hk * d.dk; ++i) in.k.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < rows * d.hv * d.dv; ++i) in.v.push_back(RoundBf16(normal(rng)));
  for (int64_t i = 0; i < rows * d.hv; ++i) {
    const float x = normal(rng);
    in.a.push_back(a_bf16 ? RoundBf16(x) : x);
  }
  for (int64_t i = 0; i < rows * d.hv; ++i) in.b.push_back(normal(rng));
  for (int64_t h = 0; h < d.hv; ++h) {
    in.neg_exp_a.push_back(-std::exp(a_log(rng)));
    in.dt_bias.push_back(bias(rng));
  }
  in.q_rep.resize(rows * d.hv * d.dk);
  in.k_rep.resize(rows * d.hv * d.dk);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < d.hv; ++h) {
      const int64_t src = (t * d.hk + h / d.rho()) * d.dk;
      std::copy_n(in.q.begin() + src, d.dk, in.q_rep.begin() + (t * d.hv + h) * d.dk);
      std::copy_n(in.k.begin() + src, d.dk, in.k_rep.begin() + (t * d.hv + h) * d.dk);
      const float x = in.a[t * d.hv + h] + in.dt_bias[h];
      const float softplus = x > 20.f ? x : std::log1p(std::exp(x));
      in.g.push_back(in.neg_exp_a[h] * softplus);
      in.beta.push_back(1.f / (1.f + std::exp(-in.b[t * d.hv + h])));
    }
  }
  return in;
}

std::vector<float> RandomState(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::vector<float> s(n);
  for (float& x : s) x = normal(rng);
  return s;
}

cpu::KdaArgs CpuArgs(const GdnInputs& in, int64_t r0, int64_t len, float* state, float* out) {
  const GdnDims& d = in.d;
  cpu::KdaArgs a;
  a.num_tokens = len;
  a.num_heads = d.hv;
  a.key_dim = d.dk;
  a.value_dim = d.dv;
  a.q = in.q_rep.data() + r0 * d.hv * d.dk;
  a.k = in.k_rep.data() + r0 * d.hv * d.dk;
  a.v = in.v.data() + r0 * d.hv * d.dv;
  a.g = in.g.data() + r0 * d.hv;
  a.g_per_head = true;
  a.beta = in.beta.data() + r0 * d.hv;
  a.state = state;
  a.out = out;
  return a;
}

std::vector<float> CpuChunked(const GdnInputs& in, int64_t r0, int64_t len,
                              std::vector<float>* state) {
  ThreadPool* pool = ThreadPool::Default();
  const GdnDims& d = in.d;
  std::vector<float> out(len * d.hv * d.dv);
  const size_t bytes = cpu::KdaChunkedWorkspaceBytes(len, d.hv, d.dk, d.dv, pool->num_threads());
  std::vector<char> ws(bytes + 64);
  void* aligned = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  const Status st =
      cpu::KdaChunked(CpuArgs(in, r0, len, state->data(), out.data()), aligned, bytes, pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Device copy of a sequence's inputs. fused: q|k|v in one conv-output row and
// b|a in one [rows, 2·Hv] row (ld 2·Hv); otherwise packed separate buffers.
struct DeviceGdn {
  DeviceGdn(const GdnInputs& in, bool fused, bool a_bf16)
      : d(in.d),
        fused(fused),
        a_bf16(a_bf16),
        qkv(in.rows * in.d.Width()),
        q(in.q.size()),
        k(in.k.size()),
        v(in.v.size()),
        ba(in.rows * 2 * in.d.hv),
        ba_bf16(in.rows * 2 * in.d.hv),
        neg_exp_a(in.d.hv),
        dt_bias(in.d.hv) {
    bool ok = true;
    const int64_t kw = d.hk * d.dk, vw = d.hv * d.dv;
    if (fused) {
      std::vector<float> packed(in.rows * d.Width());
      for (int64_t r = 0; r < in.rows; ++r) {
        float* row = packed.data() + r * d.Width();
        std::copy_n(in.q.begin() + r * kw, kw, row);
        std::copy_n(in.k.begin() + r * kw, kw, row + kw);
        std::copy_n(in.v.begin() + r * vw, vw, row + 2 * kw);
      }
      ok &= qkv.Upload(ToBf16(packed));
    } else {
      ok &= q.Upload(ToBf16(in.q)) && k.Upload(ToBf16(in.k)) && v.Upload(ToBf16(in.v));
    }
    // ba rows: fused [b (Hv) | a (Hv)]; packed: b for all rows, then a.
    std::vector<float> host(in.rows * 2 * d.hv);
    for (int64_t r = 0; r < in.rows; ++r) {
      for (int64_t h = 0; h < d.hv; ++h) {
        if (fused) {
          host[r * 2 * d.hv + h] = in.b[r * d.hv + h];
          host[r * 2 * d.hv + d.hv + h] = in.a[r * d.hv + h];
        } else {
          host[r * d.hv + h] = in.b[r * d.hv + h];
          host[in.rows * d.hv + r * d.hv + h] = in.a[r * d.hv + h];
        }
      }
    }
    ok &= ba.Upload(host) && ba_bf16.Upload(ToBf16(host));
    ok &= neg_exp_a.Upload(in.neg_exp_a) && dt_bias.Upload(in.dt_bias);
    rows = in.rows;
    uploaded = ok;
  }

  int64_t ld() const { return fused ? d.Width() : 0; }
  const bf16* QRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() : q.get() + r * d.hk * d.dk;
  }
  const bf16* KRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() + d.hk * d.dk : k.get() + r * d.hk * d.dk;
  }
  const bf16* VRow(int64_t r) const {
    return fused ? qkv.get() + r * ld() + 2 * d.hk * d.dk : v.get() + r * d.hv * d.dv;
  }
  KdaGates GatesFrom(int64_t r) const {
    KdaGates g;
    g.per_head = true;
    const int64_t b_off = fused ? r * 2 * d.hv : r * d.hv;
    const int64_t a_off = fused ? r * 2 * d.hv + d.hv : rows * d.hv + r * d.hv;
    g.g_type = a_bf16 ? ActType::kBf16 : ActType::kF32;
    g.g_raw = a_bf16 ? static_cast<const void*>(ba_bf16.get() + a_off)
                     : static_cast<const void*>(ba.get() + a_off);
    g.ld_g = fused ? 2 * d.hv : 0;
    g.beta_raw = ba.get() + b_off;
    g.beta_type = ActType::kF32;
    g.ld_beta = fused ? 2 * d.hv : 0;
    g.neg_exp_a = neg_exp_a.get();
    g.dt_bias = dt_bias.get();
    return g;
  }
  KdaShape Shape() const {
    KdaShape s;
    s.num_heads = d.hv;
    s.num_qk_heads = d.hk;
    s.key_dim = d.dk;
    s.value_dim = d.dv;
    return s;
  }

  GdnDims d;
  bool fused, a_bf16;
  int64_t rows = 0;
  DeviceArray<bf16> qkv, q, k, v;
  DeviceArray<float> ba;
  DeviceArray<bf16> ba_bf16;
  DeviceArray<float> neg_exp_a, dt_bias;
  bool uploaded = false;
};

// With `recurrent`, the batch-invariant path, given no workspace (it needs none).
std::vector<float> GpuPrefill(const DeviceGdn& dev, int64_t r0, int64_t len, float* state,
                              Status* status, bool recurrent = false) {
  const size_t n_out = len * dev.d.hv * dev.d.dv;
  DeviceArray<bf16> out(n_out);
  KdaPrefillArgs a;
  a.shape = dev.Shape();
  a.num_tokens = len;
  a.q = dev.QRow(r0);
  a.k = dev.KRow(r0);
  a.v = dev.VRow(r0);
  a.ld_qkv = dev.ld();
  a.gates = dev.GatesFrom(r0);
  a.state = state;
  a.out = out.get();
  a.out_type = ActType::kBf16;
  a.recurrent = recurrent;
  const size_t ws_bytes = recurrent ? 0 : KdaPrefillWorkspaceBytes(a.shape, len);
  DeviceArray<char> ws(ws_bytes);
  *status = KdaPrefill(a, recurrent ? nullptr : ws.get(), ws_bytes, nullptr);
  if (status->ok() && cudaDeviceSynchronize() != cudaSuccess) {
    *status = absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  }
  if (!status->ok()) return {};
  return ToFloat(out.Download(n_out));
}

// ---------------------------------------------------------------------------

struct PrefillCase {
  GdnDims d;
  int64_t tokens;
  int64_t split;  // > 0: two calls, [0, split) then [split, tokens)
  bool fused;
  bool a_bf16;
};

std::string CaseName(const ::testing::TestParamInfo<PrefillCase>& info) {
  const PrefillCase& c = info.param;
  return absl::StrCat(DimsName(c.d), "_T", c.tokens, c.split > 0 ? absl::StrCat("_split", c.split) : "",
                      c.fused ? "_fused" : "", c.a_bf16 ? "_abf16" : "");
}
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << CaseName({c, 0}); }

class GdnPrefillTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(GdnPrefillTest, MatchesCpuChunkedFromRandomState) {
  const PrefillCase& c = GetParam();
  std::mt19937 rng(77 + static_cast<uint32_t>(c.tokens * 13 + c.d.hv * 5 + c.d.dk));
  const GdnInputs in = MakeInputs(c.d, c.tokens, rng, c.a_bf16);
  const size_t n_state = c.d.hv * c.d.dk * c.d.dv;
  std::vector<float> state = RandomState(n_state, rng);
  DeviceGdn dev(in, c.fused, c.a_bf16);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_state(n_state);
  ASSERT_TRUE(d_state.Upload(state));

  std::vector<float> got, want;
  const int64_t cut = c.split > 0 ? c.split : c.tokens;
  for (const auto& [r0, len] : {std::pair<int64_t, int64_t>{0, cut}, {cut, c.tokens - cut}}) {
    if (len == 0) continue;
    Status st;
    const std::vector<float> g = GpuPrefill(dev, r0, len, d_state.get(), &st);
    ASSERT_TRUE(st.ok()) << st;
    got.insert(got.end(), g.begin(), g.end());
    const std::vector<float> w = CpuChunked(in, r0, len, &state);
    want.insert(want.end(), w.begin(), w.end());
  }
  const std::string name = CaseName({c, 0});
  ExpectClose(name + " out", got, want, kTolerance);
  ExpectClose(name + " state", d_state.Download(n_state), state, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GdnPrefillTest,
    ::testing::Values(
        // Small and odd: groups of 3 value heads, dk ≠ dv, not multiples of 8.
        PrefillCase{{2, 6, 48, 40}, 150, 0, false, false},
        PrefillCase{{2, 6, 48, 40}, 150, 0, true, true},
        PrefillCase{{3, 3, 32, 32}, 97, 0, true, false},  // ρ = 1
        PrefillCase{{1, 5, 20, 36}, 71, 0, false, false},
        PrefillCase{{2, 4, 64, 64}, 1, 0, true, false},
        PrefillCase{{1, 4, 128, 128}, 130, 0, true, false},
        // Continuation across calls (the second starts mid-chunk).
        PrefillCase{{2, 6, 48, 40}, 170, 37, true, false},
        PrefillCase{{16, 32, 128, 128}, 200, 129, true, true},
        // Qwen3-Next-80B's linear-attention shape.
        PrefillCase{{16, 32, 128, 128}, 300, 0, true, false},
        PrefillCase{{16, 32, 128, 128}, 1, 0, true, false},
        // Odd lengths around the 64-token chunk, and a pass boundary with a
        // 3-token tail continued from a mid-chunk split.
        PrefillCase{{16, 32, 128, 128}, 63, 0, true, false},
        PrefillCase{{16, 32, 128, 128}, 65, 0, true, true},
        PrefillCase{{16, 32, 128, 128}, 4099, 65, true, false}),
    CaseName);

// Decode of B sequences, one token each, over a slot pool with random states,
// for several steps; the CPU runs each sequence with cpu::KdaRecurrent.
struct DecodeCase {
  GdnDims d;
  int64_t batch;
  int steps;
  bool fused;
};

std::string DecodeName(const ::testing::TestParamInfo<DecodeCase>& info) {
  const DecodeCase& c = info.param;
  return absl::StrCat(DimsName(c.d), "_B", c.batch, "_steps", c.steps, c.fused ? "_fused" : "");
}
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << DecodeName({c, 0}); }

class GdnDecodeTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(GdnDecodeTest, BatchOverSlotsMatchesCpuRecurrent) {
  const DecodeCase& c = GetParam();
  const GdnDims& d = c.d;
  std::mt19937 rng(991 + static_cast<uint32_t>(c.batch * 3 + d.dv));
  // Row (step s, sequence b) = s·B + b of one input set.
  const GdnInputs in = MakeInputs(d, c.steps * c.batch, rng, false);
  const int64_t num_slots = c.batch + 3;
  const size_t per_slot = d.hv * d.dk * d.dv;
  std::vector<float> pool = RandomState(num_slots * per_slot, rng);
  std::vector<int32_t> slots(c.batch);
  // Distinct slots in reverse order, not starting at 0.
  for (int64_t b = 0; b < c.batch; ++b) slots[b] = static_cast<int32_t>(num_slots - 1 - b);
  DeviceGdn dev(in, c.fused, false);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_pool(pool.size());
  ASSERT_TRUE(d_pool.Upload(pool));
  DeviceArray<int32_t> d_slots(slots.size());
  ASSERT_TRUE(d_slots.Upload(slots));

  std::vector<float> got, want;
  for (int s = 0; s < c.steps; ++s) {
    const int64_t r0 = s * c.batch;
    DeviceArray<bf16> out(c.batch * d.hv * d.dv);
    KdaDecodeArgs a;
    a.shape = dev.Shape();
    a.batch = c.batch;
    a.q = dev.QRow(r0);
    a.k = dev.KRow(r0);
    a.v = dev.VRow(r0);
    a.ld_qkv = dev.ld();
    a.gates = dev.GatesFrom(r0);
    a.state_pool = d_pool.get();
    a.slots = d_slots.get();
    a.out = out.get();
    a.out_type = ActType::kBf16;
    const Status st = KdaDecode(a, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> g = ToFloat(out.Download(c.batch * d.hv * d.dv));
    got.insert(got.end(), g.begin(), g.end());
    for (int64_t b = 0; b < c.batch; ++b) {
      std::vector<float> o(d.hv * d.dv);
      float* st_b = pool.data() + slots[b] * per_slot;
      const Status cs = cpu::KdaRecurrent(CpuArgs(in, r0 + b, 1, st_b, o.data()), nullptr);
      ASSERT_TRUE(cs.ok()) << cs;
      want.insert(want.end(), o.begin(), o.end());
    }
  }
  const std::string name = DecodeName({c, 0});
  ExpectClose(name + " out", got, want, kTolerance);
  ExpectClose(name + " state pool", d_pool.Download(pool.size()), pool, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GdnDecodeTest,
    ::testing::Values(DecodeCase{{2, 6, 48, 40}, 3, 4, true},     // generic kernel
                      DecodeCase{{1, 5, 20, 36}, 2, 3, false},    // generic kernel
                      DecodeCase{{2, 4, 128, 64}, 5, 2, false},   // fast kernel
                      DecodeCase{{16, 32, 128, 128}, 1, 3, true},  // fast, production
                      DecodeCase{{16, 32, 128, 128}, 7, 2, true}),
    DecodeName);

// Prefill of a prompt, then batched decode of it in slot 1 of a pool: the
// state hand-over between the two kernels at the production shape.
TEST(GdnPrefillDecodeTest, DecodeContinuesPrefillState) {
  const GdnDims d{16, 32, 128, 128};
  std::mt19937 rng(4242);
  const int64_t prompt = 133, steps = 3, total = prompt + steps;
  const GdnInputs in = MakeInputs(d, total, rng, false);
  const size_t per_slot = d.hv * d.dk * d.dv;
  std::vector<float> state(per_slot, 0.f);
  DeviceGdn dev(in, true, false);
  ASSERT_TRUE(dev.uploaded);
  DeviceArray<float> d_pool(2 * per_slot);
  ASSERT_EQ(cudaMemset(d_pool.get(), 0, 2 * per_slot * sizeof(float)), cudaSuccess);
  Status st;
  const std::vector<float> got_prefill = GpuPrefill(dev, 0, prompt, d_pool.get() + per_slot, &st);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> want_prefill = CpuChunked(in, 0, prompt, &state);
  ExpectClose("prefill out", got_prefill, want_prefill, kTolerance);
  DeviceArray<int32_t> d_slots(1);
  ASSERT_TRUE(d_slots.Upload({1}));
  std::vector<float> got, want;
  for (int64_t t = prompt; t < total; ++t) {
    DeviceArray<bf16> out(d.hv * d.dv);
    KdaDecodeArgs a;
    a.shape = dev.Shape();
    a.batch = 1;
    a.q = dev.QRow(t);
    a.k = dev.KRow(t);
    a.v = dev.VRow(t);
    a.ld_qkv = dev.ld();
    a.gates = dev.GatesFrom(t);
    a.state_pool = d_pool.get();
    a.slots = d_slots.get();
    a.out = out.get();
    ASSERT_TRUE(KdaDecode(a, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> g = ToFloat(out.Download(d.hv * d.dv));
    got.insert(got.end(), g.begin(), g.end());
    std::vector<float> o(d.hv * d.dv);
    ASSERT_TRUE(cpu::KdaRecurrent(CpuArgs(in, t, 1, state.data(), o.data()), nullptr).ok());
    want.insert(want.end(), o.begin(), o.end());
  }
  ExpectClose("decode after prefill out", got, want, kTolerance);
  const std::vector<float> pool = d_pool.Download(2 * per_slot);
  ExpectClose("decode after prefill state",
              std::vector<float>(pool.begin() + per_slot, pool.end()), state, kTolerance);
}

// ---------------------------------------------------------------------------
// Recurrent (batch-invariant) prefill, KdaPrefillArgs::recurrent, with GDN's
// per-head gates and grouped q/k heads: bit-identical outputs and state
// however [0, T) is split into calls and when the tail runs as decode steps
// (alone or in a batch of 5), and close to the CPU.

struct RecurrentCase {
  GdnDims d;
  bool fused;
  bool a_bf16;
};

std::string RecurrentName(const ::testing::TestParamInfo<RecurrentCase>& info) {
  const RecurrentCase& c = info.param;
  return absl::StrCat(DimsName(c.d), c.fused ? "_fused" : "", c.a_bf16 ? "_abf16" : "");
}
void PrintTo(const RecurrentCase& c, std::ostream* os) { *os << RecurrentName({c, 0}); }

constexpr int64_t kRecurrentLengths[] = {1, 7, 64, 97, 203, 300};

// Recurrent prefill from `state0`, one call per [cuts[i], cuts[i+1]); out
// [T, Hv, dv] then the final state.
std::pair<std::vector<float>, std::vector<float>> RecurrentInCalls(
    const DeviceGdn& dev, const std::vector<float>& state0, const std::vector<int64_t>& cuts) {
  std::vector<float> out;
  DeviceArray<float> d_state(state0.size());
  EXPECT_TRUE(d_state.Upload(state0));
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Status st;
    const std::vector<float> part =
        GpuPrefill(dev, cuts[i], cuts[i + 1] - cuts[i], d_state.get(), &st, /*recurrent=*/true);
    EXPECT_TRUE(st.ok()) << st << " in the call at row " << cuts[i];
    if (!st.ok()) return {};
    out.insert(out.end(), part.begin(), part.end());
  }
  return {out, d_state.Download(state0.size())};
}

std::vector<int64_t> Cuts(int64_t T, const std::vector<int64_t>& interior) {
  std::vector<int64_t> cuts = {0};
  for (int64_t c : interior) {
    if (c > 0 && c < T) cuts.push_back(c);
  }
  cuts.push_back(T);
  return cuts;
}

// `base` with row `row` replaced by row `src_row` of `src`, and src's head
// parameters (device-visible inputs only; the host reference forms are stale).
GdnInputs WithRow(GdnInputs base, int64_t row, const GdnInputs& src, int64_t src_row) {
  const GdnDims& d = base.d;
  const int64_t kw = d.hk * d.dk, vw = d.hv * d.dv;
  std::copy_n(src.q.begin() + src_row * kw, kw, base.q.begin() + row * kw);
  std::copy_n(src.k.begin() + src_row * kw, kw, base.k.begin() + row * kw);
  std::copy_n(src.v.begin() + src_row * vw, vw, base.v.begin() + row * vw);
  std::copy_n(src.a.begin() + src_row * d.hv, d.hv, base.a.begin() + row * d.hv);
  std::copy_n(src.b.begin() + src_row * d.hv, d.hv, base.b.begin() + row * d.hv);
  base.neg_exp_a = src.neg_exp_a;
  base.dt_bias = src.dt_bias;
  return base;
}

class GdnRecurrentPrefillTest : public ::testing::TestWithParam<RecurrentCase> {};

TEST_P(GdnRecurrentPrefillTest, SplitsAndDecodeGiveIdenticalBits) {
  const RecurrentCase& c = GetParam();
  const GdnDims& d = c.d;
  const int64_t n_state = d.hv * d.dk * d.dv, n_row = d.hv * d.dv;
  for (int64_t T : kRecurrentLengths) {
    SCOPED_TRACE(absl::StrCat("T = ", T));
    std::mt19937 rng(303 + static_cast<uint32_t>(T * 7 + d.dv));
    const GdnInputs in = MakeInputs(d, T, rng, c.a_bf16);
    const std::vector<float> state0 = RandomState(n_state, rng);
    DeviceGdn dev(in, c.fused, c.a_bf16);
    ASSERT_TRUE(dev.uploaded);
    const std::string name = absl::StrCat(RecurrentName({c, 0}), " T=", T);

    const auto [one_out, one_state] = RecurrentInCalls(dev, state0, Cuts(T, {}));
    ASSERT_EQ(one_out.size(), static_cast<size_t>(T * n_row));
    std::vector<int64_t> every;
    for (int64_t i = 1; i < T; ++i) every.push_back(i);
    for (const auto& [label, interior] :
         {std::pair<const char*, std::vector<int64_t>>{"0|97|203", {97, 203}},
          {"one token a call", every},
          {"0|1|3|64|65|130", {1, 3, 64, 65, 130}}}) {
      const auto [out, state] = RecurrentInCalls(dev, state0, Cuts(T, interior));
      ExpectSameBits(absl::StrCat(name, " out, ", label, " vs one call"), out, one_out);
      ExpectSameBits(absl::StrCat(name, " state, ", label, " vs one call"), state, one_state);
    }
    EXPECT_NE(std::memcmp(one_state.data(), state0.data(), n_state * sizeof(float)), 0) << name;

    // Prefill [0, p), then decode p..T−1: alone (batch 1), and as row 2
    // (slot 4) of a batch of 5 over a pool of 7 random states.
    const int64_t p = T / 3;
    for (const int64_t batch : {int64_t{1}, int64_t{5}}) {
      const std::vector<int32_t> slots =
          batch == 1 ? std::vector<int32_t>{0} : std::vector<int32_t>{2, 6, 4, 0, 5};
      const int64_t row = batch == 1 ? 0 : 2, n_slots = batch == 1 ? 1 : 7;
      std::vector<float> pool = RandomState(n_slots * n_state, rng);
      std::copy(state0.begin(), state0.end(), pool.begin() + slots[row] * n_state);
      DeviceArray<float> d_pool(pool.size());
      ASSERT_TRUE(d_pool.Upload(pool));
      DeviceArray<int32_t> d_slots(slots.size());
      ASSERT_TRUE(d_slots.Upload(slots));
      std::vector<float> got;
      if (p > 0) {
        Status st;
        got = GpuPrefill(dev, 0, p, d_pool.get() + slots[row] * n_state, &st, true);
        ASSERT_TRUE(st.ok()) << st;
      }
      for (int64_t t = p; t < T; ++t) {
        const GdnInputs step = WithRow(MakeInputs(d, batch, rng, c.a_bf16), row, in, t);
        DeviceGdn step_dev(step, c.fused, c.a_bf16);
        ASSERT_TRUE(step_dev.uploaded);
        DeviceArray<bf16> out(batch * n_row);
        KdaDecodeArgs a;
        a.shape = step_dev.Shape();
        a.batch = batch;
        a.q = step_dev.QRow(0);
        a.k = step_dev.KRow(0);
        a.v = step_dev.VRow(0);
        a.ld_qkv = step_dev.ld();
        a.gates = step_dev.GatesFrom(0);
        a.state_pool = d_pool.get();
        a.slots = d_slots.get();
        a.out = out.get();
        a.out_type = ActType::kBf16;
        const Status st = KdaDecode(a, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> o = ToFloat(out.Download(batch * n_row));
        ASSERT_EQ(o.size(), static_cast<size_t>(batch * n_row));
        got.insert(got.end(), o.begin() + row * n_row, o.begin() + (row + 1) * n_row);
      }
      const std::vector<float> got_pool = d_pool.Download(pool.size());
      ASSERT_EQ(got_pool.size(), pool.size());
      const std::string label = absl::StrCat(name, " p=", p, " decode batch ", batch);
      ExpectSameBits(label + " out", got, one_out);
      ExpectSameBits(label + " state",
                     std::vector<float>(got_pool.begin() + slots[row] * n_state,
                                        got_pool.begin() + (slots[row] + 1) * n_state),
                     one_state);
    }
  }
}

TEST_P(GdnRecurrentPrefillTest, MatchesCpu) {
  const RecurrentCase& c = GetParam();
  const GdnDims& d = c.d;
  for (int64_t T : {int64_t{97}, int64_t{300}}) {
    SCOPED_TRACE(absl::StrCat("T = ", T));
    std::mt19937 rng(505 + static_cast<uint32_t>(T + d.dk));
    const GdnInputs in = MakeInputs(d, T, rng, c.a_bf16);
    const std::vector<float> state0 = RandomState(d.hv * d.dk * d.dv, rng);
    DeviceGdn dev(in, c.fused, c.a_bf16);
    ASSERT_TRUE(dev.uploaded);
    const auto [out, state] = RecurrentInCalls(dev, state0, Cuts(T, {}));
    ASSERT_FALSE(out.empty());
    std::vector<float> cpu_state = state0, cpu_rec_state = state0;
    const std::vector<float> want = CpuChunked(in, 0, T, &cpu_state);
    std::vector<float> want_rec(T * d.hv * d.dv);
    ASSERT_TRUE(cpu::KdaRecurrent(CpuArgs(in, 0, T, cpu_rec_state.data(), want_rec.data()), nullptr)
                    .ok());
    const std::string name = absl::StrCat(RecurrentName({c, 0}), " T=", T, " recurrent");
    ExpectClose(name + " out vs cpu chunked", out, want, kTolerance);
    ExpectClose(name + " state vs cpu chunked", state, cpu_state, kTolerance);
    ExpectClose(name + " out vs cpu recurrent", out, want_rec, kTolerance);
    ExpectClose(name + " state vs cpu recurrent", state, cpu_rec_state, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GdnRecurrentPrefillTest,
    ::testing::Values(RecurrentCase{{16, 32, 128, 128}, true, false},  // Qwen3-Next, fast
                      RecurrentCase{{2, 4, 128, 64}, false, true},     // fast, dv = 64
                      RecurrentCase{{2, 6, 48, 40}, true, true},       // generic
                      RecurrentCase{{1, 5, 20, 36}, false, false}),    // generic, odd
    RecurrentName);

TEST(GdnArgsTest, RejectsQkHeadsThatDoNotDivideValueHeads) {
  DeviceArray<bf16> x(1024);
  DeviceArray<float> f(1024);
  DeviceArray<int32_t> slots(1);
  KdaDecodeArgs a;
  a.shape.num_heads = 6;
  a.shape.num_qk_heads = 4;
  a.shape.key_dim = 16;
  a.shape.value_dim = 16;
  a.batch = 1;
  a.q = a.k = a.v = x.get();
  a.gates.per_head = true;
  a.gates.g_raw = f.get();
  a.gates.beta_raw = f.get();
  a.gates.neg_exp_a = f.get();
  a.gates.dt_bias = f.get();
  a.state_pool = f.get();
  a.slots = slots.get();
  a.out = x.get();
  const Status st = KdaDecode(a, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("num_qk_heads"), std::string::npos) << st;
  a.shape.num_qk_heads = 3;
  a.gates.ld_g = 4;  // per-head gates need ld_g ≥ H = 6
  const Status st2 = KdaDecode(a, nullptr);
  EXPECT_EQ(st2.code(), absl::StatusCode::kInvalidArgument) << st2;
  EXPECT_NE(std::string(st2.message()).find("ld_g"), std::string::npos) << st2;
}

}  // namespace
}  // namespace strata::cuda
