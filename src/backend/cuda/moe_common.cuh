// Internals shared by the MoE files: moe.cu (MoeForward, the dispatch),
// moe_route.cu (routing and the plan), moe_decode.cu (the grouped GEMV and
// the combine) and moe_prefill.cu (the grouped GEMM and the FP8 dequantisation).
// moe.cu's file comment has the pipeline. Not an interface.
#ifndef STRATA_BACKEND_CUDA_MOE_COMMON_CUH_
#define STRATA_BACKEND_CUDA_MOE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cta_probe.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_grouped_gemm_sm90.h"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda::moe_detail {

using route::BiasedFromSigmoid;
using route::CtaRouteShared;
using route::RanksAbove;
using route::RouteTokenCta;
using route::SigmoidLikeCpu;
using route::WriteSigmoidPicks;

constexpr int kMaxExperts = route::kRouteMaxExperts;
constexpr int kMaxTopK = route::kRouteMaxTopK;
constexpr int64_t kFusedRouteMaxTokens = 128;
constexpr int64_t kMoeGemvMaxRows = 512;  // n·k at or below: grouped GEMV
constexpr int64_t kFusedCombineMaxTokens = 4;
constexpr int kPlanThreads = 1024;
constexpr int kRouteWarps = 8;
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kGemvTokens = 8;  // token rows per pass over a weight tile
// Output features per CTA of the fused down+combine. 18 at D = 2304 is 128
// CTAs: one wave at one CTA per SM (18 rows in flight per lane take ~150
// registers). 8 rows made 288 CTAs at two per SM, i.e. 264 in a first wave and
// 24 in a second. One wave gains less than the second wave's share suggests
// (docs/dev/journal/performance.md): each warp still has 4 dependent rounds
// of loads.
constexpr int kFusedRows = 18;
// The folded shared expert's I at most (MoeFoldsSharedExpert): 76 KB of its
// rows in the down kernel's shared memory.
constexpr int64_t kMaxFoldInter = 2048;
constexpr int kCombineThreads = 256;

// Grouped GEMM tiling.
constexpr int kBm = 64;   // token rows
constexpr int kBn = 128;  // weight rows
constexpr int kBk = 32;
constexpr int kStages = 4;
constexpr int kLds = kBk + 8;  // padded row: 80 bytes, ldmatrix rows hit distinct banks
constexpr int kGemmThreads = 256;
constexpr size_t kGemmSmemBytes =
    static_cast<size_t>(kStages) * (kBm + kBn) * kLds * sizeof(bf16);  // 61440

// One parameter block for every kernel of the layer (passed by value).
struct MoeParams {
  int num_tokens;
  int num_experts;
  int hidden;  // D
  int inter;   // I
  int top_k;
  int renormalize;
  float routed_scaling;
  int num_groups;  // <= 1: no group limit
  int topk_groups;
  int softmax;       // 1: softmax routing (cpu::RouteSoftmaxTopK), no bias or groups
  int cta_route;     // 1: one token, routed by the whole CTA (RouteTokenCta)
  int direct;        // 1: one token without a plan: slot / pair j is pick j, h row j
  int down_preload;  // 1 (with direct): the down kernel loads its first weights before its wait
  STRATA_PROBE_FIELD(probe_gu)  // the one-token gate|up kernel (cta_probe.cuh)
  STRATA_PROBE_FIELD(probe_dn)  // the one-token down+combine kernel
  // 1 (with direct): the shared expert is pick top_k (h row top_k), its
  // weights at sw13 [2I, D] and sw2 [D, I], its weight 1 (MoeArgs::shared_w13).
  int shared;
  const bf16* sw13;
  const bf16* sw2;
  const bf16* x;        // [n, D]
  const float* logits;  // [n, E]
  const float* bias;    // [E] or null
  const bf16* w13;      // [E, 2I, D]; on the FP8 prefill path the chunk's scratch
  const bf16* w2;       // [E, D, I]; likewise
  // FP8 experts (MoeFp8Experts): codes, scales, block shape, scale grid sizes.
  const uint8_t* w13_fp8;
  const float* w13_scale;  // [E, sr13, sc_d]
  const uint8_t* w2_fp8;
  const float* w2_scale;  // [E, sr2, sc_i]
  int fp8_br;
  int fp8_bc;
  int sr13, sc_d, sr2, sc_i;
  // The grouped GEMM serves experts [expert_lo, expert_hi) only, with their
  // weights at w13/w2 from expert_lo on (bf16: 0 and E).
  int expert_lo;
  int expert_hi;
  bf16* deq13;  // FP8 prefill scratch: [chunk, 2I, D] and [chunk, D, I]
  bf16* deq2;
  float* y;              // [n, D]
  int accumulate;        // 1: y += the result (MoeArgs::accumulate)
  int32_t* idx;          // [n·k] expert of pair (t, j)
  float* wt;             // [n·k] routing weight of pair (t, j)
  int32_t* offsets;      // [E + 1] first row of each expert
  int32_t* meta;         // [0] active experts, [1] GEMM tiles
  int32_t* active;       // [E] active experts, ascending
  int32_t* tile_expert;  // [tile bound]
  int32_t* tile_m0;      // [tile bound] first row of the tile within its expert
  int32_t* row_token;    // [n·k] token of each expert-sorted row
  int32_t* pair_row;     // [n·k] row of pair (t, j)
  bf16* h;               // [n·k, I]
  float* yrows;          // [n·k, D]
};

inline int64_t TileBound(int64_t rows, int64_t experts) {
  return CeilDiv(rows, kBm) + std::min(experts, rows);
}

// Workspace slices, 256-byte aligned each, for n tokens.
struct Layout {
  size_t idx, wt, offsets, meta, active, tile_expert, tile_m0, row_token, pair_row, h, yrows;
  size_t deq;  // FP8 prefill scratch (deq_experts experts), if any
  int64_t deq_experts;
  // CUTLASS grouped GEMM (moe_grouped_gemm_sm90.h): its group arrays and
  // workspace, 0 bytes when the path cannot run; its gathered x and gate|up
  // output overlay yrows (dead before the down GEMM writes it).
  size_t sm90;
  size_t sm90_bytes;
  size_t total;
};

// Whether the tensor-core grouped GEMM's tiles fit the shape (alignment
// aside), and whether n·k rows take it outside batch-invariant mode.
inline bool GemmTileShape(const MoeShape& s) { return s.hidden % kBn == 0 && s.inter % 64 == 0; }
inline bool GemmShape(const MoeShape& s, int64_t rows) {
  return rows > kMoeGemvMaxRows && GemmTileShape(s);
}

// Experts per dequantisation chunk of the FP8 prefill path.
inline int64_t Fp8ChunkExperts(const MoeShape& s) {
  const int64_t per_expert = 3 * s.inter * s.hidden * static_cast<int64_t>(sizeof(bf16));
  return std::max<int64_t>(1, std::min(s.num_experts, kMoeFp8ScratchBytes / per_expert));
}

// Whether n·k rows may take the CUTLASS grouped GEMM (bf16 experts; the
// choice between it and mma.sync is made per call, see UseSm90).
inline bool Sm90Shape(const MoeShape& s, int64_t rows) {
  return !s.fp8_experts && GemmShape(s, rows) && MoeSm90GemmAvailable() &&
         MoeSm90GemmShapeOk(s.hidden, s.inter);
}

// invariant: batch-invariant mode, where FP8 experts take the grouped GEMM
// (and its dequantisation scratch) at every n.
inline Layout MakeLayout(const MoeShape& s, int64_t n, bool invariant) {
  const size_t rows = static_cast<size_t>(n * s.top_k);
  const size_t tiles = static_cast<size_t>(TileBound(n * s.top_k, s.num_experts));
  const size_t e = static_cast<size_t>(s.num_experts);
  Layout l{};
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += AlignUp(bytes);
    return at;
  };
  l.idx = take(sizeof(int32_t) * rows);
  l.wt = take(sizeof(float) * rows);
  l.offsets = take(sizeof(int32_t) * (e + 1));
  l.meta = take(sizeof(int32_t) * 4);
  l.active = take(sizeof(int32_t) * e);
  l.tile_expert = take(sizeof(int32_t) * tiles);
  l.tile_m0 = take(sizeof(int32_t) * tiles);
  l.row_token = take(sizeof(int32_t) * rows);
  l.pair_row = take(sizeof(int32_t) * rows);
  // One more row: the folded shared expert's (MoeParams::shared).
  l.h = take(sizeof(bf16) * (rows + 1) * static_cast<size_t>(s.inter));
  l.sm90_bytes = Sm90Shape(s, n * s.top_k) ? MoeSm90WorkspaceBytes(s.num_experts) : 0;
  l.yrows = take(std::max(
      sizeof(float) * rows * static_cast<size_t>(s.hidden),
      l.sm90_bytes > 0 ? MoeSm90ActivationBytes(n * s.top_k, s.hidden, s.inter) : size_t{0}));
  l.sm90 = take(l.sm90_bytes);
  const bool gemm = invariant ? GemmTileShape(s) : GemmShape(s, n * s.top_k);
  l.deq_experts = s.fp8_experts && gemm ? Fp8ChunkExperts(s) : 0;
  l.deq = take(sizeof(bf16) * 3 * static_cast<size_t>(l.deq_experts) *
               static_cast<size_t>(s.inter) * static_cast<size_t>(s.hidden));
  l.total = off;
  return l;
}

inline Status CheckShape(const MoeShape& s, const char* fn) {
  if (s.num_experts < 1 || s.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": shape.num_experts must be in [1, ",
                                                   kMaxExperts, "], got ", s.num_experts));
  }
  if (s.top_k < 1 || s.top_k > std::min<int64_t>(s.num_experts, kMaxTopK)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.top_k must be in [1, min(num_experts, ", kMaxTopK, ")], got ",
                     s.top_k, " with num_experts ", s.num_experts));
  }
  if (s.softmax && s.num_groups > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": softmax routing takes no expert groups, got ", s.num_groups));
  }
  if (s.num_groups > 1) {
    const int64_t g = s.num_groups;
    if (g > 32 || s.num_experts % g != 0 || s.num_experts / g < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          fn,
          ": shape.num_groups must be at most 32 and divide num_experts into groups of at "
          "least 2, got ",
          g, " groups of ", s.num_experts, " experts"));
    }
    if (s.topk_groups < 1 || s.topk_groups > g || s.top_k > s.topk_groups * (s.num_experts / g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          fn,
          ": shape.topk_groups must be in [1, num_groups] and leave at least top_k eligible "
          "experts, got ",
          s.topk_groups, " of ", g, " groups for top_k ", s.top_k));
    }
  }
  if (!std::isfinite(s.routed_scaling)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.routed_scaling must be finite, got ", s.routed_scaling));
  }
  return OkStatus();
}

inline Status CheckFfnShape(const MoeShape& s, const char* fn) {
  if (s.hidden < 1 || s.hidden > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.hidden must be in [1, 2^20], got ", s.hidden));
  }
  if (s.inter < 1 || s.inter > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": shape.inter must be in [1, 2^20], got ", s.inter));
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Launch helpers.

template <typename Kernel>
inline Status Launch(const char* name, Kernel kernel, dim3 grid, dim3 block, size_t smem,
                     cudaStream_t stream, const MoeParams& p) {
  const cudaError_t err = LaunchPdl(kernel, grid, block, smem, stream, p);
  if (err != cudaSuccess) return CudaError(err, name);
  return OkStatus();
}

// ---------------------------------------------------------------------------
// Grouped GEMV (decode).

// V = 8: 16-byte loads (rows 16-byte aligned, length a multiple of 8);
// V = 1: scalar fallback for any shape.
template <int V>
struct Raw;
template <>
struct Raw<8> {
  uint4 v;
};
template <>
struct Raw<1> {
  unsigned short v;
};

template <int V>
__device__ __forceinline__ Raw<V> LoadWeight(const bf16* p);
template <>
__device__ __forceinline__ Raw<8> LoadWeight<8>(const bf16* p) {
  // Read once: skip L1 (it keeps the activation rows) and fetch 256-byte L2 blocks.
  Raw<8> r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.v.x), "=r"(r.v.y), "=r"(r.v.z), "=r"(r.v.w)
               : "l"(p));
  return r;
}
template <>
__device__ __forceinline__ Raw<1> LoadWeight<1>(const bf16* p) {
  return Raw<1>{__ldg(reinterpret_cast<const unsigned short*>(p))};
}

template <int V>
__device__ __forceinline__ Raw<V> LoadAct(const bf16* p);
template <>
__device__ __forceinline__ Raw<8> LoadAct<8>(const bf16* p) {
  return Raw<8>{__ldg(reinterpret_cast<const uint4*>(p))};
}
template <>
__device__ __forceinline__ Raw<1> LoadAct<1>(const bf16* p) {
  return Raw<1>{__ldg(reinterpret_cast<const unsigned short*>(p))};
}

__device__ __forceinline__ void Unpack(const Raw<8>& r, float (&f)[8]) {
  const float2 a = Bf16x2ToF32(r.v.x), b = Bf16x2ToF32(r.v.y);
  const float2 c = Bf16x2ToF32(r.v.z), d = Bf16x2ToF32(r.v.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}
__device__ __forceinline__ void Unpack(const Raw<1>& r, float (&f)[1]) {
  f[0] = Bf16BitsToF32(r.v);
}

// One FP8 weight row: its codes and its row of block scales (bc columns per
// scale). The bf16 kernels use a plain row pointer instead.
struct Fp8Row {
  const uint8_t* w;
  const float* s;
  int bc;
};

// V codes and the scale of their block (V divides bc, so they share one).
template <int V>
struct Fp8Raw;
template <>
struct Fp8Raw<8> {
  uint2 c;
  float s;
};
template <>
struct Fp8Raw<1> {
  uint8_t c;
  float s;
};

template <int V>
__device__ __forceinline__ Raw<V> LoadRow(const bf16* w, int k) {
  return LoadWeight<V>(w + k);
}
template <int V>
__device__ __forceinline__ Fp8Raw<V> LoadRow(const Fp8Row& w, int k);
template <>
__device__ __forceinline__ Fp8Raw<8> LoadRow<8>(const Fp8Row& w, int k) {
  Fp8Raw<8> r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(r.c.x), "=r"(r.c.y)
               : "l"(w.w + k));
  r.s = __ldg(w.s + k / w.bc);
  return r;
}
template <>
__device__ __forceinline__ Fp8Raw<1> LoadRow<1>(const Fp8Row& w, int k) {
  return Fp8Raw<1>{__ldg(w.w + k), __ldg(w.s + k / w.bc)};
}

// The host's dequantisation: the exact e4m3 value (every one is an f16) times
// the scale in fp32, rounded once to bf16.
__device__ __forceinline__ float DequantE4m3(float code, float s) {
  return __bfloat162float(__float2bfloat16_rn(__fmul_rn(code, s)));
}
__device__ __forceinline__ void Unpack4(uint32_t codes, float s, float* f) {
  const float2 a = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3)));
  const float2 b = __half22float2(__half2(
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes >> 16), __NV_E4M3)));
  f[0] = DequantE4m3(a.x, s);
  f[1] = DequantE4m3(a.y, s);
  f[2] = DequantE4m3(b.x, s);
  f[3] = DequantE4m3(b.y, s);
}
__device__ __forceinline__ void Unpack(const Fp8Raw<8>& r, float (&f)[8]) {
  Unpack4(r.c.x, r.s, f);
  Unpack4(r.c.y, r.s, f + 4);
}
__device__ __forceinline__ void Unpack(const Fp8Raw<1>& r, float (&f)[1]) {
  f[0] = DequantE4m3(__half2float(__half(__nv_cvt_fp8_to_halfraw(r.c, __NV_E4M3))), r.s);
}

template <typename W>
struct RowOf;
template <>
struct RowOf<bf16> {
  using type = const bf16*;
};
template <>
struct RowOf<uint8_t> {
  using type = Fp8Row;
};

// Row r of expert e's w13 [2I, D] / w2 [D, I].
template <typename W>
__device__ __forceinline__ typename RowOf<W>::type W13Row(const MoeParams& p, int e, int r);
template <>
__device__ __forceinline__ const bf16* W13Row<bf16>(const MoeParams& p, int e, int r) {
  return p.w13 + (static_cast<size_t>(e) * 2 * p.inter + r) * static_cast<size_t>(p.hidden);
}
template <>
__device__ __forceinline__ Fp8Row W13Row<uint8_t>(const MoeParams& p, int e, int r) {
  return Fp8Row{
      p.w13_fp8 + (static_cast<size_t>(e) * 2 * p.inter + r) * static_cast<size_t>(p.hidden),
      p.w13_scale + (static_cast<size_t>(e) * p.sr13 + r / p.fp8_br) * p.sc_d, p.fp8_bc};
}
template <typename W>
__device__ __forceinline__ typename RowOf<W>::type W2Row(const MoeParams& p, int e, int r);
template <>
__device__ __forceinline__ const bf16* W2Row<bf16>(const MoeParams& p, int e, int r) {
  return p.w2 + (static_cast<size_t>(e) * p.hidden + r) * static_cast<size_t>(p.inter);
}
template <>
__device__ __forceinline__ Fp8Row W2Row<uint8_t>(const MoeParams& p, int e, int r) {
  return Fp8Row{p.w2_fp8 + (static_cast<size_t>(e) * p.hidden + r) * static_cast<size_t>(p.inter),
                p.w2_scale + (static_cast<size_t>(e) * p.sr2 + r / p.fp8_br) * p.sc_i, p.fp8_bc};
}

// acc[r][t] += wf[r] · xf (v ascending): one load step of R rows against
// activation row t, the order every warp dot product here sums in.
template <int V, int R, int TC>
__device__ __forceinline__ void FmaRows(const float (&wf)[R][V], const float (&xf)[V], int t,
                                        float (&acc)[R][TC]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int v = 0; v < V; ++v) acc[r][t] = fmaf(wf[r][v], xf[v], acc[r][t]);
  }
}

// One group of WarpDot: the loads of U steps of R rows from k0 (zeros past
// K), all issued before any use ...
template <int V, int R, int U, typename WR, typename RawT>
__device__ __forceinline__ void LoadDotGroup(const WR (&w)[R], int k0, int K, RawT (&wr)[R][U]) {
  constexpr int kStep = 32 * V;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * kStep;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (k < K) {
        wr[r][u] = LoadRow<V>(w[r], k);
      } else {
        wr[r][u] = {};
      }
    }
  }
}

// ... and their products against the first nt activation rows, step by step
// (kActShared: the rows are in shared memory, read with plain loads).
template <int V, int R, int TC, int U, bool kActShared = false, typename RawT>
__device__ __forceinline__ void UseDotGroup(const RawT (&wr)[R][U], const bf16* const (&act)[TC],
                                            int nt, int k0, int K, float (&acc)[R][TC]) {
  constexpr int kStep = 32 * V;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int k = k0 + u * kStep;
    if (k < K) {
      float wf[R][V];
#pragma unroll
      for (int r = 0; r < R; ++r) Unpack(wr[r][u], wf[r]);
#pragma unroll
      for (int t = 0; t < TC; ++t) {
        if (t < nt) {
          float xf[V];
          if constexpr (kActShared) {
            static_assert(V == 8, "16-byte rows");
            Unpack(Raw<8>{*reinterpret_cast<const uint4*>(act[t] + k)}, xf);
          } else {
            Unpack(LoadAct<V>(act[t] + k), xf);
          }
          FmaRows<V, R, TC>(wf, xf, t, acc);
        }
      }
    }
  }
}

// Per-lane partial dot products of R weight rows with TC activation rows over
// K elements (only the first nt activation rows are used). Every weight load
// of a U-step group is issued before the first use.
// kU = 0 picks 8 / R steps per group (1 for R ≥ 8); a larger kU covers a
// whole short row in one group, so the warp waits for DRAM once instead of
// once per group.
// WR: a bf16 row pointer or an Fp8Row (converted to the same bf16 values).
template <int V, int R, int TC, int kU = 0, typename WR>
__device__ __forceinline__ void WarpDot(const WR (&w)[R], const bf16* const (&act)[TC], int nt,
                                        int K, float (&acc)[R][TC]) {
  constexpr int U = kU > 0 ? kU : (R >= 8 ? 1 : 8 / R);
  constexpr int kStep = 32 * V;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < TC; ++t) acc[r][t] = 0.f;
  }
  for (int k0 = lane * V; k0 < K; k0 += kStep * U) {
    decltype(LoadRow<V>(w[0], 0)) wr[R][U];
    LoadDotGroup<V, R, U>(w, k0, K, wr);
    UseDotGroup<V, R, TC, U>(wr, act, nt, k0, K, acc);
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.f + expf(-g)); }

// h[row0 + t, j] = SiLU(gate)·up from a warp's per-lane partial sums of
// feature j (acc[0]: gate, acc[1]: up) for activation rows t < nt.
template <int TC>
__device__ __forceinline__ void StoreSwiGlu(const MoeParams& p, const float (&acc)[2][TC], int row0,
                                            int nt, int j) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    if (t < nt) {
      const float g = WarpSum(acc[0][t]);
      const float u = WarpSum(acc[1][t]);
      if (lane == t) {
        p.h[static_cast<size_t>(row0 + t) * p.inter + j] = __float2bfloat16_rn(Silu(g) * u);
      }
    }
  }
}

// h rows [row0, row0 + nt) of gate|up feature j for one expert.
template <int V, int TC, int kU, typename WR>
__device__ __forceinline__ void GateUpRows(const MoeParams& p, const WR& wg, const WR& wu, int row0,
                                           int nt, int j) {
  const bf16* act[TC];
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    const int tok = p.direct ? 0 : p.row_token[row0 + min(t, nt - 1)];
    act[t] = p.x + static_cast<size_t>(tok) * p.hidden;
  }
  const WR w[2] = {wg, wu};
  float acc[2][TC];
  WarpDot<V, 2, TC, kU>(w, act, nt, p.hidden, acc);
  StoreSwiGlu<TC>(p, acc, row0, nt, j);
}

// Grid (expert slot, ceil(I / w)) of w-warp CTAs (GateUpWarps); warp i of
// tile y computes feature j = w·y + i (gate row j and up row I + j) for
// every row of the slot's expert.
// W: bf16 or uint8_t (FP8 experts).

// --- across the MoE files ---------------------------------------------------
// moe_route.cu
bool UseCtaRoute(int64_t num_tokens, const MoeShape& s);
Status RouteAndPlan(const MoeParams& p, bool in_plan, cudaStream_t stream);
Status RouteOnly(const MoeParams& p, cudaStream_t stream);
// moe_decode.cu
bool DirectEnabled();
bool DownPreloadEnabled();
bool OneGroupRows(int64_t hidden);
bool DownSplitEnabled();
// The grouped-GEMV path (decode): gate|up, down (+ combine). V: elements per
// load (8: 16-byte loads, 1: scalar), W: bf16 or FP8 (uint8_t) weights.
template <int V, typename W>
Status LaunchGemvPath(MoeParams p, bool vec4_y, cudaStream_t stream);
// y[t] = Σ_k w_k · yrows[pair_row(t, k)] for every token.
Status LaunchCombine(const MoeParams& p, bool vec4_y, cudaStream_t stream);
// moe_prefill.cu
Status LaunchGemmPath(const MoeParams& p, bool vec4_y, int fp8_chunk, cudaStream_t stream);
bool UseSm90(MoeGemmImpl impl, int64_t rows);
Status LaunchSm90Path(const MoeParams& p, char* ws, const Layout& l, bool vec4_y,
                      cudaStream_t stream);

}  // namespace strata::cuda::moe_detail

#endif  // STRATA_BACKEND_CUDA_MOE_COMMON_CUH_
