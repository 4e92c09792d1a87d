// Dense products y = alpha · x · Wᵀ (+ beta · y) on bf16 weights.
//
// Cost model (H200: 4.27 TB/s copy bandwidth, ~686 TFLOP/s bf16 matmul with
// wgmma, ~660 with mma.sync).
//  * Small M (decode, m ≤ 16): W is read once, so time = bytes(W) / 4.27 TB/s.
//      [4096+4096+4096, 2304]  56.6 MB  → 13.3 µs
//      [2304, 4096]            18.9 MB  →  4.4 µs
//      [163840, 2304] (head)  755.0 MB  → 176.8 µs
//      [9216·2, 2304]          84.9 MB  → 19.9 µs
//    Even at m = 16 the arithmetic is 2·16 FLOP per 2 bytes of W (16
//    FLOP/byte, 68 TFLOP/s at full bandwidth): far below what mma.sync
//    delivers, but above what fp32 FMA on CUDA cores delivers once the
//    bf16 → fp32 conversions are counted, hence tensor cores here.
//  * Large M (prefill): 2·m·n·k FLOPs on cuBLASLt, e.g. m = 4096 on
//    [12288, 2304] is 232 GFLOP → 338 µs at 686 TFLOP/s; in batch-invariant
//    mode on the tiled kernel below instead (mma.sync, ~2× that time).
//
// Canonical arithmetic. Every fast kernel of this file computes y[r, c] (x row
// r, W row c) the same way, whatever m is and wherever row r sits in the
// call, so that a row's bits never depend on the rows batched with it:
//  * W's k extent is cut into KB = ceil(k / 32) k blocks of 32, and those
//    into S = S(n, k) contiguous groups: group q holds k blocks
//    [⌊q·KB/S⌋, ⌊(q+1)·KB/S⌋). S is the GEMV's k split (GemvPlanFor): it
//    depends only on n, k and the GPU (SM count, the GEMV's occupancy),
//    never on m, x_type, y_type or the batch count.
//  * Group q's partial P_q is one fp32 accumulation chain of
//    mma.sync.m16n8k16 (bf16 in, fp32 accumulate), starting from 0, over the
//    group's k blocks in ascending order, each k block fed by MmaBlock: W
//    rows as the A operand, x rows as B, each lane's 16 contiguous bytes of a
//    row (k = 32·kb + 8t … 8t+7) mapped to the k slots as MmaBlock says. A
//    lane's 16-byte chunk that lies past k is zeros (k % 8 == 0, so a chunk
//    is wholly in or out); k blocks past a group's end are not fed at all.
//    For fp32 x (GEMV only) each k block is two MmaBlocks: x's bf16 hi part,
//    then the bf16 residual lo.
//  * s = 0.f; s += P_q for q = 0 … S−1 in order (fp32 adds).
//  * fp32 y: y = alpha·s, or fma(beta, y_old, alpha·s) when beta ≠ 0;
//    bf16 y: round-to-nearest-even of alpha·s (StoreY).
// The mma computes each output element from its own A row, B column and
// accumulator only, so the same operands in the same slots give the same
// bits whichever tile, lane or N tile the element sits in.
//
// GEMV (GemvMmaKernel, m ≤ kGemvMaxRows) computes yᵀ = W · xᵀ: a 16-row
// tile of W is the A operand (M = 16) and up to 8 rows of x the B operand
// (N = 8; two N tiles for m ≤ 16). A dot product does not care about the
// order of k, so each lane loads 16 contiguous bytes (8 k values) of W rows g
// and g+8 and of x row g, and the k positions of the two mma's per 32-wide k
// block are permuted consistently in A and B (MmaBlock). That turns every W
// access into one 16-byte streaming load with no shared-memory staging and
// no shuffles: 8 rows × 64 contiguous bytes per warp instruction. x is tiny
// (≤ 16 rows) and read through L1 (the W loads bypass L1 so they do not evict
// it). fp32 x is split into bf16 hi + lo parts, both fed to the tensor cores,
// which keeps ~16 mantissa bits of x. A CTA of 8 warps owns `tpc` row tiles
// and gives each tile's S = 8/tpc warps one k group each (warp ks of a tile
// takes group ks), reducing the partials through shared memory in group
// order; tpc is halved from 8 while the grid still fits in one resident wave
// and every warp keeps a full unrolled step (8 k blocks) of k. The plan is
// made for m = 1 whatever m is (S must not depend on m).
//
// The achieved bandwidth grows with the grid: a matrix of ~one wave of CTAs
// or less (every decode GEMV but the LM head) pays the ramp and tail of its
// loads on top of its bytes, and a grid a little over one wave (144 CTAs on
// 132 SMs) leaves some SMs with twice the work; only the LM head's 1280 CTAs
// come near the copy bandwidth (per-shape profile in
// docs/dev/journal/performance.md).
// Each warp loads its first round of weights (kU k blocks of its group) into
// registers before its PDL wait, i.e. while the previous kernel of the step
// drains: at batch 1 a GEMV's fixed cost (ramp and tail, a few µs in the
// captured step) is what separates it from its bytes' time, and this hides
// part of it; prefetching the same round into L2 instead (gemv.preload=0)
// leaves the register fill after the wait. A warp with a second round copies
// it into shared memory before the wait too (cp.async, 64 KB per CTA;
// GemvParams::stage_round), for one x row only (see PlanStreaming). A
// stream-K split (equal bytes per warp, split tiles reduced by the last
// arriving warp) lost on most decode shapes: the partials' round trip and
// the arrival counters cost more than the balance gains. The A/B numbers are
// in docs/dev/journal/performance.md.
//
// Tiled kernel (InvariantGemmKernel, batch-invariant mode, m > 16): the same
// canonical arithmetic at prefill sizes. A CTA owns 128 W rows × kTileX x
// rows (128, or 64 when the 128-row grid would not fill two waves); k is
// staged through shared memory in stages of two k blocks with cp.async,
// kStages deep. Shared memory keeps each k block of each operand as its own
// [rows][64 bytes] sub-tile, so a warp's 16-byte-per-lane fragment loads
// (ld.shared.v4: lanes g, g+1 of one quarter-warp read 128 contiguous bytes)
// are conflict-free and feed MmaBlock exactly as the GEMV's global loads do
// (ldmatrix would permute k differently). Each warp owns 64 W rows × kTileX/4
// x rows and keeps two accumulator sets: the running group partial P and the
// total s, with s += P, P = 0 at each group end. bf16 x only (fp32 x is
// limited to m ≤ kGemvMaxRows by CheckGemmArgs).
//
// GemvRoute (a one-token MoE router): the GEMV kernel with one tile per CTA
// and its ≤ 16 CTAs launched as one thread-block cluster; each CTA also
// stores its 16 logits into CTA 0's shared memory (DSMEM), and CTA 0 ranks
// them once a cluster barrier says all have arrived (moe_route.cuh). Against
// the GEMV then MoE's route kernel this saves a launch, a PDL wait and the
// reload of the logits, about a microsecond per MoE layer of a batch-1
// decode step (kernel trace in docs/dev/journal/performance.md).
//
// Shapes the fast kernels cannot take (k or ldw not a multiple of 8, or
// misaligned pointers) go to a plain warp-per-row kernel with scalar loads,
// whose arithmetic per row does not depend on m either.
#include "backend/cuda/gemm.h"

#include <cooperative_groups.h>
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cta_probe.cuh"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxLtPlans = 512;  // plans kept before the cache starts over
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kTile = 16;  // W rows per mma tile

// Tiled kernel geometry (see the file comment).
constexpr int kTiledThreads = 256;
constexpr int kTiledW = 128;      // W rows per CTA
constexpr int kStageBlocks = 2;   // 32-wide k blocks per pipeline stage
constexpr int kStages = 4;        // pipeline depth
constexpr int kSubTileRowBytes = 64;  // one k block of one row
template <int kTileX>
constexpr int TiledStageBytes() {
  return (kTiledW + kTileX) * kStageBlocks * kSubTileRowBytes;
}
template <int kTileX>
constexpr int TiledSmemBytes() {
  return kStages * TiledStageBytes<kTileX>();
}

Status LtError(cublasStatus_t st, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cublasLtGetStatusString(st)));
}

#define STRATA_LT_RETURN_IF_ERROR(expr)           \
  do {                                            \
    const cublasStatus_t strata_lt_st_ = (expr);  \
    if (strata_lt_st_ != CUBLAS_STATUS_SUCCESS) { \
      return LtError(strata_lt_st_, #expr);       \
    }                                             \
  } while (0)

// ---------------------------------------------------------------------------
// Canonical arithmetic shared by every kernel.

struct GemvParams {
  const bf16* w;  // [n, k], row stride ldw
  const void* x;  // [m, k], row stride ldx (bf16 or fp32)
  void* y;        // [m, n], row stride ldy (bf16 or fp32)
  int64_t ldw;
  int64_t ldx;
  int64_t ldy;
  // Elements between consecutive products of a strided batch (the batch
  // index is blockIdx.y for the GEMV kernels, blockIdx.z for the tiled one).
  int64_t stride_w;
  int64_t stride_x;
  int64_t stride_y;
  int64_t n;
  int64_t k;
  int m;
  int tiles_per_cta;  // GEMV: 16-row W tiles per CTA
  int k_split;        // S: k groups of the canonical sum (GEMV: warps per tile)
  int preload;        // GEMV: first round of W into registers before the PDL wait
  int stage_round;    // GEMV: and the second round into shared memory (cp.async)
  float alpha;
  float beta;         // only with fp32 y
  int early_trigger;  // GemmArgs::early_trigger
  // GemvRoute's epilogue (GemvRouting; read by the kRoute kernel only).
  const float* route_bias;
  int32_t* route_idx;
  float* route_wt;
  int route_top_k;
  int route_renormalize;
  float route_scaling;
  STRATA_PROBE_FIELD(probe)
};

// First k block of group q of S over kblocks k blocks.
__host__ __device__ __forceinline__ int64_t GroupStart(int64_t kblocks, int q, int groups) {
  return kblocks * q / groups;
}

// d += a · b on one m16n8k16 tile, fp32 accumulation.
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two mma's cover one 32-wide k block. Lane (g = lane/4, t = lane%4) holds
// W rows g and g+8 and x row g at k = 32·kb + 8t … 8t+7 (16 bytes each). The
// fragment layout puts lane t's A elements at k slots {2t, 2t+1} (regs 0, 1)
// and {2t+8, 2t+9} (regs 2, 3), and its B elements at the same slots, so
// mapping chunk elements {0,1},{2,3} to the first mma's slots and {4,5},{6,7}
// to the second's pairs every W element with the x element of the same k.
__device__ __forceinline__ void MmaBlock(float (&d)[4], const uint4& w_lo, const uint4& w_hi,
                                         const uint4& x) {
  MmaBf16(d, w_lo.x, w_hi.x, w_lo.y, w_hi.y, x.x, x.y);
  MmaBf16(d, w_lo.z, w_hi.z, w_lo.w, w_hi.w, x.z, x.w);
}

__device__ __forceinline__ float4 BitsToF4(uint4 u) {
  return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
                     __uint_as_float(u.w));
}

// The canonical epilogue. Explicit _rn intrinsics so the compiler cannot
// contract differently in different kernels.
__device__ __forceinline__ void StoreY(float* y, int64_t i, float s, float alpha, float beta) {
  const float v = __fmul_rn(alpha, s);
  y[i] = beta != 0.f ? __fmaf_rn(beta, y[i], v) : v;
}
__device__ __forceinline__ void StoreY(bf16* y, int64_t i, float s, float alpha,
                                       float /*beta*/) {
  y[i] = __float2bfloat16_rn(__fmul_rn(alpha, s));
}

// ---------------------------------------------------------------------------
// Streaming kernel (m ≤ 16).

// k blocks (32 wide) each lane loads before its first mma.
constexpr int GemvUnrollOf(int nt, bool x_f32) { return (nt == 1 && !x_f32) ? 8 : 4; }
template <int kNT, bool kXF32>
constexpr int GemvUnroll() {
  return GemvUnrollOf(kNT, kXF32);
}
// What the plan assumes whatever the variant: S must not depend on m.
constexpr int kGemvPlanUnroll = GemvUnroll<1, false>();

// kNT: 8-row tiles of x (m ≤ 8·kNT). Requires k % 8 == 0, ldw % 8 == 0, w and
// x 16-byte aligned, ldx a multiple of 16 bytes. The register cap of 2 CTAs
// per SM (≤ 128 registers) matters: without it ptxas schedules for fewer
// registers and interleaves each load with the mma that consumes it, leaving
// ~3 loads in flight per lane instead of all 2·kUnroll + x (checked in SASS).
struct F32Chunk {  // 8 fp32 values of x (raw bits)
  uint4 a, b;
};

// Rows of W (router logits) GemvRoute takes: one 16-row tile per CTA of a
// cluster of at most 16.
constexpr int kRouteMaxClusterCtas = 16;
constexpr int kRouteMaxRows = kRouteMaxClusterCtas * kTile;

// GemvRoute's shared memory, used in CTA 0 only.
struct RouteSmem {
  float logits[kRouteMaxRows];  // CTA 0: every CTA's logits
  float bias[kRouteMaxRows];    // CTA 0: the score bias (zeros without one)
  route::CtaRouteShared cta;
};
__device__ __forceinline__ RouteSmem& RouteShared() {
  __shared__ RouteSmem s;
  return s;
}

// CTA 0's bias, copied before the PDL wait (it is a weight): after the wait
// its loads would queue behind the next kernel's weight loads on this SM.
// cp.async, so that no register stays live across the main loop;
// GemvRouteEpilogue waits for it.
__device__ __forceinline__ void GemvRoutePreload(const GemvParams& p) {
  if (blockIdx.x == 0 && threadIdx.x < p.n) {
    const bool has = p.route_bias != nullptr;
    CpAsync4(&RouteShared().bias[threadIdx.x], has ? p.route_bias + threadIdx.x : p.x, has);
    CpAsyncCommit();
  }
}

// GemvRoute's epilogue, in place of the kernel's y loop, for one tile per
// CTA, one x row, fp32 y and beta 0 (host-checked): the tile's sums are
// formed as that loop forms them (the same bits in y), and each is also
// written into the cluster's first CTA, which routes the token once every
// CTA's logits have arrived. The kernel arrived at the cluster barrier
// (relaxed) at its start, so CTA 0's shared memory exists once it is waited.
__device__ __forceinline__ void GemvRouteEpilogue(
    const GemvParams& p, const float (&red)[kGemvWarps][kTile][kTile + 1]) {
  RouteSmem& sm = RouteShared();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  const int64_t n_idx = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const bool mine = threadIdx.x < kTile && n_idx < p.n;
  float v = 0.f;
  if (mine) {
    float s = 0.f;
    for (int q = 0; q < p.k_split; ++q) s += red[q][threadIdx.x][0];
    v = __fmul_rn(p.alpha, s);
    *cluster.map_shared_rank(&sm.logits[n_idx], 0) = v;
  }
  // Release the remote stores; only CTA 0 waits (exited threads do not hold
  // a cluster barrier), the others are done. The logits go to global memory
  // only after the arrive: a release orders every earlier store, and a
  // global one would hold the arrive for its round trip to L2.
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  if (mine) static_cast<float*>(p.y)[n_idx] = v;
  if (cluster.block_rank() != 0) return;
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  // The next kernel (the MoE's gate|up) launches now: its shared-expert CTAs
  // load their weights while this CTA ranks, as they did behind a route
  // kernel, but without that kernel's launch and wait.
  PdlLaunchDependents();
  CpAsyncWaitAll();  // the bias (GemvRoutePreload)
  __syncthreads();
  // (A zero bias adds +0: the same scores as none.)
  route::RouteTokenCta(sm.logits, static_cast<int>(p.n), sm.bias, p.route_top_k,
                       p.route_renormalize != 0, p.route_scaling, p.route_idx, p.route_wt, sm.cta);
}

// GemvRoute's variant (kRoute) has no cap of two CTAs per SM: its ≤ 16
// CTAs take one SM each, and under the cap its epilogue's ranking made ptxas
// spill (134 registers uncapped).
template <int kNT, bool kXF32, typename YT, bool kRoute = false>
__global__ void __launch_bounds__(kGemvThreads, kRoute ? 1 : 2) GemvMmaKernel(const GemvParams p) {
  static_assert(!kRoute || (kNT == 1 && !kXF32 && std::is_same_v<YT, float>),
                "GemvRoute: one bf16 x row, fp32 logits");
  constexpr int kU = GemvUnroll<kNT, kXF32>();
  using XChunk = std::conditional_t<kXF32, F32Chunk, uint4>;
  constexpr int64_t kXBytes = kXF32 ? 4 : 2;
  __shared__ float red[kGemvWarps][kTile][kTile + 1];  // [warp][W row][x row]
  STRATA_PROBE_START(p.probe);
  if constexpr (kRoute) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t batch = blockIdx.y;
  const bf16* w = p.w + batch * p.stride_w;
  const char* x = static_cast<const char*>(p.x) + batch * p.stride_x * kXBytes;
  YT* y = static_cast<YT*>(p.y) + batch * p.stride_y;
  const int ks = warp % p.k_split;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta + warp / p.k_split;
  const int64_t row0 = tile * kTile + g;
  const bool row0_ok = row0 < p.n;
  const bool row1_ok = row0 + 8 < p.n;
  const bf16* w0 = w + (row0_ok ? row0 : 0) * p.ldw + t * 8;
  const bf16* w1 = w + (row1_ok ? row0 + 8 : 0) * p.ldw + t * 8;
  bool x_ok[kNT];
  const char* xp[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int r = g + 8 * nt;
    x_ok[nt] = r < p.m;
    xp[nt] = x + ((x_ok[nt] ? r : 0) * p.ldx + t * 8) * kXBytes;
  }
  const int64_t kblocks = CeilDiv(p.k, 32);

  // This warp's group: contiguous k blocks, ascending (the canonical chain).
  // k < 2^30, so k blocks and element offsets fit in 32 bits (fewer
  // registers: the 128-register cap is tight).
  const int kb_lo = static_cast<int>(GroupStart(kblocks, ks, p.k_split));
  const int kb_hi = static_cast<int>(GroupStart(kblocks, ks + 1, p.k_split));
  const int k32 = static_cast<int>(p.k);
  // The loop bounds and the per-block guards are warp-uniform (mma.sync
  // needs the whole warp).
  const bool has_work = tile * kTile < p.n && kb_lo < kb_hi;
  uint4 wa[kU], wb[kU];
  // W's k blocks [base, base + kU) of this group; zeros past it or past k.
  auto load_w = [&](int base) {
    const int n_here = min(kU, kb_hi - base);
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const int koff = (base + j) * 32;  // element offset of this k block
      // k % 8 == 0, so this lane's 8-element chunk is wholly in or out.
      const bool k_ok = j < n_here && koff + t * 8 < k32;
      wa[j] = LdgStream16(w0 + koff, k_ok && row0_ok);
      wb[j] = LdgStream16(w1 + koff, k_ok && row1_ok);
    }
  };

  // Until the previous kernel of the step has finished, only the weights may
  // be touched. With p.preload each warp loads its first round of weights
  // (kU k blocks) into registers while that kernel drains; otherwise the
  // CTA's threads ask for the same bytes to be brought into L2.
  // With p.stage_round the warp's second round goes into its own slice of
  // shared memory as well ([2·kU chunks][32 lanes], each lane reading back
  // only what it copied, so no barrier): when the wait returns, two rounds
  // are on chip or on their way instead of one (a two-round o_proj then has
  // all of its weights), which takes one DRAM round trip off the critical
  // path of every GEMV with a shadow to preload in.
  extern __shared__ uint4 stage[];
  uint4* my_stage = stage + warp * (2 * kU * 32) + lane;
  // Only the one-row bf16-x variants carry it (the host stages one-row
  // calls only, see RunSmallM); in the others it would be dead code, and the
  // fp32-x ones have no registers to spare for it.
  constexpr bool kMayStage = kNT == 1 && !kXF32;
  const bool staged = kMayStage && p.stage_round != 0 && has_work && kb_lo + kU < kb_hi;
  if (p.early_trigger) PdlLaunchDependents();
  if constexpr (kRoute) GemvRoutePreload(p);
  if (p.preload) {
    if (has_work) load_w(kb_lo);
    if (staged) {
      const int base = kb_lo + kU;
      const int n_here = min(kU, kb_hi - base);
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int koff = (base + j) * 32;
        const bool k_ok = j < n_here && koff + t * 8 < k32;
        CpAsync16(my_stage + (2 * j) * 32, w0 + (k_ok ? koff : 0), k_ok && row0_ok);
        CpAsync16(my_stage + (2 * j + 1) * 32, w1 + (k_ok ? koff : 0), k_ok && row1_ok);
      }
      CpAsyncCommit();
    }
  } else if (has_work && lane < kTile) {  // lane r: W row r of the warp's tile
    const int64_t row = tile * kTile + lane;
    const int64_t e0 = int64_t{kb_lo} * 32;
    const int64_t e1 = min(int64_t{min(kb_lo + kU, kb_hi)} * 32, p.k);
    if (row < p.n && e1 > e0) {
      PrefetchL2(w + row * p.ldw + e0, static_cast<uint32_t>((e1 - e0) * 2));
    }
  }
  PdlWait();
  STRATA_PROBE_WAITED(p.probe);
  // GemvRoute's CTA 0 lets the next kernel launch once the logits are in
  // (GemvRouteEpilogue): launched here, the MoE's gate|up CTAs would flood
  // the SMs with their weight loads while this GEMV still needs its x, whose
  // loads then queue behind theirs (a slower step; see
  // docs/dev/journal/performance.md).
  if constexpr (!kRoute) PdlLaunchDependents();
  if (!p.preload && has_work) load_w(kb_lo);

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;

  if (has_work) {
    for (int base = kb_lo; base < kb_hi; base += kU) {
      const int n_here = min(kU, kb_hi - base);  // k blocks of the group in this step
      XChunk xc[kU][kNT];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int koff = (base + j) * 32;
        const bool k_ok = j < n_here && koff + t * 8 < k32;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const bool ok = k_ok && x_ok[nt];
          if constexpr (kXF32) {
            const float* src = reinterpret_cast<const float*>(xp[nt]) + koff;
            xc[j][nt].a = Ldg16(src, ok);
            xc[j][nt].b = Ldg16(src + 4, ok);
          } else {
            xc[j][nt] = Ldg16(reinterpret_cast<const bf16*>(xp[nt]) + koff, ok);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        // Blocks past the group's end are not part of its chain.
        if (j >= n_here) break;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          if constexpr (kXF32) {
            // x = hi + lo with both parts in bf16; the residual is exact in
            // fp32, so the product keeps ~16 bits of x's mantissa.
            const float4 a = BitsToF4(xc[j][nt].a);
            const float4 b = BitsToF4(xc[j][nt].b);
            const uint4 hi = make_uint4(F32x2ToBf16x2(a.x, a.y), F32x2ToBf16x2(a.z, a.w),
                                        F32x2ToBf16x2(b.x, b.y), F32x2ToBf16x2(b.z, b.w));
            const float2 h0 = Bf16x2ToF32(hi.x), h1 = Bf16x2ToF32(hi.y);
            const float2 h2 = Bf16x2ToF32(hi.z), h3 = Bf16x2ToF32(hi.w);
            const uint4 lo = make_uint4(
                F32x2ToBf16x2(a.x - h0.x, a.y - h0.y), F32x2ToBf16x2(a.z - h1.x, a.w - h1.y),
                F32x2ToBf16x2(b.x - h2.x, b.y - h2.y), F32x2ToBf16x2(b.z - h3.x, b.w - h3.y));
            MmaBlock(acc[nt], wa[j], wb[j], hi);
            MmaBlock(acc[nt], wa[j], wb[j], lo);
          } else {
            MmaBlock(acc[nt], wa[j], wb[j], xc[j][nt]);
          }
        }
      }
      if (base + kU < kb_hi) {
        if (staged && base == kb_lo) {
          CpAsyncWait<0>();
#pragma unroll
          for (int j = 0; j < kU; ++j) {
            wa[j] = my_stage[(2 * j) * 32];
            wb[j] = my_stage[(2 * j + 1) * 32];
          }
        } else {
          load_w(base + kU);
        }
      }
    }
  }

  // Accumulator layout: d0, d1 at (W row g, x rows 2t, 2t+1), d2, d3 at W row
  // g+8; x rows offset by 8 in the second N tile.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    red[warp][g][nt * 8 + 2 * t] = acc[nt][0];
    red[warp][g][nt * 8 + 2 * t + 1] = acc[nt][1];
    red[warp][g + 8][nt * 8 + 2 * t] = acc[nt][2];
    red[warp][g + 8][nt * 8 + 2 * t + 1] = acc[nt][3];
  }
  __syncthreads();
  if constexpr (kRoute) {
    GemvRouteEpilogue(p, red);
    STRATA_PROBE_END(p.probe);
    return;
  }

  // Sum the S group partials of each tile in group order (s = 0, s += P_q).
  // Consecutive threads take consecutive W rows, so the stores along a row
  // of y coalesce.
  const int rows_per_cta = p.tiles_per_cta * kTile;
  const int outputs = rows_per_cta * p.m;
  for (int idx = threadIdx.x; idx < outputs; idx += kGemvThreads) {
    const int col = idx / rows_per_cta;  // row of x / y
    const int r = idx % rows_per_cta;
    const int tl = r / kTile;
    const int tr = r % kTile;
    const int64_t n_idx = (static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta + tl) * kTile + tr;
    if (n_idx >= p.n) continue;
    float s = 0.f;
    for (int q = 0; q < p.k_split; ++q) s += red[tl * p.k_split + q][tr][col];
    StoreY(y, col * p.ldy + n_idx, s, p.alpha, p.beta);
  }
  STRATA_PROBE_END(p.probe);
}

// Any shape and alignment: one warp per W row, scalar loads, fp32 FMA. Each
// output's arithmetic depends only on its own x row (m ≤ kGemvMaxRows).
template <bool kXF32, typename YT>
__global__ void __launch_bounds__(kGemvThreads) GemvSimpleKernel(const GemvParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;  // warp-uniform; no barrier in this kernel
  using XT = std::conditional_t<kXF32, float, bf16>;
  const int64_t batch = blockIdx.y;
  const XT* x = static_cast<const XT*>(p.x) + batch * p.stride_x;
  const bf16* w = p.w + batch * p.stride_w + row * p.ldw;
  YT* y = static_cast<YT*>(p.y) + batch * p.stride_y;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int i = 0; i < kGemvMaxRows; ++i) acc[i] = 0.f;
  for (int64_t kk = lane; kk < p.k; kk += 32) {
    const float wv = __bfloat162float(w[kk]);
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) {
      if (i < p.m) acc[i] = fmaf(wv, LoadF(x + i * p.ldx + kk), acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvMaxRows; ++i) {
    if (i < p.m) {
      const float s = WarpSum(acc[i]);
      if (lane == 0) StoreY(y, i * p.ldy + row, s, p.alpha, p.beta);
    }
  }
}

// ---------------------------------------------------------------------------
// Tiled kernel (batch-invariant mode, m > 16).

// y for a 128 (W) × kTileX (x) tile of one product of the batch (blockIdx.z).
// Warp (wn, wm) = (warp % 2, warp / 2) owns W rows wn·64 … +63 (4 m16 tiles)
// and x rows wm·kTileX/4 … (kNT n8 tiles). Requires what the GEMV's fast path
// requires, bf16 x. One CTA per SM: the two accumulator sets take ~250
// registers per thread at kTileX = 128 (and a cap of 128 for two CTAs at
// kTileX = 64 spills).
template <int kTileX, typename YT>
__global__ void __launch_bounds__(kTiledThreads, 1) InvariantGemmKernel(const GemvParams p) {
  constexpr int kMT = 4;                // m16 tiles (of W) per warp
  constexpr int kNT = kTileX / 4 / 8;   // n8 tiles (of x) per warp
  constexpr int kWSub = kTiledW * kSubTileRowBytes;  // one k block of the W tile
  constexpr int kXSub = kTileX * kSubTileRowBytes;
  constexpr int kXBase = kStageBlocks * kWSub;       // x sub-tiles follow W's in a stage
  constexpr int kStageBytes = TiledStageBytes<kTileX>();
  // 16-byte chunks per stage: rows × kStageBlocks × 4, spread over the CTA.
  constexpr int kWCopies = kTiledW * kStageBlocks * 4 / kTiledThreads;
  constexpr int kXCopies = kTileX * kStageBlocks * 4 / kTiledThreads;
  static_assert(kNT >= 1 && kWCopies >= 1 && kXCopies >= 1, "tile geometry");
  extern __shared__ __align__(128) uint8_t smem[];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int wn = warp & 1;
  const int wm = warp >> 1;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTileX;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTiledW;
  const int64_t batch = blockIdx.z;
  const bf16* w = p.w + batch * p.stride_w;
  const bf16* x = static_cast<const bf16*>(p.x) + batch * p.stride_x;
  YT* y = static_cast<YT*>(p.y) + batch * p.stride_y;
  const int64_t kblocks = CeilDiv(p.k, 32);
  const int64_t stages = CeilDiv(kblocks, kStageBlocks);

  // Copy c = tid + 256·i of an operand's stage: k block c / (rows·4) of the
  // stage, row (c / 4) % rows, chunk c % 4 (= tid % 4). Four consecutive
  // threads read 64 contiguous bytes of a row and write one sub-tile row.
  const int cc = tid & 3;
  auto copy_row = [&](int i, int rows) { return (tid / 4 + (kTiledThreads / 4) * i) % rows; };
  auto copy_kb = [&](int i, int rows) { return (tid + kTiledThreads * i) / (rows * 4); };
  auto load_stage = [&](int64_t st, int buf) {
    uint8_t* base = smem + buf * kStageBytes;
#pragma unroll
    for (int i = 0; i < kWCopies; ++i) {
      const int r = copy_row(i, kTiledW), kbl = copy_kb(i, kTiledW);
      const int64_t koff = (st * kStageBlocks + kbl) * 32 + cc * 8;
      const bool ok = n0 + r < p.n && koff < p.k;
      const bf16* src = ok ? w + (n0 + r) * p.ldw + koff : w;
      CpAsync16(base + kbl * kWSub + r * kSubTileRowBytes + cc * 16, src, ok);
    }
#pragma unroll
    for (int i = 0; i < kXCopies; ++i) {
      const int r = copy_row(i, kTileX), kbl = copy_kb(i, kTileX);
      const int64_t koff = (st * kStageBlocks + kbl) * 32 + cc * 8;
      const bool ok = m0 + r < p.m && koff < p.k;
      const bf16* src = ok ? x + (m0 + r) * p.ldx + koff : x;
      CpAsync16(base + kXBase + kbl * kXSub + r * kSubTileRowBytes + cc * 16, src, ok);
    }
  };

  PdlWait();  // x may be the previous kernel's output
  PdlLaunchDependents();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stages) load_stage(s, s);
    CpAsyncCommit();  // empty groups keep the wait counts uniform
  }

  float part[kMT][kNT][4], sum[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) part[mt][nt][i] = sum[mt][nt][i] = 0.f;
    }
  }
  int q = 0;                                          // current group
  int64_t group_end = GroupStart(kblocks, 1, p.k_split);  // its end (k blocks)
  // Fragment addresses within a sub-tile: row g (and g+8) of the warp's
  // tiles, chunk t.
  const int a_off = (wn * 64 + g) * kSubTileRowBytes + t * 16;
  const int b_off = (wm * (kTileX / 4) + g) * kSubTileRowBytes + t * 16;

  for (int64_t st = 0; st < stages; ++st) {
    CpAsyncWait<kStages - 2>();  // stage st has landed (this thread's copies)
    __syncthreads();             // … everyone's; and stage st−1 is fully read
    {
      const int64_t next = st + kStages - 1;
      if (next < stages) load_stage(next, static_cast<int>(next % kStages));
      CpAsyncCommit();
    }
    const uint8_t* base = smem + static_cast<int>(st % kStages) * kStageBytes;
#pragma unroll
    for (int kbl = 0; kbl < kStageBlocks; ++kbl) {
      const int64_t kb = st * kStageBlocks + kbl;
      if (kb >= kblocks) break;  // CTA-uniform: not part of any chain
      const uint8_t* ws = base + kbl * kWSub + a_off;
      const uint8_t* xs = base + kXBase + kbl * kXSub + b_off;
      uint4 b[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        b[nt] = *reinterpret_cast<const uint4*>(xs + nt * 8 * kSubTileRowBytes);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const uint4 a_lo = *reinterpret_cast<const uint4*>(ws + mt * 16 * kSubTileRowBytes);
        const uint4 a_hi = *reinterpret_cast<const uint4*>(ws + (mt * 16 + 8) * kSubTileRowBytes);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) MmaBlock(part[mt][nt], a_lo, a_hi, b[nt]);
      }
      if (kb + 1 == group_end) {  // CTA-uniform: close group q
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              sum[mt][nt][i] += part[mt][nt][i];
              part[mt][nt][i] = 0.f;
            }
          }
        }
        ++q;
        group_end = q < p.k_split ? GroupStart(kblocks, q + 1, p.k_split) : kblocks + 1;
      }
    }
  }
  CpAsyncWait<0>();

  // Element i of tile (mt, nt): W row …+ mt·16 + g + 8·(i / 2), x row
  // …+ nt·8 + 2t + i % 2. Eight lanes of equal t write 8 consecutive W rows.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t wr = n0 + wn * 64 + mt * 16 + g + 8 * (i >> 1);
        const int64_t xr = m0 + wm * (kTileX / 4) + nt * 8 + 2 * t + (i & 1);
        if (wr < p.n && xr < p.m) StoreY(y, xr * p.ldy + wr, sum[mt][nt][i], p.alpha, p.beta);
      }
    }
  }
}

// Shared memory for the staged round: 2·kU chunks of 16 bytes per lane.
constexpr size_t GemvStageBytes(int unroll) {
  return static_cast<size_t>(kGemvWarps) * 2 * unroll * 32 * 16;
}
constexpr size_t kGemvMaxStageBytes = GemvStageBytes(GemvUnroll<1, false>());

// The kernels' variants.
using GemvKernelFn = void (*)(GemvParams);
// [nt - 1][x fp32][y fp32]
const GemvKernelFn kGemvMma[2][2][2] = {
    {{GemvMmaKernel<1, false, bf16>, GemvMmaKernel<1, false, float>},
     {GemvMmaKernel<1, true, bf16>, GemvMmaKernel<1, true, float>}},
    {{GemvMmaKernel<2, false, bf16>, GemvMmaKernel<2, false, float>},
     {GemvMmaKernel<2, true, bf16>, GemvMmaKernel<2, true, float>}}};
// GemvRoute's kernel.
const GemvKernelFn kGemvRouteKernel = GemvMmaKernel<1, false, float, true>;
// [x fp32][y fp32]
const GemvKernelFn kGemvSimple[2][2] = {
    {GemvSimpleKernel<false, bf16>, GemvSimpleKernel<false, float>},
    {GemvSimpleKernel<true, bf16>, GemvSimpleKernel<true, float>}};
// [x tile 64 / 128][y fp32]
const GemvKernelFn kTiled[2][2] = {
    {InvariantGemmKernel<64, bf16>, InvariantGemmKernel<64, float>},
    {InvariantGemmKernel<128, bf16>, InvariantGemmKernel<128, float>}};
constexpr int kTiledSmem[2] = {TiledSmemBytes<64>(), TiledSmemBytes<128>()};

}  // namespace

// ---------------------------------------------------------------------------
// Context and plans.

struct BlasContext::Plans {
  // Everything that decides a cuBLASLt plan: shapes, leading dimensions,
  // batch strides, transposition, output type and the pointer alignments the
  // chosen algorithm may assume.
  using LtKey = std::array<int64_t, 15>;
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;  // false: cuBLASLt offers none (cached so we ask once)
  };
  static void Destroy(LtPlan& p) {
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    p = LtPlan{};
  }

  int num_sms = 0;
  // SMs × resident CTAs per SM of the m = 1 GEMV (bf16 x, bf16 y): the one
  // occupancy every GEMV plan, hence the canonical k split S, is made with.
  int64_t gemv_resident_ctas = 0;
  // Whether GemvRoute's kernel can run as one cluster of c CTAs (index c;
  // -1: not asked yet).
  std::array<int, kRouteMaxClusterCtas + 1> route_cluster_ok;
  std::map<LtKey, LtPlan> lt;

  ~Plans() { Clear(); }
  void Clear() {
    for (auto& entry : lt) Destroy(entry.second);
    lt.clear();
  }
};

BlasContext::BlasContext() = default;

BlasContext::~BlasContext() {
  plans_.reset();  // descriptors before the handle
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

StatusOr<std::unique_ptr<BlasContext>> BlasContext::Create() {
  std::unique_ptr<BlasContext> ctx(new BlasContext());
  cublasLtHandle_t handle = nullptr;
  STRATA_LT_RETURN_IF_ERROR(cublasLtCreate(&handle));
  ctx->handle_ = handle;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx->workspace_, kLtWorkspaceBytes));
  ctx->workspace_bytes_ = kLtWorkspaceBytes;

  auto plans = std::make_unique<Plans>();
  int device = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&plans->num_sms, cudaDevAttrMultiProcessorCount, device));
  int per_sm = 0;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kGemvMma[0][0][0], kGemvThreads, 0));
  plans->gemv_resident_ctas = static_cast<int64_t>(std::max(per_sm, 1)) * plans->num_sms;
  // The GEMV's staged second round (GemvStage) can exceed the default 48 KB.
  for (const auto& by_nt : kGemvMma) {
    for (const auto& by_x : by_nt) {
      for (GemvKernelFn fn : by_x) {
        STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
            fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kGemvMaxStageBytes)));
      }
    }
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kGemvRouteKernel,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kGemvMaxStageBytes)));
  // Clusters of more than 8 CTAs are "non-portable" (Hopper allows 16).
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kGemvRouteKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  plans->route_cluster_ok.fill(-1);
  // The tiled kernel's pipeline needs more than the default 48 KB of
  // dynamic shared memory (a per-function attribute: set once, here).
  for (int tx = 0; tx < 2; ++tx) {
    for (int yf = 0; yf < 2; ++yf) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          kTiled[tx][yf], cudaFuncAttributeMaxDynamicSharedMemorySize, kTiledSmem[tx]));
    }
  }
  ctx->plans_ = std::move(plans);
  return ctx;
}

namespace {

// ---------------------------------------------------------------------------
// Argument checks.

Status CheckGemmArgs(const GemmArgs& a, bool transpose_w, bool batched) {
  if (a.m < 0) return absl::InvalidArgumentError("Gemm: m must be >= 0");
  if (a.n <= 0 || a.n > INT32_MAX)
    return absl::InvalidArgumentError("Gemm: n must be in [1, 2^31)");
  if (a.k <= 0) return absl::InvalidArgumentError("Gemm: k must be > 0");
  if (a.x == nullptr) return absl::InvalidArgumentError("Gemm: x is null");
  if (a.w == nullptr) return absl::InvalidArgumentError("Gemm: w is null");
  if (a.y == nullptr) return absl::InvalidArgumentError("Gemm: y is null");
  if (a.x_type != ActType::kBf16 && a.x_type != ActType::kF32) {
    return absl::InvalidArgumentError("Gemm: x_type is not bf16 or fp32");
  }
  if (a.y_type != ActType::kBf16 && a.y_type != ActType::kF32) {
    return absl::InvalidArgumentError("Gemm: y_type is not bf16 or fp32");
  }
  const int64_t w_row = transpose_w ? a.n : a.k;
  if (a.ldx != 0 && a.ldx < a.k) return absl::InvalidArgumentError("Gemm: ldx < k");
  if (a.ldw != 0 && a.ldw < w_row) {
    return absl::InvalidArgumentError(transpose_w ? "Gemm: ldw < n (transposed W)"
                                                  : "Gemm: ldw < k");
  }
  if (a.ldy != 0 && a.ldy < a.n) return absl::InvalidArgumentError("Gemm: ldy < n");
  if (a.beta != 0.f && a.y_type != ActType::kF32) {
    return absl::InvalidArgumentError("Gemm: beta != 0 needs y_type fp32");
  }
  if (a.x_type == ActType::kF32 && (batched || a.m > kGemvMaxRows)) {
    return absl::InvalidArgumentError(
        "Gemm: x_type fp32 only on the small-M path (m <= kGemvMaxRows, not batched)");
  }
  return OkStatus();
}


// The largest power of two (≤ 256) dividing the address and every batch
// offset: what cuBLASLt may assume about the operand's alignment.
int64_t Alignment(const void* p, int64_t stride_elems, size_t elem_bytes) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | 256u;
  if (stride_elems != 0) v |= static_cast<uint64_t>(stride_elems) * elem_bytes;
  return static_cast<int64_t>(v & (~v + 1));
}

struct LtCall {
  int64_t m, n, k, ldx, ldw, ldy;
  int64_t count, stride_x, stride_w, stride_y;
  bool transpose_w;
  ActType y_type;
  const void* x;
  const void* w;
  void* y;
  float alpha, beta;
};

using LtKey = BlasContext::Plans::LtKey;
using LtPlan = BlasContext::Plans::LtPlan;

Status GetLtPlan(BlasContext& ctx, const LtCall& c, const LtPlan** out) {
  BlasContext::Plans& plans = *ctx.plans();
  const size_t ybytes = ActBytes(c.y_type);
  const LtKey key = {c.m,
                     c.n,
                     c.k,
                     c.ldx,
                     c.ldw,
                     c.ldy,
                     c.count,
                     c.stride_x,
                     c.stride_w,
                     c.stride_y,
                     c.transpose_w ? 1 : 0,
                     static_cast<int64_t>(c.y_type),
                     Alignment(c.w, c.count > 1 ? c.stride_w : 0, 2),
                     Alignment(c.x, c.count > 1 ? c.stride_x : 0, 2),
                     Alignment(c.y, c.count > 1 ? c.stride_y : 0, ybytes)};
  auto it = plans.lt.find(key);
  if (it != plans.lt.end()) {
    *out = &it->second;
    return OkStatus();
  }
  if (plans.lt.size() >= kMaxLtPlans) plans.Clear();

  // Row-major y[m, n] = x[m, k] · W[n, k]ᵀ is column-major yᵀ[n, m] =
  // W · xᵀ: cuBLASLt's A is W as stored (column-major [k, n], transposed by
  // the op; or [n, k] untransposed when W is stored [k, n]), B is x as stored
  // (column-major [k, m]) and C/D is y (column-major [n, m]). The TN case is
  // the tensor cores' preferred layout.
  LtPlan p;
  auto fail = [&p](Status s) {
    BlasContext::Plans::Destroy(p);
    return s;
  };
  const cudaDataType_t ytype = c.y_type == ActType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(LtError(st, "cublasLtMatmulDescCreate"));
  const cublasOperation_t ta = c.transpose_w ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t tb = CUBLAS_OP_N;
  st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  }
  if (st != CUBLAS_STATUS_SUCCESS) return fail(LtError(st, "cublasLtMatmulDescSetAttribute"));

  const uint64_t a_rows = c.transpose_w ? c.n : c.k;
  const uint64_t a_cols = c.transpose_w ? c.k : c.n;
  st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, a_rows, a_cols, c.ldw);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, c.k, c.m, c.ldx);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixLayoutCreate(&p.c, ytype, c.n, c.m, c.ldy);
  }
  if (st != CUBLAS_STATUS_SUCCESS) return fail(LtError(st, "cublasLtMatrixLayoutCreate"));
  if (c.count > 1) {
    const int32_t count = static_cast<int32_t>(c.count);
    const std::array<std::pair<cublasLtMatrixLayout_t, int64_t>, 3> layouts = {
        {{p.a, c.stride_w}, {p.b, c.stride_x}, {p.c, c.stride_y}}};
    for (const auto& [layout, stride] : layouts) {
      st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof(count));
      if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof(stride));
      }
      if (st != CUBLAS_STATUS_SUCCESS) {
        return fail(LtError(st, "cublasLtMatrixLayoutSetAttribute(batch)"));
      }
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(LtError(st, "cublasLtMatmulPreferenceCreate"));
  const uint64_t ws = ctx.workspace_bytes();
  const uint32_t align_a = static_cast<uint32_t>(key[12]);
  const uint32_t align_b = static_cast<uint32_t>(key[13]);
  const uint32_t align_c = static_cast<uint32_t>(key[14]);
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof(ws));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &align_a, sizeof(align_a));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &align_b, sizeof(align_b));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &align_c, sizeof(align_c));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &align_c, sizeof(align_c));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx.handle()), p.op, p.a, p.b,
                                        p.c, p.c, pref, 1, &result, &returned);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(LtError(st, "cublasLtMatmulAlgoGetHeuristic"));
  if (returned == 0) {
    BlasContext::Plans::Destroy(p);  // remembered as "no algorithm"
  } else {
    p.algo = result.algo;
    p.has_algo = true;
  }
  *out = &plans.lt.emplace(key, p).first->second;
  return OkStatus();
}

// Returns Unimplemented when cuBLASLt has no algorithm for the shape.
Status RunLt(BlasContext& ctx, const LtCall& c, cudaStream_t stream) {
  const LtPlan* plan = nullptr;
  STRATA_RETURN_IF_ERROR(GetLtPlan(ctx, c, &plan));
  if (!plan->has_algo) {
    return absl::UnimplementedError(
        absl::StrCat("Gemm: cuBLASLt has no algorithm for m=", c.m, " n=", c.n, " k=", c.k,
                     " ldx=", c.ldx, " ldw=", c.ldw, " ldy=", c.ldy, " count=", c.count));
  }
  STRATA_LT_RETURN_IF_ERROR(cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx.handle()), plan->op,
                                           &c.alpha, c.w, plan->a, c.x, plan->b, &c.beta, c.y,
                                           plan->c, c.y, plan->c, &plan->algo, ctx.workspace(),
                                           ctx.workspace_bytes(), stream));
  return OkStatus();
}


// Splits k over more warps while the grid still fits in one resident wave and
// each warp keeps at least one full unrolled step; see the file comment.
int GemvTilesPerCta(int64_t tiles, int64_t kblocks, int unroll, int64_t resident_ctas) {
  int tpc = kGemvWarps;
  while (tpc > 1) {
    const int next = tpc / 2;
    const int k_split = kGemvWarps / next;
    if (CeilDiv(tiles, next) > resident_ctas) break;
    if (kblocks < static_cast<int64_t>(k_split) * unroll) break;
    tpc = next;
  }
  return tpc;
}


// The canonical k split S of an (n, k) weight, and the GEMV's tiles per CTA
// that go with it. Planned for m = 1 (bf16 x) whatever the call: S must
// depend on n, k and the GPU only.
struct GemvPlan {
  int tiles_per_cta;
  int k_split;
};
GemvPlan GemvPlanFor(const BlasContext::Plans& plans, int64_t n, int64_t k) {
  const int tpc = GemvTilesPerCta(CeilDiv(n, kTile), CeilDiv(k, 32), kGemvPlanUnroll,
                                  plans.gemv_resident_ctas);
  return {tpc, kGemvWarps / tpc};
}

// One call's operands, leading dimensions resolved (never 0), and its batch
// (count 1 for Gemm).
struct Problem {
  GemmArgs a;
  int64_t count = 1;
  int64_t stride_x = 0;
  int64_t stride_w = 0;
  int64_t stride_y = 0;
};

GemvParams ToParams(const Problem& pr) {
  const GemmArgs& a = pr.a;
  GemvParams p{};
  p.w = a.w;
  p.x = a.x;
  p.y = a.y;
  p.ldw = a.ldw;
  p.ldx = a.ldx;
  p.ldy = a.ldy;
  p.stride_w = pr.stride_w;
  p.stride_x = pr.stride_x;
  p.stride_y = pr.stride_y;
  p.n = a.n;
  p.k = a.k;
  p.m = static_cast<int>(std::min<int64_t>(a.m, INT32_MAX));
  p.tiles_per_cta = 1;
  p.k_split = 1;
  p.alpha = a.alpha;
  p.beta = a.beta;
  p.early_trigger = a.early_trigger ? 1 : 0;
  return p;
}

// Whether the mma kernels can take the operands: every 16-byte chunk of a W
// or x row (of every product of a batch) is aligned, and k offsets fit in 32
// bits. Row offsets keep the alignment (ldx is a multiple of 16 bytes), so a
// slice of x's rows is fast exactly when the whole is.
bool FastShape(const Problem& pr) {
  const GemmArgs& a = pr.a;
  const int64_t x_per_16b = a.x_type == ActType::kF32 ? 4 : 8;
  return a.k % 8 == 0 && a.k < (int64_t{1} << 30) && a.ldw % 8 == 0 && a.ldx % x_per_16b == 0 &&
         IsAligned(a.w, 16) && IsAligned(a.x, 16) &&
         (pr.count == 1 || (pr.stride_w % 8 == 0 && pr.stride_x % x_per_16b == 0));
}

// Whether the GEMV loads its first round of weights into registers before
// the PDL wait (GemvParams::preload); gemv.preload=0 makes it prefetch that
// round into L2 instead (the arithmetic is the same).
bool GemvPreload() { return tuning::Current().On(tuning::Key::kGemvPreload); }

// Whether a GEMV whose warps have a second round of weights also copies it
// into shared memory before the PDL wait (GemvParams::stage_round);
// gemv.stage=0 turns that off (the arithmetic is the same).
bool GemvStage() { return tuning::Current().On(tuning::Key::kGemvStage); }

// Sets p's streaming-kernel plan for a call of m rows of x: tiles per CTA
// and k split from `plan`, the first round preloaded, and the second staged
// in shared memory when it applies. Returns the dynamic shared memory needed.
size_t PlanStreaming(GemvParams& p, const GemvPlan& plan, int64_t m, bool x_f32) {
  p.tiles_per_cta = plan.tiles_per_cta;
  p.k_split = plan.k_split;
  p.preload = GemvPreload() ? 1 : 0;
  const int unroll = GemvUnrollOf(m > 8 ? 2 : 1, x_f32);
  const int64_t rounds = CeilDiv(CeilDiv(CeilDiv(p.k, 32), p.k_split), unroll);
  // One bf16 x row only (the kernels' kMayStage): staging pays at batch 1,
  // where the step waits on each GEMV's latency, and costs a little at batch
  // 8, where the extra shared memory per CTA only takes room from the loads
  // in flight (docs/dev/journal/performance.md).
  p.stage_round = p.preload && !x_f32 && m == 1 && rounds >= 2 && GemvStage() ? 1 : 0;
  return p.stage_round ? GemvStageBytes(unroll) : 0;
}

// m ≤ kGemvMaxRows, any shape: the mma GEMV, or the scalar kernel.
Status RunSmallM(BlasContext& ctx, const Problem& pr, cudaStream_t stream) {
  const GemmArgs& a = pr.a;
  const bool x_f32 = a.x_type == ActType::kF32;
  const bool y_f32 = a.y_type == ActType::kF32;
  GemvParams p = ToParams(pr);
  const unsigned batches = static_cast<unsigned>(pr.count);
  if (!FastShape(pr)) {
    const unsigned grid = static_cast<unsigned>(CeilDiv(a.n, kGemvWarps));
    const cudaError_t err = LaunchPdl(kGemvSimple[x_f32][y_f32], dim3(grid, batches),
                                      dim3(kGemvThreads), 0, stream, p);
    if (err != cudaSuccess) return CudaError(err, "GemvSimpleKernel");
    return OkStatus();
  }
  const size_t smem = PlanStreaming(p, GemvPlanFor(*ctx.plans(), a.n, a.k), a.m, x_f32);
  const int nt = a.m > 8 ? 2 : 1;
  const unsigned grid = static_cast<unsigned>(CeilDiv(CeilDiv(a.n, kTile), p.tiles_per_cta));
  STRATA_PROBE_SLOT(p.probe, absl::StrCat("gemv_", a.n, "x", a.k, "_m", a.m).c_str(),
                    int64_t{grid} * batches);
  const cudaError_t err = LaunchPdl(kGemvMma[nt - 1][x_f32][y_f32], dim3(grid, batches),
                                    dim3(kGemvThreads), smem, stream, p);
  if (err != cudaSuccess) return CudaError(err, "GemvMmaKernel");
  return OkStatus();
}

// Whether GemvRoute fuses (gemv.route=0 turns it off: the caller then runs
// Gemm and its own route kernel, the same bits).
bool GemvRouteEnabled() { return tuning::Current().On(tuning::Key::kGemvRoute); }

// Any m, any shape: RunSmallM over 16-row slices of x and y.
Status RunSlices(BlasContext& ctx, const Problem& pr, cudaStream_t stream) {
  for (int64_t r = 0; r < pr.a.m; r += kGemvMaxRows) {
    Problem slice = pr;
    slice.a.m = std::min<int64_t>(kGemvMaxRows, pr.a.m - r);
    slice.a.x = static_cast<const char*>(pr.a.x) + r * pr.a.ldx * ActBytes(pr.a.x_type);
    slice.a.y = static_cast<char*>(pr.a.y) + r * pr.a.ldy * ActBytes(pr.a.y_type);
    STRATA_RETURN_IF_ERROR(RunSmallM(ctx, slice, stream));
  }
  return OkStatus();
}

// Batch-invariant mode, m > kGemvMaxRows, FastShape, bf16 x: the tiled kernel.
Status RunTiled(BlasContext& ctx, const Problem& pr, cudaStream_t stream) {
  const GemmArgs& a = pr.a;
  const BlasContext::Plans& plans = *ctx.plans();
  const int64_t w_tiles = CeilDiv(a.n, kTiledW);
  if (w_tiles > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: n = ", a.n, " exceeds the batch-invariant kernel's grid (n <= ",
                     int64_t{65535} * kTiledW, ")"));
  }
  // The tile shape does not change any bit (the arithmetic is per element):
  // 64-row x tiles only when 128-row ones would leave SMs idle.
  const bool narrow = CeilDiv(a.m, 128) * w_tiles * pr.count < 2 * int64_t{plans.num_sms};
  const int tile_x = narrow ? 64 : 128;
  GemvParams p = ToParams(pr);
  p.k_split = GemvPlanFor(plans, a.n, a.k).k_split;
  const dim3 grid(static_cast<unsigned>(CeilDiv(a.m, tile_x)), static_cast<unsigned>(w_tiles),
                  static_cast<unsigned>(pr.count));
  const int tx = narrow ? 0 : 1;
  const cudaError_t err = LaunchPdl(kTiled[tx][a.y_type == ActType::kF32], grid,
                                    dim3(kTiledThreads), static_cast<size_t>(kTiledSmem[tx]),
                                    stream, p);
  if (err != cudaSuccess) return CudaError(err, "InvariantGemmKernel");
  return OkStatus();
}

}  // namespace

Status Gemm(BlasContext& ctx, const GemmArgs& args, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckGemmArgs(args, /*transpose_w=*/false, /*batched=*/false));
  if (args.m == 0) return OkStatus();
  Problem pr;
  pr.a = args;
  pr.a.ldx = args.ldx ? args.ldx : args.k;
  pr.a.ldw = args.ldw ? args.ldw : args.k;
  pr.a.ldy = args.ldy ? args.ldy : args.n;
  if (args.m <= kGemvMaxRows) return RunSmallM(ctx, pr, stream);
  if (ctx.batch_invariant()) {
    return FastShape(pr) ? RunTiled(ctx, pr, stream) : RunSlices(ctx, pr, stream);
  }
  LtCall c{};
  c.m = args.m;
  c.n = args.n;
  c.k = args.k;
  c.ldx = pr.a.ldx;
  c.ldw = pr.a.ldw;
  c.ldy = pr.a.ldy;
  c.count = 1;
  c.transpose_w = false;
  c.y_type = args.y_type;
  c.x = args.x;
  c.w = args.w;
  c.y = args.y;
  c.alpha = args.alpha;
  c.beta = args.beta;
  const Status st = RunLt(ctx, c, stream);
  if (st.code() != absl::StatusCode::kUnimplemented) return st;
  // No cuBLASLt algorithm (odd leading dimensions): correct but slower, the
  // streaming kernels over 16-row slices of x and y.
  return RunSlices(ctx, pr, stream);
}

// GemvRoute's conditions on the GPU and the plan: the canonical plan of an
// [n, k] weight is one tile per CTA (S = the 8 warps of a CTA, so the kernel
// is the plain GEMV's), and its ceil(n / 16) CTAs can be resident as one
// cluster (asked once per size).
bool GemvRouteFuses(BlasContext& ctx, int64_t n, int64_t k) {
  if (!GemvRouteEnabled() || n < 1 || n > kRouteMaxRows || k < 1) return false;
  BlasContext::Plans& plans = *ctx.plans();
  if (GemvPlanFor(plans, n, k).tiles_per_cta != 1) return false;
  const int ctas = static_cast<int>(CeilDiv(n, kTile));
  int& ok = plans.route_cluster_ok[ctas];
  if (ok < 0) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ctas);
    cfg.blockDim = dim3(kGemvThreads);
    cfg.dynamicSmemBytes = kGemvMaxStageBytes;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = ctas;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kGemvRouteKernel, &cfg);
    if (err != cudaSuccess) cudaGetLastError();  // a refused size is an answer, not an error
    ok = err == cudaSuccess && clusters > 0 ? 1 : 0;
  }
  return ok == 1;
}

Status GemvRoute(BlasContext& ctx, const GemmArgs& args, const GemvRouting& r,
                 cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckGemmArgs(args, /*transpose_w=*/false, /*batched=*/false));
  if (args.m != 1 || args.x_type != ActType::kBf16 || args.y_type != ActType::kF32 ||
      args.beta != 0.f || args.early_trigger) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GemvRoute: takes one bf16 x row into fp32 y with beta 0 and no early trigger, got m = ",
        args.m));
  }
  if (r.top_k < 1 || r.top_k > std::min<int64_t>(args.n, route::kRouteMaxTopK)) {
    return absl::InvalidArgumentError(absl::StrCat("GemvRoute: top_k must be in [1, min(n, ",
                                                   route::kRouteMaxTopK, ")], got ", r.top_k,
                                                   " with n = ", args.n));
  }
  if (r.idx == nullptr || r.weight == nullptr) {
    return absl::InvalidArgumentError("GemvRoute: routing.idx and routing.weight must be set");
  }
  if (!std::isfinite(r.routed_scaling)) {
    return absl::InvalidArgumentError("GemvRoute: routing.routed_scaling must be finite");
  }
  Problem pr;
  pr.a = args;
  pr.a.ldx = args.ldx ? args.ldx : args.k;
  pr.a.ldw = args.ldw ? args.ldw : args.k;
  pr.a.ldy = args.ldy ? args.ldy : args.n;
  if (!FastShape(pr) || !GemvRouteFuses(ctx, args.n, args.k)) {
    return absl::FailedPreconditionError(
        absl::StrCat("GemvRoute: cannot fuse for n = ", args.n, ", k = ", args.k,
                     " (see GemvRouteFuses; aligned operands and k % 8 == 0 are needed too)"));
  }
  GemvParams p = ToParams(pr);
  // GemvRouteFuses checked that this is the shape's canonical plan.
  const size_t smem = PlanStreaming(p, GemvPlan{1, kGemvWarps}, 1, false);
  p.route_bias = r.bias;
  p.route_idx = r.idx;
  p.route_wt = r.weight;
  p.route_top_k = static_cast<int>(r.top_k);
  p.route_renormalize = r.renormalize ? 1 : 0;
  p.route_scaling = r.routed_scaling;
  const unsigned grid = static_cast<unsigned>(CeilDiv(args.n, kTile));
  STRATA_PROBE_SLOT(p.probe, absl::StrCat("gemv_route_", args.n, "x", args.k).c_str(),
                    int64_t{grid});
  const cudaError_t err =
      LaunchPdlCluster(kGemvRouteKernel, dim3(grid), dim3(kGemvThreads), grid, smem, stream, p);
  if (err != cudaSuccess) return CudaError(err, "GemvMmaKernel (GemvRoute)");
  return OkStatus();
}

Status StridedBatchedGemm(BlasContext& ctx, const StridedBatchedGemmArgs& args,
                          cudaStream_t stream) {
  const GemmArgs& g = args.g;
  STRATA_RETURN_IF_ERROR(CheckGemmArgs(g, args.transpose_w, /*batched=*/true));
  if (args.count < 0 || args.count > INT32_MAX) {
    return absl::InvalidArgumentError("StridedBatchedGemm: count must be in [0, 2^31)");
  }
  if (args.stride_x < 0 || args.stride_w < 0 || args.stride_y < 0) {
    return absl::InvalidArgumentError("StridedBatchedGemm: strides must be >= 0");
  }
  if (ctx.batch_invariant()) {
    // The canonical kernels read W rows of k contiguous elements; a [k, n]
    // W would need a different fragment layout, so the caller stores it
    // transposed once instead.
    if (args.transpose_w) {
      return absl::InvalidArgumentError(
          "StridedBatchedGemm: transpose_w is not supported in batch-invariant mode (store W "
          "as [n, k])");
    }
    if (args.count > 65535) {
      return absl::InvalidArgumentError(
          "StridedBatchedGemm: count must be <= 65535 in batch-invariant mode (grid limit)");
    }
  }
  if (args.count == 0 || g.m == 0) return OkStatus();
  const int64_t ldx = g.ldx ? g.ldx : g.k;
  const int64_t ldw = g.ldw ? g.ldw : (args.transpose_w ? g.n : g.k);
  const int64_t ldy = g.ldy ? g.ldy : g.n;
  Problem pr;
  pr.a = g;
  pr.a.ldx = ldx;
  pr.a.ldw = ldw;
  pr.a.ldy = ldy;
  pr.count = args.count;
  pr.stride_x = args.stride_x;
  pr.stride_w = args.stride_w;
  pr.stride_y = args.stride_y;
  if (ctx.batch_invariant()) {
    if (g.m <= kGemvMaxRows) return RunSmallM(ctx, pr, stream);
    return FastShape(pr) ? RunTiled(ctx, pr, stream) : RunSlices(ctx, pr, stream);
  }
  // Decode-sized products (MLA's per-head absorption at m = 1, 32 heads of
  // [512, 128]: 4.2 MB) stream at ~0.8 TB/s through cuBLASLt and at GEMV speed
  // here; and no cuBLASLt call means no shared workspace (layer_executor.h,
  // Branching).
  if (g.m <= kGemvMaxRows && !args.transpose_w && args.count <= 65535 && FastShape(pr)) {
    return RunSmallM(ctx, pr, stream);
  }
  LtCall c{};
  c.m = g.m;
  c.n = g.n;
  c.k = g.k;
  c.ldx = ldx;
  c.ldw = ldw;
  c.ldy = ldy;
  c.count = args.count;
  c.stride_x = args.stride_x;
  c.stride_w = args.stride_w;
  c.stride_y = args.stride_y;
  c.transpose_w = args.transpose_w;
  c.y_type = g.y_type;
  c.x = g.x;
  c.w = g.w;
  c.y = g.y;
  c.alpha = g.alpha;
  c.beta = g.beta;
  return RunLt(ctx, c, stream);
}

}  // namespace strata::cuda
