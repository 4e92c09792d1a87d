// Small fused element-wise ops between the big kernels.
#ifndef STRATA_BACKEND_CUDA_ELEMENTWISE_H_
#define STRATA_BACKEND_CUDA_ELEMENTWISE_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// h[i, :] = float(embed[tokens[i], :]); tokens on the device, already checked.
Status EmbeddingGather(const bf16* embed, int64_t dim, const int32_t* tokens, int64_t n, float* h,
                       cudaStream_t stream);

// dst0[0, n0) = src0[0, n0) and dst1[0, n1) = src1[0, n1), 32-bit words,
// in one single-CTA kernel that reads src0/src1 straight from pinned host
// memory (device-accessible under unified addressing). A decode step's
// inputs arrive this way as its graph's first node instead of through
// separate cudaMemcpyAsync calls before the launch. The host must not write
// the sources until the stream has passed this kernel.
Status UploadWords(const uint32_t* src0, uint32_t* dst0, int64_t n0, const uint32_t* src1,
                   uint32_t* dst1, int64_t n1, cudaStream_t stream);

// SwiGLU activation on a fused gate|up product: gu is [n, 2I] (gate in the
// first I columns, up in the next I); out[n, I] = silu(gate) ⊙ up, bf16.
Status SiluMul(const void* gu, ActType gu_type, int64_t n, int64_t inter, bf16* out,
               cudaStream_t stream);

// dst[i] += src[i] (fp32 destination).
Status AddInto(float* dst, const void* src, ActType src_type, int64_t count, cudaStream_t stream);

// dst[t, :] += sigmoid(logit[t · ld_logit]) · src[t, :] for n rows of `dim`
// fp32 values (a per-token gate, e.g. Qwen3-Next's shared-expert gate).
Status AddSigmoidScaledRows(float* dst, const float* src, const float* logit, int64_t ld_logit,
                            int64_t n, int64_t dim, cudaStream_t stream);

// Conversions.
Status CastF32ToBf16(const float* src, bf16* dst, int64_t count, cudaStream_t stream);
Status CastBf16ToF32(const bf16* src, float* dst, int64_t count, cudaStream_t stream);

// Fills `count` bf16 values with a uniform pseudo-random pattern in
// [-scale, scale) derived from (seed, index): the dummy weights of
// --load-format dummy, made on the device without host traffic.
Status FillRandomBf16(bf16* dst, int64_t count, uint64_t seed, float scale, cudaStream_t stream);
Status FillRandomF32(float* dst, int64_t count, uint64_t seed, float lo, float hi,
                     cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_ELEMENTWISE_H_
