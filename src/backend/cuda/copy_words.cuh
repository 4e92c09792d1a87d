// A decode step's input words, copied from pinned host memory by the step's
// first kernel (UploadWords, EmbedRmsNormStart): every read crosses PCIe
// (~1–2 µs), so each thread issues all its reads of a pass (up to
// kCopyWordsPerThread words from each span) before its first store, and the
// round trips overlap instead of queueing behind stores the compiler may not
// reorder.
#ifndef STRATA_BACKEND_CUDA_COPY_WORDS_CUH_
#define STRATA_BACKEND_CUDA_COPY_WORDS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

constexpr int kCopyWordsPerThread = 8;

// src0[0, n0) → dst0 and src1[0, n1) → dst1 by the calling CTA's threads.
__device__ __forceinline__ void CopyWordSpans(const uint32_t* src0, uint32_t* dst0, int64_t n0,
                                              const uint32_t* src1, uint32_t* dst1, int64_t n1) {
  const int64_t n = n0 > n1 ? n0 : n1;
  const int64_t pass = static_cast<int64_t>(blockDim.x) * kCopyWordsPerThread;
  for (int64_t base = threadIdx.x; base < n; base += pass) {
    uint32_t a[kCopyWordsPerThread], b[kCopyWordsPerThread];
#pragma unroll
    for (int j = 0; j < kCopyWordsPerThread; ++j) {
      const int64_t i = base + static_cast<int64_t>(j) * blockDim.x;
      if (i < n0) a[j] = src0[i];
      if (i < n1) b[j] = src1[i];
    }
#pragma unroll
    for (int j = 0; j < kCopyWordsPerThread; ++j) {
      const int64_t i = base + static_cast<int64_t>(j) * blockDim.x;
      if (i < n0) dst0[i] = a[j];
      if (i < n1) dst1[i] = b[j];
    }
  }
}

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_COPY_WORDS_CUH_
