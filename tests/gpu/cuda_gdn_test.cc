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
// random state, decode batches over a slot pool on both decode kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/kda.h"
#include "backend/cuda/kda.h"
#include "base/thread_pool.h"

namespace strata::cuda {
namespace {

constexpr double kTolerance = 1e-2;  // bf16 activations (L2-relative)

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(std::max<size_t>(n, 1)) {
    if (cudaMalloc(&ptr_, n_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  bool Upload(const std::vector<T>& host) {
    return ptr_ != nullptr && host.size() <= n_ &&
           cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
               cudaSuccess;
  }
  std::vector<T> Download(size_t n) const {
    std::vector<T> host(n);
    if (cudaMemcpy(host.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
      host.clear();
    }
    return host;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

float RoundBf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

std::vector<bf16> ToBf16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16_rn(x[i]);
  return out;
}

std::vector<float> ToFloat(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

void ExpectClose(const std::string& label, const std::vector<float>& got,
                 const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << label;
  double num = 0, den = 0, max_abs = 0;
  bool finite = true;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) finite = false;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("[gdn] %-56s rel_l2 %.3e  max_abs %.3e (tol %.0e)\n", label.c_str(), rel, max_abs,
              tolerance);
  EXPECT_TRUE(finite) << label << ": non-finite output";
  EXPECT_GT(den, 0.0) << label << ": reference is all zeros";
  EXPECT_LE(rel, tolerance) << label;
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

std::vector<float> GpuPrefill(const DeviceGdn& dev, int64_t r0, int64_t len, float* state,
                              Status* status) {
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
  const size_t ws_bytes = KdaPrefillWorkspaceBytes(a.shape, len);
  DeviceArray<char> ws(ws_bytes);
  *status = KdaPrefill(a, ws.get(), ws_bytes, nullptr);
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
