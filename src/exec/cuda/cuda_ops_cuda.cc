#include "backend/cuda/fp8_gemm.h"
#include "exec/cuda/cuda_ops.h"

namespace strata {
namespace cuda_exec {

using cuda::ActType;

Status CudaOps::Mm(cudaStream_t on, const void* x, ActType x_type, int64_t ldx, int64_t m,
                   const bf16* w, int64_t n, int64_t k, void* y, ActType y_type, int64_t ldy,
                   float beta, float alpha) const {
  cuda::GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = x;
  a.x_type = x_type;
  a.ldx = ldx;
  a.w = w;
  a.ldw = k;
  a.y = y;
  a.y_type = y_type;
  a.ldy = ldy;
  a.alpha = alpha;
  a.beta = beta;
  return cuda::Gemm(*blas, a, on);
}

Status CudaOps::Mm(cudaStream_t on, const void* x, ActType x_type, int64_t ldx, int64_t m,
                   const Mat& w, int64_t n, int64_t k, void* y, ActType y_type, int64_t ldy,
                   float beta, float alpha) const {
  if (!w.is_fp8()) return Mm(on, x, x_type, ldx, m, w.bf, n, k, y, y_type, ldy, beta, alpha);
  if (x_type != ActType::kBf16) {
    return absl::InternalError("FP8 weights take bf16 activations only");
  }
  cuda::Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = static_cast<const bf16*>(x);
  a.ldx = ldx;
  a.w.w = w.fp8;
  a.w.ldw = k;
  a.w.scale = w.scale;
  a.w.ld_scale = (k + w.block_cols - 1) / w.block_cols;
  a.w.block_rows = kFp8ScaleRows;
  a.w.block_cols = w.block_cols;
  a.y = y;
  a.y_type = y_type;
  a.ldy = ldy;
  a.alpha = alpha;
  a.beta = beta;
  a.tile = fp8_tile;
  a.tile_elems = fp8_tile_elems;
  return cuda::Fp8Gemm(*blas, a, on);
}

bool CudaOps::Branching(int64_t n) const {
  return side != nullptr && On(tuning::Key::kStepBranches) && n <= cuda::kGemvMaxRows;
}

Status CudaOps::Fork() const {
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_ev, stream));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, fork_ev, 0));
  return OkStatus();
}

Status CudaOps::Join() const {
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(join_ev, side));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, join_ev, 0));
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
