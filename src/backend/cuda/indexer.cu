// Lightning indexer with a fused causal top-k (DeepSeek-V3.2 DSA).
//
// Kernels:
//  * IndexerScoreSelectKernel, grid (splits, rows): one CTA scores up to
//    kIndexerSplitKeys keys of one query into shared memory (as
//    order-preserving uint32 keys), radix-selects the split's top-k there, and
//    writes either the final selection (one split) or its candidates. Decode
//    batches too small to fill the GPU cut rows into shorter splits
//    (IndexerDecodeArgs::small_splits): a split no longer than top_k passes
//    every key on, and the merge does the whole selection.
//  * IndexerMergeKernel, grid (rows): the top-k of all splits' candidates.
// Selection is exact under the order (score desc, position asc): a radix
// select over the 32-bit keys finds the k-th largest key τ and how many keys
// equal to τ are needed; an ordered compaction (block prefix scans, positions
// ascending) takes every key > τ and the first `need` keys == τ. A key among
// the global top-k is among its split's top-k, so merging candidates is exact.
//
// Cost at DeepSeek-V3.2's shape (H = 64, d = 128, top_k = 2048, H200):
// scoring is 2·H·d = 16 KFLOP and 256 B of key per cached token, ~64
// FLOP/B: compute-bound on mma.sync (bf16, fp32 accumulate) once a few CTAs
// per SM run. One CTA scores 4096 keys (67 MFMA, ~15–25 µs at mma.sync rates
// on one SM), so a batch-1 row of 128K keys uses 32 CTAs (~20–30 µs) plus the
// merge of 64K candidates (~10 µs); batch 64 is ~140 GFLOP of scoring, ~0.3 ms.
// The selection itself (4 histogram passes over shared memory) is cheap next
// to the scoring.
#include "backend/cuda/indexer.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/mla.h"

namespace strata::cuda {
namespace {

constexpr int kSplit = static_cast<int>(kIndexerSplitKeys);
constexpr int kSelThreads = 256;
constexpr int kMergeThreads = 512;
constexpr int kFastMaxHeads = 64;
constexpr int kFastMaxDim = 256;
// q rows in shared memory are head_dim + 32 bf16 apart (a 16-byte-unit
// stride ≡ 4 mod 8), so the 8 lanes of each ldmatrix-free 16-byte load phase
// (2 heads × 4 chunks) hit 8 different bank groups.
constexpr int kQPad = 32;
constexpr int kMaxSplits = 256;     // the merge keeps per-split counts in shared memory
constexpr int64_t kMaxTopK = 65536;

static_assert(kSplit % 64 == 0, "splits start on cache-block boundaries");

// ---------------------------------------------------------------------------
// Device helpers.

// Order-preserving map of a float score to uint32 (larger float → larger
// key). NaN ranks as −inf and −0 as +0, as the CPU's comparison sees them.
__device__ __forceinline__ uint32_t ScoreKey(float x) {
  if (isnan(x)) x = -INFINITY;
  if (x == 0.f) x = 0.f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// d += a (16x16, row) · b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Exclusive prefix sum over the block (blockDim.x a multiple of 32); *total
// gets the block's sum. `warp_sums` holds 32 ints. Ends with a barrier so the
// next call may reuse `warp_sums`.
__device__ int BlockExclusiveScan(int v, int* total, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < num_warps ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive
  }
  __syncthreads();
  const int before = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[num_warps - 1];
  __syncthreads();
  return before + x - v;
}

struct SelectSmem {
  int hist[256];
  int warp_sums[32];
  uint32_t digit;
  int remaining;
};

// Radix select over n slots (get(i) → key, valid(i)): the k-th largest key τ
// among the valid ones (1 ≤ k ≤ #valid) and how many keys equal to τ belong
// to the top k (*need ≥ 1). Every thread gets both.
template <typename Get, typename Valid>
__device__ void RadixSelect(int n, int k, Get get, Valid valid, SelectSmem& sm, uint32_t* tau,
                            int* need) {
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sm.hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      if (!valid(i)) continue;
      const uint32_t key = get(i);
      if ((key & mask) == prefix) atomicAdd(&sm.hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l owns digits 255 − 8l .. 248 − 8l (descending).
      int c[8], tot = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = sm.hist[255 - (8 * lane + j)];
        tot += c[j];
      }
      int incl = tot;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      int cum = incl - tot;  // keys with a larger digit than this lane's first
      if (cum < remaining && incl >= remaining) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (cum + c[j] >= remaining) {
            sm.digit = static_cast<uint32_t>(255 - (8 * lane + j));
            sm.remaining = remaining - cum;
            break;
          }
          cum += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= sm.digit << shift;
    mask |= 255u << shift;
    remaining = sm.remaining;
  }
  *tau = prefix;
  *need = remaining;
}

// Takes, in slot order, every valid key > τ and the first `need` valid keys
// == τ (all valid keys when take_all), calling emit(slot, out_index).
template <typename Get, typename Valid, typename Emit>
__device__ void OrderedCompact(int n, bool take_all, uint32_t tau, int need, Get get, Valid valid,
                               Emit emit, SelectSmem& sm) {
  int eq_carry = 0, out_carry = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    bool v = i < n && valid(i);
    const uint32_t key = v ? get(i) : 0u;
    const int eq = v && !take_all && key == tau ? 1 : 0;
    int eq_total = 0;
    const int eq_rank = eq_carry + BlockExclusiveScan(eq, &eq_total, sm.warp_sums);
    eq_carry += eq_total;
    const int take = v && (take_all || key > tau || (eq != 0 && eq_rank < need)) ? 1 : 0;
    int take_total = 0;
    const int at = out_carry + BlockExclusiveScan(take, &take_total, sm.warp_sums);
    out_carry += take_total;
    if (take != 0) emit(i, at);
  }
}

// ---------------------------------------------------------------------------
// Parameters.

struct Params {
  const bf16* q;  // row r at q + r·ld_q
  int64_t ld_q;
  const float* w;  // row r at w + r·ld_w
  int64_t ld_w;
  const bf16* pool;
  const int32_t* block_table;
  int64_t max_blocks;
  const int32_t* seq_lens;  // decode: [rows]; null for prefill
  int64_t past;             // prefill: query r sees past + r + 1 keys
  int64_t row0;             // first row of this pass
  int max_len;
  int heads, dim, top_k;
  float scale;
  int num_splits;
  int split_keys;      // keys per split (≤ kSplit, a multiple of 64)
  int cand_stride;     // candidate slots per split: min(top_k, split_keys)
  uint32_t* cand_key;  // [pass rows, splits, cand_stride]
  int32_t* cand_pos;
  int32_t* cand_count;  // [pass rows, splits]
  int32_t* rows_out;    // [rows, top_k]
  int32_t* counts_out;  // [rows]
  unsigned long long* selected_total;  // optional: += Σ counts
  bool fast;
};

__device__ __forceinline__ int RowLength(const Params& p, int64_t row) {
  if (p.seq_lens != nullptr) return min(max(p.seq_lens[row], 0), p.max_len);
  const int64_t n = p.past + row + 1;
  return static_cast<int>(n < p.max_len ? n : static_cast<int64_t>(p.max_len));
}

__device__ __forceinline__ const bf16* KeyRow(const Params& p, const int32_t* table, int pos) {
  const int64_t blk = table[pos / kKvBlockTokens];
  return p.pool + (blk * kKvBlockTokens + pos % kKvBlockTokens) * p.dim;
}

// Count and the −1 padding of a final row (the selection fills 0..count).
__device__ void WriteFinal(const Params& p, int64_t row, int count) {
  int32_t* out = p.rows_out + row * p.top_k;
  for (int j = count + threadIdx.x; j < p.top_k; j += blockDim.x) out[j] = -1;
  if (threadIdx.x == 0) {
    p.counts_out[row] = count;
    if (p.selected_total != nullptr) {
      atomicAdd(p.selected_total, static_cast<unsigned long long>(count));
    }
  }
}

// Scores keys s0 .. s0+n−1 into sk[0..n), tensor-core path. Warp w takes
// 16-key tiles w, w+8, ...; S[key, head] = K·Qᵀ with m16n8k16 mma. The head
// dimension is permuted consistently for both operands (it is a dot product):
// in k-step pair 2p, 2p+1 lane t supplies physical dims 32p + 8t .. +7, so
// both fragments come from single 16-byte loads (the key rows straight from
// global memory, q from shared memory).
__device__ void ScoreFast(const Params& p, const int32_t* table, int s0, int n, const bf16* sq,
                          int ldq_s, const float* sw, uint32_t* sk) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n_tiles = (n + 15) / 16;
  const int nt_used = p.heads / 8;
  const int pairs = p.dim / 32;
  for (int tile = warp; tile < n_tiles; tile += kSelThreads / 32) {
    const int ia = tile * 16 + g, ib = ia + 8;
    const bool va = ia < n, vb = ib < n;
    const bf16* ra = va ? KeyRow(p, table, s0 + ia) : nullptr;
    const bf16* rb = vb ? KeyRow(p, table, s0 + ib) : nullptr;
    float acc[kFastMaxHeads / 8][4];
#pragma unroll
    for (int nt = 0; nt < kFastMaxHeads / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
    }
#pragma unroll 4
    for (int pp = 0; pp < pairs; ++pp) {
      const int d0 = 32 * pp + 8 * t;
      const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
      const uint4 ka = va ? *reinterpret_cast<const uint4*>(ra + d0) : zero;
      const uint4 kb = vb ? *reinterpret_cast<const uint4*>(rb + d0) : zero;
#pragma unroll
      for (int nt = 0; nt < kFastMaxHeads / 8; ++nt) {
        if (nt >= nt_used) break;
        const uint4 qb = *reinterpret_cast<const uint4*>(sq + (nt * 8 + g) * ldq_s + d0);
        Mma16816(acc[nt], ka.x, kb.x, ka.y, kb.y, qb.x, qb.y);
        Mma16816(acc[nt], ka.z, kb.z, ka.w, kb.w, qb.z, qb.w);
      }
    }
    float sa = 0.f, sb = 0.f;
#pragma unroll
    for (int nt = 0; nt < kFastMaxHeads / 8; ++nt) {
      if (nt >= nt_used) break;
      const float w0 = sw[nt * 8 + 2 * t], w1 = sw[nt * 8 + 2 * t + 1];
      sa += w0 * fmaxf(acc[nt][0] * p.scale, 0.f) + w1 * fmaxf(acc[nt][1] * p.scale, 0.f);
      sb += w0 * fmaxf(acc[nt][2] * p.scale, 0.f) + w1 * fmaxf(acc[nt][3] * p.scale, 0.f);
    }
    sa += __shfl_xor_sync(0xffffffffu, sa, 1);
    sa += __shfl_xor_sync(0xffffffffu, sa, 2);
    sb += __shfl_xor_sync(0xffffffffu, sb, 1);
    sb += __shfl_xor_sync(0xffffffffu, sb, 2);
    if (t == 0) {
      if (va) sk[ia] = ScoreKey(sa);
      if (vb) sk[ib] = ScoreKey(sb);
    }
  }
}

// Plain fp32 scoring, one key per thread (any H and d): the CPU's formula and
// head order.
__device__ void ScoreGeneric(const Params& p, const int32_t* table, int s0, int n, const float* sq,
                             const float* sw, uint32_t* sk) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const bf16* kr = KeyRow(p, table, s0 + i);
    float acc = 0.f;
    for (int h = 0; h < p.heads; ++h) {
      const float* qh = sq + h * p.dim;
      float dot = 0.f;
      for (int d = 0; d < p.dim; ++d) dot += qh[d] * __bfloat162float(kr[d]);
      const float v = dot * p.scale;
      acc += sw[h] * (v > 0.f ? v : 0.f);
    }
    sk[i] = ScoreKey(acc);
  }
}

__global__ void __launch_bounds__(kSelThreads) IndexerScoreSelectKernel(const Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ SelectSmem sm;
  uint32_t* sk = reinterpret_cast<uint32_t*>(smem);  // [kSplit]
  float* sw = reinterpret_cast<float*>(sk + kSplit);  // [heads], padded to a multiple of 4
  const int heads_pad = (p.heads + 3) & ~3;
  void* q_region = sw + heads_pad;  // fast: bf16 [heads][dim + kQPad]; generic: fp32 [heads][dim]

  const int split = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int64_t row = p.row0 + r;
  const int len = RowLength(p, row);
  const int s0 = split * p.split_keys;
  const int n = min(p.split_keys, len - s0);
  if (n <= 0) {
    if (p.num_splits > 1) {
      if (threadIdx.x == 0) p.cand_count[r * p.num_splits + split] = 0;
    } else {
      WriteFinal(p, row, 0);
    }
    return;
  }
  const int32_t* table = p.seq_lens != nullptr ? p.block_table + row * p.max_blocks
                                               : p.block_table;

  // Query row and weights into shared memory.
  const bf16* qg = p.q + row * p.ld_q;
  for (int h = threadIdx.x; h < p.heads; h += blockDim.x) sw[h] = p.w[row * p.ld_w + h];
  const int ldq_s = p.dim + kQPad;
  if (p.fast) {
    bf16* sq = static_cast<bf16*>(q_region);
    const int chunks = p.dim / 8;
    for (int i = threadIdx.x; i < p.heads * chunks; i += blockDim.x) {
      const int h = i / chunks, c = i % chunks;
      *reinterpret_cast<uint4*>(sq + h * ldq_s + 8 * c) =
          *reinterpret_cast<const uint4*>(qg + static_cast<int64_t>(h) * p.dim + 8 * c);
    }
  } else {
    float* sq = static_cast<float*>(q_region);
    for (int i = threadIdx.x; i < p.heads * p.dim; i += blockDim.x) {
      sq[i] = __bfloat162float(qg[i]);
    }
  }
  __syncthreads();
  if (p.fast) {
    ScoreFast(p, table, s0, n, static_cast<const bf16*>(q_region), ldq_s, sw, sk);
  } else {
    ScoreGeneric(p, table, s0, n, static_cast<const float*>(q_region), sw, sk);
  }
  __syncthreads();

  const int k = min(p.top_k, n);
  const bool take_all = k == n;
  uint32_t tau = 0;
  int need = 0;
  auto get = [&](int i) { return sk[i]; };
  auto valid = [](int) { return true; };
  if (!take_all) RadixSelect(n, k, get, valid, sm, &tau, &need);

  if (p.num_splits == 1) {
    int32_t* out = p.rows_out + row * p.top_k;
    OrderedCompact(
        n, take_all, tau, need, get, valid, [&](int i, int at) { out[at] = s0 + i; }, sm);
    WriteFinal(p, row, k);
  } else {
    const int64_t cbase = (r * p.num_splits + split) * p.cand_stride;
    OrderedCompact(
        n, take_all, tau, need, get, valid,
        [&](int i, int at) {
          p.cand_key[cbase + at] = sk[i];
          p.cand_pos[cbase + at] = s0 + i;
        },
        sm);
    if (threadIdx.x == 0) p.cand_count[r * p.num_splits + split] = k;
  }
}

// The final top-k of one row from its splits' candidates, read from global
// memory (L2) in split order, i.e. ascending positions.
__global__ void __launch_bounds__(kMergeThreads) IndexerMergeKernel(const Params p) {
  __shared__ SelectSmem sm;
  __shared__ int s_counts[kMaxSplits];
  const int64_t r = blockIdx.x;
  const int64_t row = p.row0 + r;
  const int len = RowLength(p, row);
  const int used = (len + p.split_keys - 1) / p.split_keys;  // ≤ num_splits
  const int k = p.top_k, stride = p.cand_stride;
  const int32_t* counts = p.cand_count + r * p.num_splits;
  int total_local = 0;
  for (int i = threadIdx.x; i < used; i += blockDim.x) {
    s_counts[i] = counts[i];
    total_local += counts[i];
  }
  int total = 0;
  BlockExclusiveScan(total_local, &total, sm.warp_sums);  // also publishes s_counts
  const int k_eff = min(k, total);
  const int n = used * stride;
  const uint32_t* keys = p.cand_key + r * p.num_splits * stride;
  const int32_t* pos = p.cand_pos + r * p.num_splits * stride;
  auto get = [&](int i) { return keys[i]; };
  auto valid = [&](int i) { return i % stride < s_counts[i / stride]; };
  const bool take_all = k_eff == total;
  uint32_t tau = 0;
  int need = 0;
  if (!take_all) RadixSelect(n, k_eff, get, valid, sm, &tau, &need);
  int32_t* out = p.rows_out + row * p.top_k;
  OrderedCompact(
      n, take_all, tau, need, get, valid, [&](int i, int at) { out[at] = pos[i]; }, sm);
  WriteFinal(p, row, k_eff);
}

// ---------------------------------------------------------------------------
// Host side.

Status Invalid(const char* op, const char* field, const char* why) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " ", why));
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

Status CheckShape(const char* op, const IndexerShape& s) {
  if (s.num_heads < 1 || s.num_heads > 1024) return Invalid(op, "shape.num_heads", "must be in [1, 1024]");
  if (s.head_dim < 1 || s.head_dim > 1024) return Invalid(op, "shape.head_dim", "must be in [1, 1024]");
  if (s.top_k < 1 || s.top_k > kMaxTopK) return Invalid(op, "shape.top_k", "must be in [1, 65536]");
  if (!std::isfinite(s.scale) || s.scale < 0.f) {
    return Invalid(op, "shape.scale", "must be finite and >= 0 (0: head_dim^-1/2)");
  }
  return OkStatus();
}

Status CheckCache(const char* op, const IndexKeyCache& c) {
  if (c.pool == nullptr) return Invalid(op, "cache.pool", "is null");
  if (c.block_table == nullptr) return Invalid(op, "cache.block_table", "is null");
  if (c.max_blocks < 1) return Invalid(op, "cache.max_blocks", "must be >= 1");
  return OkStatus();
}

// How a row of up to max_len keys is cut: kSplit keys per split, or with
// `small` (decode) shorter splits until the rows give about kIndexerWaveCtas
// CTAs, each of at least kIndexerMinSplitKeys keys.
struct Splits {
  int count = 1, keys = kSplit, cand_stride = 0;
};
Splits PlanSplits(const IndexerShape& s, int64_t rows, int64_t max_len, bool small) {
  Splits sp;
  int64_t n = std::max<int64_t>(1, (max_len + kSplit - 1) / kSplit);
  sp.cand_stride = static_cast<int>(s.top_k);
  if (small && rows > 0) {
    const int64_t want = std::min((kIndexerWaveCtas + rows - 1) / rows,
                                  (max_len + kIndexerMinSplitKeys - 1) / kIndexerMinSplitKeys);
    n = std::max(n, std::min<int64_t>(want, kMaxSplits));
    // Whole cache blocks per split, then as few splits as those need.
    const int64_t keys = (max_len + n - 1) / n;
    sp.keys = static_cast<int>((keys + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens);
    n = (max_len + sp.keys - 1) / sp.keys;
    sp.cand_stride = static_cast<int>(std::min<int64_t>(s.top_k, sp.keys));
  }
  sp.count = static_cast<int>(n);
  return sp;
}

// Workspace: candidate keys, positions and per-split counts (only with more
// than one split).
struct Layout {
  size_t key_bytes = 0, pos_bytes = 0, count_bytes = 0, total = 0;
};
Layout MakeLayout(int64_t rows, const Splits& sp) {
  Layout l;
  const int splits = sp.count;
  if (splits <= 1) return l;
  const size_t cands = static_cast<size_t>(rows) * splits * static_cast<size_t>(sp.cand_stride);
  l.key_bytes = AlignUp(cands * sizeof(uint32_t));
  l.pos_bytes = AlignUp(cands * sizeof(int32_t));
  l.count_bytes = AlignUp(static_cast<size_t>(rows) * splits * sizeof(int32_t));
  l.total = l.key_bytes + l.pos_bytes + l.count_bytes;
  return l;
}

bool FastShape(const IndexerShape& s) {
  return s.num_heads % 8 == 0 && s.num_heads <= kFastMaxHeads && s.head_dim % 32 == 0 &&
         s.head_dim <= kFastMaxDim;
}

int SmemBytes(const IndexerShape& s, bool fast) {
  const int64_t heads_pad = (s.num_heads + 3) & ~int64_t{3};
  const int64_t q_bytes =
      fast ? s.num_heads * (s.head_dim + kQPad) * 2 : s.num_heads * s.head_dim * 4;
  return static_cast<int>(kSplit * 4 + heads_pad * 4 + q_bytes);
}

Status Launch(Params p, int64_t rows, const IndexerShape& s, const Splits& sp, void* workspace,
              cudaStream_t stream) {
  p.num_splits = sp.count;
  p.split_keys = sp.keys;
  p.cand_stride = sp.cand_stride;
  const int smem = SmemBytes(s, p.fast);
  if (smem > 48 * 1024) {
    int dev = 0, optin = 0;
    STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > optin) {
      return absl::UnimplementedError("Indexer: num_heads·head_dim too large for shared memory");
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        IndexerScoreSelectKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  const Layout l = MakeLayout(rows, sp);
  if (p.num_splits > 1) {
    auto* base = static_cast<uint8_t*>(workspace);
    p.cand_key = reinterpret_cast<uint32_t*>(base);
    p.cand_pos = reinterpret_cast<int32_t*>(base + l.key_bytes);
    p.cand_count = reinterpret_cast<int32_t*>(base + l.key_bytes + l.pos_bytes);
  }
  IndexerScoreSelectKernel<<<dim3(p.num_splits, static_cast<unsigned>(rows)), kSelThreads, smem,
                             stream>>>(p);
  STRATA_RETURN_IF_ERROR(LaunchStatus("IndexerScoreSelectKernel"));
  if (p.num_splits > 1) {
    IndexerMergeKernel<<<static_cast<unsigned>(rows), kMergeThreads, 0, stream>>>(p);
    STRATA_RETURN_IF_ERROR(LaunchStatus("IndexerMergeKernel"));
  }
  return OkStatus();
}

float EffectiveScale(const IndexerShape& s) {
  return s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.head_dim));
}

}  // namespace

Status IndexKeyCacheWrite(int64_t head_dim, const IndexKeyCache& cache, const bf16* rows,
                          int64_t ld, int64_t n, int64_t start, const int32_t* positions,
                          cudaStream_t stream) {
  if (head_dim < 1) return Invalid("IndexKeyCacheWrite", "head_dim", "must be >= 1");
  // The same paged copy as the latent cache's, with rows of head_dim.
  MlaShape shape;
  shape.kv_rank = head_dim;
  shape.rope_dim = 0;
  shape.scale = 1.f;
  MlaCache mc;
  mc.pool = cache.pool;
  mc.block_table = cache.block_table;
  mc.max_blocks = cache.max_blocks;
  return MlaCacheWrite(shape, mc, rows, ld, n, start, positions, stream);
}

size_t IndexerDecodeWorkspaceBytes(const IndexerShape& shape, int64_t batch, int64_t max_seq_len,
                                   bool small_splits) {
  if (!CheckShape("IndexerDecode", shape).ok() || batch < 1 || max_seq_len < 1) return 0;
  return MakeLayout(batch, PlanSplits(shape, batch, max_seq_len, small_splits)).total;
}

Status IndexerDecode(const IndexerDecodeArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  constexpr const char* kOp = "IndexerDecode";
  const IndexerShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(kOp, s));
  STRATA_RETURN_IF_ERROR(CheckCache(kOp, args.cache));
  if (args.batch < 0 || args.batch > 65535) return Invalid(kOp, "batch", "must be in [0, 65535]");
  if (args.batch == 0) return OkStatus();
  if (args.q == nullptr) return Invalid(kOp, "q", "is null");
  if (args.weights == nullptr) return Invalid(kOp, "weights", "is null");
  if (args.seq_lens == nullptr) return Invalid(kOp, "seq_lens", "is null");
  if (args.rows == nullptr) return Invalid(kOp, "rows", "is null");
  if (args.counts == nullptr) return Invalid(kOp, "counts", "is null");
  const int64_t ld_q = args.ld_q != 0 ? args.ld_q : s.num_heads * s.head_dim;
  const int64_t ld_w = args.ld_w != 0 ? args.ld_w : s.num_heads;
  if (ld_q < s.num_heads * s.head_dim) return Invalid(kOp, "ld_q", "must be 0 or >= H·d");
  if (ld_w < s.num_heads) return Invalid(kOp, "ld_w", "must be 0 or >= H");
  if (args.max_seq_len < 1) return Invalid(kOp, "max_seq_len", "must be >= 1");
  if (args.max_seq_len > args.cache.max_blocks * kKvBlockTokens) {
    return Invalid(kOp, "max_seq_len", "exceeds the block table (cache.max_blocks · 64 tokens)");
  }
  if (args.max_seq_len > kMaxSplits * kIndexerSplitKeys) {
    return Invalid(kOp, "max_seq_len", "exceeds 256 · 4096 keys");
  }
  const Splits sp = PlanSplits(s, args.batch, args.max_seq_len, args.small_splits);
  const size_t need = MakeLayout(args.batch, sp).total;
  if (need > 0 && (workspace == nullptr || !Aligned16(workspace))) {
    return Invalid(kOp, "workspace", "is null or not 16-byte aligned");
  }
  if (workspace_bytes < need) {
    return Invalid(kOp, "workspace_bytes", "is below IndexerDecodeWorkspaceBytes");
  }
  Params p{};
  p.q = args.q;
  p.ld_q = ld_q;
  p.w = args.weights;
  p.ld_w = ld_w;
  p.pool = args.cache.pool;
  p.block_table = args.cache.block_table;
  p.max_blocks = args.cache.max_blocks;
  p.seq_lens = args.seq_lens;
  p.max_len = static_cast<int>(args.max_seq_len);
  p.heads = static_cast<int>(s.num_heads);
  p.dim = static_cast<int>(s.head_dim);
  p.top_k = static_cast<int>(s.top_k);
  p.scale = EffectiveScale(s);
  p.rows_out = args.rows;
  p.counts_out = args.counts;
  p.selected_total = args.selected_total;
  p.fast = FastShape(s) && Aligned16(args.q) && ld_q % 8 == 0 && Aligned16(args.cache.pool);
  return Launch(p, args.batch, s, sp, workspace, stream);
}

size_t IndexerPrefillWorkspaceBytes(const IndexerShape& shape, int64_t num_tokens, int64_t past) {
  if (!CheckShape("IndexerPrefill", shape).ok() || num_tokens < 1 || past < 0) return 0;
  return MakeLayout(std::min(num_tokens, kIndexerPrefillRowsPerPass),
                    PlanSplits(shape, 0, past + num_tokens, false))
      .total;
}

Status IndexerPrefill(const IndexerPrefillArgs& args, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  constexpr const char* kOp = "IndexerPrefill";
  const IndexerShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(kOp, s));
  STRATA_RETURN_IF_ERROR(CheckCache(kOp, args.cache));
  if (args.num_tokens < 0) return Invalid(kOp, "num_tokens", "must be >= 0");
  if (args.num_tokens == 0) return OkStatus();
  if (args.past < 0) return Invalid(kOp, "past", "must be >= 0");
  if (args.q == nullptr) return Invalid(kOp, "q", "is null");
  if (args.weights == nullptr) return Invalid(kOp, "weights", "is null");
  if (args.rows == nullptr) return Invalid(kOp, "rows", "is null");
  if (args.counts == nullptr) return Invalid(kOp, "counts", "is null");
  const int64_t ld_q = args.ld_q != 0 ? args.ld_q : s.num_heads * s.head_dim;
  const int64_t ld_w = args.ld_w != 0 ? args.ld_w : s.num_heads;
  if (ld_q < s.num_heads * s.head_dim) return Invalid(kOp, "ld_q", "must be 0 or >= H·d");
  if (ld_w < s.num_heads) return Invalid(kOp, "ld_w", "must be 0 or >= H");
  const int64_t total = args.past + args.num_tokens;
  if (total > args.cache.max_blocks * kKvBlockTokens) {
    return Invalid(kOp, "past + num_tokens", "exceeds the block table (cache.max_blocks · 64)");
  }
  if (total > kMaxSplits * kIndexerSplitKeys) {
    return Invalid(kOp, "past + num_tokens", "exceeds 256 · 4096 keys");
  }
  // A prefill pass has rows enough to fill the GPU: kSplit keys per split.
  const Splits sp = PlanSplits(s, 0, total, false);
  const int64_t pass_rows = std::min(args.num_tokens, kIndexerPrefillRowsPerPass);
  const size_t need = MakeLayout(pass_rows, sp).total;
  if (need > 0 && (workspace == nullptr || !Aligned16(workspace))) {
    return Invalid(kOp, "workspace", "is null or not 16-byte aligned");
  }
  if (workspace_bytes < need) {
    return Invalid(kOp, "workspace_bytes", "is below IndexerPrefillWorkspaceBytes");
  }
  Params p{};
  p.ld_q = ld_q;
  p.ld_w = ld_w;
  p.pool = args.cache.pool;
  p.block_table = args.cache.block_table;
  p.max_blocks = args.cache.max_blocks;
  p.seq_lens = nullptr;
  p.past = args.past;
  p.max_len = static_cast<int>(total);
  p.heads = static_cast<int>(s.num_heads);
  p.dim = static_cast<int>(s.head_dim);
  p.top_k = static_cast<int>(s.top_k);
  p.scale = EffectiveScale(s);
  p.fast = FastShape(s) && Aligned16(args.q) && ld_q % 8 == 0 && Aligned16(args.cache.pool);
  // Rows of a pass are addressed from row0 for q, weights and outputs.
  p.q = args.q;
  p.w = args.weights;
  p.rows_out = args.rows;
  p.counts_out = args.counts;
  p.selected_total = args.selected_total;
  for (int64_t r0 = 0; r0 < args.num_tokens; r0 += pass_rows) {
    p.row0 = r0;
    STRATA_RETURN_IF_ERROR(
        Launch(p, std::min(pass_rows, args.num_tokens - r0), s, sp, workspace, stream));
  }
  return OkStatus();
}

}  // namespace strata::cuda
