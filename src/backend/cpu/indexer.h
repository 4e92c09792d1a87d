// DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention, model-spec
// §3.3.3): a cheap multi-head score of every past token for every query, and
// the causal top-k of those scores, which is the set of cache rows the main
// (MLA) attention then reads. Scoring is fp32 with no Hadamard rotation and no
// FP8 simulation, as transformers' eager path computes it.
#ifndef STRATA_BACKEND_CPU_INDEXER_H_
#define STRATA_BACKEND_CPU_INDEXER_H_

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cache_rows.h"

namespace strata {
class ThreadPool;
namespace cpu {

struct IndexerDims {
  int64_t num_heads = 0;  // index_n_heads
  int64_t head_dim = 0;   // index_head_dim
  int64_t top_k = 0;      // index_topk
};

// Floats of scratch IndexerTopK needs for `num_tokens` queries over
// `num_keys` (= past + num_tokens) keys on `num_threads` threads.
size_t IndexerScratchFloats(int64_t num_tokens, int64_t num_keys, int num_threads);

// For the T new queries at positions past .. past+T−1:
//   I(t, s) = Σ_h weights[t, h] · ReLU(scale · q[t, h, :] · keys[s, :]),  s ≤ past + t
// and the selection Sel(t) = the min(top_k, past + t + 1) causal keys with the
// largest I (ties to the lower position). That is exactly which keys
// transformers leaves unmasked: it takes the top min(top_k, #keys) of the
// causally masked row, and a query with fewer causal keys than top_k keeps
// them all (the extra picks land on masked positions and stay masked).
//
// q: [T, H, d]; weights: [T, H] (the weights_proj output already multiplied
// by H^-1/2); keys: [past + T, d], the indexer key cache with the new tokens
// appended. Writes rows[t·top_k + j] (ascending positions, j < counts[t]) and
// counts[t]; entries past counts[t] are −1. `scores` (optional, may be null):
// [T, past + T] receives I (−inf above the diagonal), for tests and margin
// checks. `scratch`: IndexerScratchFloats floats.
void IndexerTopK(const IndexerDims& d, const float* q, const float* weights, int64_t num_tokens,
                 CacheRows keys, int64_t past, float scale, int32_t* rows, int32_t* counts,
                 float* scores, float* scratch, ThreadPool* pool);
// The same over a contiguous [past + T, d] key array.
inline void IndexerTopK(const IndexerDims& d, const float* q, const float* weights,
                        int64_t num_tokens, const float* keys, int64_t past, float scale,
                        int32_t* rows, int32_t* counts, float* scores, float* scratch,
                        ThreadPool* pool) {
  IndexerTopK(d, q, weights, num_tokens, CacheRows::Contiguous(&keys, d.head_dim), past, scale,
              rows, counts, scores, scratch, pool);
}

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_INDEXER_H_
