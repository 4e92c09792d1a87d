// RMS normalisations, matching cpu::RmsNorm / cpu::GatedRmsNormSigmoid:
//   y = w ⊙ (x · rsqrt(mean(x²) + eps))            (fp32 statistics)
//   y = w ⊙ (x · rsqrt(mean(x²) + eps)) ⊙ σ(gate)  (KDA o_norm)
// The CPU sums squares in double; fp32 over a row of ≤ 10⁴ elements is off by
// ~1e-6 relative, far below the bf16 output rounding.
//
// Cost model (H200, 4.27 TB/s; all three are memory bound):
//  * AddRmsNorm, D = 2304: per row read h (9.2 KB) + delta (4.6 KB bf16),
//    write h and out (9.2 + 4.6 KB) = 27.6 KB → 6.5 ns/row, e.g. 32K rows of
//    prefill 212 µs. A decode row (one CTA) is latency bound (~3 µs).
//  * GatedRmsNormSigmoid, 32 heads × 128, fp32 o + bf16 gate → bf16: 1 KB per
//    row; 32K tokens × 32 heads → 1.07 GB → 251 µs.
//
// AddRmsNorm and RmsNormRows give one CTA to a row (D in the thousands), with
// 4-wide vector accesses when the row length and pointers allow, else scalar.
// AddRmsNorm keeps a thread's first kHeld vectors in registers between its
// passes; beyond those, and in RmsNormRows, the second pass re-reads the row
// from L1/L2 (each thread reads back exactly the elements it wrote, so no
// barrier is needed for that). GatedRmsNormSigmoid rows are one head (128
// wide): one warp per row, shuffles only.
#include "backend/cuda/norm.h"

#include <algorithm>

#include "backend/cuda/copy_words.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kMaxRowThreads = 1024;
constexpr int kGatedWarps = 8;

// Threads for one row of `vecs` vectors: enough that each does ~1 vector at
// D = 2304 (576 threads), a warp at least.
int RowThreads(int64_t vecs) {
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(vecs, 32) * 32, 32, kMaxRowThreads));
}

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

// One CTA per row. DT: element type of delta (ignored when !kDelta).
// The first kHeld vectors of each thread (all of a row up to kHeld · 1024
// vectors: D = 2304 is one per thread) stay in registers between the passes,
// and their norm weights are loaded before the PDL wait: a decode row is one
// CTA on the step's critical path, where each dependent L2 or DRAM round trip
// (~1 µs) counts.
constexpr int kHeld = 2;

// A row's first pass as every AddRmsNorm-type kernel walks it: thread t
// takes vectors t + it·blockDim (it < kHeld, kept in `held`), then every
// blockDim-th one after; load(i, v) fetches vector i (and writes h if it
// must); the squares are summed in that order, each vector's in an fma
// chain. Kernels that must give AddRmsNorm's bits share it.
template <int V, typename Load>
__device__ __forceinline__ float RowSquares(int64_t vecs, float (&held)[kHeld][V], Load load) {
  float ss = 0.f;
  auto square = [&](const float(&v)[V]) {
#pragma unroll
    for (int e = 0; e < V; ++e) ss = fmaf(v[e], v[e], ss);
  };
#pragma unroll
  for (int it = 0; it < kHeld; ++it) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
    if (i < vecs) {
      load(i, held[it]);
      square(held[it]);
    }
  }
  for (int64_t i = threadIdx.x + int64_t{kHeld} * blockDim.x; i < vecs; i += blockDim.x) {
    float v[V];
    load(i, v);
    square(v);
  }
  return ss;
}

// The second pass: out = bf16(w · (h · inv)), the held vectors from
// registers (g: their weights), the rest re-read from hr (each thread
// reads back exactly what it wrote in the first pass: no barrier needed).
template <int V>
__device__ __forceinline__ void RowOut(const float (&g)[kHeld][V], const float (&held)[kHeld][V],
                                       const float* hr, const float* w, int64_t vecs, float inv,
                                       bf16* outr) {
#pragma unroll
  for (int it = 0; it < kHeld; ++it) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
    if (i < vecs) {
      float v[V];
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] = g[it][e] * (held[it][e] * inv);
      StoreV<V>(outr + i * V, v);
    }
  }
  for (int64_t i = threadIdx.x + int64_t{kHeld} * blockDim.x; i < vecs; i += blockDim.x) {
    float v[V], gw[V];
    LoadV<V>(hr + i * V, v);
    LoadV<V>(w + i * V, gw);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = gw[e] * (v[e] * inv);
    StoreV<V>(outr + i * V, v);
  }
}

template <int V, bool kDelta, typename DT>
__global__ void AddRmsNormKernel(float* h, const DT* delta, int64_t dim, const float* w, float eps,
                                 bf16* out, int early) {
  __shared__ float scratch[32];
  // early: the next kernel (a GEMV streaming weights) may launch now, so its
  // CTAs take SM slots and load weights while this row's predecessors drain.
  if (early) PdlLaunchDependents();
  const int64_t row = blockIdx.x;
  float* hr = h + row * dim;
  const int64_t vecs = dim / V;
  float g[kHeld][V], held[kHeld][V];
#pragma unroll
  for (int it = 0; it < kHeld; ++it) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
    if (out != nullptr && i < vecs) LoadV<V>(w + i * V, g[it]);
  }
  PdlWait();
  PdlLaunchDependents();
  const float ss = RowSquares<V>(vecs, held, [&](int64_t i, float(&v)[V]) {
    LoadV<V>(hr + i * V, v);
    if constexpr (kDelta) {
      float d[V];
      LoadV<V>(delta + row * dim + i * V, d);
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] += d[e];
      StoreV<V>(hr + i * V, v);
    }
  });
  if (out == nullptr) return;  // uniform over the block: no barrier is skipped by a subset
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(dim) + eps);
  RowOut<V>(g, held, hr, w, vecs, inv, out + row * dim);
}

// EmbedRmsNormStart: CTA 0 copies the step's words as UploadWordsKernel
// does; every CTA forms its row as EmbeddingGatherKernel then
// AddRmsNormKernel<V, false> would, with the same thread count: thread t
// takes the same vectors in the same order, squares them in the same fma
// chain and BlockSum adds the same partials, so the bits are those kernels'.
// The embedding is read element by element (any alignment: V follows
// AddRmsNorm's rule on h, w and out alone).
template <int V>
__global__ void EmbedRmsNormStartKernel(const EmbedRmsNormStartArgs p) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t dim = p.dim;
  const int64_t vecs = dim / V;
  float g[kHeld][V], held[kHeld][V];
#pragma unroll
  for (int it = 0; it < kHeld; ++it) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
    if (i < vecs) LoadV<V>(p.w + i * V, g[it]);
  }
  PdlWait();
  PdlLaunchDependents();
  // The token crosses PCIe (~1–2 µs); CTA 0's word copies overlap with it.
  const int64_t token = static_cast<int64_t>(p.src0[row]);
  if (row == 0) CopyWordSpans(p.src0, p.dst0, p.n0, p.src1, p.dst1, p.n1);
  const bf16* er = p.embed + token * dim;
  float* hr = p.h + row * dim;
  const float ss = RowSquares<V>(vecs, held, [&](int64_t i, float(&v)[V]) {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = __bfloat162float(er[i * V + e]);
    StoreV<V>(hr + i * V, v);
  });
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(dim) + p.eps);
  RowOut<V>(g, held, hr, p.w, vecs, inv, p.out + row * dim);
}

// One CTA per row; y may be x (same stride): every read of the first pass is
// done before BlockSum's barrier, and each element of the second pass is read
// and then written by the same thread.
template <int V, typename T>
__global__ void RmsNormRowsKernel(const T* x, int64_t ldx, T* y, int64_t ldy, int64_t dim,
                                  const float* w, float eps) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * ldx;
  T* yr = y + row * ldy;
  const int64_t vecs = dim / V;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    float v[V];
    LoadV<V>(xr + i * V, v);
#pragma unroll
    for (int e = 0; e < V; ++e) ss = fmaf(v[e], v[e], ss);
  }
  const float inv = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    float v[V], g[V];
    LoadV<V>(xr + i * V, v);
    LoadV<V>(w + i * V, g);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = g[e] * (v[e] * inv);
    StoreV<V>(yr + i * V, v);
  }
}

// One CTA per row, scalar accesses (the indexer's key rows are ~128 wide).
// Mean, then the variance around it (two passes, as the CPU does, so that a
// large mean does not cancel the variance), then the output; every thread
// reads and writes only its own elements, so y may be x.
template <typename T>
__global__ void LayerNormRowsKernel(const T* x, int64_t ldx, T* y, int64_t ldy, int64_t dim,
                                    const float* w, const float* b, float eps) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * ldx;
  T* yr = y + row * ldy;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += LoadF(xr + i);
  const float mean = BlockSum(sum, scratch) / static_cast<float>(dim);
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = LoadF(xr + i) - mean;
    ss = fmaf(d, d, ss);
  }
  const float rstd = rsqrtf(BlockSum(ss, scratch) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    StoreF(yr + i, fmaf((LoadF(xr + i) - mean) * rstd, w[i], b[i]));
  }
}

// One warp per row (a head's value vector).
// kSilu: the gate is silu(g) = g·σ(g) (Qwen3-Next's GDN output norm).
template <int V, typename OT, typename GT, bool kSilu>
__global__ void GatedRmsNormSigmoidKernel(const OT* o, const GT* gate, int64_t rows, int64_t dim,
                                          const float* w, float eps, bf16* out) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGatedWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform; the kernel has no block barrier
  const OT* orow = o + row * dim;
  const GT* grow = gate + row * dim;
  bf16* yrow = out + row * dim;
  const int64_t vecs = dim / V;
  float ss = 0.f;
  for (int64_t i = lane; i < vecs; i += 32) {
    float v[V];
    LoadV<V>(orow + i * V, v);
#pragma unroll
    for (int e = 0; e < V; ++e) ss = fmaf(v[e], v[e], ss);
  }
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = lane; i < vecs; i += 32) {
    float v[V], g[V], s[V];
    LoadV<V>(orow + i * V, v);
    LoadV<V>(grow + i * V, g);
    LoadV<V>(w + i * V, s);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float sg = 1.f / (1.f + expf(-g[e]));
      v[e] = s[e] * (v[e] * inv) * (kSilu ? g[e] * sg : sg);
    }
    StoreV<V>(yrow + i * V, v);
  }
}

Status CheckType(ActType t, const char* what) {
  if (t != ActType::kBf16 && t != ActType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not bf16 or fp32"));
  }
  return OkStatus();
}

Status CheckRows(const char* op, int64_t n, int64_t dim, const float* w, float eps) {
  if (n < 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": n must be in [0, 2^31)"));
  }
  if (dim <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": dim must be > 0"));
  if (w == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": w is null"));
  if (!(eps >= 0.f)) return absl::InvalidArgumentError(absl::StrCat(op, ": eps must be >= 0"));
  return OkStatus();
}

// 4-wide accesses need whole vectors per row and aligned row starts.
bool Vec4(const void* p, ActType t) { return IsAligned(p, 4 * ActBytes(t)); }

template <int V>
void LaunchAddRmsNorm(float* h, const void* delta, ActType delta_type, int64_t n, int64_t dim,
                      const float* w, float eps, bf16* out, cudaStream_t stream, int early) {
  const int threads = RowThreads(dim / V);
  const unsigned grid = static_cast<unsigned>(n);
  if (delta == nullptr) {
    (void)LaunchPdl(AddRmsNormKernel<V, false, float>, dim3(grid), dim3(threads), 0, stream, h,
                    nullptr, dim, w, eps, out, early);
  } else if (delta_type == ActType::kF32) {
    (void)LaunchPdl(AddRmsNormKernel<V, true, float>, dim3(grid), dim3(threads), 0, stream, h,
                    static_cast<const float*>(delta), dim, w, eps, out, early);
  } else {
    (void)LaunchPdl(AddRmsNormKernel<V, true, bf16>, dim3(grid), dim3(threads), 0, stream, h,
                    static_cast<const bf16*>(delta), dim, w, eps, out, early);
  }
}

template <int V, typename T>
void LaunchRmsNormRows(const void* x, int64_t ldx, void* y, int64_t ldy, int64_t n, int64_t dim,
                       const float* w, float eps, cudaStream_t stream) {
  (void)LaunchPdl(RmsNormRowsKernel<V, T>, dim3(static_cast<unsigned>(n)),
                  dim3(RowThreads(dim / V)), 0, stream, static_cast<const T*>(x), ldx,
                  static_cast<T*>(y), ldy, dim, w, eps);
}

template <int V, typename OT, bool kSilu>
void LaunchGated(const void* o, const void* gate, ActType gate_type, int64_t rows, int64_t dim,
                 const float* w, float eps, bf16* out, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(CeilDiv(rows, kGatedWarps));
  const OT* op = static_cast<const OT*>(o);
  if (gate_type == ActType::kF32) {
    (void)LaunchPdl(GatedRmsNormSigmoidKernel<V, OT, float, kSilu>, dim3(grid),
                    dim3(kGatedWarps * 32), 0, stream, op, static_cast<const float*>(gate), rows,
                    dim, w, eps, out);
  } else {
    (void)LaunchPdl(GatedRmsNormSigmoidKernel<V, OT, bf16, kSilu>, dim3(grid),
                    dim3(kGatedWarps * 32), 0, stream, op, static_cast<const bf16*>(gate), rows,
                    dim, w, eps, out);
  }
}

}  // namespace

Status AddRmsNorm(float* h, const void* delta, ActType delta_type, int64_t n, int64_t dim,
                  const float* w, float eps, bf16* out, cudaStream_t stream, bool early_trigger) {
  STRATA_RETURN_IF_ERROR(CheckRows("AddRmsNorm", n, dim, w, eps));
  if (h == nullptr) return absl::InvalidArgumentError("AddRmsNorm: h is null");
  if (delta != nullptr) STRATA_RETURN_IF_ERROR(CheckType(delta_type, "AddRmsNorm: delta_type"));
  if (n == 0) return OkStatus();
  const bool vec = dim % 4 == 0 && Vec4(h, ActType::kF32) && Vec4(w, ActType::kF32) &&
                   (delta == nullptr || Vec4(delta, delta_type)) &&
                   (out == nullptr || Vec4(out, ActType::kBf16));
  if (vec) {
    LaunchAddRmsNorm<4>(h, delta, delta_type, n, dim, w, eps, out, stream, early_trigger);
  } else {
    LaunchAddRmsNorm<1>(h, delta, delta_type, n, dim, w, eps, out, stream, early_trigger);
  }
  return LaunchStatus("AddRmsNormKernel");
}

Status EmbedRmsNormStart(const EmbedRmsNormStartArgs& a, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckRows("EmbedRmsNormStart", a.n, a.dim, a.w, a.eps));
  if (a.n0 < 0 || a.n1 < 0) {
    return absl::InvalidArgumentError("EmbedRmsNormStart: n0 and n1 must be >= 0");
  }
  if (a.n > a.n0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EmbedRmsNormStart: n = ", a.n, " rows need n0 >= n token words, got n0 = ", a.n0));
  }
  if ((a.n0 > 0 && (a.src0 == nullptr || a.dst0 == nullptr)) ||
      (a.n1 > 0 && (a.src1 == nullptr || a.dst1 == nullptr))) {
    return absl::InvalidArgumentError("EmbedRmsNormStart: a word span with words has a null end");
  }
  if (a.embed == nullptr || a.h == nullptr || a.out == nullptr) {
    return absl::InvalidArgumentError("EmbedRmsNormStart: embed, h and out must be set");
  }
  if (a.n == 0) return OkStatus();
  // AddRmsNorm's choice of V (without delta), so that the bits are its.
  const bool vec = a.dim % 4 == 0 && Vec4(a.h, ActType::kF32) && Vec4(a.w, ActType::kF32) &&
                   Vec4(a.out, ActType::kBf16);
  const unsigned grid = static_cast<unsigned>(a.n);
  if (vec) {
    (void)LaunchPdl(EmbedRmsNormStartKernel<4>, dim3(grid), dim3(RowThreads(a.dim / 4)), 0, stream,
                    a);
  } else {
    (void)LaunchPdl(EmbedRmsNormStartKernel<1>, dim3(grid), dim3(RowThreads(a.dim)), 0, stream, a);
  }
  return LaunchStatus("EmbedRmsNormStartKernel");
}

Status RmsNormRows(const void* x, int64_t ldx, void* y, int64_t ldy, ActType type, int64_t n,
                   int64_t dim, const float* w, float eps, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckRows("RmsNormRows", n, dim, w, eps));
  STRATA_RETURN_IF_ERROR(CheckType(type, "RmsNormRows: type"));
  if (x == nullptr) return absl::InvalidArgumentError("RmsNormRows: x is null");
  if (y == nullptr) return absl::InvalidArgumentError("RmsNormRows: y is null");
  if (ldx < dim) return absl::InvalidArgumentError("RmsNormRows: ldx < dim");
  if (ldy < dim) return absl::InvalidArgumentError("RmsNormRows: ldy < dim");
  if (x == y && ldx != ldy) {
    return absl::InvalidArgumentError("RmsNormRows: in place needs ldx == ldy");
  }
  if (n == 0) return OkStatus();
  const bool vec = dim % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && Vec4(x, type) && Vec4(y, type) &&
                   Vec4(w, ActType::kF32);
  if (type == ActType::kF32) {
    if (vec) {
      LaunchRmsNormRows<4, float>(x, ldx, y, ldy, n, dim, w, eps, stream);
    } else {
      LaunchRmsNormRows<1, float>(x, ldx, y, ldy, n, dim, w, eps, stream);
    }
  } else if (vec) {
    LaunchRmsNormRows<4, bf16>(x, ldx, y, ldy, n, dim, w, eps, stream);
  } else {
    LaunchRmsNormRows<1, bf16>(x, ldx, y, ldy, n, dim, w, eps, stream);
  }
  return LaunchStatus("RmsNormRowsKernel");
}

Status LayerNormRows(const void* x, int64_t ldx, void* y, int64_t ldy, ActType type, int64_t n,
                     int64_t dim, const float* w, const float* b, float eps, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckRows("LayerNormRows", n, dim, w, eps));
  STRATA_RETURN_IF_ERROR(CheckType(type, "LayerNormRows: type"));
  if (b == nullptr) return absl::InvalidArgumentError("LayerNormRows: b is null");
  if (x == nullptr) return absl::InvalidArgumentError("LayerNormRows: x is null");
  if (y == nullptr) return absl::InvalidArgumentError("LayerNormRows: y is null");
  if (ldx < dim) return absl::InvalidArgumentError("LayerNormRows: ldx < dim");
  if (ldy < dim) return absl::InvalidArgumentError("LayerNormRows: ldy < dim");
  if (x == y && ldx != ldy) {
    return absl::InvalidArgumentError("LayerNormRows: in place needs ldx == ldy");
  }
  if (n == 0) return OkStatus();
  const dim3 grid(static_cast<unsigned>(n)), block(RowThreads(dim));
  if (type == ActType::kF32) {
    (void)LaunchPdl(LayerNormRowsKernel<float>, grid, block, 0, stream,
                    static_cast<const float*>(x), ldx, static_cast<float*>(y), ldy, dim, w, b, eps);
  } else {
    (void)LaunchPdl(LayerNormRowsKernel<bf16>, grid, block, 0, stream, static_cast<const bf16*>(x),
                    ldx, static_cast<bf16*>(y), ldy, dim, w, b, eps);
  }
  return LaunchStatus("LayerNormRowsKernel");
}

namespace {

template <bool kSilu>
Status GatedRmsNorm(const char* op, const void* o, ActType o_type, const void* gate,
                    ActType gate_type, int64_t rows, int64_t dim, const float* w, float eps,
                    bf16* out, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckRows(op, rows, dim, w, eps));
  STRATA_RETURN_IF_ERROR(CheckType(o_type, absl::StrCat(op, ": o_type").c_str()));
  STRATA_RETURN_IF_ERROR(CheckType(gate_type, absl::StrCat(op, ": gate_type").c_str()));
  if (o == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": o is null"));
  if (gate == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": gate is null"));
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": out is null"));
  if (rows == 0) return OkStatus();
  const bool vec = dim % 4 == 0 && Vec4(o, o_type) && Vec4(gate, gate_type) &&
                   Vec4(w, ActType::kF32) && Vec4(out, ActType::kBf16);
  if (o_type == ActType::kF32) {
    if (vec) {
      LaunchGated<4, float, kSilu>(o, gate, gate_type, rows, dim, w, eps, out, stream);
    } else {
      LaunchGated<1, float, kSilu>(o, gate, gate_type, rows, dim, w, eps, out, stream);
    }
  } else if (vec) {
    LaunchGated<4, bf16, kSilu>(o, gate, gate_type, rows, dim, w, eps, out, stream);
  } else {
    LaunchGated<1, bf16, kSilu>(o, gate, gate_type, rows, dim, w, eps, out, stream);
  }
  return LaunchStatus("GatedRmsNormSigmoidKernel");
}

}  // namespace

Status GatedRmsNormSigmoid(const void* o, ActType o_type, const void* gate, ActType gate_type,
                           int64_t rows, int64_t dim, const float* w, float eps, bf16* out,
                           cudaStream_t stream) {
  return GatedRmsNorm<false>("GatedRmsNormSigmoid", o, o_type, gate, gate_type, rows, dim, w, eps,
                             out, stream);
}

Status GatedRmsNormSilu(const void* o, ActType o_type, const void* gate, ActType gate_type,
                        int64_t rows, int64_t dim, const float* w, float eps, bf16* out,
                        cudaStream_t stream) {
  return GatedRmsNorm<true>("GatedRmsNormSilu", o, o_type, gate, gate_type, rows, dim, w, eps, out,
                            stream);
}

}  // namespace strata::cuda
