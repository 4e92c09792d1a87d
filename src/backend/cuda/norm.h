// Normalisations (model-spec §1.2): statistics in fp32, output bf16.
#ifndef STRATA_BACKEND_CUDA_NORM_H_
#define STRATA_BACKEND_CUDA_NORM_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// Batch invariance (issue 6): every kernel here computes a row on its own
// (one CTA or one warp per row, the thread count from the row length) and
// picks its vector width from the row length and the pointers' alignment,
// never from the number of rows: a row's bits do not depend on how many rows
// share the call.

// The residual stream h is fp32 [n, D]. If `delta` is non-null it is first
// added into h (h += delta, delta of delta_type). Then
//   out[i] = bf16( h[i] / sqrt(mean(h[i]²) + eps) · w ).
// `out` may be null (add only). w: [D] fp32.
// early_trigger: the next kernel of the stream (a weight-streaming GEMV)
// may launch before this one's PDL wait, so its CTAs take SM slots as the
// kernel before this norm frees them and load their weights meanwhile.
Status AddRmsNorm(float* h, const void* delta, ActType delta_type, int64_t n, int64_t dim,
                  const float* w, float eps, bf16* out, cudaStream_t stream,
                  bool early_trigger = false);

// A decode step's first kernel (one launch instead of UploadWords,
// EmbeddingGather and the first layer's AddRmsNorm): the input words are
// copied as UploadWords copies them (src0 → dst0, src1 → dst1, n0 and n1
// 32-bit words; src may be pinned host memory), and for each row b < n,
// h[b] = embed[src0[b]] (fp32) and out[b] = bf16(h[b] / rms · w), with
// EmbeddingGather's and AddRmsNorm's arithmetic: the same bits as those
// three kernels. Row b's token is read from src0, not from dst0, so nothing
// waits for the copy. Tokens must be valid rows of embed (the caller checks
// them). The next kernel may launch at once (its CTAs load weights while
// this one runs), as with AddRmsNorm's early_trigger.
struct EmbedRmsNormStartArgs {
  const uint32_t* src0 = nullptr;  // [n0]; its first n words are the tokens
  uint32_t* dst0 = nullptr;
  int64_t n0 = 0;
  const uint32_t* src1 = nullptr;  // [n1], may be null with n1 = 0
  uint32_t* dst1 = nullptr;
  int64_t n1 = 0;
  int64_t n = 0;                // rows, ≤ n0
  const bf16* embed = nullptr;  // [vocab, dim]
  int64_t dim = 0;
  const float* w = nullptr;  // [dim]
  float eps = 0.f;
  float* h = nullptr;   // [n, dim]
  bf16* out = nullptr;  // [n, dim]
};
Status EmbedRmsNormStart(const EmbedRmsNormStartArgs& a, cudaStream_t stream);

// Plain RMSNorm of rows with a stride (e.g. the latent part of MLA rows):
// y[i, :dim] = x[i, :dim] / rms · w, x and y of type `type` (may alias).
Status RmsNormRows(const void* x, int64_t ldx, void* y, int64_t ldy, ActType type, int64_t n,
                   int64_t dim, const float* w, float eps, cudaStream_t stream);

// LayerNorm of rows with a stride and a bias (DeepSeek-V3.2's indexer k_norm,
// matching cpu::LayerNorm): y[i, :dim] = (x − mean) · rsqrt(var + eps) · w + b,
// biased variance, fp32 statistics; x and y of type `type` (may alias with
// the same stride). w, b: [dim] fp32.
Status LayerNormRows(const void* x, int64_t ldx, void* y, int64_t ldy, ActType type, int64_t n,
                     int64_t dim, const float* w, const float* b, float eps, cudaStream_t stream);

// KDA output norm: o[r] = RMSNorm(o[r]) · w ⊙ sigmoid(gate[r]) for rows of
// width dim (rows = tokens · heads). o: fp32 or bf16 (o_type), gate bf16 or
// fp32 (gate_type), out bf16.
Status GatedRmsNormSigmoid(const void* o, ActType o_type, const void* gate, ActType gate_type,
                           int64_t rows, int64_t dim, const float* w, float eps, bf16* out,
                           cudaStream_t stream);

// Qwen3-Next GDN output norm: the same with silu(gate) = gate·sigmoid(gate)
// in place of sigmoid(gate) (cpu::GatedRmsNormSilu).
Status GatedRmsNormSilu(const void* o, ActType o_type, const void* gate, ActType gate_type,
                        int64_t rows, int64_t dim, const float* w, float eps, bf16* out,
                        cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_NORM_H_
