// Kimi Delta Attention on the GPU (model-spec §2.3): the gated delta rule
// with per-channel decay. The recurrent state S [H, dk, dv] is fp32; inputs
// q, k, v are bf16 after the short conv + SiLU; the gate pre-activations are
// fused in: g = −exp(A_log)[h] · softplus(g_raw + dt_bias) and
// β = sigmoid(beta_raw), both in fp32. q and k are L2-normalised inside
// (eps 1e-6 added to the sum of squares) and q is scaled by `scale`
// (0 → 1/sqrt(dk)), exactly as cpu::KdaArgs documents. The CPU backend
// (backend/cpu/kda.h) is the reference.
//
// Gated DeltaNet (Qwen3-Next, model-spec §4.3) runs on the same kernels:
// its decay is one scalar per head (KdaGates::per_head: g_raw [rows, H] and
// dt_bias [H], g = −exp(A_log)[h]·softplus(a + dt_bias[h]) broadcast over the
// dk channels, β = sigmoid(b)), and it may have more value heads than q/k
// heads (KdaShape::num_qk_heads): value head h reads q/k head h / (H / Hqk),
// transformers' repeat_interleave. H is then the value-head count and the
// state is [H, dk, dv]. Defaults keep KDA's behaviour.
#ifndef STRATA_BACKEND_CUDA_KDA_H_
#define STRATA_BACKEND_CUDA_KDA_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

struct KdaGates {
  const void* g_raw = nullptr;       // [rows, H, dk], row stride ld_g (elements)
  ActType g_type = ActType::kF32;
  int64_t ld_g = 0;                  // 0: H·dk
  const void* beta_raw = nullptr;    // [rows, H], row stride ld_beta
  ActType beta_type = ActType::kF32;
  int64_t ld_beta = 0;               // 0: H
  const float* neg_exp_a = nullptr;  // [H]   −exp(A_log)
  const float* dt_bias = nullptr;    // [H·dk]; [H] with per_head
  // GDN: one decay per head. g_raw is then [rows, H] (ld_g 0: H) and dt_bias
  // [H]; the decay is the same for every dk channel of the head.
  bool per_head = false;
};

// q/k/v rows: [rows, H, d] with row stride ld_qkv, so they can point into
// the fused conv output [rows, 3·H·dk] (q at +0, k at +H·dk, v at +2·H·dk).
// ld_qkv = 0 means packed rows: H·dk for q and k, H·dv for v. With
// num_qk_heads = Hqk < H, q and k rows are [rows, Hqk, dk] (packed: Hqk·dk)
// and v rows [rows, H, dv]; GDN's conv output [rows, 2·Hqk·dk + H·dv] is q at
// +0, k at +Hqk·dk, v at +2·Hqk·dk with ld_qkv its width.
struct KdaShape {
  int64_t num_heads = 0;  // H: value heads (= state heads)
  int64_t key_dim = 0;    // dk: any size 1..128 (larger → Unimplemented); 128 is the fast path
  int64_t value_dim = 0;  // dv: same range
  float scale = 0.f;
  int64_t num_qk_heads = 0;  // Hqk: 0 means H; otherwise must divide H (GDN). Last, so
                             // brace-initialised shapes {H, dk, dv, scale} keep meaning KDA.
};

// Prefill of one sequence: T tokens continue from `state` ([H, dk, dv] fp32,
// zeros for a new sequence; updated in place). Chunked (chunk 64) on tensor
// cores. out: [T, H, dv] (out_type). The workspace must be 16-byte aligned
// (unused, and may be null, with `recurrent`).
struct KdaPrefillArgs {
  KdaShape shape;
  int64_t num_tokens = 0;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  int64_t ld_qkv = 0;  // 0: H·dk
  KdaGates gates;
  float* state = nullptr;
  void* out = nullptr;
  ActType out_type = ActType::kBf16;
  // Batch-invariant mode: run the tokens one by one through KdaDecode's token
  // step (same kernel code, same rounding, same variant for the same shape and
  // state alignment) instead of the chunked form, whose 64-token chunks are
  // aligned to each call's first token. The outputs and final state are then
  // bit-identical however [0, T) is split into calls, and prefilling [0, p)
  // then decoding tokens p.. one at a time (alone or in any batch) gives the
  // bits of one prefill of [0, T). Much slower on long prompts (a dependent
  // chain of T steps per 32-column state slice, ~0.3 µs a token per layer at
  // H = 32, dk = dv = 128); off by default.
  bool recurrent = false;
};
size_t KdaPrefillWorkspaceBytes(const KdaShape& shape, int64_t num_tokens);
Status KdaPrefill(const KdaPrefillArgs& args, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream);

// Decode: B sequences, one token each; row b's state is
// state_pool + slots[b]·H·dk·dv (slots on the device). out: [B, H, dv].
struct KdaDecodeArgs {
  KdaShape shape;
  int64_t batch = 0;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  int64_t ld_qkv = 0;
  KdaGates gates;
  float* state_pool = nullptr;
  const int32_t* slots = nullptr;
  void* out = nullptr;
  ActType out_type = ActType::kBf16;
};
Status KdaDecode(const KdaDecodeArgs& args, cudaStream_t stream);

// KDA's whole decode mixer between in_proj and o_proj in one kernel, for
// one token per sequence (kimi_linear's batch decode step):
//   conv: [q | k | v] = silu(short conv of proj[:, 0 : 3·H·dk]) with the
//         window update (CausalConvSiluDecode's arithmetic);
//   gates: raw decay = f_b · proj[:, off_fa : +rank] (fp32), output gate =
//         g_b · proj[:, off_ga : +rank] (rounded to bf16), β = proj[:, off_beta + h];
//   step: KdaDecode's token step (the same device code; o rounded to bf16);
//   out = o_norm ⊙ RMSNorm(o) ⊙ σ(gate) per head (GatedRmsNormSigmoid).
// The gate products and the norm's sum of squares are summed in a different
// order than the GEMV and norm kernels, so the result matches the unfused
// chain to rounding, not bit for bit (batch-invariant callers keep the
// chain). Shapes: dk = dv = 128, num_qk_heads = H, per-channel decay,
// conv kernel 2..4, rank a multiple of 64 up to 256, 16-byte aligned proj
// rows at off_fa and off_ga, 16-byte aligned state pool
// (KdaDecodeFusedSupported); other shapes are InvalidArgument.
struct KdaDecodeFusedArgs {
  KdaShape shape;
  int64_t batch = 0;
  const bf16* proj = nullptr;  // [B, ld_proj]
  int64_t ld_proj = 0;
  int64_t off_fa = 0;    // rank columns of the decay's low-rank input
  int64_t off_ga = 0;    // rank columns of the output gate's low-rank input
  int64_t off_beta = 0;  // H columns of β's pre-activation
  int64_t rank = 0;
  const float* conv_w = nullptr;  // [3·H·dk, conv_kernel]
  int64_t conv_kernel = 0;
  float* window_pool = nullptr;      // [slots, conv_kernel − 1, 3·H·dk], updated in place
  const bf16* f_b = nullptr;         // [H·dk, rank]
  const bf16* g_b = nullptr;         // [H·dv, rank]
  const float* dt_bias = nullptr;    // [H·dk]
  const float* neg_exp_a = nullptr;  // [H]
  const float* o_norm = nullptr;     // [dv]
  float eps = 1e-6f;
  float* state_pool = nullptr;     // [slots, H, dk, dv], updated in place
  const int32_t* slots = nullptr;  // [B]; a negative slot gives a zero row
  bf16* out = nullptr;             // [B, H·dv]
  // The kernel before this one on the stream writes none of slots,
  // state_pool and window_pool (a decode step: it is in_proj's GEMM), and,
  // like every kernel of this backend (pdl.cuh), lets this one launch only
  // after its own wait, so everything before it has finished. The kernel
  // then reads them before its programmatic-launch wait, so the state is on
  // its way while that kernel drains. Leave false when back-to-back calls
  // may share a stream.
  bool state_before_wait = false;
};
bool KdaDecodeFusedSupported(const KdaDecodeFusedArgs& args);
Status KdaDecodeFused(const KdaDecodeFusedArgs& args, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_KDA_H_
