// Short causal depthwise convolution followed by SiLU (model-spec §1.7), the
// pre-processing of KDA's q, k and v. The last K−1 inputs of every channel are
// carried between calls so prefill, continuation and decode agree exactly.
#ifndef STRATA_BACKEND_CPU_CONV_H_
#define STRATA_BACKEND_CPU_CONV_H_

#include <cstdint>

namespace strata {
class ThreadPool;
namespace cpu {

// x: [T, C] inputs (token-major). weight: [C, K] (the checkpoint's [C, 1, K]);
// weight[c, K−1] multiplies the current token. window: [K−1, C], the previous
// K−1 inputs oldest first (zeros for a new sequence); updated in place to the
// last K−1 inputs of (window ++ x). y: [T, C] = SiLU(conv), must not alias x.
void CausalConv1dSilu(const float* x, int64_t num_tokens, int64_t channels, const float* weight,
                      int64_t kernel_size, float* window, float* y, ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_CONV_H_
