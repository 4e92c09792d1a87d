// KDA prefill on the GPU: the chunked (WY / UT transform) form in passes of
// chunks, and the token-by-token recurrent form (KdaPrefillArgs::recurrent)
// whose bits do not depend on how a prompt is split. Shared with decode:
// kda_common.cuh.
//
// Cost model at the production shape (H = 32, dk = dv = 128, fp32 state):
//  * Prefill, per 64-token chunk and head (C = 64, d = 128), in multiply-adds:
//    the strictly-lower 16×16 blocks of A = k̂k̂ᵀ and B = q̂k̂ᵀ 0.39 M (tensor
//    cores), their four diagonal blocks pairwise 0.14 M (CUDA cores, 70 K
//    exps), the blocked triangular inverse ~0.04 M, T'·[K|V] and B·[W|U] on
//    the 10 non-zero 16-row block pairs 1.31 M, and the sequential state pass
//    W·S, Q'·S, Kdᵀ·V_new 3.15 M: ~5.0 M MAC = ~10 MFLOP.
//    At T = 32768, H = 32 (16384 chunk-heads): 1.65e11 FLOP (1.0e11 of them
//    in the sequential pass), 0.24 ms at the ~690 TFLOP/s dense bf16 peak.
//    Bytes at T = 32768: inputs q, k, v (bf16), g (fp32), β and the bf16
//    output 1.61e9 B (0.38 ms at the 4.27 TB/s measured HBM rate) plus the
//    workspace, written once by the intra-chunk kernel and read once by the
//    state pass (a pass is ~170 MB, more than the 50 MB L2): default path
//    115,200 B per chunk-head (W, Q', Kd bf16; U, O_intra fp32) = 1.89e9 B
//    each way, 3.77e9 B; old path 164,352 B → 5.39e9 B. So the default path
//    needs ≥ 5.4e9 B = 1.26 ms of DRAM time at 32K (old: 7.0e9 B, 1.64 ms) and
//    is bandwidth- and latency-bound, not FLOP-bound (~10% of the bf16 roof).
//  * Where the time goes (reasoned, 32K): the state pass is a chain of 512
//    chunk steps per (head, value-tile) CTA. The old tf32 pass (32-column
//    tiles, 128 CTAs) runs 96 m16n8k8 mma per warp per step from scalar
//    shared loads, reads U/O_intra from DRAM inside the step and waits on 3
//    barriers, several µs a step → most of the old pass's time. The default pass
//    does bf16 m16n8k16 (HMMA.16816) from ldmatrix, with every input of step
//    c+1 arriving by cp.async during step c and 2 barriers a step. Its limit
//    is L2 → SM traffic, since each CTA of a head fetches the same 48 KB of
//    W/Q'/Kd: 64-column tiles (64 CTAs, 96 HMMA per warp per step) move 5.2
//    MB per step, 32-column tiles 9.1 MB; ~1 µs a step → ~0.5 ms, near the
//    pass's DRAM floor (1.89e9 B, 0.44 ms). The intra-chunk kernel (16384
//    CTAs, one per SM at 187 KB shared memory, 16 warps) is latency-bound at
//    ~8–10 µs a CTA plus its 1.9e9 B of writes: ~1.0–1.3 ms. Predicted
//    total ~1.6–2 ms (what both paths measure: docs/dev/journal/performance.md).
//    Next steps: bf16 U/O_intra in the workspace (−1.07e9 B), two intra CTAs
//    per SM (bf16 q̂/k̂/v tiles in shared memory), then overlapping pass p+1's
//    intra kernel with pass p's state pass (programmatic dependent launch
//    once both fit on an SM together), and TMA multicast of W/Q'/Kd over a
//    cluster of a head's value tiles.
// Precision. The state, gates, cumulative decays, norms, the triangular
// solve and all accumulations stay fp32. The intra-chunk products run on
// tensor cores as tf32 (10-bit mantissa, rounded with cvt.rna). The default
// state pass multiplies bf16 operands (W, Q', Kd rounded once when written;
// S and V_new rounded as mma operands each chunk, S itself kept fp32 in
// registers), as fla's chunk_kda does; the reference path (kda.prefill=tf32)
// keeps them tf32. The per-channel decay is never split into
// exp(Γ_i)·exp(−Γ_j) (overflow): within a 16-token diagonal block
// exp(Γ_i − Γ_j) is formed pairwise, and off-diagonal blocks go through the
// first row r of the later block so both factors exp(Γ_i − Γ_r) and
// exp(Γ_r − Γ_j) are ≤ 1 (fla's chunk_kda scheme).
#include "backend/cuda/kda_common.cuh"

namespace strata::cuda {
namespace {

// ---------------------------------------------------------------------------
// Device helpers of the chunked form.

// fp32 → tf32 with round-to-nearest (the tensor core would otherwise just
// drop the low 13 bits, a biased truncation).
__device__ __forceinline__ float RoundTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// D += A·B for one m16n8k8 tile. Fragments (g = lane / 4, t = lane % 4):
// a = {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]}, b = {B[t][g], B[t+4][g]},
// c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}.
__device__ __forceinline__ void MmaTf32(float (&c)[4], const float (&a)[4], const float (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

__device__ __forceinline__ void StoreF2(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}

// Eight bf16 from a 16-byte aligned address.
__device__ __forceinline__ void LoadBf16x8(const bf16* p, float (&out)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = Bf16x2ToF32(w[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// The log-decay of row `row`, head h, channel d (per-head gates ignore d).
__device__ __forceinline__ float GateAt(const GateParams& gp, int64_t row, int h, int dk, int d) {
  if (gp.per_head) {
    return ForgetGate(LoadAct(gp.g_raw, gp.g_type, row * gp.ld_g + h), gp.dt_bias[h],
                      gp.neg_exp_a[h]);
  }
  const int64_t c = static_cast<int64_t>(h) * dk + d;
  return ForgetGate(LoadAct(gp.g_raw, gp.g_type, row * gp.ld_g + c), gp.dt_bias[c],
                    gp.neg_exp_a[h]);
}

// ===========================================================================
// Prefill, in passes of chunks (old path: kMaxChunksPerPass; default path: as
// many as the caller's workspace holds, 45 with the planned size):
//  1. KdaIntraChunkKernel, one CTA per (chunk, head), all in parallel: gates,
//     norms, cumulative decay Γ, the A and B matrices, T' = (I + A)^-1·diag(β),
//     and the chunk's factors W = T'·(K̂⊙e^Γ), U = T'·V, Q' = Q̂⊙e^Γ − B·W,
//     O_intra = B·U, Kd = K̂⊙e^(Γ_last − Γ), decay = e^Γ_last → workspace.
//  2. KdaChunkRecurrenceKernel (old: kda.prefill=tf32) / KdaChunkRecurrenceV2Kernel
//     (default), one CTA per (32 value columns, head), walking the chunks in order
//     with S in registers:
//       V_new = U − W·S;  O = O_intra + Q'·S;  S = diag(decay)·S + Kdᵀ·V_new.
//     (O = (Q̂⊙e^Γ)·S + B·V_new of the CPU code with B·W·S folded into Q' so
//     that the sequential pass has no chunk-by-chunk matrix product of its own.)
// Head dims are zero-padded to 128 in shared memory and in the workspace, so
// one instantiation serves every size; padded q/k/v channels are zero, which
// keeps the padded rows and columns of S at zero.

constexpr int kChunk = 64;
constexpr int kDim = 128;         // padded dk and dv
constexpr int kLd = kDim + 4;     // [64][128] tiles: A-operand loads hit 32 banks
constexpr int kLdc = kChunk + 4;  // [64][64] tiles
constexpr int kIntraThreads = 256;    // old path
constexpr int kIntraV2Threads = 512;  // default path
constexpr int64_t kMaxChunksPerPass = 32;

// One (chunk, head) item of the workspace, fp32, rows of kDim.
constexpr int64_t kTile = int64_t{kChunk} * kDim;
constexpr int64_t kOffW = 0;             // [64][128] W (tf32-rounded)
constexpr int64_t kOffQp = kTile;        // [64][128] Q' (tf32-rounded)
constexpr int64_t kOffKd = 2 * kTile;    // [64][128] Kd (tf32-rounded)
constexpr int64_t kOffU = 3 * kTile;     // [64][128] U
constexpr int64_t kOffOi = 4 * kTile;    // [64][128] O_intra
constexpr int64_t kOffDecay = 5 * kTile;  // [128] exp(Γ_last)
constexpr int64_t kItemFloats = 5 * kTile + kDim;
constexpr int64_t kItemBytes = kItemFloats * 4;
static_assert(kItemBytes % 256 == 0, "items keep the workspace's 256-byte alignment");

// The default path's item ("v2"): the three mma operands of the state pass
// (W, Q', Kd) as bf16 — halving their workspace traffic and feeding bf16
// m16n8k16 tensor cores — and U, O_intra and the decay as fp32 (they are only
// added, never multiplied, so keeping them exact costs no tensor-core rate).
// Byte offsets; every one a multiple of 16 for cp.async.
constexpr int64_t kV2OffW = 0;                                   // bf16 [64][128]
constexpr int64_t kV2OffQp = kV2OffW + kTile * 2;                // bf16 [64][128]
constexpr int64_t kV2OffKd = kV2OffQp + kTile * 2;               // bf16 [64][128]
constexpr int64_t kV2OffU = kV2OffKd + kTile * 2;                // fp32 [64][128]
constexpr int64_t kV2OffOi = kV2OffU + kTile * 4;                // fp32 [64][128]
constexpr int64_t kV2OffDecay = kV2OffOi + kTile * 4;            // fp32 [128]
constexpr int64_t kV2ItemBytes = kV2OffDecay + kDim * 4;         // 115200
static_assert(kV2ItemBytes % 256 == 0, "v2 items keep the workspace's 256-byte alignment");
static_assert(kV2ItemBytes <= kItemBytes, "the v2 path fits the planned (fp32) workspace");

// Where the intra-chunk kernel writes one (chunk, head) item. T is the type of
// the three mma operands: float (tf32-rounded, the old path) or bf16.
template <typename T>
struct ItemOut {
  T* w;
  T* qp;
  T* kd;
  float* u;
  float* oi;
  float* decay;
};

// Two consecutive operand values: tf32-rounded fp32 or round-to-nearest bf16.
__device__ __forceinline__ void StoreOperand2(float* p, float x, float y) {
  StoreF2(p, RoundTf32(x), RoundTf32(y));
}
__device__ __forceinline__ void StoreOperand2(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

constexpr size_t kIntraSmemFloats = 4 * kChunk * kLd + 3 * kChunk * kLdc + kChunk;
constexpr size_t kIntraSmemBytes = kIntraSmemFloats * sizeof(float);

struct PrefillParams {
  const bf16* q;  // token t at q + t·ld_qk + h·dk
  const bf16* k;
  const bf16* v;  // token t at v + t·ld_v + h·dv
  int64_t ld_qk;
  int64_t ld_v;
  GateParams gates;
  float* state;  // [H, dk, dv]
  void* out;     // [T, H, dv]
  ActType out_type;
  int heads;
  int qk_group;  // value heads per q/k head
  int dk;
  int dv;
  float scale;
  int64_t num_tokens;  // T of the whole call
  int64_t t_begin;     // first token of this pass
  int num_chunks;      // chunks in this pass
  float* ws;           // [num_chunks][H] items
  bool vec;            // 16-byte loads of q, k, v, g_raw and dt_bias are aligned
};

// A hint to bring the line holding `p` into L2 (no fault, no result).
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.L2 [%0];" ::"l"(p));  // generic address
}

// Eight consecutive channels d0..d0+7 of one q/k/v row into fp32 (zeros from
// `limit` on).
__device__ __forceinline__ void LoadRow8(const bf16* row, int d0, int limit, bool vec,
                                         float (&out)[8]) {
  if (vec && d0 + 8 <= limit) {
    LoadBf16x8(row + d0, out);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = d0 + j < limit ? __bfloat162float(row[d0 + j]) : 0.f;
}

// Phase 0: q̂ (scale folded in), k̂, g and v of the chunk into shared memory,
// rows past the sequence end and channels past dk/dv as zeros (g = 0 there, so
// Γ of padded rows equals Γ of the last real row). 16 threads per row.
template <int kThreads>
__device__ void IntraLoad(const PrefillParams& p, int h, int64_t t0, int len, float* sQ, float* sK,
                          float* sG, float* sV, float* sBeta) {
  const int tid = threadIdx.x;
  const int c8 = tid & 15, rr = tid >> 4;
  const int d0 = 8 * c8;
  const float nea = p.gates.neg_exp_a[h];
  // The loop below handles one row at a time and its loads wait on the
  // previous row's stores, so without this the CTA (alone on its SM) would
  // pay four DRAM round trips back to back; the hints pull all four rows'
  // segments towards L2 at once.
  for (int i = rr; i < len; i += kThreads / 16) {
    const int64_t t = t0 + i;
    const int64_t qk_off = t * p.ld_qk + static_cast<int64_t>(h / p.qk_group) * p.dk + d0;
    if (d0 < p.dk) {
      PrefetchL2(p.q + qk_off);
      PrefetchL2(p.k + qk_off);
      if (!p.gates.per_head) {
        const int64_t g_off = t * p.gates.ld_g + static_cast<int64_t>(h) * p.dk + d0;
        PrefetchL2(p.gates.g_type == ActType::kBf16
                       ? static_cast<const void*>(static_cast<const bf16*>(p.gates.g_raw) + g_off)
                       : static_cast<const void*>(static_cast<const float*>(p.gates.g_raw) + g_off));
      }
    }
    if (d0 < p.dv) PrefetchL2(p.v + t * p.ld_v + static_cast<int64_t>(h) * p.dv + d0);
  }
  for (int i = rr; i < kChunk; i += kThreads / 16) {
    float q[8], k[8], g[8], v[8];
    const bool valid = i < len;
    if (valid) {
      const int64_t t = t0 + i;
      const int64_t qk_head = h / p.qk_group;
      LoadRow8(p.q + t * p.ld_qk + qk_head * p.dk, d0, p.dk, p.vec, q);
      LoadRow8(p.k + t * p.ld_qk + qk_head * p.dk, d0, p.dk, p.vec, k);
      LoadRow8(p.v + t * p.ld_v + static_cast<int64_t>(h) * p.dv, d0, p.dv, p.vec, v);
      const int64_t g_off = t * p.gates.ld_g + static_cast<int64_t>(h) * p.dk;
      const float* bias = p.gates.dt_bias + static_cast<int64_t>(h) * p.dk;
      if (p.gates.per_head) {
        // GDN: one decay for the head, zero on the padded channels.
        const float gh = GateAt(p.gates, t, h, p.dk, 0);
#pragma unroll
        for (int j = 0; j < 8; ++j) g[j] = d0 + j < p.dk ? gh : 0.f;
      } else if (p.vec && d0 + 8 <= p.dk) {
        float raw[8];
        if (p.gates.g_type == ActType::kBf16) {
          LoadBf16x8(static_cast<const bf16*>(p.gates.g_raw) + g_off + d0, raw);
        } else {
          const float* gr = static_cast<const float*>(p.gates.g_raw) + g_off + d0;
          const float4 lo = LoadF4(gr), hi = LoadF4(gr + 4);
          raw[0] = lo.x;
          raw[1] = lo.y;
          raw[2] = lo.z;
          raw[3] = lo.w;
          raw[4] = hi.x;
          raw[5] = hi.y;
          raw[6] = hi.z;
          raw[7] = hi.w;
        }
        const float4 b0 = LoadF4(bias + d0), b1 = LoadF4(bias + d0 + 4);
        const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) g[j] = ForgetGate(raw[j], bb[j], nea);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int d = d0 + j;
          g[j] = d < p.dk ? ForgetGate(LoadAct(p.gates.g_raw, p.gates.g_type, g_off + d), bias[d], nea)
                          : 0.f;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = k[j] = g[j] = v[j] = 0.f;
    }
    float ssq_q = 0.f, ssq_k = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      ssq_q += q[j] * q[j];
      ssq_k += k[j] * k[j];
    }
    // The 16 threads of a row are an aligned group of 16 lanes.
    ssq_q = WarpSumXor(ssq_q, 1, 8);
    ssq_k = WarpSumXor(ssq_k, 1, 8);
    const float inv_q = p.scale / sqrtf(ssq_q + kNormEps);
    const float inv_k = 1.f / sqrtf(ssq_k + kNormEps);
    float* rq = sQ + i * kLd + d0;
    float* rk = sK + i * kLd + d0;
    float* rg = sG + i * kLd + d0;
    float* rv = sV + i * kLd + d0;
    StoreF4(rq, make_float4(q[0] * inv_q, q[1] * inv_q, q[2] * inv_q, q[3] * inv_q));
    StoreF4(rq + 4, make_float4(q[4] * inv_q, q[5] * inv_q, q[6] * inv_q, q[7] * inv_q));
    StoreF4(rk, make_float4(k[0] * inv_k, k[1] * inv_k, k[2] * inv_k, k[3] * inv_k));
    StoreF4(rk + 4, make_float4(k[4] * inv_k, k[5] * inv_k, k[6] * inv_k, k[7] * inv_k));
    StoreF4(rg, make_float4(g[0], g[1], g[2], g[3]));
    StoreF4(rg + 4, make_float4(g[4], g[5], g[6], g[7]));
    StoreF4(rv, make_float4(v[0], v[1], v[2], v[3]));
    StoreF4(rv + 4, make_float4(v[4], v[5], v[6], v[7]));
    if (c8 == 0) {
      sBeta[i] = valid ? Sigmoid(LoadAct(p.gates.beta_raw, p.gates.beta_type,
                                         (t0 + i) * p.gates.ld_beta + h))
                       : 0.f;
    }
  }
}

// Off-diagonal blocks of row block I (rows 16I..16I+15) against all columns
// j < 16I, one warp, reference row r = 16I:
//   A[i][j] = β_i Σ_d (k̂_i e^(Γ_i − Γ_r))_d (k̂_j e^(Γ_r − Γ_j))_d,
//   B[i][j] =     Σ_d (q̂_i e^(Γ_i − Γ_r))_d (k̂_j e^(Γ_r − Γ_j))_d.
// The scaled operands are formed while loading the fragments: a lane's A and
// B fragments use the same two channels per k-step, and every element is
// loaded by exactly one lane, so each exp is computed once.
template <int I>
__device__ void IntraOffDiagonal(const float* sQ, const float* sK, const float* sG,
                                 const float* sBeta, float* sA, float* sB) {
  constexpr int kNt = 2 * I;  // 8-column tiles left of the block
  constexpr int r = 16 * I;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int ia = r + g, ib = r + g + 8;
  float acc_k[kNt][4], acc_q[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_k[n][c] = acc_q[n][c] = 0.f;
  }
#pragma unroll 2
  for (int ks = 0; ks < kDim / 8; ++ks) {
    const int d0 = 8 * ks + t, d1 = d0 + 4;
    const float gr0 = sG[r * kLd + d0], gr1 = sG[r * kLd + d1];
    const float ea0 = __expf(sG[ia * kLd + d0] - gr0), eb0 = __expf(sG[ib * kLd + d0] - gr0);
    const float ea1 = __expf(sG[ia * kLd + d1] - gr1), eb1 = __expf(sG[ib * kLd + d1] - gr1);
    const float ak[4] = {RoundTf32(sK[ia * kLd + d0] * ea0), RoundTf32(sK[ib * kLd + d0] * eb0),
                         RoundTf32(sK[ia * kLd + d1] * ea1), RoundTf32(sK[ib * kLd + d1] * eb1)};
    const float aq[4] = {RoundTf32(sQ[ia * kLd + d0] * ea0), RoundTf32(sQ[ib * kLd + d0] * eb0),
                         RoundTf32(sQ[ia * kLd + d1] * ea1), RoundTf32(sQ[ib * kLd + d1] * eb1)};
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      const int j = 8 * n + g;
      const float bf[2] = {RoundTf32(sK[j * kLd + d0] * __expf(gr0 - sG[j * kLd + d0])),
                           RoundTf32(sK[j * kLd + d1] * __expf(gr1 - sG[j * kLd + d1]))};
      MmaTf32(acc_k[n], ak, bf);
      MmaTf32(acc_q[n], aq, bf);
    }
  }
  const float beta_a = sBeta[ia], beta_b = sBeta[ib];
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
    const int col = 8 * n + 2 * t;
    sA[ia * kLdc + col] = beta_a * acc_k[n][0];
    sA[ia * kLdc + col + 1] = beta_a * acc_k[n][1];
    sA[ib * kLdc + col] = beta_b * acc_k[n][2];
    sA[ib * kLdc + col + 1] = beta_b * acc_k[n][3];
    sB[ia * kLdc + col] = acc_q[n][0];
    sB[ia * kLdc + col + 1] = acc_q[n][1];
    sB[ib * kLdc + col] = acc_q[n][2];
    sB[ib * kLdc + col + 1] = acc_q[n][3];
  }
}

// The four 16×16 diagonal blocks, j ≤ i, with the pairwise factor
// exp(Γ_i − Γ_j) (a reference row inside a block would need a factor > 1).
// `group` (0..num_groups) is an 8-lane group; its lanes split the channels
// (lane l8 takes d = 4·l8 + 32s) and combine with two shuffles.
__device__ void IntraDiagonal(const float* sQ, const float* sK, const float* sG, const float* sBeta,
                              float* sA, float* sB, int group, int num_groups) {
  constexpr int kPairsPerBlock = 16 * 17 / 2;
  constexpr int kPairs = 4 * kPairsPerBlock;
  const int l8 = threadIdx.x & 7;
  // Every lane runs the same trip count (the shuffles need the whole warp);
  // past the end a group recomputes the last pair and drops it.
  for (int base = 0; base < kPairs; base += num_groups) {
    const bool active = base + group < kPairs;
    const int pair = active ? base + group : kPairs - 1;
    const int blk = pair / kPairsPerBlock;
    const int q = pair - blk * kPairsPerBlock;
    // Row li of the triangle: li(li+1)/2 ≤ q < (li+1)(li+2)/2, in closed form
    // (sqrtf is exact on the perfect squares where the floor could tip) with
    // a one-step guard instead of a data-dependent loop.
    int li = static_cast<int>((sqrtf(static_cast<float>(8 * q + 1)) - 1.f) * 0.5f);
    if ((li + 1) * (li + 2) / 2 <= q) ++li;
    if (li * (li + 1) / 2 > q) --li;
    const int lj = q - li * (li + 1) / 2;
    const int i = 16 * blk + li, j = 16 * blk + lj;
    const bool same = i == j;
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int s = 0; s < kDim / 32; ++s) {
      const int d = 4 * l8 + 32 * s;
      const float4 ki = LoadF4(sK + i * kLd + d), qi = LoadF4(sQ + i * kLd + d);
      const float4 kj = LoadF4(sK + j * kLd + d);
      const float4 gi = LoadF4(sG + i * kLd + d), gj = LoadF4(sG + j * kLd + d);
      const float e0 = same ? 1.f : __expf(gi.x - gj.x), e1 = same ? 1.f : __expf(gi.y - gj.y);
      const float e2 = same ? 1.f : __expf(gi.z - gj.z), e3 = same ? 1.f : __expf(gi.w - gj.w);
      const float f0 = kj.x * e0, f1 = kj.y * e1, f2 = kj.z * e2, f3 = kj.w * e3;
      a += ki.x * f0 + ki.y * f1 + ki.z * f2 + ki.w * f3;
      b += qi.x * f0 + qi.y * f1 + qi.z * f2 + qi.w * f3;
    }
    a = WarpSumXor(a, 1, 4);
    b = WarpSumXor(b, 1, 4);
    if (active && l8 == 0) {
      if (!same) sA[i * kLdc + j] = sBeta[i] * a;
      sB[i * kLdc + j] = b;
    }
  }
}

// Y = L·X for a 64×64 lower-triangular L (zeros above the diagonal,
// unrounded fp32, rounded to tf32 here) and a [64][128] operand X held as tf32
// in shared memory: this warp's columns n0..n0+31 of the 16-row blocks ms[].
// k-steps past a row block's diagonal are skipped. With 8 warps (the old
// path) warp w takes columns 32·(w%4).. of panel w/4 for all four row blocks;
// with 16 warps, warps 8..15 take row blocks {1, 2} and warps 0..7 {0, 3}
// (10 k-steps each).
template <int kM>
__device__ __forceinline__ void LowerTimesPanels(const float* sL, const float* x, int n0,
                                                 const int (&ms)[kM], float (&acc)[kM][4][4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < kM; ++i) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][n][c] = 0.f;
    }
  }
#pragma unroll
  for (int ks = 0; ks < kChunk / 8; ++ks) {
    float bf[4][2];
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int col = n0 + 8 * n + g;
      bf[n][0] = x[(8 * ks + t) * kLd + col];
      bf[n][1] = x[(8 * ks + t + 4) * kLd + col];
    }
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      const int m = ms[i];
      if (ks >= 2 * m + 2) continue;  // L is zero right of the row block's diagonal
      const int r0 = 16 * m + g;
      const float a[4] = {RoundTf32(sL[r0 * kLdc + 8 * ks + t]),
                          RoundTf32(sL[(r0 + 8) * kLdc + 8 * ks + t]),
                          RoundTf32(sL[r0 * kLdc + 8 * ks + t + 4]),
                          RoundTf32(sL[(r0 + 8) * kLdc + 8 * ks + t + 4])};
#pragma unroll
      for (int n = 0; n < 4; ++n) MmaTf32(acc[i][n], a, bf[n]);
    }
  }
}

// T' = (I + A)^-1·diag(β) in 16×16 blocks (A strictly lower): with X the
// inverse, X_II = (I + A_II)^-1 and X_IJ = −X_II·Σ_{K=J}^{I−1} A_IK·X_KJ for
// I > J. The four diagonal blocks are solved in parallel (16 sequential rows
// instead of 64), then one block sub-diagonal at a time; the partial sums go
// to the unused blocks above the diagonal, which no later step reads. β
// scales the columns at the end. All fp32.
template <int kThreads>
__device__ void IntraInverse(const float* sA, const float* sBeta, float* sX) {
  const int tid = threadIdx.x;
  // The solve's thread maps need exactly 256 threads; with 512, warps 8..15
  // (whole warps, so the shuffles stay full-warp) only join the barriers.
  const bool solver = tid < 256;
  // Diagonal blocks, one column per 4 lanes (c = tid/4; a warp's 8 columns
  // share one block): row i is [i = c] − Σ_{i0≤j<i} A[i][j]·X[j][c], every
  // fourth j per lane. Entries above the diagonal come out as exact zeros.
  if (solver) {
    const int c = tid >> 2, quarter = tid & 3;
    const int i0 = c & ~15;
    for (int i = i0; i < i0 + 16; ++i) {
      float sum = 0.f;
      for (int j = i0 + quarter; j < i; j += 4) sum += sA[i * kLdc + j] * sX[j * kLdc + c];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (quarter == 0) sX[i * kLdc + c] = (i == c ? 1.f : 0.f) - sum;
      __syncwarp();
    }
  }
  __syncthreads();
  // Sub-diagonal `dist`: blocks (I, J = I − dist). Thread tid owns element
  // (r, cc) = (tid/16, tid%16) of every block of the level.
  const int r = tid >> 4, cc = tid & 15;
  for (int dist = 1; dist < 4; ++dist) {
    for (int bi = dist; bi < 4 && solver; ++bi) {
      const int bj = bi - dist;
      float sum = 0.f;  // P_IJ[r][cc] = Σ_{K=J}^{I−1} A_IK·X_KJ
      for (int m = 16 * bj; m < 16 * bi; ++m) {
        sum += sA[(16 * bi + r) * kLdc + m] * sX[m * kLdc + 16 * bj + cc];
      }
      sX[(16 * bj + r) * kLdc + 16 * bi + cc] = sum;  // block (J, I): above the diagonal
    }
    __syncthreads();
    for (int bi = dist; bi < 4 && solver; ++bi) {
      const int bj = bi - dist;
      float sum = 0.f;  // (X_II·P_IJ)[r][cc]; X_II is zero right of its diagonal
      for (int m = 0; m <= r; ++m) {
        sum += sX[(16 * bi + r) * kLdc + 16 * bi + m] * sX[(16 * bj + m) * kLdc + 16 * bi + cc];
      }
      sX[(16 * bi + r) * kLdc + 16 * bj + cc] = -sum;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < kChunk * kChunk; idx += kThreads) {
    const int i = idx / kChunk, c = idx % kChunk;
    sX[i * kLdc + c] *= sBeta[c];
  }
}

// T: the type of the W/Q'/Kd items (float: old path, bf16: default);
// kThreads: 256 (old path) or 512 (default: 13 warps on the diagonal blocks
// instead of 5, two rows per thread in the load, 16 warps in the panels).
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads, 1) KdaIntraChunkKernel(const PrefillParams p) {
  static_assert(kThreads == 256 || kThreads == 512, "thread maps assume 8 or 16 warps");
  static_assert(kThreads != 512 || kThreads == 4 * kDim, "the parallel Γ scan maps 4 threads a channel");
  constexpr int kWarps = kThreads / 32;
  extern __shared__ float4 intra_smem[];
  float* sQ = reinterpret_cast<float*>(intra_smem);  // [64][kLd] q̂, then q̂⊙e^Γ
  float* sK = sQ + kChunk * kLd;                       // k̂, then k̂⊙e^Γ, then W
  float* sG = sK + kChunk * kLd;                       // g, then Γ
  float* sV = sG + kChunk * kLd;                       // v, then U
  float* sA = sV + kChunk * kLd;                       // [64][kLdc] A (β-scaled rows)
  float* sB = sA + kChunk * kLdc;                      // B
  float* sX = sB + kChunk * kLdc;                      // T' = (I + A)^-1·diag(β)
  float* sBeta = sX + kChunk * kLdc;                   // [64]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int chunk = blockIdx.x, h = blockIdx.y;
  const int64_t t0 = p.t_begin + static_cast<int64_t>(chunk) * kChunk;
  const int len = static_cast<int>(std::min<int64_t>(kChunk, p.num_tokens - t0));
  ItemOut<T> item;
  if constexpr (sizeof(T) == 4) {
    float* base = p.ws + (static_cast<int64_t>(chunk) * p.heads + h) * kItemFloats;
    item = ItemOut<T>{base + kOffW, base + kOffQp, base + kOffKd,
                      base + kOffU, base + kOffOi, base + kOffDecay};
  } else {
    char* base = reinterpret_cast<char*>(p.ws) +
                 (static_cast<int64_t>(chunk) * p.heads + h) * kV2ItemBytes;
    item = ItemOut<T>{reinterpret_cast<T*>(base + kV2OffW), reinterpret_cast<T*>(base + kV2OffQp),
                      reinterpret_cast<T*>(base + kV2OffKd), reinterpret_cast<float*>(base + kV2OffU),
                      reinterpret_cast<float*>(base + kV2OffOi),
                      reinterpret_cast<float*>(base + kV2OffDecay)};
  }

  IntraLoad<kThreads>(p, h, t0, len, sQ, sK, sG, sV, sBeta);
  __syncthreads();

  // Γ_i = Σ_{s≤i} g_s per channel.
  if constexpr (kThreads == 256) {
    // Sequential, as the CPU's running sum; meanwhile the other half of the
    // block clears A and B.
    if (tid < kDim) {
      float run = 0.f;
#pragma unroll 8
      for (int i = 0; i < kChunk; ++i) {
        run += sG[i * kLd + tid];
        sG[i * kLd + tid] = run;
      }
    } else {
      for (int idx = tid - kDim; idx < 2 * kChunk * kLdc; idx += kThreads - kDim) sA[idx] = 0.f;
    }
  } else {
    // Four 16-row segments per channel in parallel (a 64-step dependent
    // chain would be ~1 µs of the CTA): local running sums, the segment
    // totals through shared memory (sA as scratch, cleared afterwards), then
    // each segment adds the totals before it. Summation order differs from
    // the CPU's by the regrouping only (≤ a few ulp of Γ).
    const int seg = tid >> 7, ch = tid & (kDim - 1);
    float* col = sG + 16 * seg * kLd + ch;
    float run = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      run += col[i * kLd];
      col[i * kLd] = run;
    }
    sA[seg * kDim + ch] = run;
    __syncthreads();
    float offset = 0.f;
    for (int s = 0; s < seg; ++s) offset += sA[s * kDim + ch];
    if (seg > 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) col[i * kLd] += offset;
    }
    __syncthreads();  // the totals are read before A is cleared
    for (int idx = tid; idx < 2 * kChunk * kLdc; idx += kThreads) sA[idx] = 0.f;
  }
  __syncthreads();

  // A and B: warps 0..2 take the off-diagonal row blocks on tensor cores,
  // the other warps the diagonal blocks on CUDA cores.
  if (warp == 0) {
    IntraOffDiagonal<1>(sQ, sK, sG, sBeta, sA, sB);
  } else if (warp == 1) {
    IntraOffDiagonal<2>(sQ, sK, sG, sBeta, sA, sB);
  } else if (warp == 2) {
    IntraOffDiagonal<3>(sQ, sK, sG, sBeta, sA, sB);
  } else {
    IntraDiagonal(sQ, sK, sG, sBeta, sA, sB, (warp - 3) * 4 + (lane >> 3), (kWarps - 3) * 4);
  }
  __syncthreads();

  // Elementwise factors (reads Γ, q̂, k̂; writes only this thread's elements).
  {
    const float* g_last = sG + (kChunk - 1) * kLd;
    for (int idx = tid; idx < kChunk * (kDim / 4); idx += kThreads) {
      const int i = idx / (kDim / 4), d = (idx % (kDim / 4)) * 4;
      const float4 gm = LoadF4(sG + i * kLd + d), gl = LoadF4(g_last + d);
      const float4 qv = LoadF4(sQ + i * kLd + d), kv = LoadF4(sK + i * kLd + d);
      const float4 eg = make_float4(__expf(gm.x), __expf(gm.y), __expf(gm.z), __expf(gm.w));
      const float4 el = make_float4(__expf(gl.x - gm.x), __expf(gl.y - gm.y),
                                    __expf(gl.z - gm.z), __expf(gl.w - gm.w));
      StoreF4(sQ + i * kLd + d, make_float4(qv.x * eg.x, qv.y * eg.y, qv.z * eg.z, qv.w * eg.w));
      StoreF4(sK + i * kLd + d,
              make_float4(RoundTf32(kv.x * eg.x), RoundTf32(kv.y * eg.y), RoundTf32(kv.z * eg.z),
                          RoundTf32(kv.w * eg.w)));
      StoreOperand2(item.kd + i * kDim + d, kv.x * el.x, kv.y * el.y);
      StoreOperand2(item.kd + i * kDim + d + 2, kv.z * el.z, kv.w * el.w);
    }
    if (tid < kDim) item.decay[tid] = __expf(g_last[tid]);
  }

  IntraInverse<kThreads>(sA, sBeta, sX);
  __syncthreads();

  const int g = lane >> 2, t = lane & 3;
  // Panel (0: K̂⊙e^Γ then W, 1: V then U), its 32 columns, and row blocks.
  const int panel = (warp >> 2) & 1;
  const int n0 = (warp & 3) * 32;
  constexpr int kM = kWarps == 8 ? 4 : 2;
  int ms[kM];
  if constexpr (kM == 4) {
    ms[0] = 0;
    ms[1] = 1;
    ms[2] = 2;
    ms[3] = 3;
  } else {
    ms[0] = warp < 8 ? 0 : 1;
    ms[1] = 3 - ms[0];
  }
  float acc[kM][4][4];

  // [W | U] = T'·[K̂⊙e^Γ | V]; W (and a tf32 copy of U) replace their inputs
  // in shared memory for the next product.
  LowerTimesPanels<kM>(sX, panel == 0 ? sK : sV, n0, ms, acc);
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int col = n0 + 8 * n + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * ms[mi] + g + 8 * half;
        const float x = acc[mi][n][2 * half], y = acc[mi][n][2 * half + 1];
        if (panel == 0) {
          StoreF2(sK + row * kLd + col, RoundTf32(x), RoundTf32(y));
          StoreOperand2(item.w + row * kDim + col, x, y);
        } else {
          StoreF2(sV + row * kLd + col, RoundTf32(x), RoundTf32(y));
          StoreF2(item.u + row * kDim + col, x, y);
        }
      }
    }
  }
  __syncthreads();

  // [B·W | B·U] → Q' = Q̂⊙e^Γ − B·W and O_intra = B·U.
  LowerTimesPanels<kM>(sB, panel == 0 ? sK : sV, n0, ms, acc);
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int col = n0 + 8 * n + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * ms[mi] + g + 8 * half;
        const float x = acc[mi][n][2 * half], y = acc[mi][n][2 * half + 1];
        if (panel == 0) {
          const float* qg = sQ + row * kLd + col;
          StoreOperand2(item.qp + row * kDim + col, qg[0] - x, qg[1] - y);
        } else {
          StoreF2(item.oi + row * kDim + col, x, y);
        }
      }
    }
  }
}

constexpr int kRecThreads = 256;
constexpr int kVt = 32;            // value columns per CTA
constexpr int kLdS = kVt + 8;      // [k][n] B-operand tiles: fragment loads hit 32 banks
constexpr int kLdKd = kDim + 8;    // Kd read transposed as the A operand
constexpr size_t kRecSmemFloats =
    2 * kChunk * kLd + 2 * kChunk * kLdKd + kChunk * kLd + kDim * kLdS + kChunk * kLdS;
constexpr size_t kRecSmemBytes = kRecSmemFloats * sizeof(float);

// The state pass. Warp w keeps rows 16w..16w+15 of the CTA's [128 × 32] slice
// of S as mma accumulators (fp32). Per chunk: publish S (tf32) to shared
// memory; V_new = U − W·S and O = O_intra + Q'·S (warp w: rows 16·(w/2).. of
// the 64, columns 16·(w%2)..); then S = decay⊙S + Kdᵀ·V_new. W and Kd are
// double-buffered with cp.async (the next chunk's arrive during this one); Q'
// has one buffer, refilled once this chunk's O is done. U, O_intra and decay
// are read from global memory in fragment order, issued ahead of the products
// that need them.
__global__ void __launch_bounds__(kRecThreads, 1) KdaChunkRecurrenceKernel(const PrefillParams p) {
  extern __shared__ float4 rec_smem[];
  float* sW = reinterpret_cast<float*>(rec_smem);  // [2][64][kLd]
  float* sKd = sW + 2 * kChunk * kLd;                // [2][64][kLdKd]
  float* sQp = sKd + 2 * kChunk * kLdKd;             // [64][kLd]
  float* sS = sQp + kChunk * kLd;                    // [128][kLdS]
  float* sVn = sS + kDim * kLdS;                     // [64][kLdS]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int v0 = blockIdx.x * kVt;
  const int h = blockIdx.y;
  const int64_t item_stride = static_cast<int64_t>(p.heads) * kItemFloats;
  const float* items = p.ws + static_cast<int64_t>(h) * kItemFloats;
  float* state = p.state + static_cast<int64_t>(h) * p.dk * p.dv;

  auto load_w_kd = [&](int c, int buf) {
    const float* src = items + c * item_stride;
    float* dw = sW + buf * kChunk * kLd;
    float* dkd = sKd + buf * kChunk * kLdKd;
    for (int idx = tid; idx < kChunk * (kDim / 4); idx += kRecThreads) {
      const int row = idx / (kDim / 4), c4 = (idx % (kDim / 4)) * 4;
      CpAsync16(dw + row * kLd + c4, src + kOffW + row * kDim + c4, true);
      CpAsync16(dkd + row * kLdKd + c4, src + kOffKd + row * kDim + c4, true);
    }
  };
  auto load_qp = [&](int c) {
    const float* src = items + c * item_stride;
    for (int idx = tid; idx < kChunk * (kDim / 4); idx += kRecThreads) {
      const int row = idx / (kDim / 4), c4 = (idx % (kDim / 4)) * 4;
      CpAsync16(sQp + row * kLd + c4, src + kOffQp + row * kDim + c4, true);
    }
  };
  load_w_kd(0, 0);
  load_qp(0);
  CpAsyncCommit();

  // acc[n] holds S rows (16w + g, 16w + g + 8) × columns v0 + 8n + 2t (+1).
  float acc[4][4];
  const int d_lo = 16 * warp + g, d_hi = d_lo + 8;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = c < 2 ? d_lo : d_hi;
      const int col = v0 + 8 * n + 2 * t + (c & 1);
      acc[n][c] = d < p.dk && col < p.dv ? state[static_cast<int64_t>(d) * p.dv + col] : 0.f;
    }
  }

  // Tiling of the two 64-row products: rows 16·mt.., column tiles nb, nb + 1.
  const int mt = warp >> 1, nb = (warp & 1) * 2;
  const int r_lo = 16 * mt + g, r_hi = r_lo + 8;

  for (int c = 0; c < p.num_chunks; ++c) {
    const int buf = c & 1;
    const float* item = items + c * item_stride;
    const int64_t t0 = p.t_begin + static_cast<int64_t>(c) * kChunk;
    const int len = static_cast<int>(std::min<int64_t>(kChunk, p.num_tokens - t0));

    // Publish S (the B operand of W·S and Q'·S).
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      StoreF2(sS + d_lo * kLdS + 8 * n + 2 * t, RoundTf32(acc[n][0]), RoundTf32(acc[n][1]));
      StoreF2(sS + d_hi * kLdS + 8 * n + 2 * t, RoundTf32(acc[n][2]), RoundTf32(acc[n][3]));
    }
    CpAsyncWaitAll();
    __syncthreads();
    // The other W/Kd buffer was last read before this barrier.
    if (c + 1 < p.num_chunks) {
      load_w_kd(c + 1, buf ^ 1);
      CpAsyncCommit();
    }

    // V_new = U − W·S and O = O_intra + Q'·S on the same tiles.
    {
      float u[2][4], oi[2][4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = v0 + 8 * (nb + j) + 2 * t;
        const float2 ul = *reinterpret_cast<const float2*>(item + kOffU + r_lo * kDim + col);
        const float2 uh = *reinterpret_cast<const float2*>(item + kOffU + r_hi * kDim + col);
        const float2 ol = *reinterpret_cast<const float2*>(item + kOffOi + r_lo * kDim + col);
        const float2 oh = *reinterpret_cast<const float2*>(item + kOffOi + r_hi * kDim + col);
        const float uv[4] = {ul.x, ul.y, uh.x, uh.y}, ov[4] = {ol.x, ol.y, oh.x, oh.y};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          u[j][e] = uv[e];
          oi[j][e] = ov[e];
        }
      }
      float ws_acc[2][4] = {}, qs_acc[2][4] = {};
      const float* w_tile = sW + buf * kChunk * kLd;
#pragma unroll 4
      for (int ks = 0; ks < kDim / 8; ++ks) {
        const int k0 = 8 * ks + t;
        const float aw[4] = {w_tile[r_lo * kLd + k0], w_tile[r_hi * kLd + k0],
                             w_tile[r_lo * kLd + k0 + 4], w_tile[r_hi * kLd + k0 + 4]};
        const float aq[4] = {sQp[r_lo * kLd + k0], sQp[r_hi * kLd + k0], sQp[r_lo * kLd + k0 + 4],
                             sQp[r_hi * kLd + k0 + 4]};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int n = 8 * (nb + j) + g;
          const float bf[2] = {sS[k0 * kLdS + n], sS[(k0 + 4) * kLdS + n]};
          MmaTf32(ws_acc[j], aw, bf);
          MmaTf32(qs_acc[j], aq, bf);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = 8 * (nb + j) + 2 * t;
        StoreF2(sVn + r_lo * kLdS + col, RoundTf32(u[j][0] - ws_acc[j][0]),
                RoundTf32(u[j][1] - ws_acc[j][1]));
        StoreF2(sVn + r_hi * kLdS + col, RoundTf32(u[j][2] - ws_acc[j][2]),
                RoundTf32(u[j][3] - ws_acc[j][3]));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = e < 2 ? r_lo : r_hi;
          const int n = v0 + col + (e & 1);
          if (row < len && n < p.dv) {
            StoreAct(p.out, p.out_type, ((t0 + row) * p.heads + h) * p.dv + n,
                     oi[j][e] + qs_acc[j][e]);
          }
        }
      }
    }
    __syncthreads();  // V_new complete; Q' and S no longer read this chunk
    if (c + 1 < p.num_chunks) {
      load_qp(c + 1);
      CpAsyncCommit();
    }

    // S = decay⊙S + Kdᵀ·V_new (A[d][i] = Kd[i][d]).
    {
      const float dec_lo = item[kOffDecay + d_lo], dec_hi = item[kOffDecay + d_hi];
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        acc[n][0] *= dec_lo;
        acc[n][1] *= dec_lo;
        acc[n][2] *= dec_hi;
        acc[n][3] *= dec_hi;
      }
      const float* kd = sKd + buf * kChunk * kLdKd;
#pragma unroll 4
      for (int ks = 0; ks < kChunk / 8; ++ks) {
        const int k0 = 8 * ks + t;
        const float a[4] = {kd[k0 * kLdKd + d_lo], kd[k0 * kLdKd + d_hi],
                            kd[(k0 + 4) * kLdKd + d_lo], kd[(k0 + 4) * kLdKd + d_hi]};
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const float bf[2] = {sVn[k0 * kLdS + 8 * n + g], sVn[(k0 + 4) * kLdS + 8 * n + g]};
          MmaTf32(acc[n], a, bf);
        }
      }
    }
  }

#pragma unroll
  for (int n = 0; n < 4; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = c < 2 ? d_lo : d_hi;
      const int col = v0 + 8 * n + 2 * t + (c & 1);
      if (d < p.dk && col < p.dv) state[static_cast<int64_t>(d) * p.dv + col] = acc[n][c];
    }
  }
}

// ===========================================================================
// The state pass of the default path ("v2"): bf16 m16n8k16 tensor cores with
// fp32 accumulation, operands fetched with ldmatrix, every per-chunk input
// (W, Q', Kd as bf16; this CTA's 32-column slices of U and O_intra and the
// decay as fp32) double-buffered with cp.async one chunk ahead, two barriers
// per chunk. S stays fp32 in registers; it is rounded to bf16 only as the B
// operand of W·S and Q'·S (as V_new is for Kdᵀ·V_new), so rounding does not
// accumulate across chunks.

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D += A·B for one m16n8k16 bf16 tile (fp32 accumulators in the m16n8k8
// layout above: c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}).
__device__ __forceinline__ void MmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void StoreBf16x2(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

constexpr int kV2Threads = 256;
constexpr int kV2LdOp = kDim + 8;  // bf16 [64][128] operand rows: 272 B, ldmatrix conflict-free
constexpr int kV2OpBytes = kChunk * kV2LdOp * 2;

// Shared-memory plan of the state pass for a value tile of kVt columns.
// fp32 [64][kVt] slices with kVt + 8 floats a row (float2 fragment reads hit
// distinct banks: the row stride is 8 banks); bf16 [128][kVt] S and [64][kVt]
// V_new with kVt + 8 elements a row (16 or 36 words: the 8 rows of an
// ldmatrix land on distinct 16-byte bank groups).
template <int kVt>
struct RecV2Layout {
  static constexpr int kLdSlice = kVt + 8;
  static constexpr int kLdS = kVt + 8;
  static constexpr int kSliceBytes = kChunk * kLdSlice * 4;
  static constexpr int kStageBytes = 3 * kV2OpBytes + 2 * kSliceBytes + kDim * 4;
  static constexpr size_t kSmemBytes =
      2 * static_cast<size_t>(kStageBytes) + (kDim + kChunk) * kLdS * 2;
  static_assert(kV2OpBytes % 16 == 0 && kSliceBytes % 16 == 0 && kStageBytes % 16 == 0 &&
                    (kLdS * 2) % 16 == 0,
                "cp.async destinations and ldmatrix rows stay 16-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM's shared memory");
};

// CTA (value tile of kVt columns, head) walks the pass's chunks in order:
//   V_new = U − W·S;  O = O_intra + Q'·S;  S = diag(decay)·S + Kdᵀ·V_new.
// Warp w keeps rows 16w..16w+15 of the CTA's [128 × kVt] slice of S as kVt/8
// m16n8 fp32 accumulators. The two [64 × kVt] products: warp w takes rows
// 16·(w/2).. and the (w%2)-th half of the column tiles.
//
// kVt trades the state pass's two limits: the W/Q'/Kd tiles (48 KB a chunk)
// are fetched from L2 by each of the dv/kVt CTAs of a head, so 32 columns
// move 9.1 MB through L2 per chunk step (128 CTAs) and 64 columns 5.2 MB (64
// CTAs) for twice the mma work per warp. The L2 traffic dominates (a step's
// mma work is ~0.3 µs at 32 columns), so 64 was expected to win; 32 columns
// measured faster at 4K and 32K tokens (docs/dev/journal/performance.md,
// Session 5): the 128-CTA grid's extra parallelism outweighs the L2 traffic,
// so the pass runs 32 columns.
template <int kVt>
__global__ void __launch_bounds__(kV2Threads, 1) KdaChunkRecurrenceV2Kernel(const PrefillParams p) {
  using L = RecV2Layout<kVt>;
  constexpr int kNt = kVt / 8;   // n8 tiles of the slice (step 3, per warp)
  constexpr int kNw = kNt / 2;   // n8 tiles per warp in step 2
  static_assert(kVt % 32 == 0 && kVt <= kDim, "pairs of n8 tiles per warp half");
  extern __shared__ float4 v2_smem[];
  char* smem = reinterpret_cast<char*>(v2_smem);
  bf16* sS = reinterpret_cast<bf16*>(smem + 2 * L::kStageBytes);  // [128][kLdS] S as bf16, [d][n]
  bf16* sVn = sS + kDim * L::kLdS;                                 // [64][kLdS]  V_new, [i][n]
  struct Stage {
    bf16* w;       // [64][kV2LdOp]
    bf16* qp;      // [64][kV2LdOp]
    bf16* kd;      // [64][kV2LdOp]
    float* u;      // [64][kLdSlice]
    float* oi;     // [64][kLdSlice]
    float* decay;  // [128]
  };
  auto stage = [&](int buf) {
    char* b = smem + buf * L::kStageBytes;
    return Stage{reinterpret_cast<bf16*>(b), reinterpret_cast<bf16*>(b + kV2OpBytes),
                 reinterpret_cast<bf16*>(b + 2 * kV2OpBytes),
                 reinterpret_cast<float*>(b + 3 * kV2OpBytes),
                 reinterpret_cast<float*>(b + 3 * kV2OpBytes + L::kSliceBytes),
                 reinterpret_cast<float*>(b + 3 * kV2OpBytes + 2 * L::kSliceBytes)};
  };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int v0 = blockIdx.x * kVt;
  const int h = blockIdx.y;
  const char* items = reinterpret_cast<const char*>(p.ws) + static_cast<int64_t>(h) * kV2ItemBytes;
  const int64_t item_stride = static_cast<int64_t>(p.heads) * kV2ItemBytes;
  float* state = p.state + static_cast<int64_t>(h) * p.dk * p.dv;

  // One chunk's inputs into stage `buf`, in 16-byte segments: 3 × 1024 of
  // operands, 2 × 16·kVt of slices, 32 of decay.
  auto load_stage = [&](int c, int buf) {
    const char* src = items + c * item_stride;
    const Stage st = stage(buf);
    for (int idx = tid; idx < kChunk * (kDim / 8); idx += kV2Threads) {
      const int row = idx >> 4, c8 = (idx & 15) * 8;
      CpAsync16(st.w + row * kV2LdOp + c8, src + kV2OffW + (row * kDim + c8) * 2, true);
      CpAsync16(st.qp + row * kV2LdOp + c8, src + kV2OffQp + (row * kDim + c8) * 2, true);
      CpAsync16(st.kd + row * kV2LdOp + c8, src + kV2OffKd + (row * kDim + c8) * 2, true);
    }
    for (int idx = tid; idx < kChunk * (kVt / 4); idx += kV2Threads) {
      const int row = idx / (kVt / 4), c4 = (idx % (kVt / 4)) * 4;
      const int64_t off = (static_cast<int64_t>(row) * kDim + v0 + c4) * 4;
      CpAsync16(st.u + row * L::kLdSlice + c4, src + kV2OffU + off, true);
      CpAsync16(st.oi + row * L::kLdSlice + c4, src + kV2OffOi + off, true);
    }
    if (tid < kDim / 4) CpAsync16(st.decay + 4 * tid, src + kV2OffDecay + 16 * tid, true);
  };
  load_stage(0, 0);
  CpAsyncCommit();

  // acc[n] holds S rows (16w + g, 16w + g + 8) × columns v0 + 8n + 2t (+1).
  float acc[kNt][4];
  const int d_lo = 16 * warp + g, d_hi = d_lo + 8;
#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = c < 2 ? d_lo : d_hi;
      const int col = v0 + 8 * n + 2 * t + (c & 1);
      acc[n][c] = d < p.dk && col < p.dv ? state[static_cast<int64_t>(d) * p.dv + col] : 0.f;
    }
  }

  // ldmatrix row addresses (lane l feeds row l % 8 of matrix l / 8).
  const int lm = lane >> 3, lr = lane & 7;
  const int mt = warp >> 1, nb = (warp & 1) * kNw;
  const int r_lo = 16 * mt + g, r_hi = r_lo + 8;
  // A = W or Q' rows 16·mt.. (non-transposed): matrices (rows +0/+8) × (k +0/+8).
  const int a_row = 16 * mt + lr + 8 * (lm & 1), a_col = 8 * (lm >> 1);
  // B = S [k = d][n] (transposed load): matrices (k +0/+8) × (n tile nb + 2j / + 2j + 1).
  const int bs_row = lr + 8 * (lm & 1), bs_col = 8 * (nb + (lm >> 1));
  // A = Kdᵀ, stored [i][d] (transposed load): matrices (d +0/+8) × (i +0/+8).
  const int ak_row = lr + 8 * (lm >> 1), ak_col = 16 * warp + 8 * (lm & 1);
  // B = V_new [k = i][n] (transposed load), n tiles 2j, 2j + 1.
  const int bv_row = lr + 8 * (lm & 1), bv_col = 8 * (lm >> 1);

  for (int c = 0; c < p.num_chunks; ++c) {
    const int buf = c & 1;
    const Stage st = stage(buf);
    const int64_t t0 = p.t_begin + static_cast<int64_t>(c) * kChunk;
    const int len = static_cast<int>(std::min<int64_t>(kChunk, p.num_tokens - t0));

    // Publish S as bf16 (the B operand of W·S and Q'·S).
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      StoreBf16x2(sS + d_lo * L::kLdS + 8 * n + 2 * t, acc[n][0], acc[n][1]);
      StoreBf16x2(sS + d_hi * L::kLdS + 8 * n + 2 * t, acc[n][2], acc[n][3]);
    }
    CpAsyncWaitAll();
    __syncthreads();  // S and stage c visible; stage c ^ 1 (chunk c − 1) no longer read
    if (c + 1 < p.num_chunks) {
      load_stage(c + 1, buf ^ 1);
      CpAsyncCommit();
    }

    // V_new = U − W·S and O = O_intra + Q'·S on the same tiles.
    {
      float ws[kNw][4] = {}, qs[kNw][4] = {};
      const uint32_t w_base = SmemAddr(st.w + a_row * kV2LdOp + a_col);
      const uint32_t q_base = SmemAddr(st.qp + a_row * kV2LdOp + a_col);
      const uint32_t s_base = SmemAddr(sS + bs_row * L::kLdS + bs_col);
#pragma unroll
      for (int ks = 0; ks < kDim / 16; ++ks) {
        uint32_t aw[4], aq[4];
        LdMatrixX4(aw, w_base + ks * 32);
        LdMatrixX4(aq, q_base + ks * 32);
#pragma unroll
        for (int j = 0; j < kNw / 2; ++j) {
          uint32_t b[4];
          LdMatrixX4Trans(b, s_base + ks * 16 * L::kLdS * 2 + j * 32);
          MmaBf16(ws[2 * j], aw, b[0], b[1]);
          MmaBf16(ws[2 * j + 1], aw, b[2], b[3]);
          MmaBf16(qs[2 * j], aq, b[0], b[1]);
          MmaBf16(qs[2 * j + 1], aq, b[2], b[3]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNw; ++j) {
        const int col = 8 * (nb + j) + 2 * t;
        const float2 ul = *reinterpret_cast<const float2*>(st.u + r_lo * L::kLdSlice + col);
        const float2 uh = *reinterpret_cast<const float2*>(st.u + r_hi * L::kLdSlice + col);
        const float2 ol = *reinterpret_cast<const float2*>(st.oi + r_lo * L::kLdSlice + col);
        const float2 oh = *reinterpret_cast<const float2*>(st.oi + r_hi * L::kLdSlice + col);
        StoreBf16x2(sVn + r_lo * L::kLdS + col, ul.x - ws[j][0], ul.y - ws[j][1]);
        StoreBf16x2(sVn + r_hi * L::kLdS + col, uh.x - ws[j][2], uh.y - ws[j][3]);
        const float o[4] = {ol.x + qs[j][0], ol.y + qs[j][1], oh.x + qs[j][2], oh.y + qs[j][3]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = e < 2 ? r_lo : r_hi;
          const int n = v0 + col + (e & 1);
          if (row < len && n < p.dv) {
            StoreAct(p.out, p.out_type, ((t0 + row) * p.heads + h) * p.dv + n, o[e]);
          }
        }
      }
    }
    __syncthreads();  // V_new complete

    // S = decay⊙S + Kdᵀ·V_new.
    {
      const float dec_lo = st.decay[d_lo], dec_hi = st.decay[d_hi];
#pragma unroll
      for (int n = 0; n < kNt; ++n) {
        acc[n][0] *= dec_lo;
        acc[n][1] *= dec_lo;
        acc[n][2] *= dec_hi;
        acc[n][3] *= dec_hi;
      }
      const uint32_t k_base = SmemAddr(st.kd + ak_row * kV2LdOp + ak_col);
      const uint32_t v_base = SmemAddr(sVn + bv_row * L::kLdS + bv_col);
#pragma unroll
      for (int ks = 0; ks < kChunk / 16; ++ks) {
        uint32_t a[4];
        LdMatrixX4Trans(a, k_base + ks * 16 * kV2LdOp * 2);
#pragma unroll
        for (int j = 0; j < kNt / 2; ++j) {
          uint32_t b[4];
          LdMatrixX4Trans(b, v_base + ks * 16 * L::kLdS * 2 + j * 32);
          MmaBf16(acc[2 * j], a, b[0], b[1]);
          MmaBf16(acc[2 * j + 1], a, b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int n = 0; n < kNt; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = c < 2 ? d_lo : d_hi;
      const int col = v0 + 8 * n + 2 * t + (c & 1);
      if (d < p.dk && col < p.dv) state[static_cast<int64_t>(d) * p.dv + col] = acc[n][c];
    }
  }
}

// ===========================================================================
// Recurrent prefill (KdaPrefillArgs::recurrent): the decode step applied to
// the call's tokens in order, one CTA per (32-column slice, head) with the
// slice in registers from the first token to the last, so a token's bits do
// not depend on where the prompt was cut into calls (the chunked path aligns
// its 64-token chunks to each call's first token).
//
// One barrier per token. Before barrier t: token t's reduction (StepReduce),
// token t+2's gates and norm sums (StepPrepare), and warp 0 alone turns token
// t+1's sums into its norms (StepNorms, published in shared memory: the same
// function and bits as decode, where every warp computes them, without seven
// redundant copies of two IEEE divisions and square roots). After it: t's
// update, and every thread picks up t+1's norms. Token j's StepSmem is
// written in iteration j−2 and last read in iteration j (after barrier j), so
// four buffers rotate: j+4's writer, in iteration j+2, has passed barrier
// j+1, which every reader of j reached first. The e/o partials are written
// and read around one barrier, so two buffers. The raw loads of token t+4 are
// issued while token t runs (two register sets, even and odd tokens, hence
// the loop unrolled by two), and L2 hints run kRecurrentL2Ahead tokens ahead,
// so the loop waits on L2 at worst, not on DRAM.
//
// Cost at H = 32, dk = dv = 128: 128 CTAs of 8 warps, each a chain of T
// steps. A step is issue-bound: ~300 warp instructions per warp (the decay
// and e/o FMAs, two shuffle reductions, the 8-warp partial sums, the gates'
// expf/log1pf), two warps per scheduler → ~600 cycles, ~0.3 µs a token per
// layer (≈ 10 ms at T = 32768 against ~6 ms for the chunked path), with
// 3 MB of inputs and outputs per 1K tokens, far below bandwidth.
constexpr int64_t kRecurrentL2Ahead = 16;

// L2 hints for row `row`: lane 0 of each warp hints its own loads' lines.
template <bool kFast>
__device__ __forceinline__ void PrefetchStepRow(const PrefillParams& p, int64_t row, int h, int n0,
                                                int tid) {
  if ((tid & 31) != 0) return;
  if (tid < p.dk) {
    const int64_t qk_off = row * p.ld_qk + static_cast<int64_t>(h / p.qk_group) * p.dk + tid;
    PrefetchL2(p.q + qk_off);
    PrefetchL2(p.k + qk_off);
    const int64_t g_off =
        row * p.gates.ld_g + (p.gates.per_head ? h : static_cast<int64_t>(h) * p.dk + tid);
    PrefetchL2(p.gates.g_type == ActType::kBf16
                   ? static_cast<const void*>(static_cast<const bf16*>(p.gates.g_raw) + g_off)
                   : static_cast<const void*>(static_cast<const float*>(p.gates.g_raw) + g_off));
  }
  if (tid == StepValueBase<kFast>()) {
    PrefetchL2(p.v + row * p.ld_v + static_cast<int64_t>(h) * p.dv + n0);
  }
  if (tid == StepBetaThread<kFast>()) {
    const int64_t b_off = row * p.gates.ld_beta + h;
    PrefetchL2(p.gates.beta_type == ActType::kBf16
                   ? static_cast<const void*>(static_cast<const bf16*>(p.gates.beta_raw) + b_off)
                   : static_cast<const void*>(static_cast<const float*>(p.gates.beta_raw) + b_off));
  }
}

// Token t of the loop. `raw` holds token t+2's loads on entry and token t+4's
// (when it exists) on exit; `nm` is t's norms on entry and t+1's on exit.
template <bool kFast>
__device__ __forceinline__ void RecurrentToken(const PrefillParams& p, int64_t t, int h, int n0,
                                               int tid, const StepConst& c, StepState<kFast>& st,
                                               StepRaw& raw, StepSmem* sm, StepEo* eo,
                                               StepNorm& nm) {
  const int64_t T = p.num_tokens;
  StepSmem& cur = sm[t & 3];
  StepSmem& next = sm[(t + 1) & 3];
  StepEo& e = eo[t & 1];
  StepReduce(st, cur, nm, p.dk, tid, e);
  if (t + 2 < T) {
    StepPrepare<kFast>(raw, c, p.dk, tid, sm[(t + 2) & 3]);
    if (t + 4 < T) LoadStepRaw<kFast>(p, t + 4, h, n0, tid, raw);
  }
  if (t + 1 < T && tid < 32) {
    const StepNorm n1 = StepNorms(next, p.scale);
    if (tid == 0) {
      next.norm[0] = n1.inv_q;
      next.norm[1] = n1.inv_k;
      next.norm[2] = n1.qk;
    }
  }
  if (t + kRecurrentL2Ahead < T) PrefetchStepRow<kFast>(p, t + kRecurrentL2Ahead, h, n0, tid);
  __syncthreads();
  StepUpdateAny<kFast>(st, cur, nm, e, tid, p.out, p.out_type, (t * p.heads + h) * p.dv + n0,
                       p.dk, p.dv, n0);
  if (t + 1 < T) nm = StepNorm{next.norm[0], next.norm[1], next.norm[2]};
}

template <bool kFast>
__global__ void __launch_bounds__(kDecodeThreads) KdaPrefillRecurrentKernel(const PrefillParams p) {
  __shared__ StepSmem sm[4];
  __shared__ StepEo eo[2];
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kDecodeCols;
  const int h = blockIdx.y;
  const int64_t T = p.num_tokens;
  float* slice = p.state + static_cast<int64_t>(h) * p.dk * p.dv + n0;

  StepState<kFast> st;
  LoadSlice(slice, p.dk, p.dv, n0, tid, st);
  const StepConst c = LoadStepConst(p.gates, h, p.dk, tid);
  StepRaw even, odd;  // the loads of the next even / odd token
  LoadStepRaw<kFast>(p, 0, h, n0, tid, even);
  if (T > 1) LoadStepRaw<kFast>(p, 1, h, n0, tid, odd);
  for (int64_t r = 2; r < T && r < kRecurrentL2Ahead; ++r) PrefetchStepRow<kFast>(p, r, h, n0, tid);
  StepPrepare<kFast>(even, c, p.dk, tid, sm[0]);
  if (T > 2) LoadStepRaw<kFast>(p, 2, h, n0, tid, even);
  if (T > 1) {
    StepPrepare<kFast>(odd, c, p.dk, tid, sm[1]);
    if (T > 3) LoadStepRaw<kFast>(p, 3, h, n0, tid, odd);
  }
  __syncthreads();
  StepNorm nm = StepNorms(sm[0], p.scale);
#pragma unroll 1
  for (int64_t t = 0; t < T; t += 2) {
    RecurrentToken<kFast>(p, t, h, n0, tid, c, st, even, sm, eo, nm);
    if (t + 1 < T) RecurrentToken<kFast>(p, t + 1, h, n0, tid, c, st, odd, sm, eo, nm);
  }
  StoreSlice(slice, p.dk, p.dv, n0, tid, st);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int64_t NumChunks(int64_t tokens) { return (tokens + kChunk - 1) / kChunk; }

// kda.prefill=tf32 takes the reference path: the fp32-workspace / tf32
// kernels.
bool ReferencePrefill() {
  return tuning::Current().Choice<tuning::KdaPrefill>(tuning::Key::kKdaPrefill) ==
         tuning::KdaPrefill::kTf32;
}

// Raises the prefill kernels' dynamic shared-memory limit, once per device: a
// later call (possibly inside a stream capture) then makes no runtime call
// besides cudaGetDevice.
Status AllowPrefillSharedMemory() {
  static std::atomic<uint64_t> done_mask{0};
  int device = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done_mask.load(std::memory_order_acquire) & bit) != 0) return OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      KdaIntraChunkKernel<float, kIntraThreads>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      kIntraSmemBytes));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      KdaIntraChunkKernel<bf16, kIntraV2Threads>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      kIntraSmemBytes));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      KdaChunkRecurrenceKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRecSmemBytes));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(KdaChunkRecurrenceV2Kernel<32>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   RecV2Layout<32>::kSmemBytes));
  done_mask.fetch_or(bit, std::memory_order_release);
  return OkStatus();
}

}  // namespace

size_t KdaPrefillWorkspaceBytes(const KdaShape& shape, int64_t num_tokens) {
  if (!CheckShape(shape, "KdaPrefill").ok() || num_tokens <= 0) return 0;
  const int64_t per_pass = std::min(NumChunks(num_tokens), kMaxChunksPerPass);
  return AlignUp(static_cast<size_t>(per_pass * shape.num_heads * kItemBytes));
}

Status KdaPrefill(const KdaPrefillArgs& args, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  const KdaShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckCommon("KdaPrefill", s, args.q, args.k, args.v, args.ld_qkv,
                                     args.gates, args.out, args.out_type));
  if (args.num_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaPrefill: num_tokens must be positive (got ", args.num_tokens, ")"));
  }
  if (args.state == nullptr) return absl::InvalidArgumentError("KdaPrefill: state is null");

  PrefillParams p{};
  p.q = args.q;
  p.k = args.k;
  p.v = args.v;
  p.ld_qk = args.ld_qkv != 0 ? args.ld_qkv : QkHeads(s) * s.key_dim;
  p.ld_v = args.ld_qkv != 0 ? args.ld_qkv : s.num_heads * s.value_dim;
  p.gates = MakeGateParams(args.gates, s.num_heads, s.key_dim);
  p.state = args.state;
  p.out = args.out;
  p.out_type = args.out_type;
  p.heads = static_cast<int>(s.num_heads);
  p.qk_group = static_cast<int>(s.num_heads / QkHeads(s));
  p.dk = static_cast<int>(s.key_dim);
  p.dv = static_cast<int>(s.value_dim);
  p.scale = EffectiveScale(s);
  p.num_tokens = args.num_tokens;

  if (args.recurrent) {
    // The decode step token by token: no workspace, no shared-memory opt-in
    // (static shared memory only), one launch.
    const dim3 grid(static_cast<unsigned>((s.value_dim + kDecodeCols - 1) / kDecodeCols),
                    static_cast<unsigned>(s.num_heads));
    if (StepIsFast(s, args.state)) {
      KdaPrefillRecurrentKernel<true><<<grid, kDecodeThreads, 0, stream>>>(p);
    } else {
      KdaPrefillRecurrentKernel<false><<<grid, kDecodeThreads, 0, stream>>>(p);
    }
    return LaunchStatus("KdaPrefillRecurrentKernel");
  }

  const size_t need = KdaPrefillWorkspaceBytes(s, args.num_tokens);
  if (workspace == nullptr) return absl::InvalidArgumentError("KdaPrefill: workspace is null");
  if (!Aligned16(workspace)) {
    return absl::InvalidArgumentError("KdaPrefill: workspace must be 16-byte aligned");
  }
  if (workspace_bytes < need) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaPrefill: workspace_bytes (", workspace_bytes, ") is below the ", need,
                     " KdaPrefillWorkspaceBytes asks for"));
  }
  p.ws = static_cast<float*>(workspace);
  // Per-head gates are read one scalar per row, so their alignment is moot.
  p.vec = s.key_dim % 8 == 0 && s.value_dim % 8 == 0 && Aligned16(args.q) && Aligned16(args.k) &&
          Aligned16(args.v) && p.ld_qk % 8 == 0 && p.ld_v % 8 == 0 &&
          (args.gates.per_head || (Aligned16(args.gates.g_raw) && p.gates.ld_g % 8 == 0 &&
                                   Aligned16(args.gates.dt_bias)));

  STRATA_RETURN_IF_ERROR(AllowPrefillSharedMemory());

  const int64_t total_chunks = NumChunks(args.num_tokens);
  if (ReferencePrefill()) {
    const int v_tiles = static_cast<int>((s.value_dim + kVt - 1) / kVt);
    for (int64_t c0 = 0; c0 < total_chunks; c0 += kMaxChunksPerPass) {
      p.t_begin = c0 * kChunk;
      p.num_chunks = static_cast<int>(std::min(kMaxChunksPerPass, total_chunks - c0));
      KdaIntraChunkKernel<float, kIntraThreads>
          <<<dim3(p.num_chunks, p.heads), kIntraThreads, kIntraSmemBytes, stream>>>(p);
      STRATA_RETURN_IF_ERROR(LaunchStatus("KdaIntraChunkKernel"));
      KdaChunkRecurrenceKernel<<<dim3(v_tiles, p.heads), kRecThreads, kRecSmemBytes, stream>>>(p);
      STRATA_RETURN_IF_ERROR(LaunchStatus("KdaChunkRecurrenceKernel"));
    }
    return OkStatus();
  }

  // The bf16 items are smaller than the planned fp32 ones, so a pass takes as
  // many chunks as the caller's workspace holds: fewer, fuller launches.
  const int64_t fit = static_cast<int64_t>(workspace_bytes / (kV2ItemBytes * s.num_heads));
  const int64_t per_pass = std::max<int64_t>(1, std::min<int64_t>(fit, total_chunks));
  constexpr int kV2Tile = 32;
  const int v_tiles = static_cast<int>((s.value_dim + kV2Tile - 1) / kV2Tile);
  for (int64_t c0 = 0; c0 < total_chunks; c0 += per_pass) {
    p.t_begin = c0 * kChunk;
    p.num_chunks = static_cast<int>(std::min(per_pass, total_chunks - c0));
    KdaIntraChunkKernel<bf16, kIntraV2Threads>
        <<<dim3(p.num_chunks, p.heads), kIntraV2Threads, kIntraSmemBytes, stream>>>(p);
    STRATA_RETURN_IF_ERROR(LaunchStatus("KdaIntraChunkKernel"));
    KdaChunkRecurrenceV2Kernel<kV2Tile>
        <<<dim3(v_tiles, p.heads), kV2Threads, RecV2Layout<kV2Tile>::kSmemBytes, stream>>>(p);
    STRATA_RETURN_IF_ERROR(LaunchStatus("KdaChunkRecurrenceV2Kernel"));
  }
  return OkStatus();
}

}  // namespace strata::cuda
