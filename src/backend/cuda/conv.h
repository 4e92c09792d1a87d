// Short causal depthwise conv + SiLU (model-spec §1.7) for KDA's q, k, v.
// Channels are generic, so the executor runs one conv over the fused
// [q | k | v] projection (C = 3·H·dk). The state is the last K−1 inputs.
#ifndef STRATA_BACKEND_CUDA_CONV_H_
#define STRATA_BACKEND_CUDA_CONV_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// One sequence, T tokens: out[t, c] = silu( Σ_j w[c, j] · x̂[t − (K−1) + j, c] )
// where x̂ is the window (rows −(K−1)..−1) followed by x. `window` [K−1, C]
// fp32 is read, then replaced by the last K−1 inputs. x: [T, C] with row
// stride ldx (x_type); w: [C, K] fp32; out: [T, C] bf16 (stride C).
// Chunk invariance (issue 6): the window holds the inputs exactly (bf16
// inputs are exact in fp32) and every output sums its taps oldest first with
// the same arithmetic whether a tap comes from x or from the window, so a
// prompt prefilled in several calls with the carried window gives the bits of
// one call (outputs and the final window).
Status CausalConvSiluPrefill(const void* x, ActType x_type, int64_t ldx, int64_t num_tokens,
                             int64_t channels, const float* w, int64_t kernel, float* window,
                             bf16* out, cudaStream_t stream);

// B sequences, one token each: x[b, :] is row b (stride ldx); sequence b's
// window is window_pool[slots[b]] ([K−1, C] fp32 each, updated in place);
// slots on the device. out: [B, C] bf16.
Status CausalConvSiluDecode(const void* x, ActType x_type, int64_t ldx, int64_t batch,
                            int64_t channels, const float* w, int64_t kernel, float* window_pool,
                            const int32_t* slots, bf16* out, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_CONV_H_
