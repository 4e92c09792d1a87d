// KDA decode on the GPU, one token per sequence: the token step per
// (sequence, head, 32-column slice) (KdaDecode), and the whole mixer of a
// small decode batch in one kernel (KdaDecodeFused). Shared with the prefill:
// kda_common.cuh.
//
// Cost model at the production shape (H = 32, dk = dv = 128, fp32 state):
//  * Decode moves the state twice per token and layer: 32 heads × 64 KiB read
//    + written = 4 MiB per sequence, 0.98 µs at 4.27 TB/s for B = 1 and 63 µs
//    for B = 64 (q, k, v, gates and out add < 0.5%). Arithmetic is ~4 flops per
//    state element, far below the compute roof. B = 64 (8192 CTAs) should run
//    at ≥ 80% of bandwidth; B = 1 (128 CTAs, one DRAM round trip to read, a
//    block reduction, then the write) is latency-bound, ~2 µs (~50%) expected.
#include "backend/cuda/kda_common.cuh"

namespace strata::cuda {
namespace {

struct DecodeParams {
  const bf16* q;  // row b at q + b·ld_qk + h·dk
  const bf16* k;
  const bf16* v;  // row b at v + b·ld_v + h·dv
  int64_t ld_qk;
  int64_t ld_v;
  GateParams gates;
  float* state_pool;     // [slots, H, dk, dv]
  const int32_t* slots;  // [B]
  void* out;             // [B, H, dv]
  ActType out_type;
  int heads;
  int qk_group;  // value heads per q/k head: head h reads q/k head h / qk_group
  int dk;
  int dv;
  float scale;
};

// One decode token for (column slice blockIdx.x, head blockIdx.y, batch row
// blockIdx.z): B·H·dv/32 CTAs cover the GPU even at B = 1; the slice is read
// once into registers and written once.
template <bool kFast>
__device__ __forceinline__ void DecodeSlice(const DecodeParams& p, StepSmem& sm, StepEo& eo) {
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kDecodeCols;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  PdlWait();
  PdlLaunchDependents();
  const int64_t slot = p.slots[b];
  float* slice = p.state_pool + (slot * p.heads + h) * static_cast<int64_t>(p.dk) * p.dv + n0;

  // The state loads go first: they are the DRAM round trip everything waits on.
  // (Not before the PDL wait: the kernel before this one may be the previous
  // step of the same layer, as in back-to-back decode steps.)
  StepState<kFast> st;
  LoadSlice(slice, p.dk, p.dv, n0, tid, st);
  const StepConst c = LoadStepConst(p.gates, h, p.dk, tid);
  StepRaw raw;
  LoadStepRaw<kFast>(p, b, h, n0, tid, raw);
  StepPrepare<kFast>(raw, c, p.dk, tid, sm);
  __syncthreads();
  const StepNorm nm = StepNorms(sm, p.scale);
  StepReduce(st, sm, nm, p.dk, tid, eo);
  __syncthreads();
  StepUpdateAny<kFast>(st, sm, nm, eo, tid, p.out, p.out_type, (b * p.heads + h) * p.dv + n0, p.dk,
                       p.dv, n0);
  StoreSlice(slice, p.dk, p.dv, n0, tid, st);
}

__global__ void __launch_bounds__(kDecodeThreads) KdaDecodeFastKernel(const DecodeParams p) {
  __shared__ StepSmem sm;
  __shared__ StepEo eo;
  DecodeSlice<true>(p, sm, eo);
}

__global__ void __launch_bounds__(kDecodeThreads) KdaDecodeGenericKernel(const DecodeParams p) {
  __shared__ StepSmem sm;
  __shared__ StepEo eo;
  DecodeSlice<false>(p, sm, eo);
}

// ===========================================================================
// Fused decode (KdaDecodeFused): for one token per sequence, the short conv of
// q, k and v, the rank-r gate products (f_b → decay, g_b → output gate), the
// token step and the gated output RMSNorm in one kernel. The unfused chain is
// five kernels and two cross-stream joins between in_proj and o_proj; at
// batch 1 each boundary costs more than its kernel's work.
//
// A cluster of dv/32 CTAs serves one (head, row); CTA x owns key dims and
// value columns [32x, 32x + 32): it convolves those q, k and v channels
// (and alone updates their window entries), forms those 32 decays, and
// shares q, k and the raw decays with the cluster through distributed shared
// memory. Every CTA then runs the token step on its own 32-column slice of
// the state as KdaDecodeFastKernel does (same device functions), keeps its
// 32 outputs (rounded to bf16, as the unfused out buffer is), and the
// cluster adds its four partial sums of squares for the head's norm.
// The weights (conv taps, f_b and g_b rows, biases, norm weight) are loaded
// before the PDL wait; they are constant for the step.
constexpr int kFusedSlice = kDecodeCols;             // 32 dims / columns per CTA
constexpr int kFusedSlices = kFastDk / kFusedSlice;  // 4: the cluster size
constexpr int kFusedMaxRankVecs = 4;                 // rank ≤ 8 threads × 4 × 8

struct FusedDecodeParams {
  const bf16* proj;  // row b at proj + b·ld_proj: [q | k | v] before the conv, then f_a, g_a
  int64_t ld_proj;
  int64_t off_fa, off_ga;
  int rank;
  GateParams gates;        // β (from proj), dt_bias, −exp(A); g_raw unused (formed here)
  const float* conv_w;     // [3·H·dk, K]
  float* window_pool;      // [slots, K−1, 3·H·dk]
  const bf16* f_b;         // [H·dk, rank]
  const bf16* g_b;         // [H·dv, rank]
  const float* o_norm;     // [dv]
  float eps;
  float* state_pool;  // [slots, H, dk, dv]
  const int32_t* slots;
  bf16* out;  // [B, H·dv]
  int heads;
  float scale;
  bool state_before_wait;  // KdaDecodeFusedArgs::state_before_wait
  STRATA_PROBE_FIELD(probe)
};

// What the cluster shares: every CTA writes its 32 q and k channels after the
// conv (bf16-rounded, as the unfused conv output is) and raw decays, then its
// partial sum of squares of the head's output, into every CTA's copy
// (remote stores before the barrier, not remote loads after it), so each CTA
// reads only its own shared memory and may leave as soon as it is done.
struct FusedShare {
  float q[kFastDk], k[kFastDk], g[kFastDk];
  float ss[kFusedSlices];
};

// One gate product: 8 adjacent lanes per output, each `vecs` 16-byte chunks
// (elements 8·part + 64·i), summed over the 8 lanes.
__device__ __forceinline__ float GateDot8(const uint4 (&w)[kFusedMaxRankVecs],
                                          const uint4 (&x)[kFusedMaxRankVecs], int vecs) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kFusedMaxRankVecs; ++i) {
    if (i < vecs) {
      const uint32_t wv[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
      const uint32_t xv[4] = {x[i].x, x[i].y, x[i].z, x[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc = fmaf(Bf16x2ToF32(wv[j]).x, Bf16x2ToF32(xv[j]).x, acc);
        acc = fmaf(Bf16x2ToF32(wv[j]).y, Bf16x2ToF32(xv[j]).y, acc);
      }
    }
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  return acc;
}

template <int K>
__global__ void __launch_bounds__(kDecodeThreads) KdaDecodeFusedKernel(const FusedDecodeParams p) {
  __shared__ StepSmem sm;
  __shared__ StepEo eo;
  __shared__ FusedShare share;
  __shared__ float v_own[kFusedSlice];
  __shared__ float gate_own[kFusedSlice];
  __shared__ bf16 o_own[kFusedSlice];
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x;
  const int x = blockIdx.x;  // slice = rank in the cluster
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  constexpr int dk = kFastDk;
  const int dv = kFusedSlices * kFusedSlice;
  const int64_t C = static_cast<int64_t>(p.heads) * dk;
  const int d0 = x * kFusedSlice;
  // Conv channel of threads 0..95: q, k, then v (column d0 + t); its step is
  // CausalConvSiluDecode's (conv_step.cuh).
  const int cgrp = tid / kFusedSlice;
  const int ct = tid % kFusedSlice;
  const int64_t chan = cgrp * C + static_cast<int64_t>(h) * dk + d0 + ct;
  // Gate products: 8 threads per output dim.
  const int gi = tid >> 3, part = tid & 7;
  const int vecs = p.rank / 64;

  STRATA_PROBE_START(p.probe);
  // Remote stores into another CTA's shared memory need that CTA to have
  // started: arrive now, wait right before the first one (long satisfied).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  // Constants (weights) before the wait.
  float taps[K];
  if (tid < 3 * kFusedSlice) {
#pragma unroll
    for (int j = 0; j < K; ++j) taps[j] = p.conv_w[chan * K + j];
  }
  uint4 fw[kFusedMaxRankVecs], gw[kFusedMaxRankVecs];
  {
    const bf16* fr = p.f_b + (static_cast<int64_t>(h) * dk + d0 + gi) * p.rank + 8 * part;
    const bf16* gr = p.g_b + (static_cast<int64_t>(h) * dv + d0 + gi) * p.rank + 8 * part;
#pragma unroll
    for (int i = 0; i < kFusedMaxRankVecs; ++i) {
      if (i < vecs) {
        fw[i] = __ldg(reinterpret_cast<const uint4*>(fr + 64 * i));
        gw[i] = __ldg(reinterpret_cast<const uint4*>(gr + 64 * i));
      }
    }
  }
  const StepConst c = LoadStepConst(p.gates, h, dk, tid);
  const float wn = tid < kFusedSlice ? p.o_norm[d0 + tid] : 0.f;

  // The slot, the state slice and the window entries: before the wait when
  // the caller says the previous kernel does not write them.
  if (!p.state_before_wait) PdlWait();
  const int64_t slot = p.slots[b];
  float* slice = nullptr;
  float* win = nullptr;
  StepState<true> st;
  ConvWindow<K> hist;
  if (slot >= 0) {
    slice = p.state_pool + (slot * p.heads + h) * static_cast<int64_t>(dk) * dv + d0;
    LoadSlice(slice, dk, dv, d0, tid, st);
    if (tid < 3 * kFusedSlice) {
      win = p.window_pool + slot * (K - 1) * 3 * C + chan;
      hist.Load(win, 3 * C);
    }
  }
  if (p.state_before_wait) PdlWait();
  STRATA_PROBE_WAITED(p.probe);
  PdlLaunchDependents();
  if (slot < 0) {  // a padding row (uniform over the cluster): zero output, no state
    if (tid < kFusedSlice) {
      p.out[(b * p.heads + h) * dv + d0 + tid] = __float2bfloat16_rn(0.f);
    }
    return;
  }
  const bf16* row = p.proj + b * p.ld_proj;
  // Conv of this CTA's channels; the window entries are this CTA's alone
  // (stored after the cluster exchange below: its barrier's release would
  // otherwise wait for these global stores to reach L2).
  float conv_out = 0.f;
  float cur = 0.f;
  if (tid < 3 * kFusedSlice) {
    cur = __bfloat162float(row[chan]);
    conv_out = __bfloat162float(__float2bfloat16_rn(hist.Output(taps, cur)));
  }
  // Decay and output-gate products of this CTA's 32 dims.
  uint4 fa[kFusedMaxRankVecs], ga[kFusedMaxRankVecs];
#pragma unroll
  for (int i = 0; i < kFusedMaxRankVecs; ++i) {
    if (i < vecs) {
      fa[i] = *reinterpret_cast<const uint4*>(row + p.off_fa + 8 * part + 64 * i);
      ga[i] = *reinterpret_cast<const uint4*>(row + p.off_ga + 8 * part + 64 * i);
    }
  }
  const float graw = GateDot8(fw, fa, vecs);
  const float gout = GateDot8(gw, ga, vecs);
  if (tid < 3 * kFusedSlice && tid >= 2 * kFusedSlice) v_own[ct] = conv_out;
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#pragma unroll
  for (int r = 0; r < kFusedSlices; ++r) {
    FusedShare* dst = cluster.map_shared_rank(&share, r);
    if (tid < kFusedSlice) {
      dst->q[d0 + ct] = conv_out;
    } else if (tid < 2 * kFusedSlice) {
      dst->k[d0 + ct] = conv_out;
    }
    if (part == 0) dst->g[d0 + gi] = graw;
  }
  if (part == 0) gate_own[gi] = __bfloat162float(__float2bfloat16_rn(gout));
  cluster.sync();
  if (tid < 3 * kFusedSlice) hist.Store(win, 3 * C, cur);
  // The whole head's q, k and raw decays (written by the owning CTAs).
  StepRaw raw;
  if (tid < dk) {
    raw.q = share.q[tid];
    raw.k = share.k[tid];
    raw.g = share.g[tid];
  }
  const int vn = tid - StepValueBase<true>();
  if (vn >= 0 && vn < kDecodeCols) raw.v = v_own[vn];
  if (tid == StepBetaThread<true>()) {
    raw.beta = LoadAct(p.gates.beta_raw, p.gates.beta_type, b * p.gates.ld_beta + h);
  }
  StepPrepare<true>(raw, c, dk, tid, sm);
  __syncthreads();
  const StepNorm nm = StepNorms(sm, p.scale);
  StepReduce(st, sm, nm, dk, tid, eo);
  __syncthreads();
  StepUpdate(st, sm, nm, eo, tid, o_own, ActType::kBf16, 0);
  __syncthreads();
  // Gated RMSNorm over the head's dv outputs: partial sums, then the cluster's.
  float o = 0.f;
  if (tid < kFusedSlice) {
    o = __bfloat162float(o_own[tid]);
    const float ss = WarpSumXor(o * o, 1, 16);
    if (tid < kFusedSlices) cluster.map_shared_rank(&share, tid)->ss[x] = ss;
  }
  cluster.sync();  // the last cluster-wide step: from here on each CTA reads its own copy
  // The new state after the barrier, for the same reason as the window.
  StoreSlice(slice, dk, dv, d0, tid, st);
  if (tid < kFusedSlice) {
    float total = 0.f;
#pragma unroll
    for (int r = 0; r < kFusedSlices; ++r) total += share.ss[r];
    const float inv = rsqrtf(total / static_cast<float>(dv) + p.eps);
    const float sg = 1.f / (1.f + expf(-gate_own[tid]));
    p.out[(b * p.heads + h) * dv + d0 + tid] = __float2bfloat16_rn(wn * (o * inv) * sg);
  }
  STRATA_PROBE_END(p.probe);
}

}  // namespace

Status KdaDecode(const KdaDecodeArgs& args, cudaStream_t stream) {
  const KdaShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckCommon("KdaDecode", s, args.q, args.k, args.v, args.ld_qkv,
                                     args.gates, args.out, args.out_type));
  if (args.batch <= 0 || args.batch > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaDecode: batch must be in [1, 65535] (got ", args.batch, ")"));
  }
  if (args.state_pool == nullptr) return absl::InvalidArgumentError("KdaDecode: state_pool is null");
  if (args.slots == nullptr) return absl::InvalidArgumentError("KdaDecode: slots is null");

  DecodeParams p{};
  p.q = args.q;
  p.k = args.k;
  p.v = args.v;
  p.ld_qk = args.ld_qkv != 0 ? args.ld_qkv : QkHeads(s) * s.key_dim;
  p.ld_v = args.ld_qkv != 0 ? args.ld_qkv : s.num_heads * s.value_dim;
  p.gates = MakeGateParams(args.gates, s.num_heads, s.key_dim);
  p.state_pool = args.state_pool;
  p.slots = args.slots;
  p.out = args.out;
  p.out_type = args.out_type;
  p.heads = static_cast<int>(s.num_heads);
  p.qk_group = static_cast<int>(s.num_heads / QkHeads(s));
  p.dk = static_cast<int>(s.key_dim);
  p.dv = static_cast<int>(s.value_dim);
  p.scale = EffectiveScale(s);

  const dim3 grid(static_cast<unsigned>((s.value_dim + kDecodeCols - 1) / kDecodeCols),
                  static_cast<unsigned>(s.num_heads), static_cast<unsigned>(args.batch));
  const bool fast = StepIsFast(s, args.state_pool);
  const cudaError_t err = LaunchPdl(fast ? KdaDecodeFastKernel : KdaDecodeGenericKernel, grid,
                                    dim3(kDecodeThreads), 0, stream, p);
  if (err != cudaSuccess) {
    return CudaError(err, fast ? "KdaDecodeFastKernel" : "KdaDecodeGenericKernel");
  }
  return OkStatus();
}

namespace {
bool IsAligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

bool KdaDecodeFusedSupported(const KdaDecodeFusedArgs& a) {
  const KdaShape& s = a.shape;
  const int64_t C = s.num_heads * s.key_dim;
  return s.key_dim == kFastDk && s.value_dim == kFastDk &&
         (s.num_qk_heads == 0 || s.num_qk_heads == s.num_heads) && s.num_heads >= 1 &&
         s.num_heads <= 65535 && a.rank >= 64 && a.rank % 64 == 0 &&
         a.rank <= 64 * kFusedMaxRankVecs && a.conv_kernel >= 2 && a.conv_kernel <= 4 &&
         a.ld_proj % 8 == 0 && a.off_fa % 8 == 0 && a.off_ga % 8 == 0 && a.off_fa >= 3 * C &&
         a.off_ga >= 3 * C && a.off_beta >= 3 * C && a.off_fa + a.rank <= a.ld_proj &&
         a.off_ga + a.rank <= a.ld_proj && a.off_beta + s.num_heads <= a.ld_proj &&
         a.proj != nullptr && IsAligned16(a.proj) && a.f_b != nullptr && IsAligned16(a.f_b) &&
         a.g_b != nullptr && IsAligned16(a.g_b) && a.state_pool != nullptr &&
         IsAligned16(a.state_pool);
}

Status KdaDecodeFused(const KdaDecodeFusedArgs& a, cudaStream_t stream) {
  if (!KdaDecodeFusedSupported(a)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaDecodeFused: unsupported shape or layout (dk ", a.shape.key_dim, ", dv ",
                     a.shape.value_dim, ", rank ", a.rank, ", conv kernel ", a.conv_kernel,
                     ", ld_proj ", a.ld_proj, "); see KdaDecodeFusedSupported"));
  }
  if (a.batch <= 0 || a.batch > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaDecodeFused: batch must be in [1, 65535] (got ", a.batch, ")"));
  }
  if (a.conv_w == nullptr || a.window_pool == nullptr || a.dt_bias == nullptr ||
      a.neg_exp_a == nullptr || a.o_norm == nullptr || a.slots == nullptr || a.out == nullptr) {
    return absl::InvalidArgumentError(
        "KdaDecodeFused: conv_w, window_pool, dt_bias, neg_exp_a, o_norm, slots and out must be "
        "set");
  }
  FusedDecodeParams p{};
  p.proj = a.proj;
  p.ld_proj = a.ld_proj;
  p.off_fa = a.off_fa;
  p.off_ga = a.off_ga;
  p.rank = static_cast<int>(a.rank);
  KdaGates gates;
  gates.beta_raw = a.proj + a.off_beta;
  gates.beta_type = ActType::kBf16;
  gates.ld_beta = a.ld_proj;
  gates.neg_exp_a = a.neg_exp_a;
  gates.dt_bias = a.dt_bias;
  p.gates = MakeGateParams(gates, a.shape.num_heads, a.shape.key_dim);
  p.conv_w = a.conv_w;
  p.window_pool = a.window_pool;
  p.f_b = a.f_b;
  p.g_b = a.g_b;
  p.o_norm = a.o_norm;
  p.eps = a.eps;
  p.state_pool = a.state_pool;
  p.slots = a.slots;
  p.out = a.out;
  p.heads = static_cast<int>(a.shape.num_heads);
  p.scale = EffectiveScale(a.shape);
  p.state_before_wait = a.state_before_wait;
  STRATA_PROBE_SLOT(p.probe, "kda_fused", int64_t{kFusedSlices} * a.shape.num_heads);
  void (*kernel)(const FusedDecodeParams) = a.conv_kernel == 2   ? KdaDecodeFusedKernel<2>
                                            : a.conv_kernel == 3 ? KdaDecodeFusedKernel<3>
                                                                 : KdaDecodeFusedKernel<4>;
  const cudaError_t err = LaunchPdlCluster(
      kernel,
      dim3(kFusedSlices, static_cast<unsigned>(a.shape.num_heads), static_cast<unsigned>(a.batch)),
      dim3(kDecodeThreads), kFusedSlices, 0, stream, p);
  if (err != cudaSuccess) return CudaError(err, "KdaDecodeFusedKernel");
  return OkStatus();
}

}  // namespace strata::cuda
