// The MoE decode regime (n·k ≤ 512 rows, or shapes the GEMM cannot take): the
// grouped GEMV kernels on CUDA cores, the fused down+combine, and the combine.
#include "backend/cuda/moe_common.cuh"

namespace strata::cuda::moe_detail {

template <int V, int kU, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeGateUpGemvKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (static_cast<int>(blockIdx.x) >= p.meta[0]) return;
  const int e = p.active[blockIdx.x];
  const int first = p.offsets[e];
  const int count = p.offsets[e + 1] - first;
  const int j = blockIdx.y * static_cast<int>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= p.inter) return;
  const auto wg = W13Row<W>(p, e, j);
  const auto wu = W13Row<W>(p, e, p.inter + j);
  constexpr int kLargeU = kU > 4 ? 0 : kU;
  for (int t0 = 0; t0 < count; t0 += kGemvTokens) {
    const int nt = min(kGemvTokens, count - t0);
    if (nt == 1) {
      GateUpRows<V, 1, kU>(p, wg, wu, first + t0, nt, j);
    } else if (nt == 2) {
      GateUpRows<V, 2, kU>(p, wg, wu, first + t0, nt, j);
    } else if (nt <= 4) {
      // Four or eight token rows with a one-group row (kU ≥ 6) spill at 128
      // registers; the default grouping (4 steps) does not. The same
      // per-lane order of the products either way.
      GateUpRows<V, 4, kLargeU>(p, wg, wu, first + t0, nt, j);
    } else {
      GateUpRows<V, kGemvTokens, kLargeU>(p, wg, wu, first + t0, nt, j);
    }
  }
}

// The CTA's threads copy one bf16 row of `chunks` 16-byte chunks into shared
// memory (cp.async through L2) and commit the copies as one group.
__device__ __forceinline__ void StageRowAsync(uint4* dst, const bf16* src, int chunks) {
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) CpAsync16(dst + c, src + c * 8, true);
  CpAsyncCommit();
}

// The folded shared expert's feature j (MoeParams::shared): GateUpRows for
// one row (WarpDot's one group of kU steps, which covers the whole row:
// MoeFoldsSharedExpert checks D ≤ 256·kU), with the weights loaded before
// the PDL wait, i.e. while the route kernel still runs (they do not depend
// on it). The token's row x goes into the CTA's shared memory before the
// wait as well, through L2 (an SM's L1 may hold an older layer's x): x is
// the router's input, written before the router ran, so it is complete once
// the route kernel (which waited for the router) has let this grid start.
// Read after the wait instead, x queued behind the routed CTAs' weight
// loads on the same SMs and the shared CTAs held their slots for microseconds
// past the route's end (per-CTA timestamps, cta_probe.cuh;
// docs/dev/journal/performance.md). Every thread of the CTA
// calls it; has_j says whether its warp has a feature.
template <int kU>
__device__ __forceinline__ void SharedGateUpFeature(const MoeParams& p, int j, bool has_j,
                                                    uint4 (&xs)[kU * 32] STRATA_PROBE_PARAM) {
  StageRowAsync(xs, p.x, p.hidden / 8);
  const int k0 = (threadIdx.x & 31) * 8;
  const bf16* const w[2] = {p.sw13 + static_cast<size_t>(j) * p.hidden,
                            p.sw13 + static_cast<size_t>(p.inter + j) * p.hidden};
  Raw<8> wr[2][kU];
  if (has_j) LoadDotGroup<8, 2, kU>(w, k0, p.hidden, wr);
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_gu);
  PdlLaunchDependents();
  CpAsyncWait<0>();
  __syncthreads();
  if (!has_j) return;
  const bf16* const act[1] = {reinterpret_cast<const bf16*>(xs)};
  float acc[2][1] = {{0.f}, {0.f}};
  UseDotGroup<8, 2, 1, kU, true>(wr, act, 1, k0, p.hidden, acc);
  StoreSwiGlu<1>(p, acc, p.top_k, 1, j);
}

// The planless one-token path (MoeParams::direct) of MoeGateUpGemvKernel, in
// a kernel of its own: the planned kernel's 8-token variants set its register
// budget (at kU = 9 it spills at 128 registers), which the one-row path does
// not need. One dependent load before the weights stream (the planned path
// takes four: meta, active, offsets, row_token).
// Grid (top_k, ceil(I / w)) of w-warp CTAs (GateUpWarps; warp i of
// tile y computes feature w·y + i), or with a folded shared expert one
// dimension of (1 + top_k) · ceil(I / w) CTAs whose first ceil(I / w) are
// the shared expert's: launched first, they become resident and load their
// weights before the routed ones take the SMs.
template <int V, int kU, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeGateUpDirectKernel(MoeParams p) {
  STRATA_PROBE_START(p.probe_gu);
  int slot = static_cast<int>(blockIdx.x);
  int tile = static_cast<int>(blockIdx.y);
  if constexpr (V == 8 && kU > 0 && std::is_same_v<W, bf16>) {
    if (p.shared) {
      const int wpc = static_cast<int>(blockDim.x >> 5);
      const int tiles = (p.inter + wpc - 1) / wpc;
      const int at = static_cast<int>(blockIdx.x);
      const int j = at * wpc + (threadIdx.x >> 5);
      if (at < tiles) {
        __shared__ uint4 x_stage[kU * 32];
        SharedGateUpFeature<kU>(p, min(j, p.inter - 1), j < p.inter, x_stage STRATA_PROBE_PASS);
        STRATA_PROBE_END(p.probe_gu);
        return;
      }
      slot = (at - tiles) % p.top_k;
      tile = (at - tiles) / p.top_k;
    }
  }
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_gu);
  PdlLaunchDependents();
  const int e = p.idx[slot];
  const int j = tile * static_cast<int>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (j >= p.inter) return;
  GateUpRows<V, 1, kU>(p, W13Row<W>(p, e, j), W13Row<W>(p, e, p.inter + j), slot, 1, j);
  STRATA_PROBE_END(p.probe_gu);
}

// WarpDot for R ≥ 8 bf16 rows of one expert that lie `stride` elements apart
// from `base` (row r at base + min(r, last) · stride), one activation row,
// with the first step's loads already in `wr` (issued by the caller, e.g.
// before its PDL wait). The same products in the same order as WarpDot; the
// rows are addressed from one pointer because 18 row pointers next to 18
// in-flight loads exceed the 128 registers 16 warps leave.
template <int R>
__device__ __forceinline__ void RowBlockDotFirstLoaded(const bf16* base, size_t stride, int last,
                                                       const bf16* act, int K, Raw<8> (&wr)[R],
                                                       float (&acc)[R][1]) {
  static_assert(R >= 8, "one load step per group");
  constexpr int kStep = 32 * 8;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = 0.f;
  for (int k0 = lane * 8; k0 < K; k0 += kStep) {
    if (k0 != lane * 8) {
#pragma unroll
      for (int r = 0; r < R; ++r) wr[r] = LoadWeight<8>(base + min(r, last) * stride + k0);
    }
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r) Unpack(wr[r], wf[r]);
    float xf[8];
    Unpack(LoadAct<8>(act + k0), xf);
    FmaRows<8, R, 1>(wf, xf, 0, acc);
  }
}

// yrows rows [row0, row0 + nt), features d and d + 1 (d + 1 < D or skipped).
template <int V, int TC, typename WR>
__device__ __forceinline__ void DownRows(const MoeParams& p, const WR& w0, const WR& w1, bool has1,
                                         int row0, int nt, int d) {
  const int lane = threadIdx.x & 31;
  const bf16* act[TC];
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    act[t] = p.h + static_cast<size_t>(row0 + min(t, nt - 1)) * p.inter;
  }
  const WR w[2] = {w0, w1};
  float acc[2][TC];
  WarpDot<V, 2, TC>(w, act, nt, p.inter, acc);
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    if (t < nt) {
      const float a = WarpSum(acc[0][t]);
      const float b = WarpSum(acc[1][t]);
      if (lane == t) {
        float* out = p.yrows + static_cast<size_t>(row0 + t) * p.hidden + d;
        out[0] = a;
        if (has1) out[1] = b;
      }
    }
  }
}

// Grid (expert slot, ceil(D / 16)); warp w of tile y computes features
// 16y + 2w and 16y + 2w + 1.
template <int V, typename W>
__global__ void __launch_bounds__(kGemvThreads, 2) MoeDownGemvKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (static_cast<int>(blockIdx.x) >= p.meta[0]) return;
  const int e = p.active[blockIdx.x];
  const int first = p.offsets[e];
  const int count = p.offsets[e + 1] - first;
  const int d = blockIdx.y * (2 * kGemvWarps) + 2 * (threadIdx.x >> 5);
  if (d >= p.hidden) return;
  const bool has1 = d + 1 < p.hidden;
  const auto w0 = W2Row<W>(p, e, d);
  const auto w1 = W2Row<W>(p, e, has1 ? d + 1 : d);
  for (int t0 = 0; t0 < count; t0 += kGemvTokens) {
    const int nt = min(kGemvTokens, count - t0);
    if (nt == 1) {
      DownRows<V, 1>(p, w0, w1, has1, first + t0, nt, d);
    } else if (nt == 2) {
      DownRows<V, 2>(p, w0, w1, has1, first + t0, nt, d);
    } else if (nt <= 4) {
      DownRows<V, 4>(p, w0, w1, has1, first + t0, nt, d);
    } else {
      DownRows<V, kGemvTokens>(p, w0, w1, has1, first + t0, nt, d);
    }
  }
}

// Down product and combine in one kernel for n ≤ kFusedCombineMaxTokens.
// Grid ceil(D / kFusedRows): the CTA owns kFusedRows features. With kSplit =
// 2 (bf16 experts only) it has 16 warps and splits each row's k range in two
// at a multiple of 256: warp w takes pairs q = w % 8, w % 8 + 8,
// ... over k half w / 8, so every warp streams its 18 rows in two dependent
// rounds of loads instead of four (K = 1024). Partial results go to shared
// memory per half; then y[t, d] = Σ_j wt[t, j] · (part₀ + part₁)[t, j, d] in
// j order. kSplit = 1: 8 warps over the whole k range (moe.down_split=0).
template <int V, typename W, int kSplit>
__global__ void __launch_bounds__(kGemvThreads* kSplit) MoeDownCombineKernel(MoeParams p) {
  static_assert(kSplit == 1 || std::is_same_v<W, bf16>, "FP8 rows are not split");
  __shared__ float part[kSplit][kFusedCombineMaxTokens * kMaxTopK][kFusedRows];
  STRATA_PROBE_START(p.probe_dn);
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) % kGemvWarps;
  const int half = (threadIdx.x >> 5) / kGemvWarps;
  const int d0 = blockIdx.x * kFusedRows;
  const int pairs = p.num_tokens * p.top_k;
  const size_t I = static_cast<size_t>(p.inter);
  // The split point: half of K rounded up to a lane's step (32·V elements);
  // a K too short for it leaves half 1 idle.
  constexpr int kUnit = 32 * V;
  const int split = kSplit == 2 ? min(p.inter, (p.inter / 2 + kUnit - 1) / kUnit * kUnit) : p.inter;
  const int kb = half == 0 ? 0 : split;
  const int ke = half == 0 ? split : p.inter;
  // One token (direct): warp w's only pair is pick w, whose expert the route
  // kernel wrote before the gate|up kernel this one follows started (that
  // kernel waited for it), so the first step of its rows is loaded before
  // the PDL wait, while gate|up's last CTAs drain. idx is read through L2
  // (ld.cg): route's writes are there, an SM's L1 may hold an older layer's.
  constexpr bool kMayPreload = kSplit == 2 && V == 8;  // bf16 rows (kSplit 2)
  const int last = p.hidden - 1 - d0;                  // rows past D repeat the last one
  Raw<8> first[kFusedRows];
  int first_e = -1;
  if constexpr (kMayPreload) {
    if (p.down_preload && p.direct && warp < pairs && lane * V < ke - kb) {
      first_e = __ldcg(p.idx + warp);
      const bf16* base = W2Row<bf16>(p, first_e, d0) + kb + lane * V;
#pragma unroll
      for (int r = 0; r < kFusedRows; ++r) first[r] = LoadWeight<8>(base + min(r, last) * I);
    }
  }
  // The folded shared expert (direct, bf16): its rows d0 … d0 + 17 of sw2
  // do not depend on routing; they are copied into shared memory before the
  // wait, and the CTA's warps form its dots after the routed pairs.
  constexpr bool kMayFold = kSplit == 2 && V == 8;
  // [kFusedRows][chunks] rows, then [chunks] the shared expert's h row.
  extern __shared__ uint4 shared_rows[];
  [[maybe_unused]] const int chunks = p.inter / 8;  // 16-byte chunks of a row of I
  if constexpr (kMayFold) {
    if (p.shared) {
      for (int c = threadIdx.x; c < kFusedRows * chunks; c += blockDim.x) {
        const int r = c / chunks;
        CpAsync16(shared_rows + c,
                  p.sw2 + static_cast<size_t>(min(d0 + r, p.hidden - 1)) * I + (c % chunks) * 8,
                  true);
      }
      CpAsyncCommit();
    }
  }
  PdlWait();
  STRATA_PROBE_WAITED(p.probe_dn);
  PdlLaunchDependents();
  // accumulate: the thread that writes output o reads its old value now, so
  // the load lands while the rows stream instead of after the last dot.
  float y_old = 0.f;
  if (p.accumulate && static_cast<int>(threadIdx.x) < p.num_tokens * kFusedRows) {
    const int t = threadIdx.x / kFusedRows;
    const int d = d0 + threadIdx.x % kFusedRows;
    if (d < p.hidden) y_old = p.y[static_cast<size_t>(t) * p.hidden + d];
  }
  if constexpr (kMayFold) {
    // The shared expert's h row (written by the gate|up kernel): one L2
    // round trip for the CTA, landing while the routed pairs stream.
    if (p.shared) {
      StageRowAsync(shared_rows + kFusedRows * chunks, p.h + static_cast<size_t>(p.top_k) * I,
                    chunks);
    }
  }
  for (int q = warp; q < pairs; q += kGemvWarps) {
    const int e = p.idx[q];
    typename RowOf<W>::type w[kFusedRows];
#pragma unroll
    for (int r = 0; r < kFusedRows; ++r) {
      if constexpr (kSplit == 2) {
        w[r] = W2Row<W>(p, e, min(d0 + r, p.hidden - 1)) + kb;
      } else {
        w[r] = W2Row<W>(p, e, min(d0 + r, p.hidden - 1));
      }
    }
    const bf16* act[1] = {p.h + static_cast<size_t>(p.direct ? q : p.pair_row[q]) * I + kb};
    float acc[kFusedRows][1];
    if constexpr (kMayPreload) {
      // `first` serves both cases (a second array of 18 loads spilled): the
      // first step is loaded here unless it was before the wait.
      const bf16* base = W2Row<bf16>(p, e, d0) + kb;
      if ((q != warp || first_e != e) && lane * V < ke - kb) {
#pragma unroll
        for (int r = 0; r < kFusedRows; ++r) {
          first[r] = LoadWeight<8>(base + min(r, last) * I + lane * V);
        }
      }
      RowBlockDotFirstLoaded<kFusedRows>(base, I, last, act[0], ke - kb, first, acc);
    } else {
      WarpDot<V, kFusedRows, 1>(w, act, 1, ke - kb, acc);
    }
#pragma unroll
    for (int r = 0; r < kFusedRows; ++r) {
      const float s = WarpSum(acc[r][0]);
      if (lane == r) part[half][q][r] = s;
    }
  }
  if constexpr (kMayFold) {
    if (p.shared) {
      // Dot (row r, half hf) of the shared expert, 36 of them over the
      // CTA's 16 warps: lane chunks ascending, then the warp sum.
      CpAsyncWait<0>();
      __syncthreads();
      const uint4* act = shared_rows + kFusedRows * chunks;
      for (int task = threadIdx.x >> 5; task < kSplit * kFusedRows;
           task += static_cast<int>(blockDim.x >> 5)) {
        const int r = task % kFusedRows;
        const int hf = task / kFusedRows;
        const int c0 = (hf == 0 ? 0 : split) / 8;
        const int c1 = (hf == 0 ? split : p.inter) / 8;
        float acc[1][1] = {{0.f}};
        for (int c = c0 + lane; c < c1; c += 32) {
          float wf[1][8], xf[8];
          Unpack(Raw<8>{shared_rows[r * chunks + c]}, wf[0]);
          Unpack(Raw<8>{act[c]}, xf);
          FmaRows<8, 1, 1>(wf, xf, 0, acc);
        }
        const float s = WarpSum(acc[0][0]);
        if (lane == 0) part[hf][pairs][r] = s;
      }
    }
  }
  __syncthreads();
  // One pass (y_old above is this thread's only output).
  static_assert(kGemvThreads >= kFusedCombineMaxTokens * kFusedRows);
  for (int o = threadIdx.x; o < p.num_tokens * kFusedRows; o += blockDim.x) {
    const int t = o / kFusedRows;
    const int r = o % kFusedRows;
    const int d = d0 + r;
    if (d >= p.hidden) continue;
    float s = 0.f;
    for (int j = 0; j < p.top_k; ++j) {
      const int q = t * p.top_k + j;
      float pq = part[0][q][r];
      if constexpr (kSplit == 2) pq = pq + part[1][q][r];
      s = fmaf(p.wt[q], pq, s);
    }
    if constexpr (kMayFold) {
      if (p.shared) s += part[0][pairs][r] + part[1][pairs][r];
    }
    // y_old + s is the add AddRmsNorm makes with y as its delta: the same bits.
    if (p.accumulate) s = y_old + s;
    p.y[static_cast<size_t>(t) * p.hidden + d] = s;
  }
  STRATA_PROBE_END(p.probe_dn);
}

// y[t] = Σ_j wt[t, j] · yrows[pair_row[t, j]], j ascending. Grid n.
template <bool kVec4>
__global__ void __launch_bounds__(kCombineThreads) MoeCombineKernel(MoeParams p) {
  __shared__ int rows[kMaxTopK];
  __shared__ float wts[kMaxTopK];
  PdlWait();
  PdlLaunchDependents();
  const int t = blockIdx.x;
  const int k = p.top_k;
  if (static_cast<int>(threadIdx.x) < k) {
    rows[threadIdx.x] = p.pair_row[t * k + threadIdx.x];
    wts[threadIdx.x] = p.wt[t * k + threadIdx.x];
  }
  __syncthreads();
  const size_t D = static_cast<size_t>(p.hidden);
  float* yt = p.y + static_cast<size_t>(t) * D;
  if (kVec4) {
    for (size_t d = threadIdx.x * 4; d < D; d += blockDim.x * 4) {
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int j = 0; j < k; ++j) {
        const float a = wts[j];
        const float4 v = *reinterpret_cast<const float4*>(p.yrows + rows[j] * D + d);
        s.x = fmaf(a, v.x, s.x);
        s.y = fmaf(a, v.y, s.y);
        s.z = fmaf(a, v.z, s.z);
        s.w = fmaf(a, v.w, s.w);
      }
      if (p.accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(yt + d);
        s = make_float4(o.x + s.x, o.y + s.y, o.z + s.z, o.w + s.w);
      }
      *reinterpret_cast<float4*>(yt + d) = s;
    }
  } else {
    for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
      float s = 0.f;
      for (int j = 0; j < k; ++j) s = fmaf(wts[j], p.yrows[rows[j] * D + d], s);
      yt[d] = p.accumulate ? yt[d] + s : s;
    }
  }
}

// Whether a routed token may skip the plan (MoeParams::direct);
// moe.direct=0 turns that off (the same bits either way).
bool DirectEnabled() { return tuning::Current().On(tuning::Key::kMoeDirect); }

// Whether the one-token down+combine kernel loads its first weights before
// its PDL wait (MoeParams::down_preload); moe.down_preload=0 turns that off
// (the same bits either way).
bool DownPreloadEnabled() { return tuning::Current().On(tuning::Key::kMoeDownPreload); }

// Whether a gate|up row short enough fits one group of loads per warp
// (moe.one_round=0 turns that off).
bool OneRoundEnabled() { return tuning::Current().On(tuning::Key::kMoeOneRound); }

// Whether 16-byte loads read a gate|up row of `hidden` elements in one group
// (5 to 9 steps of 256: the kernels' kU > 0).
bool OneGroupRows(int64_t hidden) {
  const int64_t steps = CeilDiv(hidden, 256);
  return OneRoundEnabled() && steps > 4 && steps <= 9;
}

// The gate|up kernel for rows of `hidden` elements: with 16-byte loads, a row
// of up to 9 · 256 elements (Kimi's 2304) is read in one group (2 rows × 9
// loads of 16 bytes per lane, 72 registers) instead of three dependent ones.
// direct: the planless one-token kernel, else the planned one.
template <int V, int kU, typename W>
void (*GateUpKernel(bool direct))(MoeParams) {
  return direct ? MoeGateUpDirectKernel<V, kU, W> : MoeGateUpGemvKernel<V, kU, W>;
}

template <int V, typename W>
void (*GateUpKernelFor(int hidden, bool direct))(MoeParams) {
  if constexpr (V == 8) {
    if (OneGroupRows(hidden)) {
      const int64_t steps = CeilDiv(hidden, 32 * V);
      if (steps <= 6) return GateUpKernel<V, 6, W>(direct);
      if (steps <= 8) return GateUpKernel<V, 8, W>(direct);
      return GateUpKernel<V, 9, W>(direct);
    }
  }
  return GateUpKernel<V, 0, W>(direct);
}

// Warps (features) per CTA of the decode gate|up kernels: 4. Their CTAs
// live for one round of loads each; four smaller CTAs per SM instead of two
// turn the slots over in smaller pieces through the waves and the tail, and
// the next kernel's CTAs find room sooner: 4 warps beat 8 at batch 1, 8 and
// 32, and 2 warps are no better than 4 (docs/dev/journal/performance.md).
// moe.gate_up_warps=2|4|8 picks (the same bits: a feature's products do
// not depend on it).
int GateUpWarps() {
  constexpr int kWarps[] = {2, 4, 8};  // the entry's choices, in order
  return kWarps[tuning::Current().Int(tuning::Key::kMoeGateUpWarps)];
}

// Whether the fused down+combine splits each row's k range between two warps
// (moe.down_split=0: one warp per row over all of k).
bool DownSplitEnabled() { return tuning::Current().On(tuning::Key::kMoeDownSplit); }

template <int V, typename W>
Status LaunchGemvPath(MoeParams p, bool vec4_y, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const unsigned slots = static_cast<unsigned>(std::min<int64_t>(p.num_experts, rows));
  const int wpc = GateUpWarps();
  const unsigned tiles = static_cast<unsigned>(CeilDiv(p.inter, wpc));
  // A folded shared expert: one dimension, its CTAs first (see the kernel).
  const dim3 gate_up_grid = p.shared ? dim3((slots + 1) * tiles) : dim3(slots, tiles);
  if (p.direct) {
    STRATA_PROBE_SLOT(p.probe_gu, "moe_gateup", int64_t{gate_up_grid.x} * gate_up_grid.y);
    STRATA_PROBE_SLOT(p.probe_dn, "moe_down", CeilDiv(p.hidden, kFusedRows));
  }
  STRATA_RETURN_IF_ERROR(Launch("MoeGateUpGemvKernel",
                                GateUpKernelFor<V, W>(p.hidden, p.direct != 0), gate_up_grid,
                                dim3(32 * wpc), 0, stream, p));
  if (p.num_tokens <= kFusedCombineMaxTokens) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.hidden, kFusedRows)));
    // bf16 only: FP8 rows (codes and scales) need more than the 128
    // registers 16 warps leave a thread.
    if constexpr (std::is_same_v<W, bf16>) {
      if (DownSplitEnabled()) {
        // The folded shared expert's rows are staged in dynamic shared memory.
        const size_t smem =
            p.shared ? sizeof(bf16) * (kFusedRows + 1) * static_cast<size_t>(p.inter) : 0;
        if (smem > 0) {
          const cudaError_t err = cudaFuncSetAttribute(MoeDownCombineKernel<V, W, 2>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(smem));
          if (err != cudaSuccess) return CudaError(err, "cudaFuncSetAttribute(MoeDownCombine)");
        }
        return Launch("MoeDownCombineKernel", MoeDownCombineKernel<V, W, 2>, grid,
                      dim3(2 * kGemvThreads), smem, stream, p);
      }
    }
    return Launch("MoeDownCombineKernel", MoeDownCombineKernel<V, W, 1>, grid, dim3(kGemvThreads),
                  0, stream, p);
  }
  STRATA_RETURN_IF_ERROR(
      Launch("MoeDownGemvKernel", MoeDownGemvKernel<V, W>,
             dim3(slots, static_cast<unsigned>(CeilDiv(p.hidden, 2 * kGemvWarps))),
             dim3(kGemvThreads), 0, stream, p));
  return LaunchCombine(p, vec4_y, stream);
}

Status LaunchCombine(const MoeParams& p, bool vec4_y, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_tokens));
  if (vec4_y) {
    return Launch("MoeCombineKernel", MoeCombineKernel<true>, grid, dim3(kCombineThreads), 0,
                  stream, p);
  }
  return Launch("MoeCombineKernel", MoeCombineKernel<false>, grid, dim3(kCombineThreads), 0, stream,
                p);
}

template Status LaunchGemvPath<8, bf16>(MoeParams, bool, cudaStream_t);
template Status LaunchGemvPath<1, bf16>(MoeParams, bool, cudaStream_t);
template Status LaunchGemvPath<8, uint8_t>(MoeParams, bool, cudaStream_t);
template Status LaunchGemvPath<1, uint8_t>(MoeParams, bool, cudaStream_t);

}  // namespace strata::cuda::moe_detail
