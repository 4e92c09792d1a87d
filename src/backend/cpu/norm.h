// RMS normalisation over the last dimension (model-spec §1.2), fp32 in and out.
#ifndef STRATA_BACKEND_CPU_NORM_H_
#define STRATA_BACKEND_CPU_NORM_H_

#include <cstdint>

namespace strata {
class ThreadPool;
namespace cpu {

// y[r,:] = w ⊙ x[r,:] · rsqrt(mean(x[r,:]²) + eps) for r < rows. `w` has `dim`
// entries; y may alias x. Rows are independent and run in parallel.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y,
             ThreadPool* pool);

// Kimi's gated RMSNorm (KDA o_norm): per row (one head's value vector)
//   y = w ⊙ (x · rsqrt(mean(x²) + eps)) ⊙ sigmoid(gate),
// all in fp32 (fla's fused form). `gate` is laid out like x; y may alias x.
void GatedRmsNormSigmoid(const float* x, const float* gate, int64_t rows, int64_t dim,
                         const float* w, float eps, float* y, ThreadPool* pool);

// Qwen3-Next's gated RMSNorm (the GDN output norm): the same with SiLU,
//   y = w ⊙ (x · rsqrt(mean(x²) + eps)) ⊙ gate·sigmoid(gate).
// The weight is a plain scale (not "1 + w"). y may alias x.
void GatedRmsNormSilu(const float* x, const float* gate, int64_t rows, int64_t dim, const float* w,
                      float eps, float* y, ThreadPool* pool);

// LayerNorm with weight and bias (DeepSeek-V3.2's indexer k_norm):
//   y = (x − mean(x)) · rsqrt(var(x) + eps) ⊙ w + b, biased variance.
// y may alias x.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b,
               float eps, float* y, ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_NORM_H_
