// Token selection on the GPU from fp32 logits [B, V]: greedy argmax (ties to
// the lower id, as the CPU sampler) and temperature / top-k / top-p sampling
// with a per-row seed and step counter (Philox), so the decode step, sampling
// included, can be captured in a CUDA graph. Penalties are applied by the
// caller before (PenalizeLogits).
#ifndef STRATA_BACKEND_CUDA_SAMPLING_H_
#define STRATA_BACKEND_CUDA_SAMPLING_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

struct GpuSamplingRow {
  float temperature = 0.f;  // 0: greedy
  int32_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  uint64_t seed = 0;
  uint64_t step = 0;  // advanced by the caller each token
};

// Scratch for `batch` rows: the first pass's per-chunk results (64 × 16
// bytes per row) and a 4-byte arrival count per row, 16-byte aligned. It
// must be zeroed before its first use (cudaMemset) and passed with the same
// workspace_bytes to every call (the counts' place depends on the size, not
// on the call's batch); every call leaves the counts at zero again, so it
// can serve any number of calls of any batch it fits, and graph replays, one
// at a time. With it, a greedy row's token is written by the last of the
// row's first-pass CTAs, ahead of the per-row kernel. A null or
// smaller workspace is allowed: the first pass then runs inside the per-row
// kernel (slower at large vocabularies, the same tokens).
size_t SampleWorkspaceBytes(int64_t batch, int64_t vocab);
// rows: device [B]; tokens: [B] int32 out, device memory or pinned host
// memory (written by the kernel directly; read it after the stream).
// vocab ≤ 2^23. Rows are read on the device, so they are not validated:
// T ≤ 0 or NaN means greedy, top_k ≤ 0 off, top_p ≥ 1 or NaN off (≤ 0 keeps
// the top token). Draws are deterministic for a given (seed, step) but not
// bit-equal to the CPU Sampler's (same distribution).
Status SampleTokens(const float* logits, int64_t batch, int64_t vocab, const GpuSamplingRow* rows,
                    int32_t* tokens, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_SAMPLING_H_
