// Scalar gate activations the linear-attention and gated mixers share, in
// fp32 as the references compute them.
#ifndef STRATA_EXEC_CPU_GATES_H_
#define STRATA_EXEC_CPU_GATES_H_

#include <cmath>

namespace strata::exec {

// log(1 + e^x), linear past 20 as torch's softplus (threshold 20).
inline float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_GATES_H_
