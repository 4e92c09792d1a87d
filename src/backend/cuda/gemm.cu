// Dense products y = alpha · x · Wᵀ (+ beta · y) on bf16 weights.
//
// Cost model (H200: 4.27 TB/s copy bandwidth, ~686 TFLOP/s bf16 matmul).
//  * Small M (decode, m ≤ 16): W is read once, so time = bytes(W) / 4.27 TB/s.
//      [4096+4096+4096, 2304]  56.6 MB  → 13.3 µs
//      [2304, 4096]            18.9 MB  →  4.4 µs
//      [163840, 2304] (head)  755.0 MB  → 176.8 µs
//      [9216·2, 2304]          84.9 MB  → 19.9 µs
//    The target is ≥ 85% of that. Expected (not yet measured): ~85–90% on
//    the three large shapes; the 18.9 MB one is ~4 µs of ideal time, so the
//    ~1 µs of launch and first-byte latency (outside a graph) caps it nearer
//    75–80%. Even at m = 16 the arithmetic is 2·16 FLOP per 2 bytes of W
//    (16 FLOP/byte, 68 TFLOP/s at full bandwidth): far below what mma.sync
//    delivers, but above what fp32 FMA on CUDA cores delivers once the
//    bf16 → fp32 conversions are counted, hence tensor cores here.
//  * Large M (prefill): 2·m·n·k FLOPs on cuBLASLt, e.g. m = 4096 on
//    [12288, 2304] is 232 GFLOP → 338 µs at 686 TFLOP/s.
//
// The streaming kernel (m ≤ kGemvMaxRows) computes yᵀ = W · xᵀ with
// mma.sync.m16n8k16: a 16-row tile of W is the A operand (M = 16) and up to 8
// rows of x are the B operand (N = 8; two N tiles for m ≤ 16). A dot product
// does not care about the order of k, so each lane loads 16 contiguous bytes
// (8 k values) of W rows g and g+8 and of x row g, and the k positions of the
// two mma's per 32-wide k block are permuted consistently in A and B (see
// GemvMmaKernel). That turns every W access into one 16-byte streaming load
// with no shared-memory staging and no shuffles: 8 rows × 64 contiguous bytes
// per warp instruction, each row then continued by the next loads of the
// same lane. x is tiny (≤ 16 rows) and read through L1 (the W loads bypass L1
// so they do not evict it). fp32 x is split into bf16 hi + lo parts, both fed
// to the tensor cores, which keeps ~16 mantissa bits of x.
//
// Division of work (GemvStreamKernel, opt-in with STRATA_GEMV=streamk: it
// measured slower than GemvMmaKernel, see UseLegacyGemv). The work is the
// tile-major list of U = tiles × kblocks units (16 W rows × 32 k = 1 KB of
// W each); warp w of the grid streams units [U·w/W, U·(w+1)/W), so every
// warp, and every SM, moves the same bytes to within 1 KB whatever the
// shape. Measured on the previous design (one CTA per 1–8 tiles, k split
// inside the CTA; GemvMmaKernel, the default),
// H200, Nsight Compute, one batch-1 decode step of Kimi-Linear-48B:
//      [2304, 4096]  144 CTAs on 132 SMs   9.6 µs  2.15 TB/s (12 SMs do 2×)
//      [2048, 2304]  128 CTAs              7.0 µs  1.4 TB/s
//      [2304, 1024]   72 CTAs              4.8 µs  1.0 TB/s
//      [256, 2304]    16 CTAs              4.8 µs  0.25 TB/s
//      [12576, 2304] 197 CTAs             19 µs    3.3 TB/s
//      [163840, 2304] 1280 CTAs          194 µs    4.17 TB/s
// i.e. whenever the CTA count is not a multiple of the SM count, or below
// it, some SMs stream twice the bytes of others, or idle. W is chosen by
// PlanGemvStream:
//  * U ≥ 2 × (resident warp slots): W = all resident warp slots (SMs ×
//    CTAs per SM × 8), one wave, every warp ≥ 2 KB;
//  * short k (kblocks ≤ one round) with ≥ one tile per SM: one whole tile
//    per warp (no tile split, no cross-warp reduction), CTAs of
//    ceil(tiles / SMs) warps so every SM gets a CTA;
//  * otherwise (small W): one full round per warp, ≤ one CTA per SM (a
//    few KB per SM: the per-SM transfer time is negligible, while fewer
//    warps per split tile means fewer partials for the last one to add).
// A warp's range usually starts and ends inside a tile: those tiles are
// reduced across warps without float atomics (FlushTile): each contributor
// stores its partial sums in its own slot of a workspace owned by the
// BlasContext and counts itself on a per-tile counter; the last to arrive
// adds the slots in warp order (bits independent of timing) and stores y.
// That costs ~3 L2 round trips at the end of the warp's range (fence, atomic,
// loads), ~1 µs, and is why whole-tile plans are preferred where they fill
// the GPU. Each lane keeps `round` ≤ 7 k blocks (2 × round 16-byte W loads)
// in flight before its mma's; rounds are equal-sized so the last is not a
// short, latency-bound one; with 16 warps per SM that is up to ~112 KB per
// SM in flight, above the ~32 KB per SM that Little's law asks at 4.27 TB/s
// and ~1 µs loaded latency.
//
// The legacy kernel (GemvMmaKernel, STRATA_GEMV=old): a CTA of 8 warps owns
// `tpc` row tiles and splits k over the 8/tpc warps of each tile, reducing
// through shared memory; tpc is halved from 8 while the grid still fits in
// one resident wave and every warp keeps a full unrolled step of k.
//
// Expected (H200, not yet measured; ncu-serialised, ~2 µs launch floor
// included): [2304, 4096] ~6.5 µs (was 9.6), [2048, 2304] ~4.5 µs (7.0),
// [2304, 1024] ~3.5 µs (4.8), [576, 2304] ~3.5 µs (5.0), [256, 2304]
// ~3.5 µs (4.8), [4096, 128] ~3.5 µs (4.0: 128 CTAs of 2 warps instead of
// 32 of 8), [12576, 2304] ~16 µs (19), [6144, 2304] ~9 µs (11.5), LM head
// ~185 µs (194).
//
// Shapes the fast kernel cannot take (k or ldw not a multiple of 8, or
// misaligned pointers) go to a plain warp-per-row kernel with scalar loads.
#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxLtPlans = 512;  // plans kept before the cache starts over
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kTile = 16;  // W rows per mma tile

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
// Streaming kernel (m ≤ 16).

struct GemvParams {
  const bf16* w;  // [n, k], row stride ldw
  const void* x;  // [m, k], row stride ldx (bf16 or fp32)
  void* y;        // [m, n], row stride ldy (bf16 or fp32)
  int64_t ldw;
  int64_t ldx;
  int64_t ldy;
  int64_t n;
  int64_t k;
  int m;
  int tiles_per_cta;  // legacy kernel: tpc; k_split = kGemvWarps / tpc
  int k_split;
  float alpha;
  float beta;  // only with fp32 y
  // Stream-K kernel: the work is the list of units (tile, k block), tile-major;
  // warp w of the grid takes units [units·w/warps, units·(w+1)/warps).
  int64_t kblocks;  // 32-wide k blocks per W row: ceil(k / 32)
  int64_t units;    // row tiles × kblocks
  int64_t warps;    // warps that own units (≤ grid × warps per CTA)
  int round;        // k blocks a warp loads before its mma's (≤ kU and ≤ kblocks)
  float* partials;     // [2 · warps][kNT][32 lanes] float4: split tiles' partial sums
  unsigned* counters;  // [warps]: arrivals per split tile, zero between launches
};

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

// k blocks (32 wide) each lane loads before its first mma.
template <int kNT, bool kXF32>
constexpr int GemvUnroll() {
  return (kNT == 1 && !kXF32) ? 8 : 4;
}

__device__ __forceinline__ void StoreY(float* y, int64_t i, float v, float beta) {
  y[i] = beta != 0.f ? v + beta * y[i] : v;
}
__device__ __forceinline__ void StoreY(bf16* y, int64_t i, float v, float /*beta*/) {
  y[i] = __float2bfloat16_rn(v);
}

// kNT: 8-row tiles of x (m ≤ 8·kNT). Requires k % 8 == 0, ldw % 8 == 0, w and
// x 16-byte aligned, ldx a multiple of 16 bytes. The register cap of 2 CTAs
// per SM (≤ 128 registers) matters: without it ptxas schedules for fewer
// registers and interleaves each load with the mma that consumes it, leaving
// ~3 loads in flight per lane instead of all 2·kUnroll + x (checked in SASS).
struct F32Chunk {  // 8 fp32 values of x (raw bits)
  uint4 a, b;
};

template <int kNT, bool kXF32, typename YT>
__global__ void __launch_bounds__(kGemvThreads, 2) GemvMmaKernel(const GemvParams p) {
  constexpr int kU = GemvUnroll<kNT, kXF32>();
  using XChunk = std::conditional_t<kXF32, F32Chunk, uint4>;
  __shared__ float red[kGemvWarps][kTile][kTile + 1];  // [warp][W row][x row]

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int ks = warp % p.k_split;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta + warp / p.k_split;
  const int64_t row0 = tile * kTile + g;
  const bool row0_ok = row0 < p.n;
  const bool row1_ok = row0 + 8 < p.n;
  const bf16* w0 = p.w + (row0_ok ? row0 : 0) * p.ldw + t * 8;
  const bf16* w1 = p.w + (row1_ok ? row0 + 8 : 0) * p.ldw + t * 8;
  bool x_ok[kNT];
  const char* xp[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int r = g + 8 * nt;
    x_ok[nt] = r < p.m;
    const size_t esize = kXF32 ? 4 : 2;
    xp[nt] = static_cast<const char*>(p.x) +
             ((x_ok[nt] ? r : 0) * p.ldx + t * 8) * static_cast<int64_t>(esize);
  }

  // Until the previous kernel of the step has finished, only the weights may
  // be touched: start the CTA's first round of weight loads (the first
  // k_split·kU k blocks of each of its rows) into L2 while it drains.
  {
    const int64_t cta_row = static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta * kTile + threadIdx.x;
    if (static_cast<int>(threadIdx.x) < p.tiles_per_cta * kTile && cta_row < p.n) {
      const int64_t first_k = min(p.k, static_cast<int64_t>(p.k_split) * kU * 32);
      PrefetchL2(p.w + cta_row * p.ldw, static_cast<uint32_t>(first_k * 2));
    }
  }
  PdlWait();
  PdlLaunchDependents();

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;

  const int64_t kblocks = CeilDiv(p.k, 32);
  // The loop bounds are warp-uniform (mma.sync needs the whole warp).
  if (tile * kTile < p.n) {
    for (int64_t base = static_cast<int64_t>(ks) * kU; base < kblocks;
         base += static_cast<int64_t>(p.k_split) * kU) {
      uint4 wa[kU], wb[kU];
      XChunk xc[kU][kNT];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int64_t koff = (base + j) * 32;  // element offset of this k block
        // k % 8 == 0, so this lane's 8-element chunk is wholly in or out.
        const bool k_ok = koff + t * 8 < p.k;
        wa[j] = LdgStream16(w0 + koff, k_ok && row0_ok);
        wb[j] = LdgStream16(w1 + koff, k_ok && row1_ok);
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

  // Sum the k-split partials of each tile. Consecutive threads take
  // consecutive W rows, so the stores along a row of y coalesce.
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
    StoreY(static_cast<YT*>(p.y), col * p.ldy + n_idx, p.alpha * s, p.beta);
  }
}

// Any shape and alignment: one warp per W row, scalar loads, fp32 FMA.
template <bool kXF32, typename YT>
__global__ void __launch_bounds__(kGemvThreads) GemvSimpleKernel(const GemvParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;  // warp-uniform; no barrier in this kernel
  using XT = std::conditional_t<kXF32, float, bf16>;
  const XT* x = static_cast<const XT*>(p.x);
  const bf16* w = p.w + row * p.ldw;
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
      if (lane == 0) StoreY(static_cast<YT*>(p.y), i * p.ldy + row, p.alpha * s, p.beta);
    }
  }
}

// ---------------------------------------------------------------------------
// Stream-K streaming kernel (the default for m ≤ 16; see the file comment).

// First unit of warp w's range.
__device__ __forceinline__ int64_t StreamStart(const GemvParams& p, int64_t w) {
  return p.units * w / p.warps;
}
// The warp whose range holds unit u: the largest w with StreamStart(w) ≤ u
// (floor(U·w/W) ≤ u ⟺ U·w ≤ (u+1)·W − 1).
__device__ __forceinline__ int64_t StreamOwner(const GemvParams& p, int64_t u) {
  return ((u + 1) * p.warps - 1) / p.units;
}

// One 32-wide k block of one 16-row tile: the mma's of GemvMmaKernel.
template <int kNT, bool kXF32, typename XChunk>
__device__ __forceinline__ void MmaUnit(float (&acc)[kNT][4], const uint4& wa, const uint4& wb,
                                        const XChunk (&xc)[kNT]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    if constexpr (kXF32) {
      const float4 a = BitsToF4(xc[nt].a);
      const float4 b = BitsToF4(xc[nt].b);
      const uint4 hi = make_uint4(F32x2ToBf16x2(a.x, a.y), F32x2ToBf16x2(a.z, a.w),
                                  F32x2ToBf16x2(b.x, b.y), F32x2ToBf16x2(b.z, b.w));
      const float2 h0 = Bf16x2ToF32(hi.x), h1 = Bf16x2ToF32(hi.y);
      const float2 h2 = Bf16x2ToF32(hi.z), h3 = Bf16x2ToF32(hi.w);
      const uint4 lo = make_uint4(
          F32x2ToBf16x2(a.x - h0.x, a.y - h0.y), F32x2ToBf16x2(a.z - h1.x, a.w - h1.y),
          F32x2ToBf16x2(b.x - h2.x, b.y - h2.y), F32x2ToBf16x2(b.z - h3.x, b.w - h3.y));
      MmaBlock(acc[nt], wa, wb, hi);
      MmaBlock(acc[nt], wa, wb, lo);
    } else {
      MmaBlock(acc[nt], wa, wb, xc[nt]);
    }
  }
}

// alpha · v (+ beta · y) for the tile's 16 rows straight from the mma
// fragments: lane (g, t) holds W rows g, g+8 and x rows 2t, 2t+1 (+8 per N
// tile). Eight lanes of equal t write eight consecutive floats of a y row.
template <int kNT, typename YT>
__device__ __forceinline__ void StoreTile(const GemvParams& p, int64_t tile, int lane,
                                          const float (&v)[kNT][4]) {
  const int g = lane >> 2, t = lane & 3;
  const int64_t r0 = tile * kTile + g;
  YT* y = static_cast<YT*>(p.y);
  // Element i = 2h + c of N tile nt: W row r0 + 8h, x row nt·8 + 2t + c.
  auto index = [&](int nt, int i, bool* ok) {
    const int64_t r = r0 + 8 * (i >> 1);
    const int c = nt * 8 + 2 * t + (i & 1);
    *ok = r < p.n && c < p.m;
    return c * p.ldy + r;
  };
  // beta ≠ 0 (fp32 y): every old value is loaded before the first store, so
  // the lane waits one round trip, not one per element.
  float old[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      old[nt][i] = 0.f;
      if constexpr (std::is_same_v<YT, float>) {
        bool ok;
        const int64_t at = index(nt, i, &ok);
        if (ok && p.beta != 0.f) old[nt][i] = y[at];
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      bool ok;
      const int64_t at = index(nt, i, &ok);
      if (!ok) continue;
      const float out = p.alpha * v[nt][i];
      if constexpr (std::is_same_v<YT, float>) {
        y[at] = p.beta != 0.f ? out + p.beta * old[nt][i] : out;
      } else {
        y[at] = __float2bfloat16_rn(out);
      }
    }
  }
}

// The PTX memory model's release (fence; relaxed atomic) and acquire
// (relaxed atomic; fence) patterns need only fence.acq_rel, lighter than the
// fence.sc that __threadfence() emits.
__device__ __forceinline__ void FenceAcqRelGpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Ends the warp's segment [seg0, seg1) of `tile` (units), whose sums are v.
// A whole tile is stored directly. A tile split over warps w_lo … w_hi
// (consecutive, since ranges are contiguous) is reduced without float
// atomics: each contributor stores its partial in its own slot (slot 2w for
// the segment its range starts with, 2w + 1 for the one it ends with; the
// segments in between are whole tiles), fences, and counts itself in
// counters[w_lo] (w_lo owns the tile's first unit, so distinct split tiles
// have distinct counters). The last to arrive adds the P partials in warp
// order, so the bits do not depend on which warp came last, stores y and
// zeroes the counter for the next launch.
template <int kNT, typename YT>
__device__ __forceinline__ void FlushTile(const GemvParams& p, int64_t gw, int64_t u0,
                                          int64_t tile, int64_t seg0, int64_t seg1, int lane,
                                          const float (&v)[kNT][4]) {
  const int64_t t0 = tile * p.kblocks, t1 = t0 + p.kblocks;
  if (seg0 == t0 && seg1 == t1) {
    StoreTile<kNT, YT>(p, tile, lane, v);
    return;
  }
  float4* parts = reinterpret_cast<float4*>(p.partials);
  const int64_t slot = 2 * gw + (seg0 == u0 ? 0 : 1);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    __stcg(parts + (slot * kNT + nt) * 32 + lane,
           make_float4(v[nt][0], v[nt][1], v[nt][2], v[nt][3]));
  }
  // The grid-barrier pattern of cooperative groups: the warp barrier makes
  // every lane's stores visible to lane 0, whose fence (cumulative) orders
  // them before its arrival; the last arrival fences again before the warp
  // barrier that releases the lanes to read the other warps' partials
  // (L2-coherent ld.cg, never the non-coherent path). atomicAdd is a relaxed
  // gpu-scope atomic: with the fences, the release and acquire patterns.
  __syncwarp();
  const int64_t w_lo = StreamOwner(p, t0);
  const int64_t w_hi = StreamOwner(p, t1 - 1);
  unsigned prev = 0;
  if (lane == 0) {
    FenceAcqRelGpu();  // release: the warp's partials before the arrival
    prev = atomicAdd(p.counters + w_lo, 1u);
    if (prev == static_cast<unsigned>(w_hi - w_lo)) FenceAcqRelGpu();  // acquire
  }
  prev = __shfl_sync(0xffffffffu, prev, 0);
  __syncwarp();
  if (prev != static_cast<unsigned>(w_hi - w_lo)) return;  // not the last: done
  float s[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
  // w_lo's segment is the first of its range only if its range starts at t0;
  // every later contributor's range starts inside the tile. The slots are
  // loaded kBatch at a time, all issued before the adds (one L2 round trip
  // per batch, not per contributor), and added in warp order; a slot past
  // w_hi loads zeros, which add nothing.
  constexpr int kBatch = kNT == 1 ? 16 : 8;
  const int64_t sl_lo = 2 * w_lo + (StreamStart(p, w_lo) == t0 ? 0 : 1);
  for (int64_t b = w_lo; b <= w_hi; b += kBatch) {
    float4 q[kBatch][kNT];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t sl = b + i == w_lo ? sl_lo : 2 * (b + i);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        q[i][nt] = b + i <= w_hi ? __ldcg(parts + (sl * kNT + nt) * 32 + lane)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[nt][0] += q[i][nt].x;
        s[nt][1] += q[i][nt].y;
        s[nt][2] += q[i][nt].z;
        s[nt][3] += q[i][nt].w;
      }
    }
  }
  if (lane == 0) p.counters[w_lo] = 0u;
  StoreTile<kNT, YT>(p, tile, lane, s);
}

// k blocks per round: one fewer than GemvMmaKernel's where the second
// accumulator set (a round may finish one tile and start the next) would
// otherwise push ptxas past the 128-register cap into spills (checked with
// cuobjdump --dump-resource-usage). 7 KB per warp and round is still ~100 KB
// in flight per SM at 16 warps per SM.
template <int kNT, bool kXF32>
constexpr int StreamUnroll() {
  return (kNT == 1 && !kXF32) ? 7 : (kNT == 2 && kXF32) ? 3 : 4;
}

// Same arithmetic and loads as GemvMmaKernel, different division of work:
// warp w of the grid (any number of warps per CTA) streams the contiguous
// units [U·w/W, U·(w+1)/W) of the tile-major list of (16-row tile, 32-wide
// k block) units, so every warp, hence every SM, moves the same bytes to
// within one 1 KB unit, whatever the number of tiles. A warp loads `round`
// units (2 · round 16-byte W loads per lane) before their mma's; round ≤
// kblocks, so a round crosses at most one tile boundary: the units past it
// accumulate into a fresh set and the finished tile is flushed after the
// round. Tiles shared with neighbouring warps are reduced by FlushTile.
template <int kNT, bool kXF32, typename YT>
__global__ void __launch_bounds__(kGemvThreads, 2) GemvStreamKernel(const GemvParams p) {
  constexpr int kU = StreamUnroll<kNT, kXF32>();
  using XChunk = std::conditional_t<kXF32, F32Chunk, uint4>;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int64_t kb_per_tile = p.kblocks;
  int64_t u0 = 0, u1 = 0;
  if (gw < p.warps) {
    u0 = StreamStart(p, gw);
    u1 = StreamStart(p, gw + 1);
  }

  // Before the previous kernel of the step has finished only the weights may
  // be touched: the warp's first round (16 rows of its first tile from its
  // first unit on, lanes 0–15, and the next tile's rows if the round crosses
  // into it, lanes 16–31) is requested into L2 while it drains.
  if (u0 < u1) {
    const int64_t tile = u0 / kb_per_tile;
    const int64_t kb = u0 - tile * kb_per_tile;
    const int64_t end = kb + min(static_cast<int64_t>(p.round), u1 - u0);
    const bool next = lane >= 16;
    const int64_t row = (tile + (next ? 1 : 0)) * kTile + (lane & 15);
    const int64_t b0 = next ? 0 : kb;
    const int64_t b1 = next ? end - kb_per_tile : min(end, kb_per_tile);
    if (b1 > b0 && row < p.n) {
      const int64_t e0 = b0 * 32;
      const int64_t e1 = min(b1 * 32, p.k);
      PrefetchL2(p.w + row * p.ldw + e0, static_cast<uint32_t>((e1 - e0) * 2));
    }
  }
  PdlWait();
  PdlLaunchDependents();
  if (u0 >= u1) return;  // warp-uniform; the kernel has no CTA barrier

  bool x_ok[kNT];
  const char* xp[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int r = g + 8 * nt;
    x_ok[nt] = r < p.m;
    const size_t esize = kXF32 ? 4 : 2;
    xp[nt] = static_cast<const char*>(p.x) +
             ((x_ok[nt] ? r : 0) * p.ldx + t * 8) * static_cast<int64_t>(esize);
  }

  float acc[kNT][4], done[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = done[nt][i] = 0.f;
  }
  const int kb_per_tile32 = static_cast<int>(kb_per_tile);  // < 2^26 (k < 2^31)
  const int k32 = static_cast<int>(p.k);
  int64_t tile = u0 / kb_per_tile;
  int kb = static_cast<int>(u0 - tile * kb_per_tile);  // k block of `base` within `tile`
  int64_t seg0 = u0;                                   // first unit of the current segment
  // The loop bounds are warp-uniform (mma.sync needs the whole warp).
  for (int64_t base = u0; base < u1;) {
    const int n_here = static_cast<int>(min(static_cast<int64_t>(p.round), u1 - base));
    const int left = kb_per_tile32 - kb;               // ≥ 1: units of `tile` from base on
    const int cross = left < n_here ? left : kU;       // first unit of tile + 1, if any
    // Rows g, g+8 of this tile and of the next; out-of-range rows load zeros.
    const int64_t row_a = tile * kTile + g;
    const bool a0_ok = row_a < p.n, a1_ok = row_a + 8 < p.n;
    const bool b0_ok = row_a + 16 < p.n, b1_ok = row_a + 24 < p.n;
    const bf16* w_a = p.w + (a0_ok ? row_a : 0) * p.ldw + t * 8;
    const bf16* w_b = p.w + (b0_ok ? row_a + 16 : 0) * p.ldw + t * 8;
    const int64_t ld8 = 8 * p.ldw;
    uint4 wa[kU], wb[kU];
    XChunk xc[kU][kNT];
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const bool in_next = j >= cross;
      const int koff = (kb + j - (in_next ? kb_per_tile32 : 0)) * 32;
      // k % 8 == 0, so this lane's 8-element chunk is wholly in or out.
      const bool k_ok = j < n_here && koff + t * 8 < k32;
      const bool ok0 = k_ok && (in_next ? b0_ok : a0_ok);
      const bool ok1 = k_ok && (in_next ? b1_ok : a1_ok);
      const bf16* w0 = (in_next ? w_b : w_a) + koff;
      wa[j] = LdgStream16(w0, ok0);
      wb[j] = LdgStream16(w0 + ld8, ok1);  // not dereferenced unless ok1
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
      if (j == cross) {  // tile is complete: park its sums, start the next tile's
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            done[nt][i] = acc[nt][i];
            acc[nt][i] = 0.f;
          }
        }
      }
      // Units past n_here loaded zeros: their mma's add nothing.
      MmaUnit<kNT, kXF32>(acc, wa[j], wb[j], xc[j]);
    }
    base += n_here;
    if (cross < n_here) {
      FlushTile<kNT, YT>(p, gw, u0, tile, seg0, (tile + 1) * kb_per_tile, lane, done);
      ++tile;
      seg0 = tile * kb_per_tile;
      kb += n_here - kb_per_tile32;
    } else {
      kb += n_here;
      if (kb == kb_per_tile32) {
        FlushTile<kNT, YT>(p, gw, u0, tile, seg0, (tile + 1) * kb_per_tile, lane, acc);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
        ++tile;
        seg0 = tile * kb_per_tile;
        kb = 0;
      }
    }
  }
  if (seg0 < u1) FlushTile<kNT, YT>(p, gw, u0, tile, seg0, u1, lane, acc);
}

// The mma kernel's variants, indexed [nt - 1][x fp32][y fp32].
using GemvKernelFn = void (*)(GemvParams);
const GemvKernelFn kGemvMma[2][2][2] = {
    {{GemvMmaKernel<1, false, bf16>, GemvMmaKernel<1, false, float>},
     {GemvMmaKernel<1, true, bf16>, GemvMmaKernel<1, true, float>}},
    {{GemvMmaKernel<2, false, bf16>, GemvMmaKernel<2, false, float>},
     {GemvMmaKernel<2, true, bf16>, GemvMmaKernel<2, true, float>}}};
const GemvKernelFn kGemvStream[2][2][2] = {
    {{GemvStreamKernel<1, false, bf16>, GemvStreamKernel<1, false, float>},
     {GemvStreamKernel<1, true, bf16>, GemvStreamKernel<1, true, float>}},
    {{GemvStreamKernel<2, false, bf16>, GemvStreamKernel<2, false, float>},
     {GemvStreamKernel<2, true, bf16>, GemvStreamKernel<2, true, float>}}};
constexpr int kGemvUnroll[2][2] = {{GemvUnroll<1, false>(), GemvUnroll<1, true>()},
                                   {GemvUnroll<2, false>(), GemvUnroll<2, true>()}};
constexpr int kStreamUnroll[2][2] = {{StreamUnroll<1, false>(), StreamUnroll<1, true>()},
                                     {StreamUnroll<2, false>(), StreamUnroll<2, true>()}};

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
  int64_t gemv_resident_ctas[2][2][2] = {};    // SMs × resident CTAs per SM, per variant
  int64_t stream_resident_ctas[2][2][2] = {};  // the same for GemvStreamKernel
  // GemvStreamKernel's workspace, allocated once here (kernels never
  // allocate): 2 partial-sum slots per warp (kNT · 32 lanes · float4 each,
  // sized for kNT = 2) and one arrival counter per warp, zero between
  // launches (the last arrival of a split tile resets its counter). Calls on
  // one context are serialised by its stream (PDL included: a kernel touches
  // the workspace only after griddepcontrol.wait), which is why a context
  // must not be shared by streams that run concurrently.
  int64_t stream_max_warps = 0;
  float* stream_partials = nullptr;
  unsigned* stream_counters = nullptr;
  std::map<LtKey, LtPlan> lt;

  ~Plans() {
    Clear();
    if (stream_partials) cudaFree(stream_partials);
    if (stream_counters) cudaFree(stream_counters);
  }
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
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 2; ++c) {
        int per_sm = 0;
        STRATA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, kGemvMma[a][b][c], kGemvThreads, 0));
        plans->gemv_resident_ctas[a][b][c] =
            static_cast<int64_t>(std::max(per_sm, 1)) * plans->num_sms;
        STRATA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, kGemvStream[a][b][c], kGemvThreads, 0));
        plans->stream_resident_ctas[a][b][c] =
            static_cast<int64_t>(std::max(per_sm, 1)) * plans->num_sms;
        plans->stream_max_warps = std::max(plans->stream_max_warps,
                                           plans->stream_resident_ctas[a][b][c] * kGemvWarps);
      }
    }
  }
  // 2 slots × kNT (2) × 32 lanes × 4 floats per warp: 2 KB; ~4.3 MB on an H200.
  const size_t slot_floats = size_t{2} * 32 * 4;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(
      &plans->stream_partials,
      static_cast<size_t>(2 * plans->stream_max_warps) * slot_floats * sizeof(float)));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(
      &plans->stream_counters, static_cast<size_t>(plans->stream_max_warps) * sizeof(unsigned)));
  // Zero before any stream can launch the kernel: the memset is complete
  // when Create returns.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      plans->stream_counters, 0, static_cast<size_t>(plans->stream_max_warps) * sizeof(unsigned),
      nullptr));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
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

// How GemvStreamKernel divides `tiles` × `kblocks` units (see the file
// comment for the cost reasoning behind each case).
struct StreamPlan {
  int warps_per_cta = kGemvWarps;
  int64_t grid = 0;
  int64_t warps = 0;
  int round = 0;
};

StreamPlan PlanGemvStream(int64_t tiles, int64_t kblocks, int unroll, int num_sms,
                          int64_t resident_ctas) {
  const int64_t units = tiles * kblocks;
  const int64_t all_warps = resident_ctas * kGemvWarps;  // every resident warp slot
  const int64_t sm_warps = static_cast<int64_t>(num_sms) * kGemvWarps;
  StreamPlan s;
  if (kblocks <= unroll && tiles >= num_sms && tiles <= all_warps) {
    // Short k, enough tiles for every SM: one whole tile (one round) per
    // warp, so no tile is split and no partial sums cross warps.
    s.warps = tiles;
  } else if (units >= 2 * all_warps) {
    // Large W: every warp slot of the GPU, equal bytes each.
    s.warps = all_warps;
  } else {
    // Small W: one full round per warp (fewest warps per split tile, so the
    // last arrival has the fewest partials to add), at most one CTA per SM.
    const int64_t cap = std::min<int64_t>(unroll, kblocks);
    s.warps = std::max<int64_t>(1, std::min(CeilDiv(units, cap), sm_warps));
  }
  s.warps_per_cta = static_cast<int>(std::min<int64_t>(kGemvWarps, CeilDiv(s.warps, num_sms)));
  s.grid = CeilDiv(s.warps, s.warps_per_cta);
  // Rounds of equal size: the busiest warp needs `rounds` rounds either way,
  // and equal rounds keep the last one from being a short, latency-bound one.
  const int64_t most = CeilDiv(units, s.warps);
  const int64_t cap = std::min<int64_t>(unroll, kblocks);
  const int64_t rounds = CeilDiv(most, cap);
  s.round = static_cast<int>(CeilDiv(most, rounds));
  return s;
}

// The grid-per-tile kernel is the default; STRATA_GEMV=streamk selects the
// stream-K kernel (read on every call, a getenv and no runtime call, so one
// process can compare). Measured on the H200 (2026-11-30, BM_CudaGemv vs
// BM_CudaGemvOld, graph-replayed, m = 1) stream-K was slower on 9 of the 11
// Kimi-Linear decode shapes (e.g. in_proj 21.2 vs 19.8 µs, o_proj 11.0 vs
// 10.0 µs, shared down 7.1 vs 2.9 µs) and a batch-1 decode step took 3.62 ms
// against 3.11 ms: the split-tile reduction (partials written, an arrival
// counter, the last warp re-reading them) costs more than the balance gains.
bool UseLegacyGemv() {
  const char* e = std::getenv("STRATA_GEMV");
  return e == nullptr || std::strcmp(e, "streamk") != 0;
}

Status RunGemv(BlasContext& ctx, const GemmArgs& a, int64_t ldx, int64_t ldw, int64_t ldy,
               cudaStream_t stream) {
  const bool x_f32 = a.x_type == ActType::kF32;
  const bool y_f32 = a.y_type == ActType::kF32;
  GemvParams p{};
  p.w = a.w;
  p.x = a.x;
  p.y = a.y;
  p.ldw = ldw;
  p.ldx = ldx;
  p.ldy = ldy;
  p.n = a.n;
  p.k = a.k;
  p.m = static_cast<int>(a.m);
  p.alpha = a.alpha;
  p.beta = a.beta;

  // k < 2^30: the kernels keep k offsets in 32 bits.
  const bool fast = a.k % 8 == 0 && a.k < (int64_t{1} << 30) && ldw % 8 == 0 &&
                    IsAligned(a.w, 16) && IsAligned(a.x, 16) &&
                    (x_f32 ? ldx % 4 == 0 : ldx % 8 == 0);
  if (!fast) {
    p.tiles_per_cta = 1;
    p.k_split = 1;
    const unsigned grid = static_cast<unsigned>(CeilDiv(a.n, kGemvWarps));
    const GemvKernelFn simple = x_f32 ? (y_f32 ? GemvSimpleKernel<true, float> : GemvSimpleKernel<true, bf16>)
                                      : (y_f32 ? GemvSimpleKernel<false, float> : GemvSimpleKernel<false, bf16>);
    const cudaError_t err = LaunchPdl(simple, dim3(grid), dim3(kGemvThreads), 0, stream, p);
    if (err != cudaSuccess) return CudaError(err, "GemvSimpleKernel");
    return OkStatus();
  }

  const int nt = a.m > 8 ? 2 : 1;
  const int64_t tiles = CeilDiv(a.n, kTile);
  const int unroll = kGemvUnroll[nt - 1][x_f32];
  const BlasContext::Plans& plans = *ctx.plans();
  if (!UseLegacyGemv()) {
    p.kblocks = CeilDiv(a.k, 32);
    p.units = tiles * p.kblocks;
    const StreamPlan sp = PlanGemvStream(tiles, p.kblocks, kStreamUnroll[nt - 1][x_f32],
                                         plans.num_sms,
                                         plans.stream_resident_ctas[nt - 1][x_f32][y_f32]);
    if (sp.warps > plans.stream_max_warps) {
      return absl::InternalError("Gemm: stream-K plan exceeds the GEMV workspace");
    }
    p.warps = sp.warps;
    p.round = sp.round;
    p.partials = plans.stream_partials;
    p.counters = plans.stream_counters;
    const cudaError_t err =
        LaunchPdl(kGemvStream[nt - 1][x_f32][y_f32], dim3(static_cast<unsigned>(sp.grid)),
                  dim3(sp.warps_per_cta * 32), 0, stream, p);
    if (err != cudaSuccess) return CudaError(err, "GemvStreamKernel");
    return OkStatus();
  }
  p.tiles_per_cta = GemvTilesPerCta(tiles, CeilDiv(a.k, 32), unroll,
                                    ctx.plans()->gemv_resident_ctas[nt - 1][x_f32][y_f32]);
  p.k_split = kGemvWarps / p.tiles_per_cta;
  const unsigned grid = static_cast<unsigned>(CeilDiv(tiles, p.tiles_per_cta));
  const cudaError_t err =
      LaunchPdl(kGemvMma[nt - 1][x_f32][y_f32], dim3(grid), dim3(kGemvThreads), 0, stream, p);
  if (err != cudaSuccess) return CudaError(err, "GemvMmaKernel");
  return OkStatus();
}

}  // namespace

Status Gemm(BlasContext& ctx, const GemmArgs& args, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckGemmArgs(args, /*transpose_w=*/false, /*batched=*/false));
  if (args.m == 0) return OkStatus();
  const int64_t ldx = args.ldx ? args.ldx : args.k;
  const int64_t ldw = args.ldw ? args.ldw : args.k;
  const int64_t ldy = args.ldy ? args.ldy : args.n;
  if (args.m <= kGemvMaxRows) return RunGemv(ctx, args, ldx, ldw, ldy, stream);
  LtCall c{};
  c.m = args.m;
  c.n = args.n;
  c.k = args.k;
  c.ldx = ldx;
  c.ldw = ldw;
  c.ldy = ldy;
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
  for (int64_t r = 0; r < args.m; r += kGemvMaxRows) {
    GemmArgs slice = args;
    slice.m = std::min<int64_t>(kGemvMaxRows, args.m - r);
    slice.x = static_cast<const char*>(args.x) + r * ldx * ActBytes(args.x_type);
    slice.y = static_cast<char*>(args.y) + r * ldy * ActBytes(args.y_type);
    STRATA_RETURN_IF_ERROR(RunGemv(ctx, slice, ldx, ldw, ldy, stream));
  }
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
  if (args.count == 0 || g.m == 0) return OkStatus();
  const int64_t ldx = g.ldx ? g.ldx : g.k;
  const int64_t ldw = g.ldw ? g.ldw : (args.transpose_w ? g.n : g.k);
  const int64_t ldy = g.ldy ? g.ldy : g.n;
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
