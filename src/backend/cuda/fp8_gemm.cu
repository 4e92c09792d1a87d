// FP8 block-scaled products; see fp8_gemm.h for the two paths and why.
//
// The streaming kernel is gemm.cu's GemvMmaKernel with e4m3 weights: yᵀ =
// W · xᵀ on mma.sync.m16n8k16 (bf16, fp32 accumulation), a 16-row tile of W
// as the A operand and 8-row tiles of x as B. Each lane loads 16 contiguous
// bytes = 16 codes of W rows g and g+8 per 64-wide k block (one streaming
// load each: half the bytes of the bf16 kernel's 8 values per load, so a
// warp instruction still moves 8 rows × 64 contiguous bytes), converts them
// in registers and feeds two mma pairs; x (at most 64 rows) is read through
// L1 at the same k positions, which keeps every W element paired with the x
// element of its k (the permutation argument of gemm.cu's MmaBlock).
//
// Conversion: cvt.rn.f16x2.e4m3x2 is exact (every e4m3 value is an f16), the
// f16 → fp32 widening too; the block scale multiplies in fp32 and the
// product is rounded once to bf16, i.e. the same bf16 as host dequantisation
// (fp32 code · scale, then rounded). 16 bytes of W are 16 elements, each
// costing ~3 instructions (cvt, mul, pack) per row tile; at m = 1 that is
// below the ~6 instructions per element the SMs can spend while HBM
// delivers 1 byte per element, so the kernel stays bandwidth-bound.
//
// The block scale is looked up per lane and k block (one L1-cached load per
// W row per 64 codes); a scale block's columns must be a multiple of 16 so a
// lane's 16 codes share one scale.
//
// Shapes the fast kernel cannot take (k or ldw not a multiple of 16, scale
// blocks not a multiple of 16 columns, misaligned pointers) go to a warp-per-
// row kernel with scalar loads that rounds the scaled weight the same way.
#include "backend/cuda/fp8_gemm.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;    // W rows per mma tile
constexpr int kKBlock = 64;  // k per lane group and step: 4 lanes × 16 codes
constexpr int kSimpleRows = 16;  // x rows per pass of the simple kernel

struct Fp8GemvParams {
  const uint8_t* w;    // [n, k], row stride ldw bytes
  const float* scale;  // scale grid, row stride ld_scale
  const bf16* x;       // [m, k], row stride ldx
  void* y;             // [m, n], row stride ldy (bf16 or fp32)
  int64_t ldw;
  int64_t ld_scale;
  int64_t ldx;
  int64_t ldy;
  int64_t n;
  int64_t k;
  int64_t block_rows;
  int64_t block_cols;
  int m;
  int tiles_per_cta;  // k_split = kWarps / tiles_per_cta
  int k_split;
  float alpha;
  float beta;  // only with fp32 y
};

__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 8 consecutive k of W rows g (r0) and g+8 (r1) against 8 of x: the chunk's
// elements {0,1},{2,3} fill the first mma's k slots {2t,2t+1},{2t+8,2t+9}
// and {4,5},{6,7} the second's, identically in A and B (gemm.cu MmaBlock).
__device__ __forceinline__ void MmaChunk(float (&d)[4], const uint4& r0, const uint4& r1,
                                         const uint4& x) {
  MmaBf16(d, r0.x, r1.x, r0.y, r1.y, x.x, x.y);
  MmaBf16(d, r0.z, r1.z, r0.w, r1.w, x.z, x.w);
}

// Four e4m3 codes (the lowest byte is the lowest k) times s, as two bf16x2.
__device__ __forceinline__ uint2 Fp8x4ToBf16(uint32_t codes, float s) {
  const __half2_raw lo =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const __half2_raw hi =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo));
  const float2 b = __half22float2(__half2(hi));
  return make_uint2(F32x2ToBf16x2(a.x * s, a.y * s), F32x2ToBf16x2(b.x * s, b.y * s));
}

// 16 codes → elements 0..7 (lo) and 8..15 (hi) as bf16, scaled.
__device__ __forceinline__ void Fp8x16ToBf16(const uint4& c, float s, uint4& lo, uint4& hi) {
  const uint2 a = Fp8x4ToBf16(c.x, s), b = Fp8x4ToBf16(c.y, s);
  const uint2 e = Fp8x4ToBf16(c.z, s), f = Fp8x4ToBf16(c.w, s);
  lo = make_uint4(a.x, a.y, b.x, b.y);
  hi = make_uint4(e.x, e.y, f.x, f.y);
}

__device__ __forceinline__ float DecodeE4m3(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

__device__ __forceinline__ void StoreY(float* y, int64_t i, float v, float beta) {
  y[i] = beta != 0.f ? v + beta * y[i] : v;
}
__device__ __forceinline__ void StoreY(bf16* y, int64_t i, float v, float /*beta*/) {
  y[i] = __float2bfloat16_rn(v);
}

// k blocks (64 wide) each lane loads before converting: fewer for many x
// tiles, whose accumulators take the registers.
template <int kNT>
constexpr int Fp8GemvUnroll() {
  return kNT <= 2 ? 4 : 2;
}

// kNT: 8-row tiles of x (m ≤ 8·kNT). Requires k % 16 == 0, ldw % 16 == 0,
// block_cols % 16 == 0, w and x 16-byte aligned, ldx % 8 == 0.
template <int kNT, typename YT>
__global__ void __launch_bounds__(kThreads, 2) Fp8GemvMmaKernel(const Fp8GemvParams p) {
  constexpr int kU = Fp8GemvUnroll<kNT>();
  __shared__ float red[kWarps][kTile][8 * kNT + 1];  // [warp][W row][x row]

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int ks = warp % p.k_split;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta + warp / p.k_split;
  const int64_t row0 = tile * kTile + g;
  const bool row0_ok = row0 < p.n;
  const bool row1_ok = row0 + 8 < p.n;
  const int64_t r0 = row0_ok ? row0 : 0;
  const int64_t r1 = row1_ok ? row0 + 8 : 0;
  const uint8_t* w0 = p.w + r0 * p.ldw + t * 16;
  const uint8_t* w1 = p.w + r1 * p.ldw + t * 16;
  const float* s0 = p.scale + (r0 / p.block_rows) * p.ld_scale;
  const float* s1 = p.scale + (r1 / p.block_rows) * p.ld_scale;
  bool x_ok[kNT];
  const bf16* xp[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int r = g + 8 * nt;
    x_ok[nt] = r < p.m;
    xp[nt] = p.x + (x_ok[nt] ? r : 0) * p.ldx + t * 16;
  }

  // Until the previous kernel of the step has finished only the weights may
  // be touched: start the CTA's first round of weight loads into L2.
  {
    const int64_t cta_row =
        static_cast<int64_t>(blockIdx.x) * p.tiles_per_cta * kTile + threadIdx.x;
    if (static_cast<int>(threadIdx.x) < p.tiles_per_cta * kTile && cta_row < p.n) {
      const int64_t first_k = min(p.k, static_cast<int64_t>(p.k_split) * kU * kKBlock);
      PrefetchL2(p.w + cta_row * p.ldw, static_cast<uint32_t>(first_k));
    }
  }
  PdlWait();
  PdlLaunchDependents();

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;

  const int64_t kblocks = CeilDiv(p.k, kKBlock);
  // The loop bounds are warp-uniform (mma.sync needs the whole warp).
  if (tile * kTile < p.n) {
    for (int64_t base = static_cast<int64_t>(ks) * kU; base < kblocks;
         base += static_cast<int64_t>(p.k_split) * kU) {
      uint4 wa[kU], wb[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int64_t koff = (base + j) * kKBlock;
        // k % 16 == 0, so this lane's 16 codes are wholly in or out.
        const bool k_ok = koff + t * 16 < p.k;
        wa[j] = LdgStream16(w0 + koff, k_ok && row0_ok);
        wb[j] = LdgStream16(w1 + koff, k_ok && row1_ok);
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int64_t koff = (base + j) * kKBlock;
        const int64_t kl = koff + t * 16;
        const bool k_ok = kl < p.k;
        const int64_t sc = k_ok ? kl / p.block_cols : 0;
        const float sa = k_ok && row0_ok ? __ldg(s0 + sc) : 0.f;
        const float sb = k_ok && row1_ok ? __ldg(s1 + sc) : 0.f;
        uint4 a_lo, a_hi, b_lo, b_hi;
        Fp8x16ToBf16(wa[j], sa, a_lo, a_hi);
        Fp8x16ToBf16(wb[j], sb, b_lo, b_hi);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const bool ok = k_ok && x_ok[nt];
          const uint4 x_lo = Ldg16(xp[nt] + koff, ok);
          const uint4 x_hi = Ldg16(xp[nt] + koff + 8, ok);
          MmaChunk(acc[nt], a_lo, b_lo, x_lo);
          MmaChunk(acc[nt], a_hi, b_hi, x_hi);
        }
      }
    }
  }

  // Accumulator layout: d0, d1 at (W row g, x rows 2t, 2t+1), d2, d3 at W row
  // g+8; x rows offset by 8 per N tile.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    red[warp][g][nt * 8 + 2 * t] = acc[nt][0];
    red[warp][g][nt * 8 + 2 * t + 1] = acc[nt][1];
    red[warp][g + 8][nt * 8 + 2 * t] = acc[nt][2];
    red[warp][g + 8][nt * 8 + 2 * t + 1] = acc[nt][3];
  }
  __syncthreads();

  // Sum the k-split partials of each tile; consecutive threads take
  // consecutive W rows so the stores along a row of y coalesce.
  const int rows_per_cta = p.tiles_per_cta * kTile;
  const int outputs = rows_per_cta * p.m;
  for (int idx = threadIdx.x; idx < outputs; idx += kThreads) {
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

// Any shape and alignment: one warp per W row, scalar loads, fp32 FMA on the
// same bf16-rounded weights as the fast kernel.
template <typename YT>
__global__ void __launch_bounds__(kThreads) Fp8GemvSimpleKernel(const Fp8GemvParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;  // warp-uniform; no barrier in this kernel
  const uint8_t* w = p.w + row * p.ldw;
  const float* srow = p.scale + (row / p.block_rows) * p.ld_scale;
  for (int base = 0; base < p.m; base += kSimpleRows) {
    float acc[kSimpleRows];
#pragma unroll
    for (int i = 0; i < kSimpleRows; ++i) acc[i] = 0.f;
    for (int64_t kk = lane; kk < p.k; kk += 32) {
      const float wv =
          __bfloat162float(__float2bfloat16_rn(DecodeE4m3(w[kk]) * srow[kk / p.block_cols]));
#pragma unroll
      for (int i = 0; i < kSimpleRows; ++i) {
        if (base + i < p.m) acc[i] = fmaf(wv, __bfloat162float(p.x[(base + i) * p.ldx + kk]), acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kSimpleRows; ++i) {
      if (base + i < p.m) {
        const float s = WarpSum(acc[i]);
        if (lane == 0) StoreY(static_cast<YT*>(p.y), (base + i) * p.ldy + row, p.alpha * s, p.beta);
      }
    }
  }
}

struct DequantParams {
  const uint8_t* w;
  const float* scale;
  bf16* out;  // [rows, k]
  int64_t ldw;
  int64_t ld_scale;
  int64_t block_rows;
  int64_t block_cols;
  int64_t row0;
  int64_t rows;
  int64_t k;
};

// kVec: 16 codes per thread (k, ldw and block_cols multiples of 16, w and out
// 16-byte aligned); otherwise one element per thread.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) DequantFp8Kernel(const DequantParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t per_row = kVec ? p.k / 16 : p.k;
  const int64_t total = p.rows * per_row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = idx / per_row;
    const int64_t c = (idx % per_row) * (kVec ? 16 : 1);
    const int64_t row = p.row0 + r;
    const float s = p.scale[(row / p.block_rows) * p.ld_scale + c / p.block_cols];
    if constexpr (kVec) {
      const uint4 codes = LdgStream16(p.w + row * p.ldw + c, true);
      uint4 lo, hi;
      Fp8x16ToBf16(codes, s, lo, hi);
      uint4* dst = reinterpret_cast<uint4*>(p.out + r * p.k + c);
      dst[0] = lo;
      dst[1] = hi;
    } else {
      p.out[r * p.k + c] = __float2bfloat16_rn(DecodeE4m3(p.w[row * p.ldw + c]) * s);
    }
  }
}

using Fp8GemvFn = void (*)(Fp8GemvParams);
// [log2(nt)][y fp32]
const Fp8GemvFn kFp8GemvMma[4][2] = {
    {Fp8GemvMmaKernel<1, bf16>, Fp8GemvMmaKernel<1, float>},
    {Fp8GemvMmaKernel<2, bf16>, Fp8GemvMmaKernel<2, float>},
    {Fp8GemvMmaKernel<4, bf16>, Fp8GemvMmaKernel<4, float>},
    {Fp8GemvMmaKernel<8, bf16>, Fp8GemvMmaKernel<8, float>}};
constexpr int kFp8GemvUnrolls[4] = {Fp8GemvUnroll<1>(), Fp8GemvUnroll<2>(), Fp8GemvUnroll<4>(),
                                    Fp8GemvUnroll<8>()};

// SMs × resident CTAs per SM of each variant, per device; the occupancy
// queries run once per device (host-side, no allocation on the device).
using ResidentTable = std::array<std::array<int64_t, 2>, 4>;
StatusOr<ResidentTable> ResidentCtas() {
  static std::mutex mu;
  static std::map<int, ResidentTable> by_device;
  int device = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_device.find(device);
  if (it != by_device.end()) return it->second;
  int sms = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  ResidentTable t{};
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 2; ++b) {
      int per_sm = 0;
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kFp8GemvMma[a][b], kThreads, 0));
      t[a][b] = static_cast<int64_t>(std::max(per_sm, 1)) * sms;
    }
  }
  by_device.emplace(device, t);
  return t;
}

// As gemm.cu: split k over more warps while the grid still fits in one
// resident wave and each warp keeps at least one full unrolled step.
int TilesPerCta(int64_t tiles, int64_t kblocks, int unroll, int64_t resident_ctas) {
  int tpc = kWarps;
  while (tpc > 1) {
    const int next = tpc / 2;
    const int k_split = kWarps / next;
    if (CeilDiv(tiles, next) > resident_ctas) break;
    if (kblocks < static_cast<int64_t>(k_split) * unroll) break;
    tpc = next;
  }
  return tpc;
}

int64_t ScaleCols(const Fp8Matrix& w, int64_t k) { return CeilDiv(k, w.block_cols); }

Status CheckFp8Matrix(const Fp8Matrix& w, int64_t k, const char* what) {
  if (w.w == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": w.w is null"));
  if (w.scale == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": w.scale is null"));
  if (w.block_rows <= 0 || w.block_cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": block sizes must be positive"));
  }
  if (w.ldw != 0 && w.ldw < k) return absl::InvalidArgumentError(absl::StrCat(what, ": ldw < k"));
  if (w.ld_scale != 0 && w.ld_scale < ScaleCols(w, k)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ld_scale < ceil(k / block_cols)"));
  }
  return OkStatus();
}

Status RunFp8Gemv(BlasContext& ctx, const Fp8GemmArgs& a, int64_t ldx, int64_t ldy,
                  cudaStream_t stream) {
  (void)ctx;
  const bool y_f32 = a.y_type == ActType::kF32;
  Fp8GemvParams p{};
  p.w = a.w.w;
  p.scale = a.w.scale;
  p.x = a.x;
  p.y = a.y;
  p.ldw = a.w.ldw ? a.w.ldw : a.k;
  p.ld_scale = a.w.ld_scale ? a.w.ld_scale : ScaleCols(a.w, a.k);
  p.ldx = ldx;
  p.ldy = ldy;
  p.n = a.n;
  p.k = a.k;
  p.block_rows = a.w.block_rows;
  p.block_cols = a.w.block_cols;
  p.m = static_cast<int>(a.m);
  p.alpha = a.alpha;
  p.beta = a.beta;

  const bool fast = a.k % 16 == 0 && p.ldw % 16 == 0 && a.w.block_cols % 16 == 0 &&
                    IsAligned(a.w.w, 16) && IsAligned(a.x, 16) && ldx % 8 == 0;
  if (!fast) {
    p.tiles_per_cta = 1;
    p.k_split = 1;
    const unsigned grid = static_cast<unsigned>(CeilDiv(a.n, kWarps));
    const Fp8GemvFn simple = y_f32 ? Fp8GemvSimpleKernel<float> : Fp8GemvSimpleKernel<bf16>;
    const cudaError_t err = LaunchPdl(simple, dim3(grid), dim3(kThreads), 0, stream, p);
    if (err != cudaSuccess) return CudaError(err, "Fp8GemvSimpleKernel");
    return OkStatus();
  }
  const int variant = a.m <= 8 ? 0 : a.m <= 16 ? 1 : a.m <= 32 ? 2 : 3;
  STRATA_ASSIGN_OR_RETURN(const ResidentTable resident, ResidentCtas());
  const int64_t tiles = CeilDiv(a.n, kTile);
  p.tiles_per_cta = TilesPerCta(tiles, CeilDiv(a.k, kKBlock), kFp8GemvUnrolls[variant],
                                resident[variant][y_f32]);
  p.k_split = kWarps / p.tiles_per_cta;
  const unsigned grid = static_cast<unsigned>(CeilDiv(tiles, p.tiles_per_cta));
  const cudaError_t err =
      LaunchPdl(kFp8GemvMma[variant][y_f32], dim3(grid), dim3(kThreads), 0, stream, p);
  if (err != cudaSuccess) return CudaError(err, "Fp8GemvMmaKernel");
  return OkStatus();
}

}  // namespace

Status DequantizeFp8ToBf16(const Fp8Matrix& w, int64_t row0, int64_t rows, int64_t k, bf16* out,
                           cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckFp8Matrix(w, k, "DequantizeFp8ToBf16"));
  if (out == nullptr) return absl::InvalidArgumentError("DequantizeFp8ToBf16: out is null");
  if (row0 < 0 || rows < 0 || k <= 0) {
    return absl::InvalidArgumentError("DequantizeFp8ToBf16: row0, rows must be >= 0 and k > 0");
  }
  if (rows == 0) return OkStatus();
  DequantParams p{};
  p.w = w.w;
  p.scale = w.scale;
  p.out = out;
  p.ldw = w.ldw ? w.ldw : k;
  p.ld_scale = w.ld_scale ? w.ld_scale : ScaleCols(w, k);
  p.block_rows = w.block_rows;
  p.block_cols = w.block_cols;
  p.row0 = row0;
  p.rows = rows;
  p.k = k;
  const bool vec = k % 16 == 0 && p.ldw % 16 == 0 && w.block_cols % 16 == 0 &&
                   IsAligned(w.w, 16) && IsAligned(out, 16);
  const int64_t items = rows * (vec ? k / 16 : k);
  // A grid-stride loop; a few waves of CTAs are enough to saturate HBM.
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(CeilDiv(items, kThreads), 8192));
  const cudaError_t err = vec ? LaunchPdl(DequantFp8Kernel<true>, dim3(grid), dim3(kThreads), 0,
                                          stream, p)
                              : LaunchPdl(DequantFp8Kernel<false>, dim3(grid), dim3(kThreads), 0,
                                          stream, p);
  if (err != cudaSuccess) return CudaError(err, "DequantFp8Kernel");
  return OkStatus();
}

Status Fp8Gemm(BlasContext& ctx, const Fp8GemmArgs& args, cudaStream_t stream) {
  const Fp8GemmArgs& a = args;
  if (a.m < 0) return absl::InvalidArgumentError("Fp8Gemm: m must be >= 0");
  if (a.n <= 0 || a.n > INT32_MAX) {
    return absl::InvalidArgumentError("Fp8Gemm: n must be in [1, 2^31)");
  }
  if (a.k <= 0) return absl::InvalidArgumentError("Fp8Gemm: k must be > 0");
  if (a.x == nullptr) return absl::InvalidArgumentError("Fp8Gemm: x is null");
  if (a.y == nullptr) return absl::InvalidArgumentError("Fp8Gemm: y is null");
  STRATA_RETURN_IF_ERROR(CheckFp8Matrix(a.w, a.k, "Fp8Gemm"));
  if (a.y_type != ActType::kBf16 && a.y_type != ActType::kF32) {
    return absl::InvalidArgumentError("Fp8Gemm: y_type is not bf16 or fp32");
  }
  if (a.ldx != 0 && a.ldx < a.k) return absl::InvalidArgumentError("Fp8Gemm: ldx < k");
  if (a.ldy != 0 && a.ldy < a.n) return absl::InvalidArgumentError("Fp8Gemm: ldy < n");
  if (a.beta != 0.f && a.y_type != ActType::kF32) {
    return absl::InvalidArgumentError("Fp8Gemm: beta != 0 needs y_type fp32");
  }
  if (a.m == 0) return OkStatus();
  const int64_t ldx = a.ldx ? a.ldx : a.k;
  const int64_t ldy = a.ldy ? a.ldy : a.n;
  if (a.m <= kFp8GemvMaxRows) return RunFp8Gemv(ctx, a, ldx, ldy, stream);

  // Prefill: W in row chunks through the bf16 tile and cuBLASLt. Chunks are
  // multiples of 16 rows (when the tile allows) so y's column offsets keep
  // the alignment cuBLASLt's fast kernels want.
  if (a.tile == nullptr || a.tile_elems < a.k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Fp8Gemm: m = ", a.m, " > ", kFp8GemvMaxRows,
        " needs a bf16 tile of at least k = ", a.k, " elements, got ", a.tile_elems));
  }
  int64_t chunk = std::min(a.n, a.tile_elems / a.k);
  if (chunk < a.n && chunk >= 16) chunk -= chunk % 16;
  const size_t ybytes = ActBytes(a.y_type);
  for (int64_t r0 = 0; r0 < a.n; r0 += chunk) {
    const int64_t rows = std::min(chunk, a.n - r0);
    STRATA_RETURN_IF_ERROR(DequantizeFp8ToBf16(a.w, r0, rows, a.k, a.tile, stream));
    GemmArgs g;
    g.m = a.m;
    g.n = rows;
    g.k = a.k;
    g.x = a.x;
    g.x_type = ActType::kBf16;
    g.ldx = ldx;
    g.w = a.tile;
    g.ldw = a.k;
    g.y = static_cast<char*>(a.y) + r0 * ybytes;
    g.y_type = a.y_type;
    g.ldy = ldy;
    g.alpha = a.alpha;
    g.beta = a.beta;
    STRATA_RETURN_IF_ERROR(Gemm(ctx, g, stream));
  }
  return OkStatus();
}

}  // namespace strata::cuda
