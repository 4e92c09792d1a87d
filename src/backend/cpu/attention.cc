// MLA attention kernels. Prefill walks the cache in key blocks: each block's
// latents are expanded to per-head keys/values with one blocked matmul, then
// every (query, head) pair folds the block into its running max / sum / output
// (online softmax), so scratch stays O(block + T·H·dv) for any context length.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

// Eight independent partial sums so the compiler vectorises the reduction.
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float Scale(const MlaDims& d) {
  if (d.softmax_scale > 0.f) return d.softmax_scale;
  return 1.f / std::sqrt(static_cast<float>(d.q_dim()));
}

}  // namespace

size_t MlaPrefillScratchFloats(const MlaDims& d, int64_t num_tokens, int num_threads) {
  const int64_t B = kMlaKeyBlock;
  const int64_t kv_width = d.num_heads * d.kv_b_rows_per_head();
  return static_cast<size_t>(B * d.kv_rank   // contiguous latents of the block
                             + B * kv_width  // expanded keys/values of the block
                             + num_tokens * d.num_heads * (d.v_dim + 2))  // acc, max, sum
         + MatMulScratchFloats(B, d.kv_rank, num_threads);
}

void MlaPrefill(const MlaDims& d, const float* q, int64_t num_tokens, CacheRows cache,
                int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                ThreadPool* pool, const MlaSelection* selection) {
  const int64_t T = num_tokens;
  const int64_t H = d.num_heads;
  const int64_t B = kMlaKeyBlock;
  const int64_t qd = d.q_dim();
  const int64_t per_head = d.kv_b_rows_per_head();
  const int64_t kv_width = H * per_head;
  const int64_t dv = d.v_dim;
  const float scale = Scale(d);

  float* latents = scratch;
  float* kv = latents + B * d.kv_rank;
  float* acc = kv + B * kv_width;  // [T, H, dv]
  float* mx = acc + T * H * dv;    // [T, H]
  float* sum = mx + T * H;         // [T, H]
  float* mm_scratch = sum + T * H;
  std::fill(acc, acc + T * H * dv, 0.f);
  std::fill(mx, mx + T * H, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + T * H, 0.f);

  const int64_t total = past + T;
  for (int64_t s0 = 0; s0 < total; s0 += B) {
    const int64_t nb = std::min(B, total - s0);
    for (int64_t s = 0; s < nb; ++s) {
      std::memcpy(latents + s * d.kv_rank, cache.row(s0 + s), sizeof(float) * d.kv_rank);
    }
    MatMul(latents, nb, kv_b, kv, mm_scratch, pool);  // [nb, H·(dn+dv)]
    // Queries that see at least the first key of this block.
    const int64_t t_first = std::max<int64_t>(0, s0 - past);
    if (t_first >= T) break;
    const int64_t pairs = (T - t_first) * H;
    ParallelRange(pool, pairs, 4, [&](int64_t b, int64_t e) {
      float sc[kMlaKeyBlock];
      for (int64_t p = b; p < e; ++p) {
        const int64_t t = t_first + p / H;
        const int64_t h = p % H;
        const float* qh = q + (t * H + h) * qd;
        const int64_t visible = std::min(nb, past + t + 1 - s0);  // causal
        // Keys j in [lo, hi) of this block: block rows j (dense) or, with a
        // selection, the selected rows sel[j] that fall inside the block.
        int64_t lo = 0, hi = visible;
        const int32_t* sel = nullptr;
        if (selection != nullptr) {
          sel = selection->rows + t * selection->stride;
          const int32_t* end = sel + selection->counts[t];
          lo = std::lower_bound(sel, end, static_cast<int32_t>(s0)) - sel;
          hi = std::lower_bound(sel, end, static_cast<int32_t>(s0 + visible)) - sel;
        }
        auto block_row = [&](int64_t j) { return sel ? sel[j] - s0 : j; };
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j < hi; ++j) {
          const int64_t s = block_row(j);
          const float* kn = kv + s * kv_width + h * per_head;
          const float* kr = cache.row(s0 + s) + d.kv_rank;
          const float v = (Dot(qh, kn, d.nope_dim) + Dot(qh + d.nope_dim, kr, d.rope_dim)) * scale;
          sc[j - lo] = v;
          block_max = std::max(block_max, v);
        }
        const int64_t th = t * H + h;
        float* a = acc + th * dv;
        const float new_max = std::max(mx[th], block_max);
        if (new_max > mx[th]) {
          // Rescale what was accumulated under the old maximum.
          const float c = std::exp(mx[th] - new_max);  // 0 on the first block
          sum[th] *= c;
          for (int64_t i = 0; i < dv; ++i) a[i] *= c;
          mx[th] = new_max;
        }
        float l = 0.f;
        for (int64_t j = lo; j < hi; ++j) {
          const float pw = std::exp(sc[j - lo] - new_max);
          l += pw;
          Axpy(pw, kv + block_row(j) * kv_width + h * per_head + d.nope_dim, a, dv);
        }
        sum[th] += l;
      }
    });
  }
  ParallelRange(pool, T * H, 16, [&](int64_t b, int64_t e) {
    for (int64_t th = b; th < e; ++th) {
      const float inv = 1.f / sum[th];
      for (int64_t i = 0; i < dv; ++i) out[th * dv + i] = acc[th * dv + i] * inv;
    }
  });
}

size_t MlaAbsorbedScratchFloats(const MlaDims& d, int64_t num_tokens) {
  return static_cast<size_t>(num_tokens * d.num_heads * (2 * d.kv_rank + 2));
}

void MlaAbsorbed(const MlaDims& d, const float* q, int64_t num_tokens, CacheRows cache,
                 int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                 ThreadPool* pool, const MlaSelection* selection) {
  const int64_t T = num_tokens;
  const int64_t H = d.num_heads;
  const int64_t r = d.kv_rank;
  const int64_t per_head = d.kv_b_rows_per_head();
  const int64_t B = kMlaKeyBlock;
  const float scale = Scale(d);
  const int64_t pairs = T * H;
  const int threads = pool ? pool->num_threads() : 1;
  // One contiguous group of (token, head) pairs per worker: the worker walks
  // the cache block by block and updates all its pairs from the block while
  // it is in cache, so the latents are streamed once per worker, not per head.
  const int64_t group = std::max<int64_t>(1, (pairs + threads - 1) / threads);
  float* qts = scratch;          // [pairs, r]  q̃
  float* ots = qts + pairs * r;  // [pairs, r]  õ (unnormalised)
  float* mx = ots + pairs * r;   // [pairs]
  float* sum = mx + pairs;       // [pairs]
  ParallelRange(pool, pairs, group, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t h = p % H;
      const float* qh = q + p * d.q_dim();
      float* qt = qts + p * r;
      // q̃ = W_UKᵀ q_nope: a sum of W_UK rows weighted by q_nope.
      std::fill(qt, qt + r, 0.f);
      for (int64_t i = 0; i < d.nope_dim; ++i) AxpyRow(kv_b, h * per_head + i, qh[i], qt);
      std::fill(ots + p * r, ots + (p + 1) * r, 0.f);
      mx[p] = -std::numeric_limits<float>::infinity();
      sum[p] = 0.f;
    }
    // Keys are walked in blocks of B positions of each pair's key list: the
    // causal rows 0 .. past+t (dense) or the selected rows (sparse).
    int64_t keys = past + (e - 1) / H + 1;  // the last pair's query sees the most
    if (selection != nullptr) {
      keys = 0;
      for (int64_t p = b; p < e; ++p) keys = std::max<int64_t>(keys, selection->counts[p / H]);
    }
    float sc[kMlaKeyBlock];
    for (int64_t s0 = 0; s0 < keys; s0 += B) {
      for (int64_t p = b; p < e; ++p) {
        const int32_t* sel =
            selection ? selection->rows + (p / H) * selection->stride + s0 : nullptr;
        const int64_t visible = selection ? std::min<int64_t>(B, selection->counts[p / H] - s0)
                                          : std::min(B, past + p / H + 1 - s0);  // causal
        if (visible <= 0) continue;
        auto key_row = [&](int64_t s) { return sel ? static_cast<int64_t>(sel[s]) : s0 + s; };
        const float* qt = qts + p * r;
        const float* qr = q + p * d.q_dim() + d.nope_dim;
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < visible; ++s) {
          const float* row = cache.row(key_row(s));
          sc[s] = (Dot(qt, row, r) + Dot(qr, row + r, d.rope_dim)) * scale;
          block_max = std::max(block_max, sc[s]);
        }
        float* ot = ots + p * r;
        if (block_max > mx[p]) {
          const float c = std::exp(mx[p] - block_max);  // 0 on the first block
          sum[p] *= c;
          for (int64_t i = 0; i < r; ++i) ot[i] *= c;
          mx[p] = block_max;
        }
        float l = 0.f;
        for (int64_t s = 0; s < visible; ++s) {
          const float w = std::exp(sc[s] - mx[p]);
          l += w;
          Axpy(w, cache.row(key_row(s)), ot, r);
        }
        sum[p] += l;
      }
    }
    for (int64_t p = b; p < e; ++p) {
      const int64_t h = p % H;
      float* ot = ots + p * r;
      const float inv = 1.f / sum[p];
      for (int64_t i = 0; i < r; ++i) ot[i] *= inv;
      for (int64_t j = 0; j < d.v_dim; ++j) {
        out[p * d.v_dim + j] = DotRow(kv_b, h * per_head + d.nope_dim + j, ot);
      }
    }
  });
}

namespace {

// Query-key pairs T new queries score: all causal ones, or at most top_k each.
double AttendedPairs(int64_t num_tokens, int64_t past, int64_t top_k) {
  const double T = static_cast<double>(num_tokens), P = static_cast<double>(past);
  const double dense = T * (P + (T + 1) / 2);
  return top_k > 0 ? std::min(dense, T * static_cast<double>(top_k)) : dense;
}

}  // namespace

double MlaPrefillCost(const MlaDims& d, int64_t num_tokens, int64_t past, int64_t top_k) {
  const double T = static_cast<double>(num_tokens), P = static_cast<double>(past);
  const double H = static_cast<double>(d.num_heads);
  return (P + T) * H * static_cast<double>(d.kv_b_rows_per_head() * d.kv_rank) +
         AttendedPairs(num_tokens, past, top_k) * H *
             static_cast<double>(d.nope_dim + d.rope_dim + d.v_dim);
}

double MlaAbsorbedCost(const MlaDims& d, int64_t num_tokens, int64_t past, int64_t top_k) {
  const double T = static_cast<double>(num_tokens);
  const double H = static_cast<double>(d.num_heads);
  return T * H * static_cast<double>(d.kv_b_rows_per_head() * d.kv_rank) +
         AttendedPairs(num_tokens, past, top_k) * H *
             static_cast<double>(2 * d.kv_rank + d.rope_dim);
}

}  // namespace cpu
}  // namespace strata
