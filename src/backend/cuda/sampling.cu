// Token selection on the GPU: one CTA of 1024 threads per row of logits.
//
// Semantics follow engine/sampler.cc (SamplingDistribution): greedy is the
// lowest id among the largest non-NaN logits (0 when all are NaN); sampling
// draws from softmax(l/T) over the finite logits, restricted first to the
// top_k largest (ties at the cut kept in ascending id), then to the shortest
// prefix of that set, in (logit desc, id asc) order, whose renormalised mass
// reaches top_p. Rows with T ≤ 0 (or NaN) or no finite logit are greedy.
//
// Method (no sort; the workspace only holds pass 1's per-chunk results):
//  * masses are fixed point, q_i = round(exp((l_i − max)·(1/T)) · 2^40), so
//    every sum is an integer sum: exact, independent of summation order, and
//    the draw is deterministic for a given (seed, step);
//  * the top-k threshold is a radix select on the order-preserving uint32 key
//    of each logit (three passes of 11/11/10-bit digits, counts in shared
//    memory); the top-p threshold is the same descent with masses as the
//    histogram weights and ceil(top_p · Σq) as the target; ties at either
//    threshold are cut in id order by an ordered block scan (only when the
//    tie group is split, which needs exactly equal logits);
//  * the draw r = ⌊u · Z⌋ (u: 64 bits of Philox4_32_10 seeded by (seed,
//    subsequence = step)) is located by inverse CDF in id order over the kept
//    set: warps own contiguous id ranges, the range sums are scanned in warp
//    order, and the owning warp walks its range 32 ids at a time.
// The kept set and the draw's distribution equal the reference's up to the
// 2^-40 mass quantum (a token with q = 0 lies more than 27.7·T below the max
// and has probability < 1e-12); the random stream differs from the CPU's
// mt19937, so draws are not bit-equal to the CPU sampler's.
//
// Cost model (V = 163840, fp32 logits = 655 KB per row). One CTA per row is a
// single SM, so each pass is bounded by the SM's L2 bandwidth (~150-200 GB/s
// for one SM), not HBM: ~3.5-4.5 µs per pass over a row. Inside the captured
// step the first pass (the greedy pick, max and finite count) took several
// times that (kernel trace in docs/dev/journal/performance.md), so with a
// workspace it runs beforehand in SampleScanKernel: kScanChunks CTAs per
// row, merged by the row's CTA in a total order (the same result).
//   greedy: 1 pass               ≈ 4 µs
//   temperature only: 3 passes   ≈ 12 µs
//   top-k + top-p: ~9-10 passes  ≈ 40 µs
// B rows run on B SMs in parallel, so batch ≤ 132 costs the same. Against the
// LM head GEMV that produces the row (755 MB of weights, 177 µs at 4.27
// TB/s) this is 2-20%; the first radix pass is the slowest (contended
// shared-memory atomics when many logits share a bin).
#include "backend/cuda/sampling.h"

#include <curand_kernel.h>

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // 11-bit digits (the last pass uses 10 bits)
constexpr int64_t kMaxVocab = int64_t{1} << 23;  // Σq ≤ V·2^40 must fit in 64 bits
constexpr float kMassScale = 1099511627776.f;   // 2^40

// Pass 1 of one chunk of a row (SampleScanKernel): the greedy pick (NaN
// skipped, ties to the lower id), the finite max and the finite count.
struct ScanPartial {
  float best_v;
  int best_i;
  float mx;
  int finite;
};
constexpr int kScanChunks = 64;  // CTAs per row for pass 1
constexpr int kScanThreads = 256;

struct SampleParams {
  const float* logits;          // [B, V]
  int vocab;
  int vec4;                     // rows are 16-byte aligned and V % 4 == 0
  const GpuSamplingRow* rows;   // [B]
  int32_t* tokens;              // [B]
  ScanPartial* partials;        // [B, kScanChunks] from SampleScanKernel, or null
  // With partials: [B] arrival counts of the row's scan CTAs (zero between
  // calls). The last CTA of a greedy row writes its token itself.
  unsigned int* tickets;
};

struct Smem {
  unsigned int hist_count[kBins];
  u64 hist_mass[kBins];
  u64 warp_u64[kWarps];
  float warp_best_v[kWarps];
  int warp_best_i[kWarps];
  float warp_max[kWarps];
  int warp_finite[kWarps];
  unsigned int sel_digit;
  unsigned int sel_count_eq;
  u64 sel_above;
  int found;
};


// Larger float → larger key. −0 is folded into +0 because the reference
// compares them equal (so they tie and the lower id wins).
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  const uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float KeyToFloat(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ bool IsFinite(float v) { return fabsf(v) <= 3.402823466e38f; }

// Fixed-point mass of a finite logit v ≤ m. The max itself is exactly 2^40
// (guarded so 0·inf cannot appear when 1/T overflows).
__device__ __forceinline__ u64 Mass(float v, float m, float inv_t) {
  const float d = v == m ? 0.f : (v - m) * inv_t;
  return __float2ull_rn(expf(d) * kMassScale);
}

__device__ __forceinline__ bool RanksAbove(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// f(i, l[i]) for the logits i in [begin, end) this thread takes in a block
// of kStride threads (begin and end multiples of 4 with vec4).
template <int kStride, typename F>
__device__ __forceinline__ void ForEachLogitIn(const float* l, int begin, int end, bool vec4,
                                               F&& f) {
  if (vec4) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
#pragma unroll 4
    for (int i = (begin >> 2) + threadIdx.x; i < (end >> 2); i += kStride) {
      const float4 v = __ldg(l4 + i);
      f(4 * i, v.x);
      f(4 * i + 1, v.y);
      f(4 * i + 2, v.z);
      f(4 * i + 3, v.w);
    }
  } else {
#pragma unroll 4
    for (int i = begin + threadIdx.x; i < end; i += kStride) f(i, __ldg(l + i));
  }
}

// The whole row in the row kernel's CTA.
template <typename F>
__device__ __forceinline__ void ForEachLogit(const float* l, int V, bool vec4, F&& f) {
  ForEachLogitIn<kThreads>(l, 0, V, vec4, static_cast<F&&>(f));
}

__device__ __forceinline__ u64 WarpSumU64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ u64 WarpInclusiveScanU64(u64 v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// Block-wide sum returned to every thread (two barriers; reusable).
__device__ __forceinline__ u64 BlockSumU64(u64 v, Smem& s) {
  v = WarpSumU64(v);
  if ((threadIdx.x & 31) == 0) s.warp_u64[threadIdx.x >> 5] = v;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += s.warp_u64[w];
  __syncthreads();
  return total;
}

// Warp 0: the highest bin b such that above + Σ_{bins ≥ b} ≥ target. Writes
// the bin, the weight strictly above it (previous passes included) and the
// element count in it.
template <bool kMass>
__device__ void SelectBin(Smem& s, int bins, u64 target, u64 above) {
  const int lane = threadIdx.x & 31;
  const int per = bins / 32;
  const int hi = bins - per * lane;  // lane 0 owns the top bins
  auto value = [&](int b) -> u64 { return kMass ? s.hist_mass[b] : u64{s.hist_count[b]}; };
  u64 lane_sum = 0;
  for (int b = hi - per; b < hi; ++b) lane_sum += value(b);
  const u64 incl = WarpInclusiveScanU64(lane_sum);
  const u64 before = above + (incl - lane_sum);
  const unsigned ballot = __ballot_sync(0xffffffffu, above + incl >= target);
  const int owner = ballot != 0 ? __ffs(ballot) - 1 : 31;
  if (lane == owner) {
    u64 cum = before;
    int digit = hi - per;
    for (int b = hi - 1; b >= hi - per; --b) {
      const u64 v = value(b);
      if (cum + v >= target) {
        digit = b;
        break;
      }
      cum += v;
    }
    s.sel_digit = static_cast<unsigned>(digit);
    s.sel_above = cum;
    s.sel_count_eq = s.hist_count[digit];
  }
}

struct Selected {
  uint32_t key;       // threshold key
  u64 above;          // count (or mass) of eligible elements with a larger key
  uint32_t count_eq;  // eligible elements with exactly this key
};

// Radix select over the eligible elements (weight(i, v, key) > 0): the key at
// which the count (kMass = false) or mass (true) taken in descending key order
// first reaches `target`.
template <bool kMass, typename W>
__device__ Selected RadixSelect(Smem& s, const float* l, int V, bool vec4, u64 target, W weight) {
  uint32_t prefix = 0, mask = 0;
  Selected out{0, 0, 0};
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
    const int bins = pass == 2 ? 1024 : 2048;
    for (int b = threadIdx.x; b < bins; b += kThreads) {
      s.hist_count[b] = 0;
      if (kMass) s.hist_mass[b] = 0;
    }
    __syncthreads();
    ForEachLogit(l, V, vec4, [&](int i, float v) {
      const uint32_t key = OrderedKey(v);
      if ((key & mask) != prefix) return;
      const u64 w = weight(i, v, key);
      if (w == 0) return;
      const uint32_t d = (key >> shift) & static_cast<uint32_t>(bins - 1);
      atomicAdd(&s.hist_count[d], 1u);
      if (kMass) atomicAdd(&s.hist_mass[d], w);
    });
    __syncthreads();
    if (threadIdx.x < 32) SelectBin<kMass>(s, bins, target, out.above);
    __syncthreads();
    prefix |= s.sel_digit << shift;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
    out.above = s.sel_above;
    out.count_eq = s.sel_count_eq;
  }
  out.key = prefix;
  return out;
}

// The first id i (ascending) with Σ_{j ≤ i} weight(j) > target, or −1 when the
// total is ≤ target. Integer weights, so the answer does not depend on the
// summation order.
template <typename W>
__device__ int FindInIdOrder(Smem& s, const float* l, int V, u64 target, W weight) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int range = (V + kThreads - 1) / kThreads * 32;
  const int begin = warp * range;
  const int end = min(V, begin + range);
  u64 sum = 0;
  for (int i = begin + lane; i < end; i += 32) sum += weight(i, __ldg(l + i));
  sum = WarpSumU64(sum);
  if (lane == 0) s.warp_u64[warp] = sum;
  if (threadIdx.x == 0) s.found = -1;
  __syncthreads();
  u64 base = 0;
  for (int w = 0; w < warp; ++w) base += s.warp_u64[w];
  if (target >= base && target < base + s.warp_u64[warp]) {
    for (int c = begin; c < end; c += 32) {
      const int i = c + lane;
      const u64 w = i < end ? weight(i, __ldg(l + i)) : 0;
      const u64 incl = WarpInclusiveScanU64(w);
      const u64 chunk = __shfl_sync(0xffffffffu, incl, 31);
      if (target < base + chunk) {
        const unsigned hit = __ballot_sync(0xffffffffu, base + incl > target);
        if (lane == __ffs(hit) - 1) s.found = i;
        break;
      }
      base += chunk;
    }
  }
  __syncthreads();
  const int found = s.found;
  __syncthreads();  // s.found may be reset by the next call
  return found;
}

constexpr ScanPartial kScanEmpty = {-INFINITY, INT_MAX, -INFINITY, 0};

__device__ __forceinline__ void ScanLogit(ScanPartial& a, int i, float v) {
  if (v != v) return;
  if (RanksAbove(v, i, a.best_v, a.best_i)) {
    a.best_v = v;
    a.best_i = i;
  }
  if (IsFinite(v)) {
    a.mx = fmaxf(a.mx, v);
    ++a.finite;
  }
}

__device__ __forceinline__ void Merge(ScanPartial& a, const ScanPartial& b) {
  if (RanksAbove(b.best_v, b.best_i, a.best_v, a.best_i)) {
    a.best_v = b.best_v;
    a.best_i = b.best_i;
  }
  a.mx = fmaxf(a.mx, b.mx);
  a.finite += b.finite;
}

__device__ __forceinline__ ScanPartial WarpMerge(ScanPartial a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const ScanPartial b{
        __shfl_xor_sync(0xffffffffu, a.best_v, o), __shfl_xor_sync(0xffffffffu, a.best_i, o),
        __shfl_xor_sync(0xffffffffu, a.mx, o), __shfl_xor_sync(0xffffffffu, a.finite, o)};
    Merge(a, b);
  }
  return a;
}

// Thread 0 of the scan CTA gets the merge of every thread's partial (warp
// shuffles, then the warps' results in warp order; other threads get an
// empty one). `warps`: kScanThreads / 32 shared slots, read by thread 0
// after the call's barrier, so two calls need a barrier between them.
__device__ __forceinline__ ScanPartial MergeScanCta(ScanPartial a, ScanPartial* warps) {
  a = WarpMerge(a);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = a;
  __syncthreads();
  ScanPartial t = kScanEmpty;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kScanThreads / 32; ++w) Merge(t, warps[w]);
  }
  return t;
}

// Pass 1 spread over kScanChunks CTAs per row (grid: chunk × row): one CTA
// reading a 163840-entry row is bounded by one SM's loads in flight, at the
// end of every decode step; here each of 64 CTAs of 256 threads
// reads 1/64 of the row (2,560 logits at V = 163840).
__global__ void __launch_bounds__(kScanThreads) SampleScanKernel(SampleParams p) {
  __shared__ ScanPartial warps[kScanThreads / 32];
  PdlWait();
  PdlLaunchDependents();
  const int V = p.vocab;
  const float* l = p.logits + static_cast<size_t>(blockIdx.y) * V;
  // Chunks of a multiple of 4 logits, so vector loads stay aligned.
  const int per = (V + kScanChunks * 4 - 1) / (kScanChunks * 4) * 4;
  const int begin = min(V, static_cast<int>(blockIdx.x) * per);
  const int end = min(V, begin + per);
  ScanPartial a = kScanEmpty;
  ForEachLogitIn<kScanThreads>(l, begin, end, p.vec4 != 0,
                               [&](int i, float v) { ScanLogit(a, i, v); });
  const ScanPartial t = MergeScanCta(a, warps);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    p.partials[static_cast<size_t>(blockIdx.y) * kScanChunks + blockIdx.x] = t;
    last = false;
    if (p.tickets != nullptr) {
      // Publish the partial, then count in; the CTA that counts last merges.
      __threadfence();
      last = atomicAdd(&p.tickets[blockIdx.y], 1u) == kScanChunks - 1;
    }
  }
  __syncthreads();
  if (!last) return;
  // The row's last CTA: re-arm the count for the next call, and for a greedy
  // row (T ≤ 0 or NaN) merge the chunks and write the token now, as
  // SampleKernel's pass 1 would (a total order, a max and an integer sum:
  // the same token). SampleKernel then skips T ≤ 0 rows; its launch and
  // wait are no longer between the logits and the token. Rows with T > 0
  // (those with no finite logit included) are SampleKernel's alone, so that
  // every row has one writer: a host polling the tokens must not see a
  // second, late write of this step land after it has moved on.
  __threadfence();
  if (threadIdx.x == 0) p.tickets[blockIdx.y] = 0;
  if (p.rows[blockIdx.y].temperature > 0.f) return;  // CTA-uniform
  ScanPartial m = kScanEmpty;
  if (threadIdx.x < kScanChunks) {
    // Through L2: the other CTAs' partials are not in this SM's L1.
    const float4 v = __ldcg(reinterpret_cast<const float4*>(
        p.partials + static_cast<size_t>(blockIdx.y) * kScanChunks + threadIdx.x));
    m = ScanPartial{v.x, __float_as_int(v.y), v.z, __float_as_int(v.w)};
  }
  const ScanPartial r = MergeScanCta(m, warps);  // the barrier above separates the two merges
  if (threadIdx.x == 0) p.tokens[blockIdx.y] = r.best_i == INT_MAX ? 0 : r.best_i;
}

__global__ void __launch_bounds__(kThreads, 1) SampleKernel(SampleParams p) {
  __shared__ Smem s;
  PdlWait();
  PdlLaunchDependents();
  const int V = p.vocab;
  const bool vec4 = p.vec4 != 0;
  const float* l = p.logits + static_cast<size_t>(blockIdx.x) * V;
  const GpuSamplingRow prm = p.rows[blockIdx.x];
  // The scan's last CTA has written a greedy row's token.
  if (p.tickets != nullptr && !(prm.temperature > 0.f)) return;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // Pass 1: greedy choice (NaN skipped, ties to the lower id), finite max and
  // count: from SampleScanKernel's chunks when given, else over the row here.
  // The merge is a total order, a max and an integer sum, so both ways give
  // the same result.
  ScanPartial a = kScanEmpty;
  if (p.partials != nullptr) {
    if (threadIdx.x < kScanChunks) {
      a = p.partials[static_cast<size_t>(blockIdx.x) * kScanChunks + threadIdx.x];
    }
  } else {
    ForEachLogit(l, V, vec4, [&](int i, float v) { ScanLogit(a, i, v); });
  }
  a = WarpMerge(a);
  if (lane == 0) {
    s.warp_best_v[warp] = a.best_v;
    s.warp_best_i[warp] = a.best_i;
    s.warp_max[warp] = a.mx;
    s.warp_finite[warp] = a.finite;
  }
  __syncthreads();
  a = kScanEmpty;
  for (int w = 0; w < kWarps; ++w) {
    Merge(a, ScanPartial{s.warp_best_v[w], s.warp_best_i[w], s.warp_max[w], s.warp_finite[w]});
  }
  const float mx = a.mx;
  const int finite = a.finite;
  const int greedy = a.best_i == INT_MAX ? 0 : a.best_i;
  const float temperature = prm.temperature;
  if (!(temperature > 0.f) || finite == 0) {
    if (threadIdx.x == 0) p.tokens[blockIdx.x] = greedy;
    return;
  }
  const float inv_t = 1.f / temperature;

  // top-k: in_k(i) = finite ∧ (key > thr_k ∨ (key = thr_k ∧ i ≤ cut_k)).
  uint32_t thr_k = 0;
  int cut_k = V - 1;
  if (prm.top_k > 0 && prm.top_k < finite) {
    const Selected sel = RadixSelect<false>(
        s, l, V, vec4, static_cast<u64>(prm.top_k),
        [](int, float v, uint32_t) -> u64 { return IsFinite(v) ? 1 : 0; });
    thr_k = sel.key;
    const u64 need = static_cast<u64>(prm.top_k) - sel.above;  // ≥ 1 ties at the cut
    if (need < sel.count_eq) {
      cut_k = FindInIdOrder(s, l, V, need - 1, [thr_k](int, float v) -> u64 {
        return IsFinite(v) && OrderedKey(v) == thr_k ? 1 : 0;
      });
    }
  }
  auto in_k = [thr_k, cut_k](int i, float v, uint32_t key) {
    return IsFinite(v) && (key > thr_k || (key == thr_k && i <= cut_k));
  };

  // top-p over the top-k set: in_s(i) = in_k(i) ∧ (key > thr_p ∨ (key = thr_p ∧ i ≤ cut_p)).
  uint32_t thr_p = 0;
  int cut_p = V - 1;
  u64 total = 0;  // Σq over the kept set
  {
    u64 z = 0;
    ForEachLogit(l, V, vec4, [&](int i, float v) {
      if (in_k(i, v, OrderedKey(v))) z += Mass(v, mx, inv_t);
    });
    total = BlockSumU64(z, s);
  }
  if (prm.top_p < 1.f) {  // NaN: off
    u64 target = 1;
    if (prm.top_p > 0.f) {
      target = static_cast<u64>(ceil(static_cast<double>(prm.top_p) * static_cast<double>(total)));
    }
    target = target < 1 ? 1 : (target > total ? total : target);
    const Selected sel = RadixSelect<true>(
        s, l, V, vec4, target, [&](int i, float v, uint32_t key) -> u64 {
          return in_k(i, v, key) ? Mass(v, mx, inv_t) : 0;
        });
    thr_p = sel.key;
    const u64 q = Mass(KeyToFloat(thr_p), mx, inv_t);
    u64 need = q > 0 ? (target - sel.above + q - 1) / q : sel.count_eq;
    if (need > sel.count_eq) need = sel.count_eq;
    if (need < 1) need = 1;
    if (need < sel.count_eq) {
      cut_p = FindInIdOrder(s, l, V, need - 1, [&](int i, float v) -> u64 {
        const uint32_t key = OrderedKey(v);
        return key == thr_p && in_k(i, v, key) ? 1 : 0;
      });
    }
    total = sel.above + need * q;
  }

  // The draw: r uniform in [0, total), located by inverse CDF in id order.
  curandStatePhilox4_32_10_t rng;
  curand_init(prm.seed, prm.step, 0, &rng);
  const uint4 bits = curand4(&rng);
  const u64 u = (static_cast<u64>(bits.x) << 32) | bits.y;
  const u64 r = __umul64hi(u, total);
  const int token = FindInIdOrder(s, l, V, r, [&](int i, float v) -> u64 {
    const uint32_t key = OrderedKey(v);
    if (!in_k(i, v, key)) return 0;
    if (!(key > thr_p || (key == thr_p && i <= cut_p))) return 0;
    return Mass(v, mx, inv_t);
  });
  if (threadIdx.x == 0) p.tokens[blockIdx.x] = token >= 0 ? token : greedy;
}

}  // namespace

// Per row the workspace can serve: its partials and its arrival count. A
// workspace of W bytes serves R = W / kWorkspaceRowBytes rows: partials
// [R, kScanChunks] from the start, counts [R] after them. The layout depends
// on W alone, so row b's count stays at the same address whatever the batch
// of a call (a call with fewer rows must not find another call's partials
// where its counts are).
constexpr size_t kWorkspaceRowBytes = kScanChunks * sizeof(ScanPartial) + sizeof(unsigned int);

size_t SampleWorkspaceBytes(int64_t batch, int64_t /*vocab*/) {
  return batch > 0 ? static_cast<size_t>(batch) * kWorkspaceRowBytes : 0;
}

Status SampleTokens(const float* logits, int64_t batch, int64_t vocab, const GpuSamplingRow* rows,
                    int32_t* tokens, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (batch < 0 || batch > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleTokens: batch must be in [0, 2^31), got ", batch));
  }
  if (vocab < 1 || vocab > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleTokens: vocab must be in [1, ", kMaxVocab, "], got ", vocab));
  }
  if (batch == 0) return OkStatus();
  if (logits == nullptr) return absl::InvalidArgumentError("SampleTokens: logits is null");
  if (rows == nullptr) return absl::InvalidArgumentError("SampleTokens: rows is null");
  if (tokens == nullptr) return absl::InvalidArgumentError("SampleTokens: tokens is null");
  SampleParams p{};
  p.logits = logits;
  p.vocab = static_cast<int>(vocab);
  p.vec4 = (vocab % 4 == 0 && IsAligned(logits, 16)) ? 1 : 0;
  p.rows = rows;
  p.tokens = tokens;
  // With a workspace, pass 1 runs in SampleScanKernel over kScanChunks CTAs
  // per row; without one (or too small), inside SampleKernel.
  if (workspace != nullptr && workspace_bytes >= SampleWorkspaceBytes(batch, vocab) &&
      IsAligned(workspace, 16) && batch <= 65535) {
    p.partials = static_cast<ScanPartial*>(workspace);
    // sampling.scan_greedy=0: greedy rows wait for SampleKernel as well
    // (the same tokens).
    if (tuning::Current().On(tuning::Key::kSamplingScanGreedy)) {
      const size_t rows = workspace_bytes / kWorkspaceRowBytes;  // ≥ batch
      p.tickets = reinterpret_cast<unsigned int*>(p.partials + rows * kScanChunks);
    }
    const cudaError_t err =
        LaunchPdl(SampleScanKernel, dim3(kScanChunks, static_cast<unsigned>(batch)),
                  dim3(kScanThreads), 0, stream, p);
    if (err != cudaSuccess) return CudaError(err, "SampleScanKernel");
  }
  // Programmatic dependent launch overlaps this launch with the previous
  // kernel's tail (the LM head's, or the scan's).
  const cudaError_t err =
      LaunchPdl(SampleKernel, dim3(static_cast<unsigned>(batch)), dim3(kThreads), 0, stream, p);
  if (err != cudaSuccess) return CudaError(err, "SampleKernel");
  return OkStatus();
}

}  // namespace strata::cuda
