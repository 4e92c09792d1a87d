// Short causal depthwise conv + SiLU with the carried window, matching
// cpu::CausalConv1dSilu: taps summed oldest first in fp32, then silu(a) =
// a / (1 + e^−a), and the window replaced by the last K−1 rows of
// (window ++ x) — which for T < K−1 keeps the newest old rows.
//
// Cost model (H200, 4.27 TB/s; memory bound): prefill over the fused KDA
// q|k|v, C = 3·32·128 = 12288 channels, reads x (bf16, 2 B) and writes out
// (2 B) per element: 4 B·T·C, e.g. T = 32K → 1.6 GB → 377 µs; the window and
// weights are noise. Decode reads x, the window (3 rows fp32) and writes the
// window and out: ~30 B per channel per sequence → 12288 channels × 64
// sequences = 24 MB → 5.5 µs.
//
// Prefill: a thread owns `V` adjacent channels (4 when the row length and
// pointers allow 16-byte/8-byte accesses) and a run of kTokensPerThread
// tokens, keeps the last K−1 inputs in registers and slides them along its
// run. Only the run starting at t = 0 reads the old window (runs are ≥ K−1
// long), so that thread — after its outputs — also writes the new window for
// its channels: no other thread reads or writes those window entries, hence
// no race and one kernel. K is a template parameter (2..8, or 1 with no
// window) so the register window is indexed with constants only.
#include "backend/cuda/conv.h"

#include <type_traits>

#include "backend/cuda/conv_step.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kMaxKernel = 8;
constexpr int kTokensPerThread = 64;  // ≥ kMaxKernel − 1 (see above)
constexpr int kThreads = 128;
static_assert(kTokensPerThread >= kMaxKernel - 1, "runs must cover the whole window");

template <int V, typename T>
__device__ __forceinline__ void LoadV(const T* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 f = LoadF4(p);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    v[0] = LoadF(p);
  }
}

template <int V, typename T>
__device__ __forceinline__ void StoreV(T* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    StoreF4(p, make_float4(v[0], v[1], v[2], v[3]));
  } else {
    StoreF(p, v[0]);
  }
}

template <int K, int V, typename XT>
__global__ void __launch_bounds__(kThreads)
    CausalConvPrefillKernel(const XT* x, int64_t ldx, int64_t num_tokens, int64_t channels,
                            const float* w, float* window, bf16* out) {
  PdlWait();
  PdlLaunchDependents();
  constexpr int W = K - 1;
  constexpr int kHist = W > 0 ? W : 1;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (c0 >= channels) return;  // no barriers in this kernel
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerThread;
  const int64_t t1 = t0 + kTokensPerThread < num_tokens ? t0 + kTokensPerThread : num_tokens;

  float wt[V][K];
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int j = 0; j < K; ++j) wt[e][j] = w[(c0 + e) * K + j];
  }
  // hist[j][e] = x̂[t − W + j] for the next t (oldest first).
  float hist[kHist][V];
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const int64_t src = t0 - W + j;
    if (src >= 0) {
      LoadV<V>(x + src * ldx + c0, hist[j]);
    } else {
      LoadV<V>(window + (W + src) * channels + c0, hist[j]);
    }
  }
#pragma unroll 4
  for (int64_t t = t0; t < t1; ++t) {
    float cur[V];
    LoadV<V>(x + t * ldx + c0, cur);
    float y[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < W; ++j) acc += wt[e][j] * hist[j][e];
      acc += wt[e][W] * cur[e];
      y[e] = ConvSilu(acc);
    }
    StoreV<V>(out + t * channels + c0, y);
#pragma unroll
    for (int j = 0; j + 1 < W; ++j) {
#pragma unroll
      for (int e = 0; e < V; ++e) hist[j][e] = hist[j + 1][e];
    }
    if constexpr (W > 0) {
#pragma unroll
      for (int e = 0; e < V; ++e) hist[W - 1][e] = cur[e];
    }
  }

  // Only the first run writes the window. New window row r = x̂[T − W + r]:
  // from x when T − W + r ≥ 0, else old window row T + r, which is > r and so
  // not yet overwritten (rows ascend). This thread read all the old rows of
  // its channels above.
  if (blockIdx.y != 0) return;
#pragma unroll
  for (int r = 0; r < W; ++r) {
    const int64_t src = num_tokens - W + r;
    float v[V];
    if (src >= 0) {
      LoadV<V>(x + src * ldx + c0, v);
    } else {
      LoadV<V>(window + (W + src) * channels + c0, v);
    }
    StoreV<V>(window + r * channels + c0, v);
  }
}

// One thread per (sequence, channel): reads its window column, writes the
// shifted column back. A negative slot (padding) writes zeros and touches no
// window.
template <int K, typename XT>
__global__ void __launch_bounds__(kThreads)
    CausalConvDecodeKernel(const XT* x, int64_t ldx, int64_t channels, const float* w,
                           float* window_pool, const int32_t* slots, bf16* out) {
  PdlWait();
  PdlLaunchDependents();
  constexpr int W = K - 1;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (c >= channels) return;
  const int32_t slot = slots[b];
  if (slot < 0) {
    out[b * channels + c] = __float2bfloat16_rn(0.f);
    return;
  }
  float* win = window_pool + static_cast<int64_t>(slot) * W * channels + c;
  const float cur = LoadF(x + b * ldx + c);
  ConvWindow<K> hist;
  hist.Load(win, channels);
  out[b * channels + c] = __float2bfloat16_rn(hist.Output(w + c * K, cur));
  hist.Store(win, channels, cur);
}

Status CheckCommon(const char* op, ActType x_type, int64_t ldx, int64_t channels, const float* w,
                   int64_t kernel, const void* x, const bf16* out) {
  if (x_type != ActType::kBf16 && x_type != ActType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x_type is not bf16 or fp32"));
  }
  if (channels <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": channels must be > 0"));
  if (kernel < 1 || kernel > kMaxKernel) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": kernel must be in [1, ", kMaxKernel, "]"));
  }
  if (ldx < channels) return absl::InvalidArgumentError(absl::StrCat(op, ": ldx < channels"));
  if (w == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": w is null"));
  if (x == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": x is null"));
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": out is null"));
  return OkStatus();
}

template <int K, int V, typename XT>
void LaunchPrefill(const void* x, int64_t ldx, int64_t t, int64_t c, const float* w, float* window,
                   bf16* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(CeilDiv(c, V), kThreads)),
                  static_cast<unsigned>(CeilDiv(t, kTokensPerThread)));
  (void)LaunchPdl(CausalConvPrefillKernel<K, V, XT>, dim3(grid), dim3(kThreads), 0, stream, static_cast<const XT*>(x), ldx, t, c, w, window, out);
}

template <int K>
void DispatchPrefill(const void* x, ActType x_type, int64_t ldx, int64_t t, int64_t c,
                     const float* w, float* window, bf16* out, bool vec, cudaStream_t stream) {
  if (x_type == ActType::kF32) {
    if (vec) {
      LaunchPrefill<K, 4, float>(x, ldx, t, c, w, window, out, stream);
    } else {
      LaunchPrefill<K, 1, float>(x, ldx, t, c, w, window, out, stream);
    }
  } else if (vec) {
    LaunchPrefill<K, 4, bf16>(x, ldx, t, c, w, window, out, stream);
  } else {
    LaunchPrefill<K, 1, bf16>(x, ldx, t, c, w, window, out, stream);
  }
}

template <int K>
void DispatchDecode(const void* x, ActType x_type, int64_t ldx, int64_t batch, int64_t c,
                    const float* w, float* pool, const int32_t* slots, bf16* out,
                    cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(c, kThreads)), static_cast<unsigned>(batch));
  if (x_type == ActType::kF32) {
    (void)LaunchPdl(CausalConvDecodeKernel<K, float>, dim3(grid), dim3(kThreads), 0, stream, static_cast<const float*>(x), ldx, c, w, pool, slots, out);
  } else {
    (void)LaunchPdl(CausalConvDecodeKernel<K, bf16>, dim3(grid), dim3(kThreads), 0, stream, static_cast<const bf16*>(x), ldx, c, w, pool, slots, out);
  }
}

// Calls f(std::integral_constant<int, K>) for K = kernel (checked to be in
// [1, kMaxKernel]).
template <typename F>
void ForKernelSize(int64_t kernel, F&& f) {
  switch (kernel) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 5:
      f(std::integral_constant<int, 5>{});
      break;
    case 6:
      f(std::integral_constant<int, 6>{});
      break;
    case 7:
      f(std::integral_constant<int, 7>{});
      break;
    default:
      f(std::integral_constant<int, 8>{});
      break;
  }
  static_assert(kMaxKernel == 8, "extend the switch");
}

}  // namespace

Status CausalConvSiluPrefill(const void* x, ActType x_type, int64_t ldx, int64_t num_tokens,
                             int64_t channels, const float* w, int64_t kernel, float* window,
                             bf16* out, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(
      CheckCommon("CausalConvSiluPrefill", x_type, ldx, channels, w, kernel, x, out));
  if (num_tokens < 0) {
    return absl::InvalidArgumentError("CausalConvSiluPrefill: num_tokens must be >= 0");
  }
  if (kernel > 1 && window == nullptr) {
    return absl::InvalidArgumentError("CausalConvSiluPrefill: window is null");
  }
  if (CeilDiv(num_tokens, kTokensPerThread) > 65535) {
    return absl::InvalidArgumentError(
        "CausalConvSiluPrefill: num_tokens too large for one call (max 65535·64)");
  }
  if (num_tokens == 0) return OkStatus();
  // 4 channels per thread: whole vectors per row and aligned row starts for
  // x (ldx), out (C) and the window rows (C).
  const bool vec = channels % 4 == 0 && ldx % 4 == 0 && IsAligned(x, 4 * ActBytes(x_type)) &&
                   IsAligned(out, 8) && (window == nullptr || IsAligned(window, 16));
  ForKernelSize(kernel, [&](auto k) {
    DispatchPrefill<decltype(k)::value>(x, x_type, ldx, num_tokens, channels, w, window, out, vec,
                                        stream);
  });
  return LaunchStatus("CausalConvPrefillKernel");
}

Status CausalConvSiluDecode(const void* x, ActType x_type, int64_t ldx, int64_t batch,
                            int64_t channels, const float* w, int64_t kernel, float* window_pool,
                            const int32_t* slots, bf16* out, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(
      CheckCommon("CausalConvSiluDecode", x_type, ldx, channels, w, kernel, x, out));
  if (batch < 0 || batch > 65535) {
    return absl::InvalidArgumentError("CausalConvSiluDecode: batch must be in [0, 65535]");
  }
  if (slots == nullptr) return absl::InvalidArgumentError("CausalConvSiluDecode: slots is null");
  if (kernel > 1 && window_pool == nullptr) {
    return absl::InvalidArgumentError("CausalConvSiluDecode: window_pool is null");
  }
  if (batch == 0) return OkStatus();
  ForKernelSize(kernel, [&](auto k) {
    DispatchDecode<decltype(k)::value>(x, x_type, ldx, batch, channels, w, window_pool, slots, out,
                                       stream);
  });
  return LaunchStatus("CausalConvDecodeKernel");
}

}  // namespace strata::cuda
