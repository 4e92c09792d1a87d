// One channel of the short causal conv + SiLU (model-spec §1.7) at decode:
// the channel's window (its last K−1 inputs, oldest first, `stride` floats
// apart) is read, the output formed, and the window shifted by the new input.
// CausalConvSiluDecode (conv.cu) and KdaDecodeFused (kda_decode.cu) both run it, so
// their outputs and windows are the same bits.
#ifndef STRATA_BACKEND_CUDA_CONV_STEP_CUH_
#define STRATA_BACKEND_CUDA_CONV_STEP_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// silu(a) = a / (1 + e^−a), as cpu::CausalConv1dSilu computes it.
__device__ __forceinline__ float ConvSilu(float a) { return a / (1.f + expf(-a)); }

template <int K>
struct ConvWindow {
  static constexpr int W = K - 1;
  float v[W > 0 ? W : 1];

  __device__ __forceinline__ void Load(const float* win, int64_t stride) {
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = win[j * stride];
  }
  // silu(Σ_j taps[j]·v[j] + taps[K−1]·cur): the taps oldest first.
  __device__ __forceinline__ float Output(const float* taps, float cur) const {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < W; ++j) acc += taps[j] * v[j];
    acc += taps[W] * cur;
    return ConvSilu(acc);
  }
  // The window after `cur`: the oldest entry drops out.
  __device__ __forceinline__ void Store(float* win, int64_t stride, float cur) const {
#pragma unroll
    for (int j = 0; j + 1 < W; ++j) win[j * stride] = v[j + 1];
    if constexpr (W > 0) win[(W - 1) * stride] = cur;
  }
};

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_CONV_STEP_CUH_
