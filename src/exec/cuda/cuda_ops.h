// What a CUDA layer module enqueues through: the executor's main and side
// streams, its cuBLASLt context, its tuning and the FP8 staging tile. A
// CudaOps is a view (LayerExecutor::Ops() makes one per pass from the
// executor's members); it owns nothing and is used under the executor's Turn,
// never across threads.
#ifndef STRATA_EXEC_CUDA_CUDA_OPS_H_
#define STRATA_EXEC_CUDA_CUDA_OPS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"
#include "base/status.h"
#include "base/tuning.h"

namespace strata {
namespace cuda_exec {

using cuda::bf16;

// Rows of weight that share one row of a Mat's device scale grid.
constexpr int64_t kFp8ScaleRows = 8;

// A weight matrix [rows, cols] the plain GEMMs read: bf16, or FP8 e4m3 codes
// with fp32 scales [ceil(rows / kFp8ScaleRows), ceil(cols / block_cols)].
struct Mat {
  bf16* bf = nullptr;
  uint8_t* fp8 = nullptr;
  float* scale = nullptr;
  int64_t block_cols = 0;
  bool is_fp8() const { return fp8 != nullptr; }
};

struct CudaOps {
  cudaStream_t stream = nullptr;
  // Null until the executor's runtime exists (InitRuntime); see Branching.
  cudaStream_t side = nullptr;
  cudaEvent_t fork_ev = nullptr;
  cudaEvent_t join_ev = nullptr;
  cuda::BlasContext* blas = nullptr;
  const tuning::Config* tuning = nullptr;
  // bf16 scratch an FP8 product of more than kFp8GemvMaxRows rows dequantises
  // its weight into (only executors with FP8 weights set it).
  bf16* fp8_tile = nullptr;
  int64_t fp8_tile_elems = 0;

  bool On(tuning::Key k) const { return tuning->On(k); }

  // y = x·wᵀ (weights [n, k]) on `on` through cuBLASLt / the streaming GEMV
  // (bf16), or Fp8Gemm (FP8: bf16 activations only).
  Status Mm(cudaStream_t on, const void* x, cuda::ActType x_type, int64_t ldx, int64_t m,
            const bf16* w, int64_t n, int64_t k, void* y, cuda::ActType y_type, int64_t ldy,
            float beta, float alpha = 1.f) const;
  Status Mm(cudaStream_t on, const void* x, cuda::ActType x_type, int64_t ldx, int64_t m,
            const Mat& w, int64_t n, int64_t k, void* y, cuda::ActType y_type, int64_t ldy,
            float beta, float alpha = 1.f) const;

  // Branches inside a decode step. A batch-1 step is a chain of ~450 short
  // kernels, many of them latency-bound (a recurrent step, routing, a 1 MB
  // GEMV) while DRAM idles; work that does not depend on them can run beside
  // them on `side`. Fork: side waits for everything enqueued on stream so
  // far; Join: stream waits for everything enqueued on side so far (a
  // captured graph keeps both as edges). Branching(n) is true for decode
  // steps of n ≤ cuda::kGemvMaxRows rows (unless step.branches=0): side then
  // only runs products of that size, i.e. the workspace-free streaming
  // kernels (bf16 and FP8), so cuBLASLt never runs on two streams at once
  // (its calls share the BlasContext's workspace) and the FP8 tile is never
  // shared. Each kernel computes what it did on one stream, so results, and
  // the batch-invariant guarantees, are the same either way.
  bool Branching(int64_t n) const;
  Status Fork() const;
  Status Join() const;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_OPS_H_
