// GqaAppend: one CTA of kAppendThreads per (token, head vector): the row is
// staged in shared memory as fp32, normalised (block reduction), rotated and
// stored. GqaAttention: one CTA of four warps per (query tile, kv head, head
// chunk); the tile's rows are up to kRows (token, query head) pairs that share
// the kv head and the block-table row, so every key/value tile staged in
// shared memory serves all of them. Each warp owns kRows / 4 rows: lane j
// scores key j of the 32-key tile, then the warp updates the running max,
// denominator and its fp32 accumulators (lane owns channels lane + 32·i < hd).
// Clear before fast: no tensor cores; prefill re-reads the cache once per
// query tile from L2.
//
// Batch and chunk invariance (issue 6) holds in every mode, so there is no
// batch_invariant flag: a (token, head) row is one warp's work from start to
// end, whatever else shares its CTA; its key tiles start at absolute
// positions 0, 32, 64, ... and stop at the last tile holding a key it sees
// (k0 ≤ position), so the call's length (kv_len) only changes keys the row
// masks; masked keys score −inf (weight exactly 0, so the tile max and the
// butterfly sums are unchanged) and skip the value accumulation. Decode
// (per-token rows) runs the same per-row loop in the unsplit form: no
// split-KV, no length bound, so a token's output is the same bits at decode,
// in a batch of any size, and in a prefill call of any split.
//
// The split form (decode only) gives one row's keys to several CTAs: CTA s of
// a row walks the keys [s·split_keys, (s+1)·split_keys) (split_keys a multiple
// of the 32-key tile, so no tile straddles two ranges) with the same loop and
// stores its running max, denominator and unnormalised accumulators; the
// merge kernel rescales the ranges to their common max and sums them. A row
// of one CTA walks a 4K context tile after tile (about 0.75 µs a tile at
// head_dim 256), so the unsplit decode is bound by that walk, not by bytes.
#include "backend/cuda/gqa.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backend/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

constexpr int kBlockTokens = 64;  // rows of a cache block
constexpr int kMaxHeadDim = 256;
constexpr int kAppendThreads = 128;
constexpr int kWarps = 4;
constexpr int kRows = 8;                    // (token, head) rows per attention CTA
constexpr int kRowsPerWarp = kRows / kWarps;
constexpr int kKeyTile = 32;
constexpr int kMaxPerLane = kMaxHeadDim / 32;

__device__ __forceinline__ int64_t TokenRow(const GqaCacheArgs& c, int64_t t) {
  return c.per_token_rows ? t : 0;
}
__device__ __forceinline__ int64_t TokenPos(const GqaCacheArgs& c, int64_t t) {
  return c.positions != nullptr ? c.positions[t] : c.pos0 + t;
}
// Element offset of (position p, kv head g, channel 0) in a layer's cache.
__device__ __forceinline__ int64_t CacheOffset(const GqaCacheArgs& c, int64_t row, int64_t p,
                                               int64_t g, int64_t hkv, int64_t hd) {
  const int64_t block = c.block_table[row * c.table_stride + p / kBlockTokens];
  return ((block * kBlockTokens + p % kBlockTokens) * hkv + g) * hd;
}

struct AppendParams {
  int H, Hkv, hd, rot;
  bf16* q;
  int64_t ldq;
  const bf16* k;
  const bf16* v;
  int64_t ldkv;
  const float* q_norm;
  const float* k_norm;
  float eps;
  const float* inv_freq;
  GqaCacheArgs cache;
};

// blockIdx.x: token; blockIdx.y: head vector (q heads 0..H−1, then kv heads).
__global__ void __launch_bounds__(kAppendThreads) GqaAppendKernel(AppendParams p) {
  __shared__ float row[kMaxHeadDim];
  __shared__ float partial[kAppendThreads / 32];
  PdlWait();
  PdlLaunchDependents();
  const int64_t t = blockIdx.x;
  const int head = blockIdx.y;
  const bool is_q = head < p.H;
  const int g = is_q ? 0 : head - p.H;
  const int64_t pos = TokenPos(p.cache, t);
  const int64_t crow = TokenRow(p.cache, t);
  const int hd = p.hd;
  if (!is_q) {
    // v goes to the cache unchanged.
    const bf16* vs = p.v + t * p.ldkv + static_cast<int64_t>(g) * hd;
    bf16* vd = p.cache.v_cache + CacheOffset(p.cache, crow, pos, g, p.Hkv, hd);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) vd[i] = vs[i];
  }
  const bf16* src = is_q ? p.q + t * p.ldq + static_cast<int64_t>(head) * hd
                         : p.k + t * p.ldkv + static_cast<int64_t>(g) * hd;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    const float x = __bfloat162float(src[i]);
    row[i] = x;
    ss = fmaf(x, x, ss);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kAppendThreads / 32; ++w) total += partial[w];
  const float inv = rsqrtf(total / static_cast<float>(hd) + p.eps);
  const float* w = is_q ? p.q_norm : p.k_norm;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) row[i] = row[i] * inv * w[i];
  __syncthreads();
  bf16* dst = is_q ? p.q + t * p.ldq + static_cast<int64_t>(head) * hd
                   : p.cache.k_cache + CacheOffset(p.cache, crow, pos, g, p.Hkv, hd);
  const int half = p.rot / 2;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float y = row[i];
    if (i < p.rot) {
      const int j = i < half ? i : i - half;
      const float angle = __fmul_rn(static_cast<float>(pos), p.inv_freq[j]);
      const float c = static_cast<float>(cos(static_cast<double>(angle)));
      const float s = static_cast<float>(sin(static_cast<double>(angle)));
      y = i < half ? row[i] * c - row[i + half] * s : row[i] * c + row[i - half] * s;
    }
    dst[i] = __float2bfloat16(y);
  }
}

struct AttnParams {
  int H, Hkv, hd;
  int heads_per_cta;   // query heads of one kv head handled by a CTA
  int tokens_per_cta;  // kRows / heads_per_cta (1 with per-token rows)
  int chunks;          // (H / Hkv) / heads_per_cta
  // Split form: key ranges per row (0: unsplit) of split_keys keys each; the
  // partials: acc [n, H, splits, hd] and (max, denominator) [n, H, splits, 2].
  int splits;
  int64_t split_keys;
  float* part_acc;
  float* part_ml;
  int64_t n;
  const bf16* q;
  int64_t ldq;
  const bf16* gate;
  int64_t ldg;
  float scale;
  GqaCacheArgs cache;
  bf16* out;
  int64_t ldo;
};

// Dynamic shared memory: q [kRows, hd] fp32, K [32, hd + 2] bf16 (the pad
// puts lane j's key row on its own bank), V [32, hd] bf16.
size_t AttnSmemBytes(int hd) {
  return sizeof(float) * kRows * hd + sizeof(bf16) * kKeyTile * (hd + 2) +
         sizeof(bf16) * kKeyTile * hd;
}

// grid: x = query tile (split form: tile · splits + key range), y = kv
// head, z = head chunk.
__global__ void __launch_bounds__(kWarps * 32) GqaAttentionKernel(AttnParams p) {
  extern __shared__ float smem[];
  const int hd = p.hd;
  float* qs = smem;
  bf16* ks = reinterpret_cast<bf16*>(qs + kRows * hd);
  bf16* vs = ks + kKeyTile * (hd + 2);
  PdlWait();
  PdlLaunchDependents();
  const int g = blockIdx.y;
  const int split = p.splits > 0 ? static_cast<int>(blockIdx.x % p.splits) : 0;
  const int64_t tile = p.splits > 0 ? blockIdx.x / p.splits : blockIdx.x;
  const int64_t t0 = tile * p.tokens_per_cta;
  const int h0 = g * (p.H / p.Hkv) + blockIdx.z * p.heads_per_cta;
  const int rows = p.tokens_per_cta * p.heads_per_cta;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Row r: token t0 + r / heads_per_cta, head h0 + r % heads_per_cta.
  for (int i = threadIdx.x; i < kRows * hd; i += blockDim.x) {
    const int r = i / hd, d = i % hd;
    const int64_t t = t0 + r / p.heads_per_cta;
    float x = 0.f;
    if (r < rows && t < p.n) {
      x = __bfloat162float(p.q[t * p.ldq + static_cast<int64_t>(h0 + r % p.heads_per_cta) * hd + d]);
    }
    qs[i] = x;
  }
  // Keys any row of the tile may see: up to the last valid token's position.
  const int64_t t_last = min(t0 + p.tokens_per_cta, p.n) - 1;
  const int64_t crow = TokenRow(p.cache, t0);
  const int64_t kv_len = TokenPos(p.cache, t_last) + 1;
  const int64_t k_begin = p.splits > 0 ? split * p.split_keys : 0;
  const int64_t k_end = p.splits > 0 ? min(kv_len, k_begin + p.split_keys) : kv_len;

  int64_t my_pos[kRowsPerWarp];
  bool my_valid[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int r = warp + kWarps * j;
    const int64_t t = t0 + r / p.heads_per_cta;
    my_valid[j] = r < rows && t < p.n;
    my_pos[j] = my_valid[j] ? TokenPos(p.cache, t) : -1;
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) acc[j][i] = 0.f;
  }
  const int per_lane = (hd + 31) / 32;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kKeyTile) {
    __syncthreads();  // the previous tile is consumed (and q is staged)
    for (int i = threadIdx.x; i < kKeyTile * (hd / 2); i += blockDim.x) {
      const int j = i / (hd / 2), d2 = i % (hd / 2);
      const int64_t key = k0 + j;
      __nv_bfloat162 kv2 = __floats2bfloat162_rn(0.f, 0.f), vv2 = kv2;
      if (key < kv_len) {
        const int64_t off = CacheOffset(p.cache, crow, key, g, p.Hkv, hd) + 2 * d2;
        kv2 = *reinterpret_cast<const __nv_bfloat162*>(p.cache.k_cache + off);
        vv2 = *reinterpret_cast<const __nv_bfloat162*>(p.cache.v_cache + off);
      }
      *reinterpret_cast<__nv_bfloat162*>(ks + j * (hd + 2) + 2 * d2) = kv2;
      *reinterpret_cast<__nv_bfloat162*>(vs + j * hd + 2 * d2) = vv2;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      if (!my_valid[j]) continue;  // warp-uniform
      const int64_t key = k0 + lane;
      if (k0 > my_pos[j]) continue;  // every key of the tile is in this row's future
      const float* qr = qs + (warp + kWarps * j) * hd;
      const bf16* kr = ks + lane * (hd + 2);
      float s = 0.f;
      for (int d = 0; d < hd; d += 2) {
        const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kr + d));
        s = fmaf(qr[d], kf.x, s);
        s = fmaf(qr[d + 1], kf.y, s);
      }
      s = key <= my_pos[j] ? s * p.scale : -INFINITY;
      float tile_max = s;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const float m_new = fmaxf(m[j], tile_max);  // finite: key k0 ≤ my_pos is visible
      const float alpha = expf(m[j] - m_new);     // exp(−inf) = 0 on the first tile
      const float pj = expf(s - m_new);
      float psum = pj;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      l[j] = l[j] * alpha + psum;
      m[j] = m_new;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) acc[j][i] *= alpha;
      // Only the row's visible keys: a masked key's weight is 0, but adding
      // 0·v could still turn an accumulator of −0 into +0 depending on what
      // the masked slot holds (a later token of this call, or the zero fill
      // past kv_len), so masked keys are not touched at all.
      const int visible =
          static_cast<int>(min(static_cast<int64_t>(kKeyTile), my_pos[j] - k0 + 1));
      for (int kk = 0; kk < visible; ++kk) {
        const float w = __shfl_sync(0xffffffffu, pj, kk);
        const bf16* vr = vs + kk * hd + lane;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) {
          if (i < per_lane && lane + 32 * i < hd) {
            acc[j][i] = fmaf(w, __bfloat162float(vr[32 * i]), acc[j][i]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    if (!my_valid[j]) continue;
    const int r = warp + kWarps * j;
    const int64_t t = t0 + r / p.heads_per_cta;
    const int64_t h = h0 + r % p.heads_per_cta;
    if (p.splits > 0) {
      // A range wholly after the row's position leaves m = −inf, l = 0.
      const int64_t part = (t * p.H + h) * p.splits + split;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int d = lane + 32 * i;
        if (i >= per_lane || d >= hd) break;
        p.part_acc[part * hd + d] = acc[j][i];
      }
      if (lane == 0) {
        p.part_ml[2 * part] = m[j];
        p.part_ml[2 * part + 1] = l[j];
      }
      continue;
    }
    const float inv_l = 1.f / l[j];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (i >= per_lane || d >= hd) break;
      float o = acc[j][i] * inv_l;
      if (p.gate != nullptr) {
        const float gv = __bfloat162float(p.gate[t * p.ldg + h * hd + d]);
        o *= 1.f / (1.f + expf(-gv));
      }
      p.out[t * p.ldo + h * hd + d] = __float2bfloat16(o);
    }
  }
}

// The split form's merge: one CTA of kMergeThreads per (token, head). Warp 0
// finds the ranges' common max and each range's weight exp(m_s − max) once;
// every row has key 0 in range 0, so the max is finite, and a range after the
// row's position (m = −inf, acc = 0) weighs 0.
constexpr int kMergeThreads = 128;
__global__ void __launch_bounds__(kMergeThreads) GqaMergeKernel(AttnParams p) {
  __shared__ float weight[kGqaMaxSplits];
  __shared__ float inv_den;
  PdlWait();
  PdlLaunchDependents();
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t base = (t * p.H + h) * p.splits;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int s = lane; s < p.splits; s += 32) mx = fmaxf(mx, p.part_ml[2 * (base + s)]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float den = 0.f;
    for (int s = lane; s < p.splits; s += 32) {
      const float m = p.part_ml[2 * (base + s)];
      const float w = m != -INFINITY ? expf(m - mx) : 0.f;
      weight[s] = w;
      den = fmaf(w, p.part_ml[2 * (base + s) + 1], den);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) inv_den = 1.f / den;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < p.hd; d += blockDim.x) {
    float o = 0.f;
    for (int s = 0; s < p.splits; ++s) o = fmaf(weight[s], p.part_acc[(base + s) * p.hd + d], o);
    o *= inv_den;
    if (p.gate != nullptr) {
      const float gv = __bfloat162float(p.gate[t * p.ldg + static_cast<int64_t>(h) * p.hd + d]);
      o *= 1.f / (1.f + expf(-gv));
    }
    p.out[t * p.ldo + static_cast<int64_t>(h) * p.hd + d] = __float2bfloat16(o);
  }
}

// Key ranges of a split row under `max_seq_len`, and the keys of each (a
// multiple of the key tile): ranges of at least one tile, at most
// kGqaMaxSplits of them.
constexpr int64_t kMinSplitKeys = kKeyTile;
void SplitPlan(int64_t max_seq_len, int* splits, int64_t* split_keys) {
  const int64_t s = std::min<int64_t>(
      kGqaMaxSplits, std::max<int64_t>(1, (max_seq_len + kMinSplitKeys - 1) / kMinSplitKeys));
  const int64_t keys = (max_seq_len + s - 1) / s;
  *split_keys = (keys + kKeyTile - 1) / kKeyTile * kKeyTile;
  *splits = static_cast<int>((max_seq_len + *split_keys - 1) / *split_keys);
}

Status CheckShape(const GqaShape& s, const char* fn) {
  if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": num_kv_heads (", s.num_kv_heads,
                                                   ") must divide num_heads (", s.num_heads, ")"));
  }
  const int64_t ratio = s.num_heads / s.num_kv_heads;
  if (ratio > kRows && ratio % kRows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        fn, ": num_heads / num_kv_heads must be at most ", kRows, " or a multiple of it, got ",
        ratio));
  }
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        fn, ": head_dim must be positive, even and at most ", kMaxHeadDim, ", got ",
        s.head_dim));
  }
  if (s.rotary_dim < 0 || s.rotary_dim % 2 != 0 || s.rotary_dim > s.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        fn, ": rotary_dim must be even and in [0, head_dim], got ", s.rotary_dim));
  }
  return OkStatus();
}

Status CheckCache(const GqaCacheArgs& c, const char* fn) {
  if (c.k_cache == nullptr || c.v_cache == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": cache.k_cache / v_cache is null"));
  }
  if (c.block_table == nullptr || c.table_stride <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": cache.block_table is null or table_stride is not positive"));
  }
  if (c.positions == nullptr && c.pos0 < 0) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": cache.pos0 is negative"));
  }
  return OkStatus();
}

}  // namespace

Status GqaAppend(const GqaAppendArgs& a, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(a.shape, "GqaAppend"));
  STRATA_RETURN_IF_ERROR(CheckCache(a.cache, "GqaAppend"));
  if (a.num_tokens < 0 || a.num_tokens > INT32_MAX) {
    return absl::InvalidArgumentError("GqaAppend: num_tokens must be in [0, 2^31)");
  }
  if (a.num_tokens == 0) return OkStatus();
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.q_norm == nullptr ||
      a.k_norm == nullptr) {
    return absl::InvalidArgumentError("GqaAppend: q, k, v, q_norm and k_norm must be set");
  }
  if (a.shape.rotary_dim > 0 && a.inv_freq == nullptr) {
    return absl::InvalidArgumentError("GqaAppend: inv_freq is null with a rotary_dim");
  }
  const GqaShape& s = a.shape;
  AppendParams p{};
  p.H = static_cast<int>(s.num_heads);
  p.Hkv = static_cast<int>(s.num_kv_heads);
  p.hd = static_cast<int>(s.head_dim);
  p.rot = static_cast<int>(s.rotary_dim);
  p.q = a.q;
  p.ldq = a.ldq > 0 ? a.ldq : s.num_heads * s.head_dim;
  p.k = a.k;
  p.v = a.v;
  p.ldkv = a.ldkv > 0 ? a.ldkv : s.num_kv_heads * s.head_dim;
  p.q_norm = a.q_norm;
  p.k_norm = a.k_norm;
  p.eps = a.eps;
  p.inv_freq = a.inv_freq;
  p.cache = a.cache;
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(p.H + p.Hkv));
  GqaAppendKernel<<<grid, kAppendThreads, 0, stream>>>(p);
  return LaunchStatus("GqaAppendKernel");
}

Status GqaAttention(const GqaAttentionArgs& a, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(a.shape, "GqaAttention"));
  STRATA_RETURN_IF_ERROR(CheckCache(a.cache, "GqaAttention"));
  if (a.num_tokens < 0 || a.num_tokens > INT32_MAX) {
    return absl::InvalidArgumentError("GqaAttention: num_tokens must be in [0, 2^31)");
  }
  if (a.num_tokens == 0) return OkStatus();
  if (a.q == nullptr || a.out == nullptr) {
    return absl::InvalidArgumentError("GqaAttention: q and out must be set");
  }
  const GqaShape& s = a.shape;
  const int64_t hh = s.num_heads * s.head_dim;
  AttnParams p{};
  p.H = static_cast<int>(s.num_heads);
  p.Hkv = static_cast<int>(s.num_kv_heads);
  p.hd = static_cast<int>(s.head_dim);
  const int ratio = p.H / p.Hkv;
  p.heads_per_cta = ratio < kRows ? ratio : kRows;
  p.chunks = ratio / p.heads_per_cta;
  p.tokens_per_cta = a.cache.per_token_rows ? 1 : kRows / p.heads_per_cta;
  p.n = a.num_tokens;
  p.q = a.q;
  p.ldq = a.ldq > 0 ? a.ldq : hh;
  p.gate = a.gate;
  p.ldg = a.ldg > 0 ? a.ldg : hh;
  p.scale = a.scale != 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(s.head_dim));
  p.cache = a.cache;
  p.out = a.out;
  p.ldo = a.ldo > 0 ? a.ldo : hh;
  const int64_t tiles = (a.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta;
  if (tiles > INT32_MAX) return absl::InvalidArgumentError("GqaAttention: too many tokens");
  const bool split = a.max_seq_len > 0 && a.workspace != nullptr;
  if (split) {
    if (!a.cache.per_token_rows) {
      return absl::InvalidArgumentError("GqaAttention: the split form is for decode only");
    }
    if (a.workspace_bytes < GqaDecodeWorkspaceBytes(s, a.num_tokens, a.max_seq_len)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GqaAttention: workspace of ", a.workspace_bytes, " bytes, the split form needs ",
          GqaDecodeWorkspaceBytes(s, a.num_tokens, a.max_seq_len)));
    }
    SplitPlan(a.max_seq_len, &p.splits, &p.split_keys);
    p.part_acc = static_cast<float*>(a.workspace);
    p.part_ml = p.part_acc + a.num_tokens * s.num_heads * p.splits * s.head_dim;
  }
  const int64_t x = tiles * (split ? p.splits : 1);
  if (x > INT32_MAX) return absl::InvalidArgumentError("GqaAttention: too many tokens");
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(p.Hkv),
                  static_cast<unsigned>(p.chunks));
  // At most 8·256·4 + 32·258·2 + 32·256·2 = 41,088 bytes: under the 48 KB
  // every kernel may use without opting in.
  GqaAttentionKernel<<<grid, kWarps * 32, AttnSmemBytes(p.hd), stream>>>(p);
  STRATA_RETURN_IF_ERROR(LaunchStatus("GqaAttentionKernel"));
  if (!split) return OkStatus();
  GqaMergeKernel<<<dim3(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(p.H)),
                   kMergeThreads, 0, stream>>>(p);
  return LaunchStatus("GqaMergeKernel");
}

size_t GqaDecodeWorkspaceBytes(const GqaShape& shape, int64_t batch, int64_t max_seq_len) {
  if (batch <= 0 || max_seq_len <= 0) return 0;
  int splits = 0;
  int64_t split_keys = 0;
  SplitPlan(max_seq_len, &splits, &split_keys);
  return sizeof(float) * static_cast<size_t>(batch * shape.num_heads * splits) *
         static_cast<size_t>(shape.head_dim + 2);
}

}  // namespace strata::cuda
