#include "exec/cuda/ffn_cuda.h"

#include "backend/cuda/elementwise.h"

namespace strata {
namespace cuda_exec {

using cuda::ActType;

cuda::MoeArgs CudaFfn::MoeCall(const CudaOps& ops, const FfnWeights& w, int64_t n,
                               bool decode) const {
  cuda::MoeArgs a;
  a.shape = d_.moe;
  a.num_tokens = n;
  a.x = b_.xn;
  a.router_logits = b_.router_logits;
  a.score_bias = w.score_bias;
  if (w.w13.is_fp8()) {
    a.shape.fp8_experts = true;
    a.fp8.w13 = w.w13.fp8;
    a.fp8.w13_scale = w.w13.scale;
    a.fp8.w2 = w.w2.fp8;
    a.fp8.w2_scale = w.w2.scale;
    a.fp8.block_rows = kFp8ScaleRows;
    a.fp8.block_cols = w.w13.block_cols;
  } else {
    a.w13 = w.w13.bf;
    a.w2 = w.w2.bf;
  }
  a.y = b_.delta;
  a.batch_invariant = invariant_;
  // An FP8 router stays the caller's product (Enqueue).
  if (!w.router.is_fp8()) {
    a.router_w = w.router.bf;
    a.blas = ops.blas;
  }
  const bool shared_bf16 = w.gate_up.bf != nullptr && w.down.bf != nullptr;
  if (decode && shared_bf16 && w.shared_gate == nullptr && d_.shared_inter == d_.moe.inter) {
    a.shared_w13 = w.gate_up.bf;
    a.shared_w2 = w.down.bf;
    if (!cuda::MoeFoldsSharedExpert(a)) a.shared_w13 = a.shared_w2 = nullptr;
  }
  // The folded call adds its sum into h itself (MoeArgs::accumulate);
  // moe.into_h=0 leaves it to the next norm.
  if (a.shared_w13 != nullptr && ops.On(tuning::Key::kMoeIntoH)) {
    a.y = b_.h;
    a.accumulate = true;
  }
  return a;
}

Status CudaFfn::SwiGlu(const CudaOps& ops, cudaStream_t on, const FfnWeights& w, int64_t inter,
                       int64_t n, float* out, float beta) const {
  STRATA_RETURN_IF_ERROR(ops.Mm(on, b_.xn, ActType::kBf16, d_.D, n, w.gate_up, 2 * inter, d_.D,
                                b_.gu, ActType::kBf16, 2 * inter, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::SiluMul(b_.gu, ActType::kBf16, n, inter, b_.act, on));
  return ops.Mm(on, b_.act, ActType::kBf16, inter, n, w.down, d_.D, inter, out, ActType::kF32, d_.D,
                beta);
}

Status CudaFfn::Shared(const CudaOps& ops, cudaStream_t on, const FfnWeights& w, int64_t n) const {
  if (w.shared_gate == nullptr) return SwiGlu(ops, on, w, d_.shared_inter, n, b_.h, 1.f);
  STRATA_RETURN_IF_ERROR(SwiGlu(ops, on, w, d_.shared_inter, n, b_.shared, 0.f));
  const int64_t rows = d_.shared_gate_rows;
  STRATA_RETURN_IF_ERROR(ops.Mm(on, b_.xn, ActType::kBf16, d_.D, n, w.shared_gate, rows, d_.D,
                                b_.shared_gate, ActType::kF32, rows, 0.f));
  return cuda::AddSigmoidScaledRows(b_.h, b_.shared, b_.shared_gate, rows, n, d_.D, on);
}

Status CudaFfn::Enqueue(const CudaOps& ops, const FfnWeights& w, const cuda::MoeArgs& moe,
                        int64_t n, bool decode, const float** pending) const {
  *pending = nullptr;
  if (!w.is_moe) return SwiGlu(ops, ops.stream, w, d_.dense_inter, n, b_.h, 1.f);
  const bool folded = moe.shared_w13 != nullptr;
  const bool shared = d_.shared_inter > 0 && !folded;
  // Decode branches: the shared expert (it adds into h; the routed experts
  // go to delta) streams its weights on the side stream while routing is
  // latency-bound.
  const bool branch = shared && decode && ops.Branching(n);
  if (branch) {
    STRATA_RETURN_IF_ERROR(ops.Fork());
    STRATA_RETURN_IF_ERROR(Shared(ops, ops.side, w, n));
  }
  if (moe.router_w == nullptr) {
    STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, b_.xn, ActType::kBf16, d_.D, n, w.router,
                                  d_.moe.num_experts, d_.D, b_.router_logits, ActType::kF32,
                                  d_.moe.num_experts, 0.f));
  }
  STRATA_RETURN_IF_ERROR(cuda::MoeForward(moe, b_.moe_ws, b_.moe_ws_bytes, ops.stream));
  if (branch) {
    STRATA_RETURN_IF_ERROR(ops.Join());
  } else if (shared) {
    STRATA_RETURN_IF_ERROR(Shared(ops, ops.stream, w, n));
  }
  // The routed sum joins the residual in the next AddRmsNorm (one pass
  // less), or, with the shared expert folded in, in the MoE call itself:
  // nothing else touches h during that call, and the next norm then reads
  // one array.
  *pending = moe.accumulate ? nullptr : b_.delta;
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
