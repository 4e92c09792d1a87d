// Programmatic dependent launch (PDL, sm_90): a kernel launched with
// LaunchPdl may be scheduled while its predecessor on the stream is still
// running. It must call PdlWait() before it reads anything the predecessor
// wrote or writes anything the predecessor reads; before that point it may
// only touch data that is constant for the whole step (weights), which is
// what PrefetchL2 is for. At batch 1 a decode step is ~400 short kernels:
// without PDL each boundary costs a launch gap plus the tail of the previous
// grid; with it the next grid is already resident, its weights on their way
// into L2, and it starts the moment the previous one retires.
//
// Every kernel of this backend calls PdlWait() then PdlLaunchDependents()
// before touching activations, whether or not it was launched with PDL (the
// instructions are no-ops without a programmatic dependency). Triggering only
// after the wait bounds the look-ahead to one kernel, so a waiting grid never
// holds SM slots its predecessor still needs.
#ifndef STRATA_BACKEND_CUDA_PDL_CUH_
#define STRATA_BACKEND_CUDA_PDL_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel of the stream start launching; its PdlWait() still
// blocks until this whole grid has finished and its writes are visible.
__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asks the memory system to bring [p, p + bytes) into L2 without waiting for
// it. p must be 16-byte aligned; bytes is rounded down to a multiple of 16.
// Only for data no kernel of the step writes (weights).
__device__ __forceinline__ void PrefetchL2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bytes &= ~15u;
  if (bytes != 0) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
  }
#endif
}

// Launches `kernel` on `stream` with PDL when PdlEnabled() and the stream is
// an explicit one (the legacy default stream's implicit synchronisation is
// left alone), in thread-block clusters of `cluster_x` CTAs along x when it
// is above 1. Returns the launch error, if any.
template <typename... Params, typename... Args>
cudaError_t LaunchPdlCluster(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster_x,
                             size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (PdlEnabled() && stream != nullptr && stream != cudaStreamLegacy &&
      stream != cudaStreamPerThread) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = n > 0 ? attr : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

// LaunchPdlCluster without clusters.
template <typename... Params, typename... Args>
cudaError_t LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  return LaunchPdlCluster(kernel, grid, block, 1, smem, stream, std::forward<Args>(args)...);
}

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_PDL_CUH_
