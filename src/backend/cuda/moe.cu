// Sigmoid-routed mixture of experts on the GPU, with no host loop over experts
// and no host synchronisation (the whole layer is graph-capturable).
//
// Pipeline (all on `stream`, every kernel reads its sizes from device memory):
//   1. route      one warp per token: sigmoid, top-k by score + bias (ties to
//                 the lower index), weights — bit-compatible with
//                 cpu::RouteSigmoidTopK (see SigmoidLikeCpu), or with a group
//                 limit cpu::RouteSigmoidGroupedTopK. For n ≤ 128
//                 tokens it runs inside the plan kernel (one launch less).
//                 A single sigmoid-routed token without a group limit (a
//                 batch-1 decode step) is ranked by the whole CTA instead
//                 (RouteTokenCta: the same bits, a far shorter chain), and
//                 with MoeArgs::router_w inside the router's kernel
//                 (gemm.h, GemvRoute) instead of a route kernel.
//   2. plan       one CTA: per-expert histogram (shared-memory atomics), an
//                 exclusive scan into offsets, the list of active experts, the
//                 tile schedule of the grouped GEMM, and the permutation: each
//                 (token, k) pair gets a row in expert-sorted order.
//   3. gate|up    h[row, I] = silu(x·w1ᵀ) ⊙ (x·w3ᵀ), bf16, x gathered by row.
//   4. down       yrows[row, D] = h · w2ᵀ, fp32.
//   5. combine    y[t] = Σ_k w_k · yrows[pair_row(t, k)], summed in k order (no
//                 float atomics, so results are reproducible bit for bit).
// Regimes:
//   decode (n·k ≤ 512 rows, or shapes the GEMM cannot take): grouped GEMV on
//     CUDA cores. Grid (expert slot, weight-row tile); a slot past the number
//     of active experts exits at once; every CTA streams its weight rows once
//     (16-byte no-L1-allocate loads, 4 per row in flight per lane) and
//     multiplies them with all of its expert's token rows (8 at a time). For
//     n ≤ 4 steps 4 and 5 are one kernel: a CTA owns kFusedRows features, each
//     warp takes (token, k) pairs, and the k-ordered sum happens in shared
//     memory. A single token with bf16 experts and CTA routing (a batch-1
//     decode step) skips the plan: pick j of the route kernel is slot j and
//     h row j (MoeParams::direct), so route → gate|up → down+combine.
//   prefill: grouped GEMM on tensor cores (mma.sync m16n8k16 bf16, fp32
//     accumulate; 64×128×32 CTA tiles, 4-stage cp.async pipeline, ldmatrix
//     from padded shared memory). The plan kernel writes a device-side tile
//     schedule (expert, first row); the grid is the fixed upper bound
//     ceil(n·k/64) + min(E, n·k) tiles and CTAs past the real count exit. The
//     gate|up CTA's 128 weight rows interleave 16 gate rows and the matching
//     16 up rows, so silu(g)·u is formed in registers.
//   prefill, bf16 experts, builds with CUTLASS: from moe.cutlass_min_rows
//     rows on (MoeGemmImpl), steps 3-4 are CUTLASS's Hopper ptr-array grouped
//     GEMM instead (moe_grouped_gemm_sm90.h: TMA + wgmma, x gathered into
//     expert-sorted rows first); route, plan and combine stay here.
//   batch-invariant (MoeArgs::batch_invariant): the mma.sync grouped GEMM for
//     every n when the shape and alignment allow it, else the grouped GEMV
//     for every n; routing always in its own kernel. See "Batch invariance".
// Kernels are chained with programmatic dependent launch (each waits on
// griddepcontrol.wait before touching its inputs), which hides most of the
// launch gap between the short decode kernels.
//
// Cost model at the production shape (E=256, k=8, D=2304, I=1024, bf16):
//   one expert = w13 2·1024·2304·2 B (9.44 MB) + w2 2304·1024·2 B (4.72 MB)
//              = 14.16 MB.
//   decode, batch 1: 8 experts = 113.2 MB → 26.5 µs at 4.27 TB/s (target
//     ≥ 70%: ≤ 37.9 µs). Each of the three kernels (route, gate|up,
//     down+combine) pays a ramp and a tail on top of its bytes, and the
//     latency-bound route has almost no bytes at all (the per-kernel split
//     of the captured step is in docs/dev/journal/performance.md). The down
//     rows of one SM (37.7 MB / 132 = 286 KB) exceed its register file
//     (256 KB), so a warp needs at least two dependent rounds of loads; with
//     8 warps per CTA it took four. Sixteen warps splitting each row's k
//     range (kSplit = 2) take two, which shortens the kernel at batch 1 and
//     more at batch 4.
//   decode, batch 8: E·(1-(1-k/E)^8) ≈ 57.4 distinct experts = 813 MB → 190 µs.
//   decode, batch 64: ≈ 222.5 experts = 3.15 GB → 738 µs.
//   prefill, n tokens: 2·n·k·3·I·D = n·113.2 MFLOP (n = 2000: 226 GFLOP →
//     330 µs at 686 TFLOP/s) but all 256 experts (3.62 GB → 849 µs) stream
//     once, so a layer stays bandwidth-bound until ≈ 161 rows per expert
//     (686/4.27 FLOP per byte), i.e. n ≳ 5100 tokens. Side traffic: h (bf16)
//     and yrows (fp32) written and read once, ≈ 9% at n = 2000. mma.sync
//     reaches ~50-60% of the wgmma peak in the compute-bound regime.
#include "backend/cuda/moe.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cta_probe.cuh"
#include "backend/cuda/moe_grouped_gemm_sm90.h"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

using route::BiasedFromSigmoid;
using route::CtaRouteShared;
using route::RanksAbove;
using route::RouteTokenCta;
using route::SigmoidLikeCpu;
using route::WriteSigmoidPicks;

constexpr int kMaxExperts = route::kRouteMaxExperts;
constexpr int kMaxTopK = route::kRouteMaxTopK;
constexpr int64_t kFusedRouteMaxTokens = 128;
constexpr int64_t kMoeGemvMaxRows = 512;   // n·k at or below: grouped GEMV
constexpr int64_t kFusedCombineMaxTokens = 4;
constexpr int kPlanThreads = 1024;
constexpr int kRouteWarps = 8;
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kGemvTokens = 8;     // token rows per pass over a weight tile
// Output features per CTA of the fused down+combine. 18 at D = 2304 is 128
// CTAs: one wave at one CTA per SM (18 rows in flight per lane take ~150
// registers). 8 rows made 288 CTAs at two per SM, i.e. 264 in a first wave and
// 24 in a second. One wave gains less than the second wave's share suggests
// (docs/dev/journal/performance.md): each warp still has 4 dependent rounds
// of loads.
constexpr int kFusedRows = 18;
// The folded shared expert's I at most (MoeFoldsSharedExpert): 76 KB of its
// rows in the down kernel's shared memory.
constexpr int64_t kMaxFoldInter = 2048;
constexpr int kCombineThreads = 256;

// Grouped GEMM tiling.
constexpr int kBm = 64;   // token rows
constexpr int kBn = 128;  // weight rows
constexpr int kBk = 32;
constexpr int kStages = 4;
constexpr int kLds = kBk + 8;  // padded row: 80 bytes, ldmatrix rows hit distinct banks
constexpr int kGemmThreads = 256;
constexpr size_t kGemmSmemBytes =
    static_cast<size_t>(kStages) * (kBm + kBn) * kLds * sizeof(bf16);  // 61440

// One parameter block for every kernel of the layer (passed by value).
struct MoeParams {
  int num_tokens;
  int num_experts;
  int hidden;  // D
  int inter;   // I
  int top_k;
  int renormalize;
  float routed_scaling;
  int num_groups;   // <= 1: no group limit
  int topk_groups;
  int softmax;      // 1: softmax routing (cpu::RouteSoftmaxTopK), no bias or groups
  int cta_route;    // 1: one token, routed by the whole CTA (RouteTokenCta)
  int direct;       // 1: one token without a plan: slot / pair j is pick j, h row j
  int down_preload; // 1 (with direct): the down kernel loads its first weights before its wait
  STRATA_PROBE_FIELD(probe_gu)  // the one-token gate|up kernel (cta_probe.cuh)
  STRATA_PROBE_FIELD(probe_dn)  // the one-token down+combine kernel
  // 1 (with direct): the shared expert is pick top_k (h row top_k), its
  // weights at sw13 [2I, D] and sw2 [D, I], its weight 1 (MoeArgs::shared_w13).
  int shared;
  const bf16* sw13;
  const bf16* sw2;
  const bf16* x;          // [n, D]
  const float* logits;    // [n, E]
  const float* bias;      // [E] or null
  const bf16* w13;        // [E, 2I, D]; on the FP8 prefill path the chunk's scratch
  const bf16* w2;         // [E, D, I]; likewise
  // FP8 experts (MoeFp8Experts): codes, scales, block shape, scale grid sizes.
  const uint8_t* w13_fp8;
  const float* w13_scale;  // [E, sr13, sc_d]
  const uint8_t* w2_fp8;
  const float* w2_scale;   // [E, sr2, sc_i]
  int fp8_br;
  int fp8_bc;
  int sr13, sc_d, sr2, sc_i;
  // The grouped GEMM serves experts [expert_lo, expert_hi) only, with their
  // weights at w13/w2 from expert_lo on (bf16: 0 and E).
  int expert_lo;
  int expert_hi;
  bf16* deq13;            // FP8 prefill scratch: [chunk, 2I, D] and [chunk, D, I]
  bf16* deq2;
  float* y;               // [n, D]
  int accumulate;         // 1: y += the result (MoeArgs::accumulate)
  int32_t* idx;           // [n·k] expert of pair (t, j)
  float* wt;              // [n·k] routing weight of pair (t, j)
  int32_t* offsets;       // [E + 1] first row of each expert
  int32_t* meta;          // [0] active experts, [1] GEMM tiles
  int32_t* active;        // [E] active experts, ascending
  int32_t* tile_expert;   // [tile bound]
  int32_t* tile_m0;       // [tile bound] first row of the tile within its expert
  int32_t* row_token;     // [n·k] token of each expert-sorted row
  int32_t* pair_row;      // [n·k] row of pair (t, j)
  bf16* h;                // [n·k, I]
  float* yrows;           // [n·k, D]
};

int64_t TileBound(int64_t rows, int64_t experts) {
  return CeilDiv(rows, kBm) + std::min(experts, rows);
}

// Workspace slices, 256-byte aligned each, for n tokens.
struct Layout {
  size_t idx, wt, offsets, meta, active, tile_expert, tile_m0, row_token, pair_row, h, yrows;
  size_t deq;             // FP8 prefill scratch (deq_experts experts), if any
  int64_t deq_experts;
  // CUTLASS grouped GEMM (moe_grouped_gemm_sm90.h): its group arrays and
  // workspace, 0 bytes when the path cannot run; its gathered x and gate|up
  // output overlay yrows (dead before the down GEMM writes it).
  size_t sm90;
  size_t sm90_bytes;
  size_t total;
};

// Whether the tensor-core grouped GEMM's tiles fit the shape (alignment
// aside), and whether n·k rows take it outside batch-invariant mode.
bool GemmTileShape(const MoeShape& s) { return s.hidden % kBn == 0 && s.inter % 64 == 0; }
bool GemmShape(const MoeShape& s, int64_t rows) {
  return rows > kMoeGemvMaxRows && GemmTileShape(s);
}

// Experts per dequantisation chunk of the FP8 prefill path.
int64_t Fp8ChunkExperts(const MoeShape& s) {
  const int64_t per_expert = 3 * s.inter * s.hidden * static_cast<int64_t>(sizeof(bf16));
  return std::max<int64_t>(1, std::min(s.num_experts, kMoeFp8ScratchBytes / per_expert));
}

// Whether n·k rows may take the CUTLASS grouped GEMM (bf16 experts; the
// choice between it and mma.sync is made per call, see UseSm90).
bool Sm90Shape(const MoeShape& s, int64_t rows) {
  return !s.fp8_experts && GemmShape(s, rows) && MoeSm90GemmAvailable() &&
         MoeSm90GemmShapeOk(s.hidden, s.inter);
}

// invariant: batch-invariant mode, where FP8 experts take the grouped GEMM
// (and its dequantisation scratch) at every n.
Layout MakeLayout(const MoeShape& s, int64_t n, bool invariant) {
  const size_t rows = static_cast<size_t>(n * s.top_k);
  const size_t tiles = static_cast<size_t>(TileBound(n * s.top_k, s.num_experts));
  const size_t e = static_cast<size_t>(s.num_experts);
  Layout l{};
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += AlignUp(bytes);
    return at;
  };
  l.idx = take(sizeof(int32_t) * rows);
  l.wt = take(sizeof(float) * rows);
  l.offsets = take(sizeof(int32_t) * (e + 1));
  l.meta = take(sizeof(int32_t) * 4);
  l.active = take(sizeof(int32_t) * e);
  l.tile_expert = take(sizeof(int32_t) * tiles);
  l.tile_m0 = take(sizeof(int32_t) * tiles);
  l.row_token = take(sizeof(int32_t) * rows);
  l.pair_row = take(sizeof(int32_t) * rows);
  // One more row: the folded shared expert's (MoeParams::shared).
  l.h = take(sizeof(bf16) * (rows + 1) * static_cast<size_t>(s.inter));
  l.sm90_bytes = Sm90Shape(s, n * s.top_k) ? MoeSm90WorkspaceBytes(s.num_experts) : 0;
  l.yrows = take(std::max(sizeof(float) * rows * static_cast<size_t>(s.hidden),
                          l.sm90_bytes > 0
                              ? MoeSm90ActivationBytes(n * s.top_k, s.hidden, s.inter)
                              : size_t{0}));
  l.sm90 = take(l.sm90_bytes);
  const bool gemm = invariant ? GemmTileShape(s) : GemmShape(s, n * s.top_k);
  l.deq_experts = s.fp8_experts && gemm ? Fp8ChunkExperts(s) : 0;
  l.deq = take(sizeof(bf16) * 3 * static_cast<size_t>(l.deq_experts) *
               static_cast<size_t>(s.inter) * static_cast<size_t>(s.hidden));
  l.total = off;
  return l;
}

Status CheckShape(const MoeShape& s, const char* fn) {
  if (s.num_experts < 1 || s.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": shape.num_experts must be in [1, ",
                                                   kMaxExperts, "], got ", s.num_experts));
  }
  if (s.top_k < 1 || s.top_k > std::min<int64_t>(s.num_experts, kMaxTopK)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.top_k must be in [1, min(num_experts, ", kMaxTopK, ")], got ",
                     s.top_k, " with num_experts ", s.num_experts));
  }
  if (s.softmax && s.num_groups > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": softmax routing takes no expert groups, got ", s.num_groups));
  }
  if (s.num_groups > 1) {
    const int64_t g = s.num_groups;
    if (g > 32 || s.num_experts % g != 0 || s.num_experts / g < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          fn, ": shape.num_groups must be at most 32 and divide num_experts into groups of at "
              "least 2, got ", g, " groups of ", s.num_experts, " experts"));
    }
    if (s.topk_groups < 1 || s.topk_groups > g ||
        s.top_k > s.topk_groups * (s.num_experts / g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          fn, ": shape.topk_groups must be in [1, num_groups] and leave at least top_k eligible "
              "experts, got ", s.topk_groups, " of ", g, " groups for top_k ", s.top_k));
    }
  }
  if (!std::isfinite(s.routed_scaling)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.routed_scaling must be finite, got ", s.routed_scaling));
  }
  return OkStatus();
}

Status CheckFfnShape(const MoeShape& s, const char* fn) {
  if (s.hidden < 1 || s.hidden > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.hidden must be in [1, 2^20], got ", s.hidden));
  }
  if (s.inter < 1 || s.inter > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.inter must be in [1, 2^20], got ", s.inter));
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Launch helpers.

template <typename Kernel>
Status Launch(const char* name, Kernel kernel, dim3 grid, dim3 block, size_t smem,
              cudaStream_t stream, const MoeParams& p) {
  const cudaError_t err = LaunchPdl(kernel, grid, block, smem, stream, p);
  if (err != cudaSuccess) return CudaError(err, name);
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Routing.

// sigmoid(logit) + bias, NaN as −inf.
__device__ __forceinline__ float BiasedScore(const float* logits, const float* bias, int e) {
  return BiasedFromSigmoid(SigmoidLikeCpu(logits[e]), bias, e);
}

// Group limit (cpu::RouteSigmoidGroupedTopK): lane g < num_groups scores its
// group (sum of its two largest biased scores, re-derived from the logits:
// the same rounded values), then topk_groups warp-wide picks (ties to the
// lower group) give the bit mask of eligible groups.
__device__ uint32_t EligibleGroups(const float* logits, int num_experts, const float* bias,
                                   int num_groups, int topk_groups) {
  const int lane = threadIdx.x & 31;
  const int per_group = num_experts / num_groups;
  float score = -INFINITY;
  if (lane < num_groups) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = lane * per_group; e < (lane + 1) * per_group; ++e) {
      const float v = BiasedScore(logits, bias, e);
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    score = __fadd_rn(first, second);
  }
  uint32_t mask = 0;
  for (int j = 0; j < topk_groups; ++j) {
    const bool taken = lane >= num_groups || ((mask >> lane) & 1u) != 0;
    float best_v = taken ? -INFINITY : score;
    int best_g = taken ? INT_MAX : lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int og = __shfl_xor_sync(0xffffffffu, best_g, o);
      if (RanksAbove(ov, og, best_v, best_g)) {
        best_v = ov;
        best_g = og;
      }
    }
    mask |= 1u << best_g;
  }
  return mask;
}

// Softmax routing's selection key: the logit itself (softmax is monotonic),
// NaN as −inf, as cpu::RouteSoftmaxTopK.
__device__ __forceinline__ float LogitKey(const float* logits, int e) {
  const float v = logits[e];
  return v != v ? -INFINITY : v;
}

// One warp routes one token. Pick j is the best eligible expert strictly
// below pick j−1 in the order (biased score desc, index asc), as the
// reference does. With `softmax` the order is on the logits and the weights
// are softmax probabilities over all experts (cpu::RouteSoftmaxTopK; the
// denominator is summed in warp order, not the CPU's, a few ulp apart).
template <int kPer>
__device__ void RouteToken(const float* logits, int num_experts, const float* bias, int top_k,
                           bool renormalize, float routed_scaling, int num_groups,
                           int topk_groups, bool softmax, int32_t* idx_out, float* w_out) {
  const int lane = threadIdx.x & 31;
  const uint32_t groups = num_groups > 1
                              ? EligibleGroups(logits, num_experts, bias, num_groups, topk_groups)
                              : 0xffffffffu;
  const int per_group = num_groups > 1 ? num_experts / num_groups : num_experts;
  float biased[kPer];
  bool eligible[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    biased[i] = e >= num_experts ? -INFINITY
                : softmax        ? LogitKey(logits, e)
                                 : BiasedScore(logits, bias, e);
    eligible[i] = e < num_experts && ((groups >> (e / per_group)) & 1u) != 0;
  }
  float prev_v = 0.f;
  int prev_e = -1;
  int my_pick = 0;
  float top_v = 0.f;  // the first pick's key: softmax's max
  for (int j = 0; j < top_k; ++j) {
    float best_v = -INFINITY;
    int best_e = INT_MAX;  // sentinel: loses to every real expert, -inf ones included
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      const float v = biased[i];
      const bool below_prev = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (eligible[i] && below_prev && RanksAbove(v, e, best_v, best_e)) {
        best_v = v;
        best_e = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (RanksAbove(ov, oe, best_v, best_e)) {
        best_v = ov;
        best_e = oe;
      }
    }
    if (lane == j) my_pick = best_e;
    if (j == 0) top_v = best_v;
    prev_v = best_v;
    prev_e = best_e;
  }
  if (softmax) {
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i < num_experts) part = __fadd_rn(part, expf(__fsub_rn(biased[i], top_v)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
    const float p = lane < top_k
                        ? __fdiv_rn(expf(__fsub_rn(LogitKey(logits, my_pick), top_v)), part)
                        : 0.f;
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) total = __fadd_rn(total, __shfl_sync(0xffffffffu, p, j));
    const float norm = renormalize ? __fdiv_rn(1.f, total) : 1.f;
    if (lane < top_k) {
      idx_out[lane] = my_pick;
      w_out[lane] = __fmul_rn(p, __fmul_rn(norm, routed_scaling));
    }
    return;
  }
  // Weights from the unbiased scores.
  const float s = lane < top_k ? SigmoidLikeCpu(logits[my_pick]) : 0.f;
  WriteSigmoidPicks(my_pick, s, top_k, renormalize, routed_scaling, idx_out, w_out);
}

template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) MoeRouteKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (p.cta_route) {  // host-checked: one token, sigmoid, no group limit
    __shared__ CtaRouteShared sm;
    RouteTokenCta(p.logits, p.num_experts, p.bias, p.top_k, p.renormalize != 0, p.routed_scaling,
                  p.idx, p.wt, sm);
    return;
  }
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
  if (t >= p.num_tokens) return;
  const size_t t64 = static_cast<size_t>(t);
  RouteToken<kPer>(p.logits + t64 * p.num_experts, p.num_experts, p.bias, p.top_k,
                   p.renormalize != 0, p.routed_scaling, p.num_groups, p.topk_groups,
                   p.softmax != 0, p.idx + t64 * p.top_k, p.wt + t64 * p.top_k);
}

__device__ __forceinline__ int WarpExclusiveScan(int v) {
  const int lane = threadIdx.x & 31;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  return incl - v;
}

// One CTA. Shared memory: count[E], cursor[E]. idx is read with plain loads
// (never the read-only path): when route_here is set this CTA wrote it, and
// __syncthreads makes a block's global writes visible to the block.
template <int kPer>
__global__ void __launch_bounds__(kPlanThreads) MoePlanKernel(MoeParams p, int route_here) {
  extern __shared__ int32_t plan_smem[];
  int32_t* count = plan_smem;
  int32_t* cursor = plan_smem + p.num_experts;
  PdlWait();
  PdlLaunchDependents();
  const int E = p.num_experts;
  const int k = p.top_k;
  const int pairs = p.num_tokens * k;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  if (route_here && p.cta_route) {
    __shared__ CtaRouteShared sm;
    RouteTokenCta(p.logits, E, p.bias, k, p.renormalize != 0, p.routed_scaling, p.idx, p.wt, sm);
  } else if (route_here) {
    const int num_warps = blockDim.x >> 5;
    for (int t = warp; t < p.num_tokens; t += num_warps) {
      const size_t t64 = static_cast<size_t>(t);
      RouteToken<kPer>(p.logits + t64 * E, E, p.bias, k, p.renormalize != 0, p.routed_scaling,
                       p.num_groups, p.topk_groups, p.softmax != 0, p.idx + t64 * k,
                       p.wt + t64 * k);
    }
  }
  __syncthreads();
  for (int q = threadIdx.x; q < pairs; q += blockDim.x) atomicAdd(&count[p.idx[q]], 1);
  __syncthreads();
  if (warp == 0) {
    // Lane l owns a contiguous run of experts; three exclusive scans give each
    // lane its first row, active slot and tile.
    const int per = (E + 31) / 32;
    const int e0 = min(E, lane * per);
    const int e1 = min(E, e0 + per);
    int rows = 0, act = 0, tiles = 0;
    for (int e = e0; e < e1; ++e) {
      const int c = count[e];
      rows += c;
      act += c > 0 ? 1 : 0;
      tiles += (c + kBm - 1) / kBm;
    }
    int row_at = WarpExclusiveScan(rows);
    int act_at = WarpExclusiveScan(act);
    int tile_at = WarpExclusiveScan(tiles);
    for (int e = e0; e < e1; ++e) {
      const int c = count[e];
      p.offsets[e] = row_at;
      cursor[e] = row_at;
      row_at += c;
      if (c > 0) {
        p.active[act_at++] = e;
        for (int m0 = 0; m0 < c; m0 += kBm) {
          p.tile_expert[tile_at] = e;
          p.tile_m0[tile_at] = m0;
          ++tile_at;
        }
      }
    }
    if (lane == 31) {
      p.offsets[E] = row_at;
      p.meta[0] = act_at;
      p.meta[1] = tile_at;
    }
  }
  __syncthreads();
  // Row order inside an expert follows the atomics and may vary between runs;
  // no value depends on it (each row is computed on its own, and the combine
  // reads rows through pair_row in k order).
  for (int q = threadIdx.x; q < pairs; q += blockDim.x) {
    const int pos = atomicAdd(&cursor[p.idx[q]], 1);
    p.row_token[pos] = q / k;
    p.pair_row[q] = pos;
  }
}

// ---------------------------------------------------------------------------
// Grouped GEMV (decode).

// V = 8: 16-byte loads (rows 16-byte aligned, length a multiple of 8);
// V = 1: scalar fallback for any shape.
template <int V>
struct Raw;
template <>
struct Raw<8> {
  uint4 v;
};
template <>
struct Raw<1> {
  unsigned short v;
};

template <int V>
__device__ __forceinline__ Raw<V> LoadWeight(const bf16* p);
template <>
__device__ __forceinline__ Raw<8> LoadWeight<8>(const bf16* p) {
  // Read once: skip L1 (it keeps the activation rows) and fetch 256-byte L2 blocks.
  Raw<8> r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.v.x), "=r"(r.v.y), "=r"(r.v.z), "=r"(r.v.w)
               : "l"(p));
  return r;
}
template <>
__device__ __forceinline__ Raw<1> LoadWeight<1>(const bf16* p) {
  return Raw<1>{__ldg(reinterpret_cast<const unsigned short*>(p))};
}

template <int V>
__device__ __forceinline__ Raw<V> LoadAct(const bf16* p);
template <>
__device__ __forceinline__ Raw<8> LoadAct<8>(const bf16* p) {
  return Raw<8>{__ldg(reinterpret_cast<const uint4*>(p))};
}
template <>
__device__ __forceinline__ Raw<1> LoadAct<1>(const bf16* p) {
  return Raw<1>{__ldg(reinterpret_cast<const unsigned short*>(p))};
}

__device__ __forceinline__ void Unpack(const Raw<8>& r, float (&f)[8]) {
  const float2 a = Bf16x2ToF32(r.v.x), b = Bf16x2ToF32(r.v.y);
  const float2 c = Bf16x2ToF32(r.v.z), d = Bf16x2ToF32(r.v.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}
__device__ __forceinline__ void Unpack(const Raw<1>& r, float (&f)[1]) {
  f[0] = Bf16BitsToF32(r.v);
}

// One FP8 weight row: its codes and its row of block scales (bc columns per
// scale). The bf16 kernels use a plain row pointer instead.
struct Fp8Row {
  const uint8_t* w;
  const float* s;
  int bc;
};

// V codes and the scale of their block (V divides bc, so they share one).
template <int V>
struct Fp8Raw;
template <>
struct Fp8Raw<8> {
  uint2 c;
  float s;
};
template <>
struct Fp8Raw<1> {
  uint8_t c;
  float s;
};

template <int V>
__device__ __forceinline__ Raw<V> LoadRow(const bf16* w, int k) {
  return LoadWeight<V>(w + k);
}
template <int V>
__device__ __forceinline__ Fp8Raw<V> LoadRow(const Fp8Row& w, int k);
template <>
__device__ __forceinline__ Fp8Raw<8> LoadRow<8>(const Fp8Row& w, int k) {
  Fp8Raw<8> r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(r.c.x), "=r"(r.c.y)
               : "l"(w.w + k));
  r.s = __ldg(w.s + k / w.bc);
  return r;
}
template <>
__device__ __forceinline__ Fp8Raw<1> LoadRow<1>(const Fp8Row& w, int k) {
  return Fp8Raw<1>{__ldg(w.w + k), __ldg(w.s + k / w.bc)};
}

// The host's dequantisation: the exact e4m3 value (every one is an f16) times
// the scale in fp32, rounded once to bf16.
__device__ __forceinline__ float DequantE4m3(float code, float s) {
  return __bfloat162float(__float2bfloat16_rn(__fmul_rn(code, s)));
}
__device__ __forceinline__ void Unpack4(uint32_t codes, float s, float* f) {
  const float2 a = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3)));
  const float2 b = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes >> 16), __NV_E4M3)));
  f[0] = DequantE4m3(a.x, s);
  f[1] = DequantE4m3(a.y, s);
  f[2] = DequantE4m3(b.x, s);
  f[3] = DequantE4m3(b.y, s);
}
__device__ __forceinline__ void Unpack(const Fp8Raw<8>& r, float (&f)[8]) {
  Unpack4(r.c.x, r.s, f);
  Unpack4(r.c.y, r.s, f + 4);
}
__device__ __forceinline__ void Unpack(const Fp8Raw<1>& r, float (&f)[1]) {
  f[0] = DequantE4m3(__half2float(__half(__nv_cvt_fp8_to_halfraw(r.c, __NV_E4M3))), r.s);
}

template <typename W>
struct RowOf;
template <>
struct RowOf<bf16> {
  using type = const bf16*;
};
template <>
struct RowOf<uint8_t> {
  using type = Fp8Row;
};

// Row r of expert e's w13 [2I, D] / w2 [D, I].
template <typename W>
__device__ __forceinline__ typename RowOf<W>::type W13Row(const MoeParams& p, int e, int r);
template <>
__device__ __forceinline__ const bf16* W13Row<bf16>(const MoeParams& p, int e, int r) {
  return p.w13 + (static_cast<size_t>(e) * 2 * p.inter + r) * static_cast<size_t>(p.hidden);
}
template <>
__device__ __forceinline__ Fp8Row W13Row<uint8_t>(const MoeParams& p, int e, int r) {
  return Fp8Row{
      p.w13_fp8 + (static_cast<size_t>(e) * 2 * p.inter + r) * static_cast<size_t>(p.hidden),
      p.w13_scale + (static_cast<size_t>(e) * p.sr13 + r / p.fp8_br) * p.sc_d, p.fp8_bc};
}
template <typename W>
__device__ __forceinline__ typename RowOf<W>::type W2Row(const MoeParams& p, int e, int r);
template <>
__device__ __forceinline__ const bf16* W2Row<bf16>(const MoeParams& p, int e, int r) {
  return p.w2 + (static_cast<size_t>(e) * p.hidden + r) * static_cast<size_t>(p.inter);
}
template <>
__device__ __forceinline__ Fp8Row W2Row<uint8_t>(const MoeParams& p, int e, int r) {
  return Fp8Row{p.w2_fp8 + (static_cast<size_t>(e) * p.hidden + r) * static_cast<size_t>(p.inter),
                p.w2_scale + (static_cast<size_t>(e) * p.sr2 + r / p.fp8_br) * p.sc_i, p.fp8_bc};
}

// acc[r][t] += wf[r] · xf (v ascending): one load step of R rows against
// activation row t, the order every warp dot product here sums in.
template <int V, int R, int TC>
__device__ __forceinline__ void FmaRows(const float (&wf)[R][V], const float (&xf)[V], int t,
                                        float (&acc)[R][TC]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int v = 0; v < V; ++v) acc[r][t] = fmaf(wf[r][v], xf[v], acc[r][t]);
  }
}

// One group of WarpDot: the loads of U steps of R rows from k0 (zeros past
// K), all issued before any use ...
template <int V, int R, int U, typename WR, typename RawT>
__device__ __forceinline__ void LoadDotGroup(const WR (&w)[R], int k0, int K, RawT (&wr)[R][U]) {
  constexpr int kStep = 32 * V;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * kStep;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (k < K) {
        wr[r][u] = LoadRow<V>(w[r], k);
      } else {
        wr[r][u] = {};
      }
    }
  }
}

// ... and their products against the first nt activation rows, step by step
// (kActShared: the rows are in shared memory, read with plain loads).
template <int V, int R, int TC, int U, bool kActShared = false, typename RawT>
__device__ __forceinline__ void UseDotGroup(const RawT (&wr)[R][U], const bf16* const (&act)[TC],
                                            int nt, int k0, int K, float (&acc)[R][TC]) {
  constexpr int kStep = 32 * V;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * kStep;
    if (k < K) {
      float wf[R][V];
#pragma unroll
      for (int r = 0; r < R; ++r) Unpack(wr[r][u], wf[r]);
#pragma unroll
      for (int t = 0; t < TC; ++t) {
        if (t < nt) {
          float xf[V];
          if constexpr (kActShared) {
            static_assert(V == 8, "16-byte rows");
            Unpack(Raw<8>{*reinterpret_cast<const uint4*>(act[t] + k)}, xf);
          } else {
            Unpack(LoadAct<V>(act[t] + k), xf);
          }
          FmaRows<V, R, TC>(wf, xf, t, acc);
        }
      }
    }
  }
}

// Per-lane partial dot products of R weight rows with TC activation rows over
// K elements (only the first nt activation rows are used). Every weight load
// of a U-step group is issued before the first use.
// kU = 0 picks 8 / R steps per group (1 for R ≥ 8); a larger kU covers a
// whole short row in one group, so the warp waits for DRAM once instead of
// once per group.
// WR: a bf16 row pointer or an Fp8Row (converted to the same bf16 values).
template <int V, int R, int TC, int kU = 0, typename WR>
__device__ __forceinline__ void WarpDot(const WR (&w)[R], const bf16* const (&act)[TC],
                                        int nt, int K, float (&acc)[R][TC]) {
  constexpr int U = kU > 0 ? kU : (R >= 8 ? 1 : 8 / R);
  constexpr int kStep = 32 * V;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < TC; ++t) acc[r][t] = 0.f;
  }
  for (int k0 = lane * V; k0 < K; k0 += kStep * U) {
    decltype(LoadRow<V>(w[0], 0)) wr[R][U];
    LoadDotGroup<V, R, U>(w, k0, K, wr);
    UseDotGroup<V, R, TC, U>(wr, act, nt, k0, K, acc);
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.f + expf(-g)); }

// h[row0 + t, j] = SiLU(gate)·up from a warp's per-lane partial sums of
// feature j (acc[0]: gate, acc[1]: up) for activation rows t < nt.
template <int TC>
__device__ __forceinline__ void StoreSwiGlu(const MoeParams& p, const float (&acc)[2][TC], int row0,
                                            int nt, int j) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    if (t < nt) {
      const float g = WarpSum(acc[0][t]);
      const float u = WarpSum(acc[1][t]);
      if (lane == t) {
        p.h[static_cast<size_t>(row0 + t) * p.inter + j] = __float2bfloat16_rn(Silu(g) * u);
      }
    }
  }
}

// h rows [row0, row0 + nt) of gate|up feature j for one expert.
template <int V, int TC, int kU, typename WR>
__device__ __forceinline__ void GateUpRows(const MoeParams& p, const WR& wg, const WR& wu,
                                           int row0, int nt, int j) {
  const bf16* act[TC];
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    const int tok = p.direct ? 0 : p.row_token[row0 + min(t, nt - 1)];
    act[t] = p.x + static_cast<size_t>(tok) * p.hidden;
  }
  const WR w[2] = {wg, wu};
  float acc[2][TC];
  WarpDot<V, 2, TC, kU>(w, act, nt, p.hidden, acc);
  StoreSwiGlu<TC>(p, acc, row0, nt, j);
}

// Grid (expert slot, ceil(I / w)) of w-warp CTAs (GateUpWarps); warp i of
// tile y computes feature j = w·y + i (gate row j and up row I + j) for
// every row of the slot's expert.
// W: bf16 or uint8_t (FP8 experts).
template <int V, int kU, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeGateUpGemvKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (static_cast<int>(blockIdx.x) >= p.meta[0]) return;
  const int e = p.active[blockIdx.x];
  const int first = p.offsets[e];
  const int count = p.offsets[e + 1] - first;
  const int j = blockIdx.y * static_cast<int>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= p.inter) return;
  const auto wg = W13Row<W>(p, e, j);
  const auto wu = W13Row<W>(p, e, p.inter + j);
  constexpr int kLargeU = kU > 4 ? 0 : kU;
  for (int t0 = 0; t0 < count; t0 += kGemvTokens) {
    const int nt = min(kGemvTokens, count - t0);
    if (nt == 1) {
      GateUpRows<V, 1, kU>(p, wg, wu, first + t0, nt, j);
    } else if (nt == 2) {
      GateUpRows<V, 2, kU>(p, wg, wu, first + t0, nt, j);
    } else if (nt <= 4) {
      // Four or eight token rows with a one-group row (kU ≥ 6) spill at 128
      // registers; the default grouping (4 steps) does not. The same
      // per-lane order of the products either way.
      GateUpRows<V, 4, kLargeU>(p, wg, wu, first + t0, nt, j);
    } else {
      GateUpRows<V, kGemvTokens, kLargeU>(p, wg, wu, first + t0, nt, j);
    }
  }
}

// The CTA's threads copy one bf16 row of `chunks` 16-byte chunks into shared
// memory (cp.async through L2) and commit the copies as one group.
__device__ __forceinline__ void StageRowAsync(uint4* dst, const bf16* src, int chunks) {
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) CpAsync16(dst + c, src + c * 8, true);
  CpAsyncCommit();
}

// The folded shared expert's feature j (MoeParams::shared): GateUpRows for
// one row (WarpDot's one group of kU steps, which covers the whole row:
// MoeFoldsSharedExpert checks D ≤ 256·kU), with the weights loaded before
// the PDL wait, i.e. while the route kernel still runs (they do not depend
// on it). The token's row x goes into the CTA's shared memory before the
// wait as well, through L2 (an SM's L1 may hold an older layer's x): x is
// the router's input, written before the router ran, so it is complete once
// the route kernel (which waited for the router) has let this grid start.
// Read after the wait instead, x queued behind the routed CTAs' weight
// loads on the same SMs and the shared CTAs held their slots for microseconds
// past the route's end (per-CTA timestamps, cta_probe.cuh;
// docs/dev/journal/performance.md). Every thread of the CTA
// calls it; has_j says whether its warp has a feature.
template <int kU>
__device__ __forceinline__ void SharedGateUpFeature(const MoeParams& p, int j, bool has_j,
                                                    uint4 (&xs)[kU * 32] STRATA_PROBE_PARAM) {
  StageRowAsync(xs, p.x, p.hidden / 8);
  const int k0 = (threadIdx.x & 31) * 8;
  const bf16* const w[2] = {p.sw13 + static_cast<size_t>(j) * p.hidden,
                            p.sw13 + static_cast<size_t>(p.inter + j) * p.hidden};
  Raw<8> wr[2][kU];
  if (has_j) LoadDotGroup<8, 2, kU>(w, k0, p.hidden, wr);
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_gu);
  PdlLaunchDependents();
  CpAsyncWait<0>();
  __syncthreads();
  if (!has_j) return;
  const bf16* const act[1] = {reinterpret_cast<const bf16*>(xs)};
  float acc[2][1] = {{0.f}, {0.f}};
  UseDotGroup<8, 2, 1, kU, true>(wr, act, 1, k0, p.hidden, acc);
  StoreSwiGlu<1>(p, acc, p.top_k, 1, j);
}

// The planless one-token path (MoeParams::direct) of MoeGateUpGemvKernel, in
// a kernel of its own: the planned kernel's 8-token variants set its register
// budget (at kU = 9 it spills at 128 registers), which the one-row path does
// not need. One dependent load before the weights stream (the planned path
// takes four: meta, active, offsets, row_token).
// Grid (top_k, ceil(I / w)) of w-warp CTAs (GateUpWarps; warp i of
// tile y computes feature w·y + i), or with a folded shared expert one
// dimension of (1 + top_k) · ceil(I / w) CTAs whose first ceil(I / w) are
// the shared expert's: launched first, they become resident and load their
// weights before the routed ones take the SMs.
template <int V, int kU, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeGateUpDirectKernel(MoeParams p) {
  STRATA_PROBE_START(p.probe_gu);
  int slot = static_cast<int>(blockIdx.x);
  int tile = static_cast<int>(blockIdx.y);
  if constexpr (V == 8 && kU > 0 && std::is_same_v<W, bf16>) {
    if (p.shared) {
      const int wpc = static_cast<int>(blockDim.x >> 5);
      const int tiles = (p.inter + wpc - 1) / wpc;
      const int at = static_cast<int>(blockIdx.x);
      const int j = at * wpc + (threadIdx.x >> 5);
      if (at < tiles) {
        __shared__ uint4 x_stage[kU * 32];
        SharedGateUpFeature<kU>(p, min(j, p.inter - 1), j < p.inter, x_stage STRATA_PROBE_PASS);
        STRATA_PROBE_END(p.probe_gu);
        return;
      }
      slot = (at - tiles) % p.top_k;
      tile = (at - tiles) / p.top_k;
    }
  }
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_gu);
  PdlLaunchDependents();
  const int e = p.idx[slot];
  const int j = tile * static_cast<int>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= p.inter) return;
  GateUpRows<V, 1, kU>(p, W13Row<W>(p, e, j), W13Row<W>(p, e, p.inter + j), slot, 1, j);
  STRATA_PROBE_END(p.probe_gu);
}

// WarpDot for R ≥ 8 bf16 rows of one expert that lie `stride` elements apart
// from `base` (row r at base + min(r, last) · stride), one activation row,
// with the first step's loads already in `wr` (issued by the caller, e.g.
// before its PDL wait). The same products in the same order as WarpDot; the
// rows are addressed from one pointer because 18 row pointers next to 18
// in-flight loads exceed the 128 registers 16 warps leave.
template <int R>
__device__ __forceinline__ void RowBlockDotFirstLoaded(const bf16* base, size_t stride, int last,
                                                       const bf16* act, int K, Raw<8> (&wr)[R],
                                                       float (&acc)[R][1]) {
  static_assert(R >= 8, "one load step per group");
  constexpr int kStep = 32 * 8;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.f;
  for (int k0 = lane * 8; k0 < K; k0 += kStep) {
    if (k0 != lane * 8) {
#pragma unroll
      for (int r = 0; r < R; ++r) wr[r] = LoadWeight<8>(base + min(r, last) * stride + k0);
    }
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r) Unpack(wr[r], wf[r]);
    float xf[8];
    Unpack(LoadAct<8>(act + k0), xf);
    FmaRows<8, R, 1>(wf, xf, 0, acc);
  }
}

// yrows rows [row0, row0 + nt), features d and d + 1 (d + 1 < D or skipped).
template <int V, int TC, typename WR>
__device__ __forceinline__ void DownRows(const MoeParams& p, const WR& w0, const WR& w1,
                                         bool has1, int row0, int nt, int d) {
  const int lane = threadIdx.x & 31;
  const bf16* act[TC];
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    act[t] = p.h + static_cast<size_t>(row0 + min(t, nt - 1)) * p.inter;
  }
  const WR w[2] = {w0, w1};
  float acc[2][TC];
  WarpDot<V, 2, TC>(w, act, nt, p.inter, acc);
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    if (t < nt) {
      const float a = WarpSum(acc[0][t]);
      const float b = WarpSum(acc[1][t]);
      if (lane == t) {
        float* out = p.yrows + static_cast<size_t>(row0 + t) * p.hidden + d;
        out[0] = a;
        if (has1) out[1] = b;
      }
    }
  }
}

// Grid (expert slot, ceil(D / 16)); warp w of tile y computes features
// 16y + 2w and 16y + 2w + 1.
template <int V, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeDownGemvKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (static_cast<int>(blockIdx.x) >= p.meta[0]) return;
  const int e = p.active[blockIdx.x];
  const int first = p.offsets[e];
  const int count = p.offsets[e + 1] - first;
  const int d = blockIdx.y * (2 * kGemvWarps) + 2 * (threadIdx.x >> 5);
  if (d >= p.hidden) return;
  const bool has1 = d + 1 < p.hidden;
  const auto w0 = W2Row<W>(p, e, d);
  const auto w1 = W2Row<W>(p, e, has1 ? d + 1 : d);
  for (int t0 = 0; t0 < count; t0 += kGemvTokens) {
    const int nt = min(kGemvTokens, count - t0);
    if (nt == 1) {
      DownRows<V, 1>(p, w0, w1, has1, first + t0, nt, d);
    } else if (nt == 2) {
      DownRows<V, 2>(p, w0, w1, has1, first + t0, nt, d);
    } else if (nt <= 4) {
      DownRows<V, 4>(p, w0, w1, has1, first + t0, nt, d);
    } else {
      DownRows<V, kGemvTokens>(p, w0, w1, has1, first + t0, nt, d);
    }
  }
}

// Down product and combine in one kernel for n ≤ kFusedCombineMaxTokens.
// Grid ceil(D / kFusedRows): the CTA owns kFusedRows features. With kSplit =
// 2 (bf16 experts only) it has 16 warps and splits each row's k range in two
// at a multiple of 256: warp w takes pairs q = w % 8, w % 8 + 8,
// ... over k half w / 8, so every warp streams its 18 rows in two dependent
// rounds of loads instead of four (K = 1024). Partial results go to shared
// memory per half; then y[t, d] = Σ_j wt[t, j] · (part₀ + part₁)[t, j, d] in
// j order. kSplit = 1: 8 warps over the whole k range (moe.down_split=0).
template <int V, typename W, int kSplit>
__global__ void __launch_bounds__(kGemvThreads * kSplit) MoeDownCombineKernel(MoeParams p) {
  static_assert(kSplit == 1 || std::is_same_v<W, bf16>, "FP8 rows are not split");
  __shared__ float part[kSplit][kFusedCombineMaxTokens * kMaxTopK][kFusedRows];
  STRATA_PROBE_START(p.probe_dn);
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) % kGemvWarps;
  const int half = (threadIdx.x >> 5) / kGemvWarps;
  const int d0 = blockIdx.x * kFusedRows;
  const int pairs = p.num_tokens * p.top_k;
  const size_t I = static_cast<size_t>(p.inter);
  // The split point: half of K rounded up to a lane's step (32·V elements);
  // a K too short for it leaves half 1 idle.
  constexpr int kUnit = 32 * V;
  const int split =
      kSplit == 2 ? min(p.inter, (p.inter / 2 + kUnit - 1) / kUnit * kUnit) : p.inter;
  const int kb = half == 0 ? 0 : split;
  const int ke = half == 0 ? split : p.inter;
  // One token (direct): warp w's only pair is pick w, whose expert the route
  // kernel wrote before the gate|up kernel this one follows started (that
  // kernel waited for it), so the first step of its rows is loaded before
  // the PDL wait, while gate|up's last CTAs drain. idx is read through L2
  // (ld.cg): route's writes are there, an SM's L1 may hold an older layer's.
  constexpr bool kMayPreload = kSplit == 2 && V == 8;  // bf16 rows (kSplit 2)
  const int last = p.hidden - 1 - d0;  // rows past D repeat the last one
  Raw<8> first[kFusedRows];
  int first_e = -1;
  if constexpr (kMayPreload) {
    if (p.down_preload && p.direct && warp < pairs && lane * V < ke - kb) {
      first_e = __ldcg(p.idx + warp);
      const bf16* base = W2Row<bf16>(p, first_e, d0) + kb + lane * V;
#pragma unroll
      for (int r = 0; r < kFusedRows; ++r) first[r] = LoadWeight<8>(base + min(r, last) * I);
    }
  }
  // The folded shared expert (direct, bf16): its rows d0 … d0 + 17 of sw2
  // do not depend on routing; they are copied into shared memory before the
  // wait, and the CTA's warps form its dots after the routed pairs.
  constexpr bool kMayFold = kSplit == 2 && V == 8;
  // [kFusedRows][chunks] rows, then [chunks] the shared expert's h row.
  extern __shared__ uint4 shared_rows[];
  [[maybe_unused]] const int chunks = p.inter / 8;  // 16-byte chunks of a row of I
  if constexpr (kMayFold) {
    if (p.shared) {
      for (int c = threadIdx.x; c < kFusedRows * chunks; c += blockDim.x) {
        const int r = c / chunks;
        CpAsync16(shared_rows + c,
                  p.sw2 + static_cast<size_t>(min(d0 + r, p.hidden - 1)) * I + (c % chunks) * 8,
                  true);
      }
      CpAsyncCommit();
    }
  }
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_dn);
  PdlLaunchDependents();
  // accumulate: the thread that writes output o reads its old value now, so
  // the load lands while the rows stream instead of after the last dot.
  float y_old = 0.f;
  if (p.accumulate && static_cast<int>(threadIdx.x) < p.num_tokens * kFusedRows) {
    const int t = threadIdx.x / kFusedRows;
    const int d = d0 + threadIdx.x % kFusedRows;
    if (d < p.hidden) y_old = p.y[static_cast<size_t>(t) * p.hidden + d];
  }
  if constexpr (kMayFold) {
    // The shared expert's h row (written by the gate|up kernel): one L2
    // round trip for the CTA, landing while the routed pairs stream.
    if (p.shared) {
      StageRowAsync(shared_rows + kFusedRows * chunks, p.h + static_cast<size_t>(p.top_k) * I,
                    chunks);
    }
  }
  for (int q = warp; q < pairs; q += kGemvWarps) {
    const int e = p.idx[q];
    typename RowOf<W>::type w[kFusedRows];
#pragma unroll
    for (int r = 0; r < kFusedRows; ++r) {
      if constexpr (kSplit == 2) {
        w[r] = W2Row<W>(p, e, min(d0 + r, p.hidden - 1)) + kb;
      } else {
        w[r] = W2Row<W>(p, e, min(d0 + r, p.hidden - 1));
      }
    }
    const bf16* act[1] = {p.h + static_cast<size_t>(p.direct ? q : p.pair_row[q]) * I + kb};
    float acc[kFusedRows][1];
    if constexpr (kMayPreload) {
      // `first` serves both cases (a second array of 18 loads spilled): the
      // first step is loaded here unless it was before the wait.
      const bf16* base = W2Row<bf16>(p, e, d0) + kb;
      if ((q != warp || first_e != e) && lane * V < ke - kb) {
#pragma unroll
        for (int r = 0; r < kFusedRows; ++r) {
          first[r] = LoadWeight<8>(base + min(r, last) * I + lane * V);
        }
      }
      RowBlockDotFirstLoaded<kFusedRows>(base, I, last, act[0], ke - kb, first, acc);
    } else {
      WarpDot<V, kFusedRows, 1>(w, act, 1, ke - kb, acc);
    }
#pragma unroll
    for (int r = 0; r < kFusedRows; ++r) {
      const float s = WarpSum(acc[r][0]);
      if (lane == r) part[half][q][r] = s;
    }
  }
  if constexpr (kMayFold) {
    if (p.shared) {
      // Dot (row r, half hf) of the shared expert, 36 of them over the
      // CTA's 16 warps: lane chunks ascending, then the warp sum.
      CpAsyncWait<0>();
      __syncthreads();
      const uint4* act = shared_rows + kFusedRows * chunks;
      for (int task = threadIdx.x >> 5; task < kSplit * kFusedRows;
           task += static_cast<int>(blockDim.x >> 5)) {
        const int r = task % kFusedRows;
        const int hf = task / kFusedRows;
        const int c0 = (hf == 0 ? 0 : split) / 8;
        const int c1 = (hf == 0 ? split : p.inter) / 8;
        float acc[1][1] = {{0.f}};
        for (int c = c0 + lane; c < c1; c += 32) {
          float wf[1][8], xf[8];
          Unpack(Raw<8>{shared_rows[r * chunks + c]}, wf[0]);
          Unpack(Raw<8>{act[c]}, xf);
          FmaRows<8, 1, 1>(wf, xf, 0, acc);
        }
        const float s = WarpSum(acc[0][0]);
        if (lane == 0) part[hf][pairs][r] = s;
      }
    }
  }
  __syncthreads();
  // One pass (y_old above is this thread's only output).
  static_assert(kGemvThreads >= kFusedCombineMaxTokens * kFusedRows);
  for (int o = threadIdx.x; o < p.num_tokens * kFusedRows; o += blockDim.x) {
    const int t = o / kFusedRows;
    const int r = o % kFusedRows;
    const int d = d0 + r;
    if (d >= p.hidden) continue;
    float s = 0.f;
    for (int j = 0; j < p.top_k; ++j) {
      const int q = t * p.top_k + j;
      float pq = part[0][q][r];
      if constexpr (kSplit == 2) pq = pq + part[1][q][r];
      s = fmaf(p.wt[q], pq, s);
    }
    if constexpr (kMayFold) {
      if (p.shared) s += part[0][pairs][r] + part[1][pairs][r];
    }
    // y_old + s is the add AddRmsNorm makes with y as its delta: the same bits.
    if (p.accumulate) s = y_old + s;
    p.y[static_cast<size_t>(t) * p.hidden + d] = s;
  }
  STRATA_PROBE_END(p.probe_dn);
}

// y[t] = Σ_j wt[t, j] · yrows[pair_row[t, j]], j ascending. Grid n.
template <bool kVec4>
__global__ void __launch_bounds__(kCombineThreads) MoeCombineKernel(MoeParams p) {
  __shared__ int rows[kMaxTopK];
  __shared__ float wts[kMaxTopK];
  PdlWait();
  PdlLaunchDependents();
  const int t = blockIdx.x;
  const int k = p.top_k;
  if (static_cast<int>(threadIdx.x) < k) {
    rows[threadIdx.x] = p.pair_row[t * k + threadIdx.x];
    wts[threadIdx.x] = p.wt[t * k + threadIdx.x];
  }
  __syncthreads();
  const size_t D = static_cast<size_t>(p.hidden);
  float* yt = p.y + static_cast<size_t>(t) * D;
  if (kVec4) {
    for (size_t d = threadIdx.x * 4; d < D; d += blockDim.x * 4) {
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int j = 0; j < k; ++j) {
        const float a = wts[j];
        const float4 v = *reinterpret_cast<const float4*>(p.yrows + rows[j] * D + d);
        s.x = fmaf(a, v.x, s.x);
        s.y = fmaf(a, v.y, s.y);
        s.z = fmaf(a, v.z, s.z);
        s.w = fmaf(a, v.w, s.w);
      }
      if (p.accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(yt + d);
        s = make_float4(o.x + s.x, o.y + s.y, o.z + s.z, o.w + s.w);
      }
      *reinterpret_cast<float4*>(yt + d) = s;
    }
  } else {
    for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
      float s = 0.f;
      for (int j = 0; j < k; ++j) s = fmaf(wts[j], p.yrows[rows[j] * D + d], s);
      yt[d] = p.accumulate ? yt[d] + s : s;
    }
  }
}

// ---------------------------------------------------------------------------
// Grouped GEMM (prefill): mma.sync m16n8k16, bf16 in, fp32 accumulate.

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Batch invariance (MoeArgs::batch_invariant): an output element of a row is
// the fp32 sum over k tiles 0, 1, ... of mma.sync m16n8k16 steps, each of
// which reads only that row's A fragment and the B tile; the tile config is
// fixed and the k loop never splits, so the value depends neither on how
// many rows the tile or the call hold nor on the row's slot in the tile
// (rows are placed by atomics, in any order). Masked rows are zero-filled and
// feed only their own accumulators. The combine sums the k picks in k order
// with one fmaf chain (vector and scalar forms alike).
//
// kGateUp: A = x rows gathered through row_token (K = D), B = 64 gate rows and
// the matching 64 up rows of w13[e] interleaved in groups of 16 (smem row r is
// gate row j0 + 16·(r/32) + r%16 when (r/16) is even, else the up row of the
// same j), epilogue h = silu(g)·u as bf16. Otherwise A = h rows (K = I), B =
// 128 rows of w2[e], epilogue yrows fp32.
// Grid (tile bound, I/64 or D/128). Requires D % 128 == 0, I % 64 == 0 and
// 16-byte aligned x, w13, w2 (checked on the host).
template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) MoeGroupedGemmKernel(MoeParams p) {
  extern __shared__ __align__(16) unsigned char gemm_smem[];
  bf16* const a_smem = reinterpret_cast<bf16*>(gemm_smem);  // [kStages][kBm][kLds]
  bf16* const b_smem = a_smem + kStages * kBm * kLds;        // [kStages][kBn][kLds]
  PdlWait();
  PdlLaunchDependents();
  const int tile = blockIdx.x;
  if (tile >= p.meta[1]) return;
  const int e = p.tile_expert[tile];
  if (e < p.expert_lo || e >= p.expert_hi) return;
  const size_t el = static_cast<size_t>(e - p.expert_lo);  // weight slot
  const int first = p.offsets[e] + p.tile_m0[tile];
  const int rows = min(kBm, p.offsets[e + 1] - first);
  const int D = p.hidden;
  const int I = p.inter;
  const int K = kGateUp ? D : I;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int wm = warp >> 2;  // 2 warps along M (32 rows each)
  const int wn = warp & 3;   // 4 warps along N (32 columns each)

  // Loaders: one 16-byte chunk of A and two of B per thread and stage.
  const int ld_row = tid >> 2;          // 0..63
  const int ld_col = (tid & 3) * 8;     // element offset of the chunk
  const bool a_valid = ld_row < rows;
  const bf16* a_src;
  if (kGateUp) {
    const int tok = a_valid ? p.row_token[first + ld_row] : 0;
    a_src = p.x + static_cast<size_t>(tok) * D + ld_col;
  } else {
    a_src = p.h + static_cast<size_t>(first + (a_valid ? ld_row : 0)) * I + ld_col;
  }
  const bf16* b_src[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = ld_row + 64 * i;
    size_t wrow;
    if (kGateUp) {
      const int group = r >> 4;
      const int j = blockIdx.y * 64 + (group >> 1) * 16 + (r & 15);
      wrow = el * 2 * I + ((group & 1) ? I + j : j);
    } else {
      wrow = el * D + blockIdx.y * kBn + r;
    }
    b_src[i] = (kGateUp ? p.w13 : p.w2) + wrow * K + ld_col;
  }
  auto load_stage = [&](int stage, int kt) {
    const int koff = kt * kBk;
    CpAsync16(a_smem + (stage * kBm + ld_row) * kLds + ld_col, a_src + koff, a_valid);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      CpAsync16(b_smem + (stage * kBn + ld_row + 64 * i) * kLds + ld_col, b_src[i] + koff, true);
    }
  };

  const int k_tiles = K / kBk;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    CpAsyncCommit();  // empty groups keep the wait count uniform
  }
  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.f;
    }
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile kt landed
    __syncthreads();             // everyone's did, and tile kt−1 is no longer read
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    CpAsyncCommit();
    const bf16* a_tile = a_smem + (kt % kStages) * kBm * kLds;
    const bf16* b_tile = b_smem + (kt % kStages) * kBn * kLds;
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        LdMatrixX4(a[mi], a_tile + (wm * 32 + mi * 16 + (lane & 15)) * kLds + kk + (lane >> 4) * 8);
      }
      uint32_t b[4][2];
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t r[4];
        LdMatrixX4(r, b_tile + (wn * 32 + nj * 16 + (lane >> 4) * 8 + (lane & 7)) * kLds + kk +
                          ((lane >> 3) & 1) * 8);
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Mma16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      }
    }
  }
  CpAsyncWait<0>();

  // Accumulator c of fragment (mi, ni): row wm·32 + mi·16 + lane/4 (+8 for
  // c = 2, 3), column wn·32 + ni·8 + 2·(lane%4) (+1 for odd c).
  const int g = lane >> 2;
  const int c2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = wm * 32 + mi * 16 + g + half * 8;
      if (row >= rows) continue;
      const size_t out_row = static_cast<size_t>(first + row);
      if (kGateUp) {
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const int j = blockIdx.y * 64 + wn * 16 + ni * 8 + c2;
          const float h0 = Silu(acc[mi][ni][2 * half]) * acc[mi][ni + 2][2 * half];
          const float h1 = Silu(acc[mi][ni][2 * half + 1]) * acc[mi][ni + 2][2 * half + 1];
          *reinterpret_cast<uint32_t*>(p.h + out_row * I + j) = F32x2ToBf16x2(h0, h1);
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int col = blockIdx.y * kBn + wn * 32 + ni * 8 + c2;
          *reinterpret_cast<float2*>(p.yrows + out_row * D + col) =
              make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
        }
      }
    }
  }
}

// FP8 prefill: experts [expert_lo, expert_hi) that have rows, dequantised
// into deq13 / deq2 (slot e − expert_lo) in the bf16 layout, 8 elements per
// thread (D and I are multiples of 64 on this path). Grid (x, chunk size).
constexpr int kDequantThreads = 256;
__global__ void __launch_bounds__(kDequantThreads) MoeDequantExpertsKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int e = p.expert_lo + static_cast<int>(blockIdx.y);
  if (e >= p.expert_hi || p.offsets[e + 1] == p.offsets[e]) return;
  const size_t D = static_cast<size_t>(p.hidden);
  const size_t I = static_cast<size_t>(p.inter);
  const size_t slot = blockIdx.y;
  const size_t n13 = 2 * I * D / 8;
  const size_t total = n13 + D * I / 8;
  for (size_t v = static_cast<size_t>(blockIdx.x) * kDequantThreads + threadIdx.x; v < total;
       v += static_cast<size_t>(gridDim.x) * kDequantThreads) {
    const bool is13 = v < n13;
    const size_t q = (is13 ? v : v - n13) * 8;
    const size_t cols = is13 ? D : I;
    const int r = static_cast<int>(q / cols);
    const int c = static_cast<int>(q % cols);
    const Fp8Row row = is13 ? W13Row<uint8_t>(p, e, r) : W2Row<uint8_t>(p, e, r);
    float f[8];
    Unpack(LoadRow<8>(row, c), f);
    bf16* dst = (is13 ? p.deq13 + slot * 2 * I * D : p.deq2 + slot * D * I) + q;
    *reinterpret_cast<uint4*>(dst) = make_uint4(F32x2ToBf16x2(f[0], f[1]), F32x2ToBf16x2(f[2], f[3]),
                                                F32x2ToBf16x2(f[4], f[5]), F32x2ToBf16x2(f[6], f[7]));
  }
}

// ---------------------------------------------------------------------------
// Host side.

// Whether one token may be routed by the whole CTA (RouteTokenCta): sigmoid
// scores and no group limit (moe.cta_route=0 turns it off; the results are
// the same bits).
bool UseCtaRoute(int64_t num_tokens, const MoeShape& s) {
  return tuning::Current().On(tuning::Key::kMoeCtaRoute) && num_tokens == 1 && !s.softmax &&
         s.num_groups <= 1 && s.num_experts <= kMaxExperts && s.top_k <= kMaxTopK;
}

// Calls f(std::integral_constant<int, kPer>{}) with the biased scores per
// lane a routing warp holds for E experts (32·kPer ≥ E).
template <typename F>
Status WithScoresPerLane(int E, F f) {
  if (E <= 32) return f(std::integral_constant<int, 1>{});
  if (E <= 64) return f(std::integral_constant<int, 2>{});
  if (E <= 128) return f(std::integral_constant<int, 4>{});
  if (E <= 256) return f(std::integral_constant<int, 8>{});
  if (E <= 512) return f(std::integral_constant<int, 16>{});
  return f(std::integral_constant<int, 32>{});
}

template <int kPer>
Status LaunchRouteOnly(const MoeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.num_tokens, kRouteWarps)));
  return Launch("MoeRouteKernel", MoeRouteKernel<kPer>, grid, dim3(kRouteWarps * 32), 0, stream, p);
}

template <int kPer>
Status LaunchRouting(const MoeParams& p, bool in_plan, cudaStream_t stream) {
  if (!in_plan) STRATA_RETURN_IF_ERROR(LaunchRouteOnly<kPer>(p, stream));
  const cudaError_t err =
      LaunchPdl(MoePlanKernel<kPer>, dim3(1), dim3(kPlanThreads),
                2 * sizeof(int32_t) * static_cast<size_t>(p.num_experts), stream, p, in_plan ? 1 : 0);
  if (err != cudaSuccess) return CudaError(err, "MoePlanKernel");
  return OkStatus();
}

Status RouteAndPlan(const MoeParams& p, bool in_plan, cudaStream_t stream) {
  return WithScoresPerLane(p.num_experts, [&](auto per) {
    return LaunchRouting<decltype(per)::value>(p, in_plan, stream);
  });
}

Status RouteOnly(const MoeParams& p, cudaStream_t stream) {
  return WithScoresPerLane(
      p.num_experts, [&](auto per) { return LaunchRouteOnly<decltype(per)::value>(p, stream); });
}

// Whether a routed token may skip the plan (MoeParams::direct);
// moe.direct=0 turns that off (the same bits either way).
bool DirectEnabled() { return tuning::Current().On(tuning::Key::kMoeDirect); }

// Whether the one-token down+combine kernel loads its first weights before
// its PDL wait (MoeParams::down_preload); moe.down_preload=0 turns that off
// (the same bits either way).
bool DownPreloadEnabled() { return tuning::Current().On(tuning::Key::kMoeDownPreload); }

// Whether a gate|up row short enough fits one group of loads per warp
// (moe.one_round=0 turns that off).
bool OneRoundEnabled() { return tuning::Current().On(tuning::Key::kMoeOneRound); }

// Whether 16-byte loads read a gate|up row of `hidden` elements in one group
// (5 to 9 steps of 256: the kernels' kU > 0).
bool OneGroupRows(int64_t hidden) {
  const int64_t steps = CeilDiv(hidden, 256);
  return OneRoundEnabled() && steps > 4 && steps <= 9;
}

// The gate|up kernel for rows of `hidden` elements: with 16-byte loads, a row
// of up to 9 · 256 elements (Kimi's 2304) is read in one group (2 rows × 9
// loads of 16 bytes per lane, 72 registers) instead of three dependent ones.
// direct: the planless one-token kernel, else the planned one.
template <int V, int kU, typename W>
void (*GateUpKernel(bool direct))(MoeParams) {
  return direct ? MoeGateUpDirectKernel<V, kU, W> : MoeGateUpGemvKernel<V, kU, W>;
}

template <int V, typename W>
void (*GateUpKernelFor(int hidden, bool direct))(MoeParams) {
  if constexpr (V == 8) {
    if (OneGroupRows(hidden)) {
      const int64_t steps = CeilDiv(hidden, 32 * V);
      if (steps <= 6) return GateUpKernel<V, 6, W>(direct);
      if (steps <= 8) return GateUpKernel<V, 8, W>(direct);
      return GateUpKernel<V, 9, W>(direct);
    }
  }
  return GateUpKernel<V, 0, W>(direct);
}

// Warps (features) per CTA of the decode gate|up kernels: 4. Their CTAs
// live for one round of loads each; four smaller CTAs per SM instead of two
// turn the slots over in smaller pieces through the waves and the tail, and
// the next kernel's CTAs find room sooner: 4 warps beat 8 at batch 1, 8 and
// 32, and 2 warps are no better than 4 (docs/dev/journal/performance.md).
// moe.gate_up_warps=2|4|8 picks (the same bits: a feature's products do
// not depend on it).
int GateUpWarps() {
  constexpr int kWarps[] = {2, 4, 8};  // the entry's choices, in order
  return kWarps[tuning::Current().Int(tuning::Key::kMoeGateUpWarps)];
}

// Whether the fused down+combine splits each row's k range between two warps
// (moe.down_split=0: one warp per row over all of k).
bool DownSplitEnabled() { return tuning::Current().On(tuning::Key::kMoeDownSplit); }

template <int V, typename W>
Status LaunchGemvPath(MoeParams p, bool vec4_y, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const unsigned slots = static_cast<unsigned>(std::min<int64_t>(p.num_experts, rows));
  const int wpc = GateUpWarps();
  const unsigned tiles = static_cast<unsigned>(CeilDiv(p.inter, wpc));
  // A folded shared expert: one dimension, its CTAs first (see the kernel).
  const dim3 gate_up_grid = p.shared ? dim3((slots + 1) * tiles) : dim3(slots, tiles);
  if (p.direct) {
    STRATA_PROBE_SLOT(p.probe_gu, "moe_gateup", int64_t{gate_up_grid.x} * gate_up_grid.y);
    STRATA_PROBE_SLOT(p.probe_dn, "moe_down", CeilDiv(p.hidden, kFusedRows));
  }
  STRATA_RETURN_IF_ERROR(Launch("MoeGateUpGemvKernel",
                                GateUpKernelFor<V, W>(p.hidden, p.direct != 0), gate_up_grid,
                                dim3(32 * wpc), 0, stream, p));
  if (p.num_tokens <= kFusedCombineMaxTokens) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.hidden, kFusedRows)));
    // bf16 only: FP8 rows (codes and scales) need more than the 128
    // registers 16 warps leave a thread.
    if constexpr (std::is_same_v<W, bf16>) {
      if (DownSplitEnabled()) {
        // The folded shared expert's rows are staged in dynamic shared memory.
        const size_t smem =
            p.shared ? sizeof(bf16) * (kFusedRows + 1) * static_cast<size_t>(p.inter) : 0;
        if (smem > 0) {
          const cudaError_t err = cudaFuncSetAttribute(MoeDownCombineKernel<V, W, 2>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(smem));
          if (err != cudaSuccess) return CudaError(err, "cudaFuncSetAttribute(MoeDownCombine)");
        }
        return Launch("MoeDownCombineKernel", MoeDownCombineKernel<V, W, 2>, grid,
                      dim3(2 * kGemvThreads), smem, stream, p);
      }
    }
    return Launch("MoeDownCombineKernel", MoeDownCombineKernel<V, W, 1>, grid, dim3(kGemvThreads),
                  0, stream, p);
  }
  STRATA_RETURN_IF_ERROR(Launch(
      "MoeDownGemvKernel", MoeDownGemvKernel<V, W>,
      dim3(slots, static_cast<unsigned>(CeilDiv(p.hidden, 2 * kGemvWarps))), dim3(kGemvThreads), 0,
      stream, p));
  const dim3 grid(static_cast<unsigned>(p.num_tokens));
  if (vec4_y) {
    return Launch("MoeCombineKernel", MoeCombineKernel<true>, grid, dim3(kCombineThreads), 0,
                  stream, p);
  }
  return Launch("MoeCombineKernel", MoeCombineKernel<false>, grid, dim3(kCombineThreads), 0,
                stream, p);
}

// fp8_chunk: experts per dequantisation chunk when p.w13_fp8 is set.
Status LaunchGemmPath(const MoeParams& p, bool vec4_y, int fp8_chunk, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const unsigned tiles = static_cast<unsigned>(TileBound(rows, p.num_experts));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(MoeGroupedGemmKernel<true>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kGemmSmemBytes)));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(MoeGroupedGemmKernel<false>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kGemmSmemBytes)));
  auto gemms = [&](const MoeParams& q) -> Status {
    STRATA_RETURN_IF_ERROR(Launch("MoeGroupedGemmKernel<gate_up>", MoeGroupedGemmKernel<true>,
                                  dim3(tiles, static_cast<unsigned>(q.inter / 64)),
                                  dim3(kGemmThreads), kGemmSmemBytes, stream, q));
    return Launch("MoeGroupedGemmKernel<down>", MoeGroupedGemmKernel<false>,
                  dim3(tiles, static_cast<unsigned>(q.hidden / kBn)), dim3(kGemmThreads),
                  kGemmSmemBytes, stream, q);
  };
  if (p.w13_fp8 == nullptr) {
    STRATA_RETURN_IF_ERROR(gemms(p));
  } else {
    // Chunks of `chunk` experts: dequantise the chunk's active experts, then
    // the GEMMs on the tiles of those experts (the others exit at once). The
    // scratch is reused; stream order (and each kernel's PdlWait) keeps the
    // next chunk's dequantisation behind the previous chunk's GEMMs.
    const int64_t per = 3 * static_cast<int64_t>(p.inter) * p.hidden / 8;
    const unsigned dq_x =
        static_cast<unsigned>(std::min<int64_t>(CeilDiv(per, kDequantThreads), 1024));
    for (int lo = 0; lo < p.num_experts; lo += fp8_chunk) {
      MoeParams q = p;
      q.expert_lo = lo;
      q.expert_hi = std::min(p.num_experts, lo + fp8_chunk);
      q.w13 = p.deq13;
      q.w2 = p.deq2;
      STRATA_RETURN_IF_ERROR(Launch("MoeDequantExpertsKernel", MoeDequantExpertsKernel,
                                    dim3(dq_x, static_cast<unsigned>(q.expert_hi - lo)),
                                    dim3(kDequantThreads), 0, stream, q));
      STRATA_RETURN_IF_ERROR(gemms(q));
    }
  }
  const dim3 grid(static_cast<unsigned>(p.num_tokens));
  if (vec4_y) {
    return Launch("MoeCombineKernel", MoeCombineKernel<true>, grid, dim3(kCombineThreads), 0,
                  stream, p);
  }
  return Launch("MoeCombineKernel", MoeCombineKernel<false>, grid, dim3(kCombineThreads), 0,
                stream, p);
}

// The CUTLASS grouped GEMM for this call? MoeArgs::gemm_impl, else
// moe.gemm=cutlass|mma|auto, and auto from moe.cutlass_min_rows rows (n·k)
// on, default 4096. CUTLASS's TMA + wgmma GEMM wins by about 2× from n =
// 2048 tokens (16384 rows) up, as the compute-bound regime predicts (Session
// 5 in docs/dev/journal/performance.md); between 4096 and 16384 rows the
// crossover has not been measured, so 4096 stays the threshold there.
bool UseSm90(MoeGemmImpl impl, int64_t rows) {
  if (impl == MoeGemmImpl::kCutlass) return true;
  if (impl == MoeGemmImpl::kMma) return false;
  const tuning::Config& t = tuning::Current();
  switch (t.Choice<tuning::MoeGemm>(tuning::Key::kMoeGemm)) {
    case tuning::MoeGemm::kCutlass:
      return true;
    case tuning::MoeGemm::kMma:
      return false;
    case tuning::MoeGemm::kAuto:
      break;
  }
  return rows >= t.Int(tuning::Key::kMoeCutlassMinRows);
}

Status LaunchSm90Path(const MoeParams& p, char* ws, const Layout& l, bool vec4_y,
                      cudaStream_t stream) {
  MoeSm90Args a;
  a.num_experts = p.num_experts;
  a.hidden = p.hidden;
  a.inter = p.inter;
  a.rows = p.num_tokens * p.top_k;
  a.offsets = p.offsets;
  a.row_token = p.row_token;
  a.x = p.x;
  a.w13 = p.w13;
  a.w2 = p.w2;
  a.act = p.yrows;
  a.h = p.h;
  a.yrows = p.yrows;
  a.workspace = ws + l.sm90;
  a.workspace_bytes = l.sm90_bytes;
  STRATA_RETURN_IF_ERROR(MoeSm90GroupedGemms(a, stream));
  const dim3 grid(static_cast<unsigned>(p.num_tokens));
  if (vec4_y) {
    return Launch("MoeCombineKernel", MoeCombineKernel<true>, grid, dim3(kCombineThreads), 0,
                  stream, p);
  }
  return Launch("MoeCombineKernel", MoeCombineKernel<false>, grid, dim3(kCombineThreads), 0,
                stream, p);
}

// Whether MoeForward takes the planless one-token path (MoeParams::direct).
bool DirectPath(const MoeArgs& a) {
  const MoeShape& s = a.shape;
  const bool vec = IsAligned(a.x, 16) && IsAligned(a.w13, 16) && IsAligned(a.w2, 16) &&
                   s.hidden % 8 == 0 && s.inter % 8 == 0;
  return a.fp8.w13 == nullptr && !a.batch_invariant && UseCtaRoute(a.num_tokens, s) && vec &&
         !GemmShape(s, a.num_tokens * s.top_k) && DirectEnabled();
}

// moe.fold_shared=0 keeps the shared expert out of the one-token path.
bool FoldEnabled() { return tuning::Current().On(tuning::Key::kMoeFoldShared); }

// MoeFoldsSharedExpert for a call whose DirectPath is `direct`.
bool FoldsSharedExpert(const MoeArgs& a, bool direct) {
  const MoeShape& s = a.shape;
  // One group of loads per gate|up row (the kernels' kU > 0), the down
  // kernel's two halves (kSplit = 2), and kFusedRows + 1 rows of I in its
  // shared memory.
  return FoldEnabled() && a.shared_w13 != nullptr && a.shared_w2 != nullptr &&
         IsAligned(a.shared_w13, 16) && IsAligned(a.shared_w2, 16) && OneGroupRows(s.hidden) &&
         DownSplitEnabled() && s.inter <= kMaxFoldInter && !s.fp8_experts && direct;
}

}  // namespace

bool MoeFoldsSharedExpert(const MoeArgs& a) { return FoldsSharedExpert(a, DirectPath(a)); }

size_t MoeWorkspaceBytes(const MoeShape& shape, int64_t max_tokens, bool batch_invariant) {
  if (max_tokens <= 0 || shape.num_experts <= 0 || shape.top_k <= 0 || shape.hidden <= 0 ||
      shape.inter <= 0) {
    return 0;
  }
  return MakeLayout(shape, max_tokens, batch_invariant).total;
}

Status MoeRoute(const MoeShape& shape, const float* router_logits, const float* score_bias,
                int64_t num_tokens, int32_t* idx, float* weight, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(shape, "MoeRoute"));
  if (num_tokens < 0 || num_tokens > INT_MAX / kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoeRoute: num_tokens must be in [0, ", INT_MAX / kMaxTopK, "], got ",
                     num_tokens));
  }
  if (num_tokens == 0) return OkStatus();
  if (router_logits == nullptr) return absl::InvalidArgumentError("MoeRoute: router_logits is null");
  if (idx == nullptr) return absl::InvalidArgumentError("MoeRoute: idx is null");
  if (weight == nullptr) return absl::InvalidArgumentError("MoeRoute: weight is null");
  MoeParams p{};
  p.num_tokens = static_cast<int>(num_tokens);
  p.num_experts = static_cast<int>(shape.num_experts);
  p.top_k = static_cast<int>(shape.top_k);
  p.renormalize = shape.renormalize ? 1 : 0;
  p.routed_scaling = shape.routed_scaling;
  p.num_groups = static_cast<int>(shape.num_groups);
  p.topk_groups = static_cast<int>(shape.topk_groups);
  p.softmax = shape.softmax ? 1 : 0;
  p.cta_route = UseCtaRoute(num_tokens, shape) ? 1 : 0;
  p.logits = router_logits;
  p.bias = score_bias;
  p.idx = idx;
  p.wt = weight;
  return RouteOnly(p, stream);
}

Status MoeForward(const MoeArgs& args, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  const MoeShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(s, "MoeForward"));
  STRATA_RETURN_IF_ERROR(CheckFfnShape(s, "MoeForward"));
  // Rows (n·k) are counted in int (row offsets times D or I are size_t).
  const int64_t max_tokens = INT_MAX / kMaxTopK;
  if (args.num_tokens < 0 || args.num_tokens > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("MoeForward: args.num_tokens must be in [0, ",
                                                   max_tokens, "], got ", args.num_tokens));
  }
  if (args.num_tokens == 0) return OkStatus();
  if (args.x == nullptr) return absl::InvalidArgumentError("MoeForward: args.x is null");
  if (args.router_logits == nullptr) {
    return absl::InvalidArgumentError("MoeForward: args.router_logits is null");
  }
  if (args.router_w != nullptr && args.blas == nullptr) {
    return absl::InvalidArgumentError("MoeForward: args.blas must be set with args.router_w");
  }
  const bool fp8 = args.fp8.w13 != nullptr;
  if (fp8 != s.fp8_experts) {
    return absl::InvalidArgumentError(
        "MoeForward: args.fp8.w13 must be set exactly when shape.fp8_experts is");
  }
  if (fp8) {
    const MoeFp8Experts& f = args.fp8;
    if (args.w13 != nullptr || args.w2 != nullptr) {
      return absl::InvalidArgumentError("MoeForward: args.w13 / args.w2 must be null with FP8 experts");
    }
    if (f.w2 == nullptr || f.w13_scale == nullptr || f.w2_scale == nullptr) {
      return absl::InvalidArgumentError(
          "MoeForward: args.fp8.w2, args.fp8.w13_scale and args.fp8.w2_scale must be set");
    }
    if (f.block_rows < 1 || f.block_cols < 1 || f.block_rows > INT_MAX ||
        f.block_cols > INT_MAX || s.inter % f.block_rows != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoeForward: args.fp8 blocks must be positive with shape.inter a multiple of "
          "block_rows, got ", f.block_rows, " x ", f.block_cols, " with inter ", s.inter));
    }
  } else {
    if (args.w13 == nullptr) return absl::InvalidArgumentError("MoeForward: args.w13 is null");
    if (args.w2 == nullptr) return absl::InvalidArgumentError("MoeForward: args.w2 is null");
  }
  if (args.y == nullptr) return absl::InvalidArgumentError("MoeForward: args.y is null");
  const Layout l = MakeLayout(s, args.num_tokens, args.batch_invariant);
  if (workspace == nullptr || workspace_bytes < l.total) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoeForward: workspace_bytes must be at least MoeWorkspaceBytes = ", l.total,
                     " for ", args.num_tokens, " tokens, got ", workspace_bytes,
                     workspace == nullptr ? " (workspace is null)" : ""));
  }
  if (!IsAligned(workspace, 256)) {
    return absl::InvalidArgumentError("MoeForward: workspace must be 256-byte aligned");
  }
  char* ws = static_cast<char*>(workspace);
  MoeParams p{};
  p.num_tokens = static_cast<int>(args.num_tokens);
  p.num_experts = static_cast<int>(s.num_experts);
  p.hidden = static_cast<int>(s.hidden);
  p.inter = static_cast<int>(s.inter);
  p.top_k = static_cast<int>(s.top_k);
  p.renormalize = s.renormalize ? 1 : 0;
  p.routed_scaling = s.routed_scaling;
  p.num_groups = static_cast<int>(s.num_groups);
  p.topk_groups = static_cast<int>(s.topk_groups);
  p.softmax = s.softmax ? 1 : 0;
  p.cta_route = UseCtaRoute(args.num_tokens, s) ? 1 : 0;
  p.x = args.x;
  p.logits = args.router_logits;
  p.bias = args.score_bias;
  p.w13 = args.w13;
  p.w2 = args.w2;
  p.expert_lo = 0;
  p.expert_hi = p.num_experts;
  if (fp8) {
    const MoeFp8Experts& f = args.fp8;
    p.w13_fp8 = f.w13;
    p.w13_scale = f.w13_scale;
    p.w2_fp8 = f.w2;
    p.w2_scale = f.w2_scale;
    p.fp8_br = static_cast<int>(f.block_rows);
    p.fp8_bc = static_cast<int>(f.block_cols);
    p.sr13 = static_cast<int>(2 * s.inter / f.block_rows);
    p.sc_d = static_cast<int>(CeilDiv(s.hidden, f.block_cols));
    p.sr2 = static_cast<int>(CeilDiv(s.hidden, f.block_rows));
    p.sc_i = static_cast<int>(CeilDiv(s.inter, f.block_cols));
    p.deq13 = reinterpret_cast<bf16*>(ws + l.deq);
    p.deq2 = p.deq13 + static_cast<size_t>(l.deq_experts) * 2 * s.inter * s.hidden;
  }
  p.y = args.y;
  p.accumulate = args.accumulate ? 1 : 0;
  p.idx = reinterpret_cast<int32_t*>(ws + l.idx);
  p.wt = reinterpret_cast<float*>(ws + l.wt);
  p.offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  p.meta = reinterpret_cast<int32_t*>(ws + l.meta);
  p.active = reinterpret_cast<int32_t*>(ws + l.active);
  p.tile_expert = reinterpret_cast<int32_t*>(ws + l.tile_expert);
  p.tile_m0 = reinterpret_cast<int32_t*>(ws + l.tile_m0);
  p.row_token = reinterpret_cast<int32_t*>(ws + l.row_token);
  p.pair_row = reinterpret_cast<int32_t*>(ws + l.pair_row);
  p.h = reinterpret_cast<bf16*>(ws + l.h);
  p.yrows = reinterpret_cast<float*>(ws + l.yrows);

  const int64_t rows = args.num_tokens * s.top_k;
  const bool invariant = args.batch_invariant;
  const bool vec4_y = s.hidden % 4 == 0 && IsAligned(args.y, 16);
  const bool aligned = IsAligned(args.x, 16) && IsAligned(args.w13, 16) && IsAligned(args.w2, 16);
  const bool vec = aligned && s.hidden % 8 == 0 && s.inter % 8 == 0;
  // One token on the bf16 GEMV path (a batch-1 decode step): the route
  // kernel's picks are the slots and h rows, so there is no plan kernel and
  // the GEMVs find their expert with one load.
  // (cta_route holds for one token only.)
  const bool fold = args.shared_w13 != nullptr || args.shared_w2 != nullptr;
  const bool direct = DirectPath(args);
  if (fold && !FoldsSharedExpert(args, direct)) {
    return absl::InvalidArgumentError(
        "MoeForward: args.shared_w13 / args.shared_w2 set for a call that cannot fold the "
        "shared expert (see MoeFoldsSharedExpert)");
  }
  bool routed = false;  // idx / wt written with the logits (GemvRoute)
  if (args.router_w != nullptr) {
    GemmArgs g;
    g.m = args.num_tokens;
    g.n = s.num_experts;
    g.k = s.hidden;
    g.x = args.x;
    g.x_type = ActType::kBf16;
    g.w = args.router_w;
    g.y = args.router_logits;
    g.y_type = ActType::kF32;
    if (direct && p.cta_route && IsAligned(args.router_w, 16) &&
        GemvRouteFuses(*args.blas, s.num_experts, s.hidden)) {
      GemvRouting r;
      r.bias = args.score_bias;
      r.top_k = s.top_k;
      r.renormalize = s.renormalize;
      r.routed_scaling = s.routed_scaling;
      r.idx = p.idx;
      r.weight = p.wt;
      STRATA_RETURN_IF_ERROR(GemvRoute(*args.blas, g, r, stream));
      routed = true;
    } else {
      STRATA_RETURN_IF_ERROR(Gemm(*args.blas, g, stream));
    }
  }
  if (direct) {
    p.direct = 1;
    p.down_preload = DownPreloadEnabled() ? 1 : 0;
    p.shared = fold ? 1 : 0;
    p.sw13 = args.shared_w13;
    p.sw2 = args.shared_w2;
    if (!routed) STRATA_RETURN_IF_ERROR(RouteOnly(p, stream));
    return LaunchGemvPath<8, bf16>(p, vec4_y, stream);
  }
  // Batch-invariant calls route in the route kernel for every n (the plan
  // kernel's copy of RouteToken is the same explicitly rounded arithmetic,
  // but one code path for all n leaves nothing to argue about).
  STRATA_RETURN_IF_ERROR(
      RouteAndPlan(p, !invariant && args.num_tokens <= kFusedRouteMaxTokens, stream));

  if (fp8) {
    // The codes take 8-byte loads; the scratch the GEMM reads is aligned.
    const bool vec8 = IsAligned(args.x, 16) && IsAligned(args.fp8.w13, 8) &&
                      IsAligned(args.fp8.w2, 8) && s.hidden % 8 == 0 && s.inter % 8 == 0 &&
                      args.fp8.block_cols % 8 == 0;
    if (vec8 && (invariant ? GemmTileShape(s) : GemmShape(s, rows))) {
      return LaunchGemmPath(p, vec4_y, static_cast<int>(l.deq_experts), stream);
    }
    if (vec8) return LaunchGemvPath<8, uint8_t>(p, vec4_y, stream);
    return LaunchGemvPath<1, uint8_t>(p, vec4_y, stream);
  }
  if (aligned && (invariant ? GemmTileShape(s) : GemmShape(s, rows))) {
    if (!invariant && l.sm90_bytes > 0 && UseSm90(args.gemm_impl, rows)) {
      return LaunchSm90Path(p, ws, l, vec4_y, stream);
    }
    return LaunchGemmPath(p, vec4_y, 0, stream);
  }
  if (vec) return LaunchGemvPath<8, bf16>(p, vec4_y, stream);
  return LaunchGemvPath<1, bf16>(p, vec4_y, stream);
}

}  // namespace strata::cuda
