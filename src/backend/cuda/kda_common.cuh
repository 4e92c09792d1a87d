// Private to backend/cuda (kda.h is the API): what kda_decode.cu and
// kda_prefill.cu share.
//
// Kimi Delta Attention on the GPU (model-spec §2.3): the token recurrence for
// decode and the chunked (WY / UT transform) form for prefill. The CPU kernels
// in backend/cpu/kda.cc are the reference; the formulas and their order follow
// them (gates, L2 norms with eps 1e-6, o = Sᵀq̂ read as S_decayedᵀq̂ + (q̂·k̂)u).
//
// Here: the device helpers, the gate parameters, the token step that decode
// and the recurrent prefill run with the same bits, and the host-side checks.
#ifndef STRATA_BACKEND_CUDA_KDA_COMMON_CUH_
#define STRATA_BACKEND_CUDA_KDA_COMMON_CUH_

#include "backend/cuda/kda.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backend/cuda/conv_step.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cta_probe.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int64_t kMaxDim = 128;  // head dims above this are Unimplemented
constexpr float kNormEps = 1e-6f;

// ---------------------------------------------------------------------------
// Device helpers.

__device__ __forceinline__ float LoadAct(const void* p, ActType type, int64_t i) {
  return type == ActType::kBf16 ? __bfloat162float(static_cast<const bf16*>(p)[i])
                                : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void StoreAct(void* p, ActType type, int64_t i, float x) {
  if (type == ActType::kBf16) {
    static_cast<bf16*>(p)[i] = __float2bfloat16_rn(x);
  } else {
    static_cast<float*>(p)[i] = x;
  }
}

// Accurate expf/log1pf: the gates are computed once per element and must match
// the host's std::exp/std::log1p (softplus has the usual linear shortcut).
// The _rn intrinsics pin the rounding wherever the function is inlined (the
// token step relies on that, see StepPrepare).
__device__ __forceinline__ float ForgetGate(float raw, float bias, float neg_exp_a) {
  const float x = __fadd_rn(raw, bias);
  return __fmul_rn(neg_exp_a, x > 20.f ? x : log1pf(expf(x)));
}

__device__ __forceinline__ float Sigmoid(float x) {
  return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x)));
}

__device__ __forceinline__ float WarpSumXor(float v, int from, int to) {
  for (int o = from; o <= to; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---------------------------------------------------------------------------
// Parameters shared by the kernels (passed by value).

struct GateParams {
  const void* g_raw;  // [rows, H, dk], row stride ld_g
  ActType g_type;
  int64_t ld_g;
  const void* beta_raw;  // [rows, H], row stride ld_beta
  ActType beta_type;
  int64_t ld_beta;
  const float* neg_exp_a;  // [H]
  const float* dt_bias;    // [H·dk]; [H] when per_head
  bool per_head;           // GDN: g_raw [rows, H], one decay per head
};

GateParams MakeGateParams(const KdaGates& g, int64_t heads, int64_t dk) {
  const int64_t ld_g = g.ld_g != 0 ? g.ld_g : (g.per_head ? heads : heads * dk);
  return GateParams{g.g_raw,    g.g_type,    ld_g,
                    g.beta_raw, g.beta_type, g.ld_beta != 0 ? g.ld_beta : heads,
                    g.neg_exp_a, g.dt_bias,  g.per_head};
}

int64_t QkHeads(const KdaShape& s) { return s.num_qk_heads != 0 ? s.num_qk_heads : s.num_heads; }

float EffectiveScale(const KdaShape& s) {
  return s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.key_dim));
}

// ===========================================================================
// The token step: S ← diag(α)S; u = β(v − Sᵀk̂); S += k̂uᵀ; o = Sᵀq̂, for one
// 32-column slice of one head's state held in registers by a 256-thread CTA.
// Decode runs it once per (sequence, head, slice); the recurrent prefill
// (KdaPrefillArgs::recurrent) runs it once per token in a loop. Both call the
// same functions below, and every rounding step is spelled out with the _rn
// intrinsics (which the compiler never contracts into an FMA or reorders), so
// a token gets the same bits whichever kernel computes it: the property that
// makes a prefill split anywhere, or a prefill followed by decode, reproduce
// one long prefill exactly. Two variants with different reduction orders:
// "fast" (dk = 128, dv a multiple of 32, 16-byte aligned state; each thread
// holds rows r0 + 32i (i < 4) × four adjacent columns as float4) and
// "generic" (any dk, dv ≤ 128; each thread one column, rows rg + 8i). Decode
// and prefill pick the variant with the same rule (StepIsFast), so they agree.

constexpr int kDecodeThreads = 256;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kDecodeCols = 32;  // value columns per CTA
constexpr int kFastDk = 128;
constexpr int kFastPasses = kFastDk / (kDecodeThreads / 8);  // rows per thread, fast
constexpr int kGenericRows = kMaxDim / kDecodeWarps;         // rows per thread, generic

// Which thread loads the slice's value column n (v_thread − base) and β.
template <bool kFast>
__device__ __forceinline__ int StepValueBase() {
  return kFast ? kFastDk : 0;
}
template <bool kFast>
__device__ __forceinline__ int StepBetaThread() {
  return kFast ? kFastDk + kDecodeCols : kDecodeCols;
}

// A token's inputs as this thread loads them: channel tid's q, k and raw
// decay (tid < dk), one value column, and β's pre-activation.
struct StepRaw {
  float q = 0.f, k = 0.f, g = 0.f, v = 0.f, beta = 0.f;
};

// The row-independent part of channel tid's decay gate.
struct StepConst {
  float bias = 0.f, neg_exp_a = 0.f;
};

// One token's prepared inputs in shared memory (16-byte aligned so v and red
// rows can be read as float4: fewer shared-memory wavefronts per token).
struct alignas(16) StepSmem {
  float q[kMaxDim], k[kMaxDim], alpha[kMaxDim], v[kDecodeCols];
  float red[3][kDecodeWarps];  // per-warp partial sums of q·q, k·k, q·k
  float beta;
  float norm[3];  // the recurrent prefill's StepNorms result, computed by one warp
};

// Per-warp partial sums of e = Sᵀk̂ and o = Sᵀq̂ per slice column.
struct alignas(16) StepEo {
  float e[kDecodeWarps][kDecodeCols], o[kDecodeWarps][kDecodeCols];
};

// The token's norms (identical in every thread).
struct StepNorm {
  float inv_q, inv_k, qk;
};

__device__ __forceinline__ float WarpSumXorRn(float v, int from, int to) {
  for (int o = from; o <= to; o <<= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ StepConst LoadStepConst(const GateParams& gp, int h, int dk, int tid) {
  StepConst c;
  if (tid < dk) {
    c.bias = gp.per_head ? gp.dt_bias[h] : gp.dt_bias[static_cast<int64_t>(h) * dk + tid];
    c.neg_exp_a = gp.neg_exp_a[h];
  }
  return c;
}

// The loads of row `row` (a batch row for decode, a token for prefill). P is
// DecodeParams or PrefillParams (same field names).
template <bool kFast, typename P>
__device__ __forceinline__ void LoadStepRaw(const P& p, int64_t row, int h, int n0, int tid,
                                            StepRaw& r) {
  if (tid < p.dk) {
    const int64_t qk_off = row * p.ld_qk + static_cast<int64_t>(h / p.qk_group) * p.dk + tid;
    r.q = __bfloat162float(p.q[qk_off]);
    r.k = __bfloat162float(p.k[qk_off]);
    const int64_t c = p.gates.per_head ? h : static_cast<int64_t>(h) * p.dk + tid;
    r.g = LoadAct(p.gates.g_raw, p.gates.g_type, row * p.gates.ld_g + c);
  }
  const int vn = tid - StepValueBase<kFast>();
  if (vn >= 0 && vn < kDecodeCols) {
    const int n = n0 + vn;
    r.v = n < p.dv ? __bfloat162float(p.v[row * p.ld_v + static_cast<int64_t>(h) * p.dv + n]) : 0.f;
  }
  if (tid == StepBetaThread<kFast>()) {
    r.beta = LoadAct(p.gates.beta_raw, p.gates.beta_type, row * p.gates.ld_beta + h);
  }
}

// Gates and sums of squares of one token into `sm` (published by the caller's
// next barrier). Channels past dk add zeros.
template <bool kFast>
__device__ __forceinline__ void StepPrepare(const StepRaw& r, const StepConst& c, int dk, int tid,
                                            StepSmem& sm) {
  float sums[3] = {0.f, 0.f, 0.f};
  if (tid < dk) {
    sm.q[tid] = r.q;
    sm.k[tid] = r.k;
    sm.alpha[tid] = expf(ForgetGate(r.g, c.bias, c.neg_exp_a));
    sums[0] = __fmul_rn(r.q, r.q);
    sums[1] = __fmul_rn(r.k, r.k);
    sums[2] = __fmul_rn(r.q, r.k);
  }
  const int vn = tid - StepValueBase<kFast>();
  if (vn >= 0 && vn < kDecodeCols) sm.v[vn] = r.v;
  if (tid == StepBetaThread<kFast>()) sm.beta = Sigmoid(r.beta);
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    sums[i] = WarpSumXorRn(sums[i], 1, 16);
    if (lane == 0) sm.red[i][warp] = sums[i];
  }
}

// After the barrier that follows StepPrepare: 1/‖q‖·scale, 1/‖k‖ and q̂·k̂.
__device__ __forceinline__ StepNorm StepNorms(const StepSmem& sm, float scale) {
  static_assert(kDecodeWarps == 8, "two float4 per row of red");
  float tot[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const float4 lo = LoadF4(&sm.red[i][0]), hi = LoadF4(&sm.red[i][4]);
    const float r[kDecodeWarps] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) tot[i] = __fadd_rn(tot[i], r[w]);
  }
  StepNorm nm;
  nm.inv_q = __fdiv_rn(scale, __fsqrt_rn(__fadd_rn(tot[0], kNormEps)));
  nm.inv_k = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(tot[1], kNormEps)));
  nm.qk = __fmul_rn(__fmul_rn(tot[2], nm.inv_q), nm.inv_k);
  return nm;
}

// The slice in registers. Fast: rows r0 + 32i, columns 4·c4..4·c4+3 (r0 =
// tid/8, c4 = tid%8); a warp's load covers 4 rows × 128 contiguous bytes.
// Generic: column tid%32, rows tid/32 + 8i below dk (zeros elsewhere).
template <bool kFast>
struct StepState;
template <>
struct StepState<true> {
  float4 s[kFastPasses];
  float kh[kFastPasses];  // k̂ of the rows, from StepReduce to StepUpdate
};
template <>
struct StepState<false> {
  float s[kGenericRows];
};

// `slice` points at row 0, column n0 of the head's [dk, dv] state.
__device__ __forceinline__ void LoadSlice(const float* slice, int /*dk*/, int dv, int /*n0*/,
                                          int tid, StepState<true>& st) {
  const float* p = slice + (tid >> 3) * static_cast<int64_t>(dv) + 4 * (tid & 7);
#pragma unroll
  for (int i = 0; i < kFastPasses; ++i) st.s[i] = LoadF4(p + 32 * i * static_cast<int64_t>(dv));
}
__device__ __forceinline__ void StoreSlice(float* slice, int /*dk*/, int dv, int /*n0*/,
                                           int tid, const StepState<true>& st) {
  float* p = slice + (tid >> 3) * static_cast<int64_t>(dv) + 4 * (tid & 7);
#pragma unroll
  for (int i = 0; i < kFastPasses; ++i) StoreF4(p + 32 * i * static_cast<int64_t>(dv), st.s[i]);
}
__device__ __forceinline__ void LoadSlice(const float* slice, int dk, int dv, int n0, int tid,
                                          StepState<false>& st) {
  const int col = tid & 31, rg = tid >> 5;
  const bool col_ok = n0 + col < dv;
#pragma unroll
  for (int i = 0; i < kGenericRows; ++i) {
    const int d = rg + kDecodeWarps * i;
    st.s[i] = col_ok && d < dk ? slice[static_cast<int64_t>(d) * dv + col] : 0.f;
  }
}
__device__ __forceinline__ void StoreSlice(float* slice, int dk, int dv, int n0, int tid,
                                           const StepState<false>& st) {
  const int col = tid & 31, rg = tid >> 5;
  if (n0 + col >= dv) return;
#pragma unroll
  for (int i = 0; i < kGenericRows; ++i) {
    const int d = rg + kDecodeWarps * i;
    if (d < dk) slice[static_cast<int64_t>(d) * dv + col] = st.s[i];
  }
}

// Decay, then this thread's partial e and o, reduced within the warp into
// `eo` (published by the caller's next barrier).
__device__ __forceinline__ void StepReduce(StepState<true>& st, const StepSmem& sm,
                                           const StepNorm& nm, int /*dk*/, int tid, StepEo& eo) {
  const int lane = tid & 31, warp = tid >> 5, c4 = tid & 7, r0 = tid >> 3;
  float e[4] = {0.f, 0.f, 0.f, 0.f}, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kFastPasses; ++i) {
    const int d = r0 + 32 * i;
    const float a = sm.alpha[d];
    const float kh = __fmul_rn(sm.k[d], nm.inv_k), qh = __fmul_rn(sm.q[d], nm.inv_q);
    st.kh[i] = kh;
    float4& s = st.s[i];
    s.x = __fmul_rn(s.x, a);
    s.y = __fmul_rn(s.y, a);
    s.z = __fmul_rn(s.z, a);
    s.w = __fmul_rn(s.w, a);
    e[0] = __fmaf_rn(kh, s.x, e[0]);
    e[1] = __fmaf_rn(kh, s.y, e[1]);
    e[2] = __fmaf_rn(kh, s.z, e[2]);
    e[3] = __fmaf_rn(kh, s.w, e[3]);
    o[0] = __fmaf_rn(qh, s.x, o[0]);
    o[1] = __fmaf_rn(qh, s.y, o[1]);
    o[2] = __fmaf_rn(qh, s.z, o[2]);
    o[3] = __fmaf_rn(qh, s.w, o[3]);
  }
  // Lanes with the same c4 differ in lane bits 3 and 4.
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    e[c] = WarpSumXorRn(e[c], 8, 16);
    o[c] = WarpSumXorRn(o[c], 8, 16);
  }
  if (lane < 8) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      eo.e[warp][4 * c4 + c] = e[c];
      eo.o[warp][4 * c4 + c] = o[c];
    }
  }
}
__device__ __forceinline__ void StepReduce(StepState<false>& st, const StepSmem& sm,
                                           const StepNorm& nm, int dk, int tid, StepEo& eo) {
  const int col = tid & 31, rg = tid >> 5;
  float e = 0.f, o = 0.f;
#pragma unroll
  for (int i = 0; i < kGenericRows; ++i) {
    const int d = rg + kDecodeWarps * i;
    if (d < dk) {
      const float x = __fmul_rn(st.s[i], sm.alpha[d]);
      st.s[i] = x;
      e = __fmaf_rn(__fmul_rn(sm.k[d], nm.inv_k), x, e);
      o = __fmaf_rn(__fmul_rn(sm.q[d], nm.inv_q), x, o);
    }
  }
  eo.e[rg][col] = e;
  eo.o[rg][col] = o;
}

// After the barrier that follows StepReduce: u = β(v − e), the output
// o + (q̂·k̂)u of the slice's columns at out + out_off (column n0), and the
// rank-1 update S += k̂uᵀ. Every thread sums the warp partials of its own
// columns in the same order, so no further barrier is needed.
__device__ __forceinline__ void StepUpdate(StepState<true>& st, const StepSmem& sm,
                                           const StepNorm& nm, const StepEo& eo, int tid,
                                           void* out, ActType out_type, int64_t out_off) {
  const int c4 = tid & 7;
  // The four columns' partials as float4 (one wavefront per warp and w),
  // summed per column in w order.
  float et[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    const float4 x = LoadF4(&eo.e[w][4 * c4]);
    et[0] = __fadd_rn(et[0], x.x);
    et[1] = __fadd_rn(et[1], x.y);
    et[2] = __fadd_rn(et[2], x.z);
    et[3] = __fadd_rn(et[3], x.w);
  }
  const float4 v = LoadF4(&sm.v[4 * c4]);
  const float vc[4] = {v.x, v.y, v.z, v.w};
  float u[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) u[c] = __fmul_rn(sm.beta, __fsub_rn(vc[c], et[c]));
  if (tid < 8) {
    float ot[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float4 x = LoadF4(&eo.o[w][4 * c4]);
      ot[0] = __fadd_rn(ot[0], x.x);
      ot[1] = __fadd_rn(ot[1], x.y);
      ot[2] = __fadd_rn(ot[2], x.z);
      ot[3] = __fadd_rn(ot[3], x.w);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      StoreAct(out, out_type, out_off + 4 * c4 + c, __fmaf_rn(nm.qk, u[c], ot[c]));
    }
  }
#pragma unroll
  for (int i = 0; i < kFastPasses; ++i) {
    const float kh = st.kh[i];
    float4& s = st.s[i];
    s.x = __fmaf_rn(kh, u[0], s.x);
    s.y = __fmaf_rn(kh, u[1], s.y);
    s.z = __fmaf_rn(kh, u[2], s.z);
    s.w = __fmaf_rn(kh, u[3], s.w);
  }
}
__device__ __forceinline__ void StepUpdate(StepState<false>& st, const StepSmem& sm,
                                           const StepNorm& nm, const StepEo& eo, int tid,
                                           void* out, ActType out_type, int64_t out_off, int dk,
                                           bool col_ok) {
  const int col = tid & 31, rg = tid >> 5;
  float et = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) et = __fadd_rn(et, eo.e[w][col]);
  const float u = __fmul_rn(sm.beta, __fsub_rn(sm.v[col], et));
  if (rg == 0 && col_ok) {
    float ot = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) ot = __fadd_rn(ot, eo.o[w][col]);
    StoreAct(out, out_type, out_off + col, __fmaf_rn(nm.qk, u, ot));
  }
#pragma unroll
  for (int i = 0; i < kGenericRows; ++i) {
    const int d = rg + kDecodeWarps * i;
    if (d < dk) st.s[i] = __fmaf_rn(__fmul_rn(sm.k[d], nm.inv_k), u, st.s[i]);
  }
}

template <bool kFast>
__device__ __forceinline__ void StepUpdateAny(StepState<kFast>& st, const StepSmem& sm,
                                              const StepNorm& nm, const StepEo& eo, int tid,
                                              void* out, ActType out_type, int64_t out_off,
                                              int dk, int dv, int n0) {
  if constexpr (kFast) {
    StepUpdate(st, sm, nm, eo, tid, out, out_type, out_off);
  } else {
    StepUpdate(st, sm, nm, eo, tid, out, out_type, out_off, dk, n0 + (tid & 31) < dv);
  }
}

// The rule both decode and the recurrent prefill use to pick the variant
// (`state` is the pool base for decode, the sequence's state for prefill:
// slot offsets are multiples of dk·dv floats, so the answers agree).
bool StepIsFast(const KdaShape& s, const void* state) {
  return s.key_dim == kFastDk && s.value_dim % kDecodeCols == 0 &&
         reinterpret_cast<uintptr_t>(state) % 16 == 0;
}

// ---------------------------------------------------------------------------
// Host-side checks.

bool ValidActType(ActType t) { return t == ActType::kBf16 || t == ActType::kF32; }

Status CheckShape(const KdaShape& s, const char* op) {
  if (s.num_heads <= 0 || s.num_heads > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape.num_heads must be in [1, 65535] (got ", s.num_heads, ")"));
  }
  if (s.key_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape.key_dim must be positive (got ", s.key_dim, ")"));
  }
  if (s.value_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape.value_dim must be positive (got ", s.value_dim, ")"));
  }
  if (s.key_dim > kMaxDim || s.value_dim > kMaxDim) {
    return absl::UnimplementedError(absl::StrCat(op, ": head dims above ", kMaxDim,
                                                 " are not implemented (dk=", s.key_dim,
                                                 ", dv=", s.value_dim, ")"));
  }
  if (!std::isfinite(s.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shape.scale must be finite"));
  }
  if (s.num_qk_heads < 0 || (s.num_qk_heads != 0 && s.num_heads % s.num_qk_heads != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": shape.num_qk_heads (", s.num_qk_heads,
                     ") must be 0 or divide shape.num_heads (", s.num_heads, ")"));
  }
  return OkStatus();
}

Status CheckCommon(const char* op, const KdaShape& s, const bf16* q, const bf16* k, const bf16* v,
                   int64_t ld_qkv, const KdaGates& g, const void* out, ActType out_type) {
  STRATA_RETURN_IF_ERROR(CheckShape(s, op));
  const int64_t h = s.num_heads;
  if (q == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": q is null"));
  if (k == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": k is null"));
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": v is null"));
  if (ld_qkv < 0 ||
      (ld_qkv != 0 && (ld_qkv < QkHeads(s) * s.key_dim || ld_qkv < h * s.value_dim))) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ld_qkv (", ld_qkv, ") must be 0 or at least max(Hqk·dk, H·dv)"));
  }
  if (g.g_raw == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": gates.g_raw is null"));
  if (!ValidActType(g.g_type)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.g_type is not a valid ActType"));
  }
  const int64_t g_width = g.per_head ? h : h * s.key_dim;
  if (g.ld_g < 0 || (g.ld_g != 0 && g.ld_g < g_width)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.ld_g (", g.ld_g,
                                                   ") must be 0 or at least ", g_width,
                                                   g.per_head ? " (H)" : " (H·dk)"));
  }
  if (g.beta_raw == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.beta_raw is null"));
  }
  if (!ValidActType(g.beta_type)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.beta_type is not a valid ActType"));
  }
  if (g.ld_beta < 0 || (g.ld_beta != 0 && g.ld_beta < h)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": gates.ld_beta (", g.ld_beta, ") must be 0 or at least H"));
  }
  if (g.neg_exp_a == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.neg_exp_a is null"));
  }
  if (g.dt_bias == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gates.dt_bias is null"));
  }
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": out is null"));
  if (!ValidActType(out_type)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": out_type is not a valid ActType"));
  }
  return OkStatus();
}

}  // namespace

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_KDA_COMMON_CUH_
