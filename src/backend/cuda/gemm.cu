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
// Grid sizing (to fill 132 SMs): a CTA is 8 warps; it owns `tpc` row tiles
// and splits k over the 8/tpc warps of each tile, reducing their partial sums
// through shared memory. Starting from tpc = 8 (one warp per tile, whole k),
// k is split further (tpc halved) while the grid still fits in one resident
// wave (CTAs ≤ SMs × resident CTAs per SM, from the occupancy API at context
// creation) and every warp still gets a full unrolled step of k. So a short,
// wide W ([2304, 4096]: 144 tiles) gets 144 CTAs with 8 warps each splitting
// k = 4096, all resident at once with 16 loads of 16 bytes in flight per
// lane; a tall W (the LM head, 10240 tiles) gets 1280 CTAs of one tile per
// warp over several waves, where the tail is a few percent. CTAs resident on
// the same SM just share its load slots: HBM, not the SM, is the bottleneck.
// Each lane keeps kUnroll k blocks (2 × kUnroll 16-byte W loads) in flight
// before its first mma, which with ≥ 8 warps per SM is ≥ 64 KB per SM in
// flight, above the ~32 KB per SM that Little's law asks at 4.27 TB/s and
// ~1 µs loaded latency.
//
// Shapes the fast kernel cannot take (k or ldw not a multiple of 8, or
// misaligned pointers) go to a plain warp-per-row kernel with scalar loads.
#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
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
  int tiles_per_cta;  // tpc; k_split = kGemvWarps / tpc
  int k_split;
  float alpha;
  float beta;  // only with fp32 y
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

// The mma kernel's variants, indexed [nt - 1][x fp32][y fp32].
using GemvKernelFn = void (*)(GemvParams);
const GemvKernelFn kGemvMma[2][2][2] = {
    {{GemvMmaKernel<1, false, bf16>, GemvMmaKernel<1, false, float>},
     {GemvMmaKernel<1, true, bf16>, GemvMmaKernel<1, true, float>}},
    {{GemvMmaKernel<2, false, bf16>, GemvMmaKernel<2, false, float>},
     {GemvMmaKernel<2, true, bf16>, GemvMmaKernel<2, true, float>}}};
constexpr int kGemvUnroll[2][2] = {{GemvUnroll<1, false>(), GemvUnroll<1, true>()},
                                   {GemvUnroll<2, false>(), GemvUnroll<2, true>()}};

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
  int64_t gemv_resident_ctas[2][2][2] = {};  // SMs × resident CTAs per SM, per variant
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
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 2; ++c) {
        int per_sm = 0;
        STRATA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, kGemvMma[a][b][c], kGemvThreads, 0));
        plans->gemv_resident_ctas[a][b][c] =
            static_cast<int64_t>(std::max(per_sm, 1)) * plans->num_sms;
      }
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

  const bool fast = a.k % 8 == 0 && ldw % 8 == 0 && IsAligned(a.w, 16) && IsAligned(a.x, 16) &&
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
