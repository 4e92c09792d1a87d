// The feed-forward block of a layer on the GPU, for every architecture: a
// dense SwiGLU MLP, or routed experts (MoeForward) with an optional shared
// expert, plain (Kimi, DeepSeek) or scaled by a sigmoid gate (Qwen3-Next).
// Reads xn (the post-attention norm's output) and adds into the residual
// stream h; the routed sum goes to `delta`, which the next AddRmsNorm adds,
// unless the MoE call adds it into h itself.
//
// The decode tunings live here, so every architecture takes them:
//  * the router runs inside MoeForward (MoeArgs::router_w), which at one
//    token fuses routing into the router's kernel where the routing allows;
//  * one token folds the shared expert into the routed kernels
//    (MoeFoldsSharedExpert; moe.fold_shared) and lets the down kernel add
//    the sum into h (moe.into_h), after which the post-attention norm may
//    trigger early (PostNormMayTriggerEarly);
//  * otherwise, at decode, the shared expert runs on the side stream beside
//    routing and the routed experts (CudaOps::Branching).
// Each kernel computes what it computes without the tuning, so results are
// those of the plain order except the fold, which sums the shared expert as
// the routed experts are summed (moe.h).
#ifndef STRATA_EXEC_CUDA_FFN_CUDA_H_
#define STRATA_EXEC_CUDA_FFN_CUDA_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/moe.h"
#include "exec/arch_spec.h"
#include "exec/cuda/carver.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/dummy_fill.h"
#include "exec/cuda/tensor_sink.h"
#include "exec/cuda/weight_carver.h"

namespace strata {
namespace cuda_exec {

// One layer's weights (device pointers into the executor's weight arena).
struct FfnWeights {
  bool is_moe = false;
  Mat gate_up;                  // dense MLP or shared expert: [2I, D], gate rows then up rows
  Mat down;                     // [D, I]
  Mat router;                   // [E, D]
  float* score_bias = nullptr;  // [E] selection-only bias, or null
  Mat w13;                      // routed experts [E·2I, D]
  Mat w2;                       // [E·D, I]
  // Qwen3-Next: the shared expert's output is scaled by σ(xn·w_gᵀ), w_g
  // [shared_gate_rows, D] with only row 0 real (rows padded for the GEMV).
  bf16* shared_gate = nullptr;
};

// Rows the gate of a gated shared expert is padded to (only row 0 is real),
// so that its product has an aligned row.
constexpr int64_t kSharedGateRows = 8;

// `layer`'s feed-forward weights, carved from `c` in a fixed order (dense:
// gate|up, down; MoE: router, selection bias, experts' gate|up and down, the
// shared expert's gate|up and down, its gate). The matrices stay FP8 where
// `c` says so; the routed experts only when all 3·E of the layer's are and
// every expert's gate, up and down rows start on a kFp8ScaleRows group.
void CarveFfnWeights(const exec::LayerSpec& layer, int64_t D, WeightCarver& c, FfnWeights& w);

// `layer`'s feed-forward weights (carved as `w` points) from the checkpoint
// names its LayerSpec gives: a dense MLP's gate, up and down; a router, its
// selection bias, the experts' stacked gate|up and down, the shared expert
// and its gate.
Status UploadFfnWeights(const exec::LayerSpec& layer, int64_t D, const FfnWeights& w,
                        const TensorSink& sink);
// Random bf16 weights for the same tensors (the bias in ±0.01), drawn from
// `fill` in a fixed order; `w` holds bf16 matrices only.
Status FillDummyFfnWeights(const exec::LayerSpec& layer, int64_t D, const FfnWeights& w,
                           DummyFill& fill);

struct FfnDims {
  int64_t D = 0;
  int64_t dense_inter = 0;   // dense layers' I
  int64_t shared_inter = 0;  // the shared expert's I (0: none)
  int64_t shared_gate_rows = 0;
  cuda::MoeShape moe;  // of the routed experts (num_experts 0: no MoE layer)
};

// The routed experts' shape for `moe` at model width D.
cuda::MoeShape MoeShapeOf(const exec::MoeSpec& moe, int64_t D);
// The dimensions of `spec`'s feed-forward blocks (the dense width is the
// widest dense layer's); Unimplemented naming the layer when two MoE layers
// differ in shape, which one CudaFfn does not run, or for more expert groups
// than the router takes.
StatusOr<FfnDims> FfnDimsOf(const exec::ArchSpec& spec);
// Columns of the gate|up scratch: twice the widest dense or shared expert.
inline int64_t GateUpCols(const FfnDims& d) { return 2 * std::max(d.dense_inter, d.shared_inter); }

// Activations and workspace (the executor's scratch).
struct FfnBuffers {
  const bf16* xn = nullptr;        // [rows, D] input
  float* h = nullptr;              // [rows, D] residual stream
  float* delta = nullptr;          // [rows, D] routed-expert output
  bf16* gu = nullptr;              // [rows, 2·max I]
  bf16* act = nullptr;             // [rows, max I]
  float* router_logits = nullptr;  // [rows, E]
  float* shared = nullptr;         // [rows, D] gated shared expert's output
  float* shared_gate = nullptr;    // [rows, shared_gate_rows]
  void* moe_ws = nullptr;
  size_t moe_ws_bytes = 0;
};

class CudaFfn {
 public:
  CudaFfn() = default;
  CudaFfn(const FfnDims& dims, const FfnBuffers& buf, bool batch_invariant)
      : d_(dims), b_(buf), invariant_(batch_invariant) {}

  // The MoE call of an MoE layer for n rows (at decode, with the shared
  // expert folded in where allowed); unused for a dense layer.
  cuda::MoeArgs MoeCall(const CudaOps& ops, const FfnWeights& w, int64_t n, bool decode) const;
  // Whether the post-attention norm before `moe` may let the router launch
  // early: only with the shared expert folded in, since otherwise an early
  // router pulls routing and the routed gate|up ahead of the shared
  // expert's SiLU on the side stream, which then waits for an SM slot behind
  // the routed CTAs.
  static bool PostNormMayTriggerEarly(const cuda::MoeArgs& moe) {
    return moe.shared_w13 != nullptr;
  }
  // Enqueues the block (graph-safe). *pending: what the next norm must add
  // into h (the routed sum), or null.
  Status Enqueue(const CudaOps& ops, const FfnWeights& w, const cuda::MoeArgs& moe, int64_t n,
                 bool decode, const float** pending) const;

 private:
  // h += down(SiLU(gate)·up)(xn), or with `out`/beta 0 into out.
  Status SwiGlu(const CudaOps& ops, cudaStream_t on, const FfnWeights& w, int64_t inter, int64_t n,
                float* out, float beta) const;
  // The shared expert (with its gate) into h on `on`.
  Status Shared(const CudaOps& ops, cudaStream_t on, const FfnWeights& w, int64_t n) const;

  FfnDims d_;
  FfnBuffers b_;
  bool invariant_ = false;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_FFN_CUDA_H_
