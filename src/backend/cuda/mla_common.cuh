// Private to backend/cuda (mla.h is the API): what mla_decode.cu and
// mla_prefill.cu share.
//
// Kimi's NoPE MLA on the GPU: paged latent cache write/gather, absorbed decode
// (flash-decoding over the shared 576-wide cache row) and flash-style prefill.
//
// Here: the constants, the device helpers (cp.async, ldmatrix, mma.sync,
// warp and block reductions, cache rows) and the host-side checks.
//
// Fast paths (tensor cores, cp.async double buffering, XOR-swizzled shared
// memory so ldmatrix is conflict-free) serve r = 512, dr = 64 (decode) and
// dn = 128, dr = 64, dv = 128 (prefill) with 16-byte aligned rows; every other
// shape takes a plain fp32 kernel that is slow but obviously correct (the test
// fixtures' odd sizes).
#ifndef STRATA_BACKEND_CUDA_MLA_COMMON_CUH_
#define STRATA_BACKEND_CUDA_MLA_COMMON_CUH_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/mla.h"
#include "backend/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxSplits = 256;  // flash-decoding splits per sequence (default plan)
// Batch-invariant decode (MlaDecodeArgs::batch_invariant): splits of a fixed
// kInvariantSplitBlocks cache blocks (512 keys) at absolute positions, so a
// sequence's partials and their merge depend on its own length only; up to
// kMaxMergeSplits of them (2^20 keys), the merge kernel's shared weights.
constexpr int kInvariantSplitBlocks = 8;
constexpr int kMaxMergeSplits = 2048;

// ---------------------------------------------------------------------------
// Device helpers: cp.async, ldmatrix, mma.sync (sm_80+ instructions that
// Hopper still runs at full rate for these tile sizes).

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a (16x16, row) · b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16x2 register, `lo` in the low half (the lower column of
// an mma fragment pair).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are a
// multiple of 128 bytes: XOR-ing the chunk with row % 8 puts the 8 rows an
// ldmatrix phase reads in 8 different bank groups.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide max/sum for blockDim.x a multiple of 32 (≤ 1024); every thread
// gets the result. `red` holds 32 floats; the trailing barrier lets the next
// call reuse it.
__device__ float BlockMax(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpMax(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : -INFINITY;
  v = WarpMax(v);
  __syncthreads();
  return v;
}

__device__ float BlockSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : 0.f;
  v = WarpSum(v);
  __syncthreads();
  return v;
}

// Tokens of sequence b the kernels may read: seq_lens clamped to the host's
// bound (which check-time guarantees fits the block table).
__device__ __forceinline__ int ClampedSeqLen(const int32_t* seq_lens, int b, int max_seq_len) {
  return min(max(seq_lens[b], 0), max_seq_len);
}

// Rows query b attends to: its selected count (sparse) or its sequence length.
__device__ __forceinline__ int DecodeLength(const int32_t* seq_lens, const int32_t* sel_counts,
                                            int b, int max_seq_len) {
  return ClampedSeqLen(sel_counts != nullptr ? sel_counts : seq_lens, b, max_seq_len);
}

// Cache row of position `pos` through one sequence's block table, or null
// when the position is outside it (sparse rows are data, so they are checked).
__device__ __forceinline__ const bf16* SparseCacheRow(const bf16* pool, const int32_t* table,
                                                      int64_t max_blocks, int pos, int cd) {
  if (pos < 0 || pos / kKvBlockTokens >= max_blocks) return nullptr;
  const int64_t blk = table[pos / kKvBlockTokens];
  if (blk < 0) return nullptr;
  return pool + (blk * kKvBlockTokens + pos % kKvBlockTokens) * cd;
}

constexpr int kSimpleThreads = 128;

// ---------------------------------------------------------------------------
// Host side.

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

Status Invalid(const char* field, const char* why) {
  return absl::InvalidArgumentError(absl::StrCat("MLA: ", field, " ", why));
}

Status CheckShape(const MlaShape& s, bool need_heads) {
  if (need_heads && s.num_heads < 1) return Invalid("shape.num_heads", "must be >= 1");
  if (s.kv_rank < 1) return Invalid("shape.kv_rank", "must be >= 1");
  if (s.rope_dim < 0) return Invalid("shape.rope_dim", "must be >= 0");
  if (s.nope_dim < 0) return Invalid("shape.nope_dim", "must be >= 0");
  if (!(s.scale >= 0.f) || !std::isfinite(s.scale)) {
    return Invalid("shape.scale", "must be finite and >= 0 (0: (dn + dr)^-1/2)");
  }
  if (s.scale == 0.f && s.nope_dim + s.rope_dim < 1) {
    return Invalid("shape.scale", "is 0 but nope_dim + rope_dim is 0");
  }
  if (s.num_heads > (1 << 16) || s.cache_dim() > (1 << 20) || s.nope_dim > (1 << 20)) {
    return Invalid("shape", "dimensions are implausibly large");
  }
  return OkStatus();
}

float ScaleLog2(const MlaShape& s) {
  const float scale =
      s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.nope_dim + s.rope_dim));
  return scale * kLog2e;
}

Status CheckCache(const MlaCache& c) {
  if (c.pool == nullptr) return Invalid("cache.pool", "is null");
  if (c.block_table == nullptr) return Invalid("cache.block_table", "is null");
  if (c.max_blocks < 1) return Invalid("cache.max_blocks", "must be >= 1");
  return OkStatus();
}

StatusOr<int> CurrentDeviceAttribute(cudaDeviceAttr attr, const char* what) {
  int dev = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  int value = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&value, attr, dev);
  if (err != cudaSuccess) return CudaError(err, what);
  return value;
}

template <typename Kernel>
Status AllowDynamicSmem(Kernel kernel, int bytes, const char* name) {
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return CudaError(err, name);
  return OkStatus();
}

// Whether the device lets a block use `bytes` of dynamic shared memory.
bool SmemFits(int bytes) {
  StatusOr<int> optin = CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                               "max shared memory per block");
  return optin.ok() && *optin >= bytes;
}

}  // namespace

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_MLA_COMMON_CUH_
