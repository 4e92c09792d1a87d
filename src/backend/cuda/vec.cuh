// Small device helpers shared by the CUDA kernels: 4-wide loads and stores
// that turn bf16 or fp32 into fp32 registers, a streaming 16-byte load for
// weights read exactly once, and warp/block sums. Kept tiny on purpose: a
// kernel file should be readable without chasing helpers.
#ifndef STRATA_BACKEND_CUDA_VEC_CUH_
#define STRATA_BACKEND_CUDA_VEC_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

__host__ __device__ inline bool IsAligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

__host__ __device__ constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// bf16 → fp32 is exact: the 16 bits become the top half of the word.
__device__ __forceinline__ float Bf16BitsToF32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}
__device__ __forceinline__ float2 Bf16x2ToF32(uint32_t pair) {
  // The lower address (lower k) sits in the low half on a little-endian load.
  return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
}
__device__ __forceinline__ uint32_t F32x2ToBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Scalar load/store through fp32 for either element type.
__device__ __forceinline__ float LoadF(const float* p) { return *p; }
__device__ __forceinline__ float LoadF(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void StoreF(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreF(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// Four consecutive elements; p must be aligned to 4 elements (16 bytes for
// fp32, 8 bytes for bf16).
__device__ __forceinline__ float4 LoadF4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 LoadF4(const bf16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = Bf16x2ToF32(u.x);
  const float2 b = Bf16x2ToF32(u.y);
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void StoreF4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void StoreF4(bf16* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(F32x2ToBf16x2(v.x, v.y), F32x2ToBf16x2(v.z, v.w));
}

// 16 bytes of data read exactly once (weights), or zeros when !pred: skips
// L1 so L1 keeps the activations that are reused, and lets L2 fetch 256-byte
// blocks. The data must be read-only for the kernel's lifetime (the .nc path).
// The predicate sits inside the asm (as CUTLASS's guarded loads do) so the
// load is never issued for an out-of-range address however the compiler
// schedules it; the asm is not volatile, so it may batch these loads freely.
__device__ __forceinline__ uint4 LdgStream16(const void* p, bool pred) {
  uint4 v;
  asm("{\n"
      "  .reg .pred q;\n"
      "  setp.ne.b32 q, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @q ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// 16 bytes through the read-only (L1-cached) path, or zeros when !pred: small
// operands that many warps re-read. Guarded like LdgStream16.
__device__ __forceinline__ uint4 Ldg16(const void* p, bool pred) {
  uint4 v;
  asm("{\n"
      "  .reg .pred q;\n"
      "  setp.ne.b32 q, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block, returned to every thread. `scratch` holds one
// float per warp (32 floats is always enough). Contains two __syncthreads, so
// every thread of the block must call it; calling it again with the same
// scratch is safe (the second barrier orders the reads before the next writes).
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = (blockDim.x + 31) >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < num_warps; ++i) total += scratch[i];
  __syncthreads();
  return total;
}

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_VEC_CUH_
