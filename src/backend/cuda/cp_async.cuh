// Asynchronous global → shared copies (cp.async, sm_80+), the helpers the
// GEMV's staged round (gemm.cu), the MoE grouped GEMM (moe.cu) and the MLA
// kernels (mla_common.cuh) share: 16 bytes per call, bypassing L1 (.cg).
#ifndef STRATA_BACKEND_CUDA_CP_ASYNC_CUH_
#define STRATA_BACKEND_CUDA_CP_ASYNC_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared at `dst`; with valid == false the destination is
// zero-filled and nothing is read (src-size 0), so `src` only has to be a
// valid address, and tails of partial tiles never feed garbage (possibly
// NaN) into the tensor cores.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  CpAsync16(SmemAddr(dst), src, valid);
}

// 4 bytes global → shared, through L1 (.ca: the only kind for 4 bytes);
// zero-filled with valid == false, as CpAsync16. Holds no register while in
// flight, unlike a load that a later store consumes.
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are in
// flight; its own completed copies are then visible to it.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() { CpAsyncWait<0>(); }

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_CP_ASYNC_CUH_
