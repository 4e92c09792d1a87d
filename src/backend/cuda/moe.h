// Sigmoid-routed mixture of experts (model-spec §2.5) on the GPU, with no
// host loop over experts: routing, the token→expert permutation, the grouped
// expert products and the weighted combine all run on the device from device
// offsets. Expert weights are stacked at load: w13 [E, 2I, D] (per expert the
// gate rows w1 then the up rows w3) and w2 [E, D, I], bf16 or FP8 e4m3 with
// block scales (MoeFp8Experts). The shared expert
// is a dense SwiGLU the executor runs itself, except on the one-token path,
// which can fold it in (MoeArgs::shared_w13). backend/cpu/moe.h is the
// reference (RouteSigmoidTopK for the routing rule, ties to the lower index).
#ifndef STRATA_BACKEND_CUDA_MOE_H_
#define STRATA_BACKEND_CUDA_MOE_H_

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"

namespace strata::cuda {

struct MoeShape {
  int64_t num_experts = 0;   // E
  int64_t hidden = 0;        // D
  int64_t inter = 0;         // I
  int64_t top_k = 0;
  bool renormalize = true;
  float routed_scaling = 1.f;
  // Group-limited selection (DeepSeek-V3 "noaux_tc", cpu::RouteSigmoidGroupedTopK):
  // num_groups equal groups of experts, only the topk_groups best (sum of a
  // group's two largest biased scores) eligible. num_groups <= 1: no limit.
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  // Softmax routing (Qwen3-Next, cpu::RouteSoftmaxTopK): top-k of the logits,
  // weights softmax(logits) over all experts (renormalised over the picks with
  // `renormalize`). No score_bias and no groups with it.
  bool softmax = false;
  // The experts come as FP8 (MoeArgs::fp8): the workspace then holds the bf16
  // scratch the prefill path dequantises experts into.
  bool fp8_experts = false;
};

// FP8 block-scaled experts (DeepSeek-V3 checkpoints), in the bf16 layout:
// element (r, c) of expert e's w13 [2I, D] is
// w13[e, r, c] · w13_scale[e, r / block_rows, c / block_cols], with
// w13_scale [E, 2I / block_rows, ceil(D / block_cols)]; likewise w2 [E, D, I]
// with w2_scale [E, ceil(D / block_rows), ceil(I / block_cols)]. I must be a
// multiple of block_rows so gate and up rows never share a scale row (the
// loader's 8-row groups, replicated from the checkpoint's 128-row blocks,
// keep any checkpoint block edge). Each weight is rounded to bf16 exactly as
// host dequantisation does (fp32 code · scale, then bf16), so the result is
// the bf16 path's on the dequantised weights.
struct MoeFp8Experts {
  const uint8_t* w13 = nullptr;
  const float* w13_scale = nullptr;
  const uint8_t* w2 = nullptr;
  const float* w2_scale = nullptr;
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

// Which tensor-core grouped GEMM a prefill-sized bf16 call takes: CUTLASS's
// Hopper ptr-array grouped GEMM (TMA + wgmma; only in builds with CUTLASS,
// see moe_grouped_gemm_sm90.h) or the mma.sync kernels. kAuto: the tuning
// entry moe.gemm (cutlass|mma|auto), and auto takes CUTLASS from
// moe.cutlass_min_rows (default 4096) rows n·k on. FP8 experts and builds
// without CUTLASS always take mma.sync.
enum class MoeGemmImpl { kAuto, kMma, kCutlass };

struct MoeArgs {
  MoeShape shape;
  int64_t num_tokens = 0;              // n
  const bf16* x = nullptr;             // [n, D]
  // [n, E] fp32: the router GEMM's output, or with router_w set where
  // MoeForward writes it.
  float* router_logits = nullptr;
  const float* score_bias = nullptr;   // [E] selection-only bias; may be null
  const bf16* w13 = nullptr;           // bf16 experts, or both null with fp8.w13
  const bf16* w2 = nullptr;
  MoeFp8Experts fp8;                   // used when fp8.w13 is set (shape.fp8_experts)
  float* y = nullptr;                  // [n, D] fp32, overwritten with Σ_k w_k E_k(x)
  // y += the result instead: y[t, d] + r[t, d], the add AddRmsNorm makes with
  // y as its h and the result as its delta, so a residual stream passed as y
  // gets the same bits as with the result added by the next norm (and that
  // norm reads one array less). y must then not be read or written by other
  // work concurrently with the call.
  bool accumulate = false;
  MoeGemmImpl gemm_impl = MoeGemmImpl::kAuto;
  // Batch-invariant mode (issue 6): every token's y row is bit-identical for
  // any num_tokens and whatever other tokens share the call. Routing runs in
  // its own kernel for every n, and the expert products take one kernel for
  // every n: the mma.sync grouped GEMM (fixed 64×128×32 tiles, the whole k
  // loop in one CTA, never CUTLASS or the decode GEMV) when D % 128 == 0,
  // I % 64 == 0 and x, w13, w2 are 16-byte aligned (FP8: x 16-byte, codes
  // 8-byte aligned, D, I, block_cols multiples of 8), else the grouped GEMV
  // (whose per-row sums do not depend on how many rows share an expert).
  // Slower at decode sizes than the default (the GEMM streams each active
  // expert in 64-row tiles); default off. Size the workspace with
  // MoeWorkspaceBytes(shape, max_tokens, /*batch_invariant=*/true).
  bool batch_invariant = false;
  // The shared expert folded into the one-token path (a batch-1 decode
  // step), when MoeFoldsSharedExpert(args) holds; both null otherwise.
  // shared_w13 [2I, D] (gate rows, then up rows) and shared_w2 [D, I], bf16,
  // 16-byte aligned, with the routed experts' I. y then holds
  // Σ_k w_k E_k(x) + S(x): the shared expert's CTAs run in the routed
  // kernels and load their weights while routing is still in progress (no
  // second stream, no separate SwiGLU kernels). Its products are summed as
  // the routed experts' are (fp32 on CUDA cores), not as the dense GEMV the
  // executor would run, so the result differs from the unfolded call's in
  // the last bits. The shared expert's CTAs also copy x before they wait
  // for routing, so x must be complete by the time the kernel that wrote
  // router_logits finishes (it is whenever that kernel reads x, as a router
  // GEMM does, on this stream). moe.fold_shared=0 turns the fold off.
  const bf16* shared_w13 = nullptr;
  const bf16* shared_w2 = nullptr;
  // The router: when router_w ([E, D] bf16, 16-byte aligned) is set,
  // MoeForward computes router_logits = x · router_wᵀ itself with Gemm on
  // `blas` (the same bits as the caller's Gemm would be) before routing. On
  // the one-token path (a batch-1 decode step) the routing then runs inside
  // the router's kernel when GemvRouteFuses(E, D) (gemm.h, GemvRoute): one
  // kernel, one launch and one PDL wait less per layer. `blas` must be the
  // context the stream's other products use (Gemm's ordering rule). The
  // fused kernel reads score_bias before its PDL wait (it is a weight).
  const bf16* router_w = nullptr;
  BlasContext* blas = nullptr;
};

// Whether MoeForward takes the one-token path with args.shared_w13 and
// args.shared_w2 folded in: one token, bf16 experts, not batch-invariant,
// sigmoid routing without groups, aligned operands, rows (D) of 1,032 to
// 2,304 elements, I ≤ 2,048, and the shared expert's pointers set and
// aligned.
// MoeForward returns InvalidArgument when they are set and this is false.
bool MoeFoldsSharedExpert(const MoeArgs& args);

// Workspace for `max_tokens` tokens: routing results, per-expert counts and
// offsets, the permuted activations and the intermediate [n·k, I]. It must
// be 256-byte aligned (cudaMalloc is) and may serve any n ≤ max_tokens.
// Limits (InvalidArgument beyond): num_experts ≤ 1024, top_k ≤ min(32, E);
// with groups: num_groups ≤ 32 dividing E, ≥ 2 experts per group,
// 1 ≤ topk_groups ≤ num_groups and top_k ≤ topk_groups · E / num_groups.
// Decode (n·k ≤ 512) streams each active expert once on CUDA cores; more
// rows take the tensor-core grouped GEMM when D % 128 == 0, I % 64 == 0 and
// x, w13, w2 are 16-byte aligned. No host sync: the call can be captured.
// FP8 experts: decode converts the codes in registers (8-byte loads when D
// and I are multiples of 8); the grouped GEMM reads bf16, so prefill
// dequantises the active experts of a chunk of experts into the workspace's
// scratch (at most kMoeFp8ScratchBytes, at least one expert) and runs the
// GEMMs chunk by chunk before one combine.
constexpr int64_t kMoeFp8ScratchBytes = int64_t{512} << 20;
// batch_invariant: the calls set MoeArgs::batch_invariant (FP8 experts then
// need the dequantisation scratch at every n; bf16 experts: the same size).
size_t MoeWorkspaceBytes(const MoeShape& shape, int64_t max_tokens, bool batch_invariant = false);
Status MoeForward(const MoeArgs& args, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream);

// Routing alone (exposed for tests and for the scheduler's statistics):
// idx [n, k] int32 and weight [n, k] fp32 on the device, bit-compatible with
// cpu::RouteSigmoidTopK (picks in descending order).
Status MoeRoute(const MoeShape& shape, const float* router_logits, const float* score_bias,
                int64_t num_tokens, int32_t* idx, float* weight, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_MOE_H_
