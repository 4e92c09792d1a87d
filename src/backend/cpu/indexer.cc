// Lightning-indexer scoring and causal top-k. Queries are split into one
// contiguous part per worker; each part owns a slice of the scratch for its
// score row and the index array the selection partitions.
#include "backend/cpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

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

int NumParts(int64_t num_tokens, int num_threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_tokens, num_threads)));
}

}  // namespace

size_t IndexerScratchFloats(int64_t num_tokens, int64_t num_keys, int num_threads) {
  // Per part: the score row and an int32 index row (same size as a float).
  return static_cast<size_t>(NumParts(num_tokens, std::max(num_threads, 1))) *
         static_cast<size_t>(2 * num_keys);
}

void IndexerTopK(const IndexerDims& d, const float* q, const float* weights, int64_t num_tokens,
                 CacheRows keys, int64_t past, float scale, int32_t* rows, int32_t* counts,
                 float* scores, float* scratch, ThreadPool* pool) {
  const int64_t T = num_tokens;
  const int64_t H = d.num_heads, dim = d.head_dim, K = d.top_k;
  const int64_t num_keys = past + T;
  const int threads = pool ? pool->num_threads() : 1;
  const int parts = NumParts(T, threads);
  // I(t, s) for s in [s0, s1).
  auto score_keys = [&](int64_t t, int64_t s0, int64_t s1, float* score) {
    const float* qt = q + t * H * dim;
    const float* wt = weights + t * H;
    for (int64_t s = s0; s < s1; ++s) {
      const float* ks = keys.row(s);
      float acc = 0.f;
      for (int64_t h = 0; h < H; ++h) {
        const float v = Dot(qt + h * dim, ks, dim) * scale;
        acc += wt[h] * (v > 0.f ? v : 0.f);
      }
      // NaN (broken weights) ranks last so the ordering stays strict.
      score[s] = std::isnan(acc) ? -std::numeric_limits<float>::infinity() : acc;
    }
  };
  // Top-k of one scored row into the outputs.
  auto select = [&](int64_t t, float* score, int32_t* order) {
    const int64_t n = past + t + 1;  // causal keys of this query
    if (scores != nullptr) {
      float* out = scores + t * num_keys;
      std::copy(score, score + n, out);
      std::fill(out + n, out + num_keys, -std::numeric_limits<float>::infinity());
    }
    const int64_t k = std::min(K, n);
    std::iota(order, order + n, 0);
    if (k < n) {
      std::nth_element(order, order + k, order + n, [score](int32_t a, int32_t b) {
        return score[a] > score[b] || (score[a] == score[b] && a < b);
      });
      std::sort(order, order + k);
    }
    int32_t* out_rows = rows + t * K;
    std::copy(order, order + k, out_rows);
    std::fill(out_rows + k, out_rows + K, -1);
    counts[t] = static_cast<int32_t>(k);
  };
  if (T < threads) {
    // Decode and short continuations: the keys of each query are scored in
    // parallel instead (one long row per query).
    float* score = scratch;
    auto* order = reinterpret_cast<int32_t*>(score + num_keys);
    for (int64_t t = 0; t < T; ++t) {
      ParallelRange(pool, past + t + 1, 256,
                    [&](int64_t b, int64_t e) { score_keys(t, b, e, score); });
      select(t, score, order);
    }
    return;
  }
  ParallelRange(pool, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      float* score = scratch + static_cast<size_t>(p) * static_cast<size_t>(2 * num_keys);
      auto* order = reinterpret_cast<int32_t*>(score + num_keys);
      for (int64_t t = T * p / parts; t < T * (p + 1) / parts; ++t) {
        score_keys(t, 0, past + t + 1, score);
        select(t, score, order);
      }
    }
  });
}

}  // namespace cpu
}  // namespace strata
