// Element-wise glue between the big kernels. All are memory bound; cost at
// 4.27 TB/s is (bytes read + bytes written) / bandwidth, e.g.
//  * EmbeddingGather, D = 2304: 4.6 KB read + 9.2 KB written per token;
//  * SiluMul, [n, 2·9216] bf16 → [n, 9216] bf16: 55 KB per row (13 ns);
//  * FillRandomBf16 over the 48B dummy model's ~96 GB: ~23 ms of writes.
// Accesses are 16 bytes per thread when the pointers and lengths allow (the
// common case: rows of 2304 or 1024 elements from 256-byte-aligned buffers),
// with a scalar path for the rest; grid-stride loops with 64-bit indices.
#include "backend/cuda/elementwise.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/copy_words.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops stop growing the grid here: ~16 CTAs per SM on an H200,
// enough to saturate HBM, and launches stay cheap for huge counts.
constexpr int64_t kMaxBlocks = 2048;

unsigned GridFor(int64_t work_items) {
  return static_cast<unsigned>(std::clamp<int64_t>(CeilDiv(work_items, kThreads), 1, kMaxBlocks));
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---------------------------------------------------------------------------
// EmbeddingGather: one CTA per token.

template <bool kVec>
__global__ void EmbeddingGatherKernel(const bf16* embed, int64_t dim, const int32_t* tokens,
                                      float* h) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t row = blockIdx.x;
  const bf16* src = embed + static_cast<int64_t>(tokens[row]) * dim;
  float* dst = h + row * dim;
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x; i < dim / 8; i += blockDim.x) {
      const uint4 u = *reinterpret_cast<const uint4*>(src + i * 8);
      const float2 a = Bf16x2ToF32(u.x), b = Bf16x2ToF32(u.y);
      const float2 c = Bf16x2ToF32(u.z), d = Bf16x2ToF32(u.w);
      StoreF4(dst + i * 8, make_float4(a.x, a.y, b.x, b.y));
      StoreF4(dst + i * 8 + 4, make_float4(c.x, c.y, d.x, d.y));
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
  }
}

__global__ void UploadWordsKernel(const uint32_t* src0, uint32_t* dst0, int64_t n0,
                                  const uint32_t* src1, uint32_t* dst1, int64_t n1) {
  PdlWait();
  PdlLaunchDependents();
  CopyWordSpans(src0, dst0, n0, src1, dst1, n1);
}

// ---------------------------------------------------------------------------
// SiluMul: out[r, c] = silu(gu[r, c]) · gu[r, I + c], as cpu::SwiGLU computes
// it (g / (1 + e^−g) · u in fp32).

__device__ __forceinline__ float SiluTimes(float g, float u) { return g / (1.f + expf(-g)) * u; }

template <bool kVec, typename T>
__global__ void SiluMulKernel(const T* gu, int64_t n, int64_t inter, bf16* out) {
  PdlWait();
  PdlLaunchDependents();
  if constexpr (kVec) {
    const int64_t per_row = inter / 4;
    for (int64_t v = GlobalThread(); v < n * per_row; v += GridThreads()) {
      const int64_t r = v / per_row;
      const int64_t c = (v % per_row) * 4;
      const float4 g = LoadF4(gu + r * 2 * inter + c);
      const float4 u = LoadF4(gu + r * 2 * inter + inter + c);
      StoreF4(out + r * inter + c, make_float4(SiluTimes(g.x, u.x), SiluTimes(g.y, u.y),
                                               SiluTimes(g.z, u.z), SiluTimes(g.w, u.w)));
    }
  } else {
    for (int64_t e = GlobalThread(); e < n * inter; e += GridThreads()) {
      const int64_t r = e / inter;
      const int64_t c = e % inter;
      out[e] = __float2bfloat16_rn(
          SiluTimes(LoadF(gu + r * 2 * inter + c), LoadF(gu + r * 2 * inter + inter + c)));
    }
  }
}

// ---------------------------------------------------------------------------
// AddSigmoidScaledRows: dst[t, i] += sigmoid(logit[t · ld]) · src[t, i]
// (Qwen3-Next's gated shared expert), one element per thread step.
__global__ void AddSigmoidScaledRowsKernel(float* dst, const float* src, const float* logit,
                                           int64_t ld_logit, int64_t dim, int64_t count) {
  PdlWait();
  PdlLaunchDependents();
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const float l = logit[(i / dim) * ld_logit];
    dst[i] += src[i] * (1.f / (1.f + expf(-l)));
  }
}

// ---------------------------------------------------------------------------
// AddInto and the casts: dst[i] = src[i] (kAdd: dst[i] += src[i]), 4 elements
// per step on the vector path and a scalar tail after it.

template <bool kAdd, bool kVec, typename S, typename D>
__global__ void MapKernel(const S* src, D* dst, int64_t count) {
  PdlWait();
  PdlLaunchDependents();
  int64_t start = 0;
  if constexpr (kVec) {
    const int64_t vecs = count / 4;
    for (int64_t v = GlobalThread(); v < vecs; v += GridThreads()) {
      float4 s = LoadF4(src + v * 4);
      if constexpr (kAdd) {
        const float4 d = LoadF4(dst + v * 4);
        s = make_float4(d.x + s.x, d.y + s.y, d.z + s.z, d.w + s.w);
      }
      StoreF4(dst + v * 4, s);
    }
    start = vecs * 4;
  }
  for (int64_t i = start + GlobalThread(); i < count; i += GridThreads()) {
    const float s = LoadF(src + i);
    if constexpr (kAdd) {
      StoreF(dst + i, LoadF(dst + i) + s);
    } else {
      StoreF(dst + i, s);
    }
  }
}

template <bool kAdd, typename S, typename D>
Status LaunchMap(const S* src, D* dst, int64_t count, cudaStream_t stream, const char* name) {
  if (count == 0) return OkStatus();
  const bool vec = IsAligned(src, 4 * sizeof(S)) && IsAligned(dst, 4 * sizeof(D));
  if (vec) {
    (void)LaunchPdl(MapKernel<kAdd, true, S, D>, dim3(GridFor(CeilDiv(count, 4))), dim3(kThreads),
                    0, stream, src, dst, count);
  } else {
    (void)LaunchPdl(MapKernel<kAdd, false, S, D>, dim3(GridFor(count)), dim3(kThreads), 0, stream,
                    src, dst, count);
  }
  return LaunchStatus(name);
}

// ---------------------------------------------------------------------------
// Random fill: element i is the i-th output of splitmix64 seeded with `seed`
// (Steele et al.'s generator: state_i = seed + (i+1)·γ, output = mix(state_i)),
// so every element is independent of the launch shape and reproducible on the
// host. The top 24 bits give u in [0, 1) exactly.

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

__device__ __forceinline__ float UniformAt(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.f / 16777216.f);
}

// Round toward zero keeps |value| < scale: the range stays [-scale, scale).
__device__ __forceinline__ bf16 RandomBf16(uint64_t seed, uint64_t i, float scale) {
  return __float2bfloat16_rz((2.f * UniformAt(seed, i) - 1.f) * scale);
}

template <bool kVec>
__global__ void FillRandomBf16Kernel(bf16* dst, int64_t count, uint64_t seed, float scale) {
  PdlWait();
  PdlLaunchDependents();
  int64_t start = 0;
  if constexpr (kVec) {
    const int64_t vecs = count / 8;
    for (int64_t v = GlobalThread(); v < vecs; v += GridThreads()) {
      uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint64_t i = static_cast<uint64_t>(v) * 8 + 2 * e;
        const bf16 lo = RandomBf16(seed, i, scale);
        const bf16 hi = RandomBf16(seed, i + 1, scale);
        w[e] = static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
               (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
      }
      *reinterpret_cast<uint4*>(dst + v * 8) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    start = vecs * 8;
  }
  for (int64_t i = start + GlobalThread(); i < count; i += GridThreads()) {
    dst[i] = RandomBf16(seed, static_cast<uint64_t>(i), scale);
  }
}

template <bool kVec>
__global__ void FillRandomF32Kernel(float* dst, int64_t count, uint64_t seed, float lo, float hi) {
  PdlWait();
  PdlLaunchDependents();
  const float span = hi - lo;
  int64_t start = 0;
  if constexpr (kVec) {
    const int64_t vecs = count / 4;
    for (int64_t v = GlobalThread(); v < vecs; v += GridThreads()) {
      const uint64_t i = static_cast<uint64_t>(v) * 4;
      StoreF4(dst + v * 4,
              make_float4(lo + span * UniformAt(seed, i), lo + span * UniformAt(seed, i + 1),
                          lo + span * UniformAt(seed, i + 2), lo + span * UniformAt(seed, i + 3)));
    }
    start = vecs * 4;
  }
  for (int64_t i = start + GlobalThread(); i < count; i += GridThreads()) {
    dst[i] = lo + span * UniformAt(seed, static_cast<uint64_t>(i));
  }
}

Status CheckCount(const char* op, int64_t count, const void* a, const char* a_name, const void* b,
                  const char* b_name) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": count must be >= 0"));
  if (count > 0 && a == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is null"));
  }
  if (count > 0 && b_name != nullptr && b == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", b_name, " is null"));
  }
  return OkStatus();
}

Status CheckType(ActType t, const char* what) {
  if (t != ActType::kBf16 && t != ActType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not bf16 or fp32"));
  }
  return OkStatus();
}

}  // namespace

Status EmbeddingGather(const bf16* embed, int64_t dim, const int32_t* tokens, int64_t n, float* h,
                       cudaStream_t stream) {
  if (n < 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError("EmbeddingGather: n must be in [0, 2^31)");
  }
  if (dim <= 0) return absl::InvalidArgumentError("EmbeddingGather: dim must be > 0");
  if (embed == nullptr) return absl::InvalidArgumentError("EmbeddingGather: embed is null");
  if (tokens == nullptr && n > 0) {
    return absl::InvalidArgumentError("EmbeddingGather: tokens is null");
  }
  if (h == nullptr && n > 0) return absl::InvalidArgumentError("EmbeddingGather: h is null");
  if (n == 0) return OkStatus();
  const int threads = static_cast<int>(std::clamp<int64_t>(CeilDiv(dim, 8 * 32) * 32, 32, 1024));
  if (dim % 8 == 0 && IsAligned(embed, 16) && IsAligned(h, 16)) {
    (void)LaunchPdl(EmbeddingGatherKernel<true>, dim3(static_cast<unsigned>(n)), dim3(threads), 0,
                    stream, embed, dim, tokens, h);
  } else {
    (void)LaunchPdl(EmbeddingGatherKernel<false>, dim3(static_cast<unsigned>(n)), dim3(threads), 0,
                    stream, embed, dim, tokens, h);
  }
  return LaunchStatus("EmbeddingGatherKernel");
}

Status UploadWords(const uint32_t* src0, uint32_t* dst0, int64_t n0, const uint32_t* src1,
                   uint32_t* dst1, int64_t n1, cudaStream_t stream) {
  if (n0 < 0) return absl::InvalidArgumentError("UploadWords: n0 must be >= 0");
  if (n1 < 0) return absl::InvalidArgumentError("UploadWords: n1 must be >= 0");
  if (n0 > 0 && (src0 == nullptr || dst0 == nullptr)) {
    return absl::InvalidArgumentError("UploadWords: src0 and dst0 must be non-null when n0 > 0");
  }
  if (n1 > 0 && (src1 == nullptr || dst1 == nullptr)) {
    return absl::InvalidArgumentError("UploadWords: src1 and dst1 must be non-null when n1 > 0");
  }
  if (n0 + n1 == 0) return OkStatus();
  (void)LaunchPdl(UploadWordsKernel, dim3(1), dim3(256), 0, stream, src0, dst0, n0, src1, dst1, n1);
  return LaunchStatus("UploadWordsKernel");
}

Status SiluMul(const void* gu, ActType gu_type, int64_t n, int64_t inter, bf16* out,
               cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("SiluMul: n must be >= 0");
  if (inter <= 0) return absl::InvalidArgumentError("SiluMul: inter must be > 0");
  STRATA_RETURN_IF_ERROR(CheckType(gu_type, "SiluMul: gu_type"));
  if (n > 0 && gu == nullptr) return absl::InvalidArgumentError("SiluMul: gu is null");
  if (n > 0 && out == nullptr) return absl::InvalidArgumentError("SiluMul: out is null");
  if (n == 0) return OkStatus();
  const bool vec = inter % 4 == 0 && IsAligned(gu, 4 * ActBytes(gu_type)) && IsAligned(out, 8);
  const int64_t items = vec ? n * inter / 4 : n * inter;
  const unsigned grid = GridFor(items);
  if (gu_type == ActType::kF32) {
    const float* g = static_cast<const float*>(gu);
    if (vec) {
      (void)LaunchPdl(SiluMulKernel<true, float>, dim3(grid), dim3(kThreads), 0, stream, g, n,
                      inter, out);
    } else {
      (void)LaunchPdl(SiluMulKernel<false, float>, dim3(grid), dim3(kThreads), 0, stream, g, n,
                      inter, out);
    }
  } else {
    const bf16* g = static_cast<const bf16*>(gu);
    if (vec) {
      (void)LaunchPdl(SiluMulKernel<true, bf16>, dim3(grid), dim3(kThreads), 0, stream, g, n, inter,
                      out);
    } else {
      (void)LaunchPdl(SiluMulKernel<false, bf16>, dim3(grid), dim3(kThreads), 0, stream, g, n,
                      inter, out);
    }
  }
  return LaunchStatus("SiluMulKernel");
}

Status AddInto(float* dst, const void* src, ActType src_type, int64_t count, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckCount("AddInto", count, dst, "dst", src, "src"));
  STRATA_RETURN_IF_ERROR(CheckType(src_type, "AddInto: src_type"));
  if (src_type == ActType::kF32) {
    return LaunchMap<true>(static_cast<const float*>(src), dst, count, stream, "AddInto");
  }
  return LaunchMap<true>(static_cast<const bf16*>(src), dst, count, stream, "AddInto");
}

Status AddSigmoidScaledRows(float* dst, const float* src, const float* logit, int64_t ld_logit,
                            int64_t n, int64_t dim, cudaStream_t stream) {
  if (n < 0 || dim <= 0 || ld_logit <= 0) {
    return absl::InvalidArgumentError(
        "AddSigmoidScaledRows: n must be >= 0, dim and ld_logit positive");
  }
  if (n == 0) return OkStatus();
  if (dst == nullptr || src == nullptr || logit == nullptr) {
    return absl::InvalidArgumentError("AddSigmoidScaledRows: dst, src and logit must be set");
  }
  const int64_t count = n * dim;
  (void)LaunchPdl(AddSigmoidScaledRowsKernel, dim3(GridFor(count)), dim3(kThreads), 0, stream, dst,
                  src, logit, ld_logit, dim, count);
  return LaunchStatus("AddSigmoidScaledRowsKernel");
}

Status CastF32ToBf16(const float* src, bf16* dst, int64_t count, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckCount("CastF32ToBf16", count, src, "src", dst, "dst"));
  return LaunchMap<false>(src, dst, count, stream, "CastF32ToBf16");
}

Status CastBf16ToF32(const bf16* src, float* dst, int64_t count, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckCount("CastBf16ToF32", count, src, "src", dst, "dst"));
  return LaunchMap<false>(src, dst, count, stream, "CastBf16ToF32");
}

Status FillRandomBf16(bf16* dst, int64_t count, uint64_t seed, float scale, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckCount("FillRandomBf16", count, dst, "dst", nullptr, nullptr));
  if (!(scale >= 0.f) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError("FillRandomBf16: scale must be finite and >= 0");
  }
  if (count == 0) return OkStatus();
  if (IsAligned(dst, 16)) {
    (void)LaunchPdl(FillRandomBf16Kernel<true>, dim3(GridFor(CeilDiv(count, 8))), dim3(kThreads), 0,
                    stream, dst, count, seed, scale);
  } else {
    (void)LaunchPdl(FillRandomBf16Kernel<false>, dim3(GridFor(count)), dim3(kThreads), 0, stream,
                    dst, count, seed, scale);
  }
  return LaunchStatus("FillRandomBf16Kernel");
}

Status FillRandomF32(float* dst, int64_t count, uint64_t seed, float lo, float hi,
                     cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckCount("FillRandomF32", count, dst, "dst", nullptr, nullptr));
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi)) {
    return absl::InvalidArgumentError("FillRandomF32: need finite lo <= hi");
  }
  if (count == 0) return OkStatus();
  if (IsAligned(dst, 16)) {
    (void)LaunchPdl(FillRandomF32Kernel<true>, dim3(GridFor(CeilDiv(count, 4))), dim3(kThreads), 0,
                    stream, dst, count, seed, lo, hi);
  } else {
    (void)LaunchPdl(FillRandomF32Kernel<false>, dim3(GridFor(count)), dim3(kThreads), 0, stream,
                    dst, count, seed, lo, hi);
  }
  return LaunchStatus("FillRandomF32Kernel");
}

}  // namespace strata::cuda
