// Dense matrix products on bf16 weights: y = alpha · x · Wᵀ (+ beta · y).
// Large M goes to cuBLASLt (bf16 tensor cores, fp32 accumulation); small M
// (decode: one row per sequence) goes to a bandwidth-bound GEMV-style kernel
// that streams W once at close to HBM speed.
//
// Batch-invariant mode (BlasContext::set_batch_invariant): every row of y is
// computed with the same arithmetic, bit for bit, whatever m is and wherever
// the row sits in x (gemm.cu's file comment defines it), so that a sequence's
// greedy output does not depend on what it is batched with or how its prompt
// was cut into prefill calls. Large M then takes a tiled tensor-core kernel
// instead of cuBLASLt (about half its speed).
#ifndef STRATA_BACKEND_CUDA_GEMM_H_
#define STRATA_BACKEND_CUDA_GEMM_H_

#include <memory>

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// Owns the cuBLASLt handle and its workspace, allocated once at creation,
// and the plans. One per stream; not thread-safe: calls through one context
// must be ordered (one stream, or streams joined by events), since
// consecutive cuBLASLt calls reuse the same workspace.
class BlasContext {
 public:
  static StatusOr<std::unique_ptr<BlasContext>> Create();
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  void* handle() const { return handle_; }  // cublasLtHandle_t
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // Off by default (cuBLASLt is faster at large M). On: Gemm never uses
  // cuBLASLt, and StridedBatchedGemm rejects transpose_w; see the file
  // comment. Read when a call enqueues (a captured graph keeps its kernels).
  void set_batch_invariant(bool on) { batch_invariant_ = on; }
  bool batch_invariant() const { return batch_invariant_; }

  // Plans kept per shape so a repeated call does no planning work: cuBLASLt
  // descriptors and heuristic results, and the device facts that size the
  // streaming kernel's grid (and fix the canonical k split). Defined and
  // used only in gemm.cu.
  struct Plans;
  Plans* plans() const { return plans_.get(); }

 private:
  BlasContext();
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool batch_invariant_ = false;
  std::unique_ptr<Plans> plans_;
};

struct GemmArgs {
  int64_t m = 0;                       // rows of x and y
  int64_t n = 0;                       // rows of W = columns of y
  int64_t k = 0;                       // columns of x and W
  const void* x = nullptr;             // [m, k] activations, stride ldx elements
  ActType x_type = ActType::kBf16;     // bf16 or fp32 (fp32 only for m <= kGemvMaxRows)
  int64_t ldx = 0;                     // 0: k
  const bf16* w = nullptr;             // [n, k] row-major weight (checkpoint layout)
  int64_t ldw = 0;                     // 0: k
  void* y = nullptr;                   // [m, n], stride ldy elements
  ActType y_type = ActType::kBf16;
  int64_t ldy = 0;                     // 0: n
  float alpha = 1.f;
  float beta = 0.f;                    // beta != 0 accumulates into y (fp32 y only)
  // GEMV (m ≤ kGemvMaxRows): the next kernel of the stream may launch before
  // this one's PDL wait instead of after it, so its CTAs take free SM slots
  // and load their weights while this GEMV's predecessor (a short,
  // latency-bound kernel) still runs.
  bool early_trigger = false;
};

// Rows at or below which Gemm takes the streaming kernel.
constexpr int64_t kGemvMaxRows = 16;

Status Gemm(BlasContext& ctx, const GemmArgs& args, cudaStream_t stream);

// The routing GemvRoute computes from the product y (one row of n router
// logits): sigmoid scores, the top_k by score + bias (ties to the lower
// index), weights from the unbiased scores, renormalised and scaled —
// cpu::RouteSigmoidTopK's picks, order and weights, bit for bit (as
// MoeRoute's). Outputs are device memory.
struct GemvRouting {
  // [n] selection-only bias, or null. Read before the kernel's PDL wait:
  // it must not be written by the previous kernel on the stream (a weight).
  const float* bias = nullptr;
  int64_t top_k = 0;  // 1 … min(n, 32)
  bool renormalize = true;
  float routed_scaling = 1.f;
  int32_t* idx = nullptr;   // [top_k] picks, best first
  float* weight = nullptr;  // [top_k]
};

// Whether GemvRoute can run for an [n, k] weight on this GPU: the streaming
// kernel's plan for the shape is one 16-row tile per CTA, and its
// ceil(n / 16) ≤ 16 CTAs fit one thread-block cluster (n ≤ 256).
// STRATA_GEMV_ROUTE=0 makes it false (an A/B switch).
bool GemvRouteFuses(BlasContext& ctx, int64_t n, int64_t k);

// A one-token MoE router in one kernel: y = alpha · x · Wᵀ for one bf16 row
// of x into fp32 y, the bits Gemm gives, then r's routing of y. The GEMV's
// CTAs form one cluster; each also writes its logits into the first CTA's
// shared memory, and that CTA routes once all have arrived, which saves the
// separate route kernel's launch, wait and reload of the logits. Requires
// m = 1, bf16 x, fp32 y, beta 0, early_trigger off (InvalidArgument
// otherwise) and GemvRouteFuses(n, k), 16-byte aligned x and W, k and ldw
// multiples of 8 (FailedPrecondition otherwise, nothing enqueued). Like every
// kernel here it waits (PDL) for the previous kernel on `stream`; the next
// one may launch once the logits are complete, before the routing is.
Status GemvRoute(BlasContext& ctx, const GemmArgs& args, const GemvRouting& r, cudaStream_t stream);

// `count` independent products with fixed strides between them (elements):
// y_i = x_i · W_iᵀ, e.g. per-head absorption in MLA. bf16 in; y_type out.
// Batch-invariant mode: transpose_w is InvalidArgument and count <= 65535.
struct StridedBatchedGemmArgs {
  GemmArgs g;                // shapes and leading dimensions of one product
  int64_t count = 0;
  int64_t stride_x = 0;
  int64_t stride_w = 0;
  int64_t stride_y = 0;
  bool transpose_w = false;  // true: y_i = x_i · W_i (W_i is [k, n]; g.ldw 0 means n)
};
Status StridedBatchedGemm(BlasContext& ctx, const StridedBatchedGemmArgs& args,
                          cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_GEMM_H_
