// DeepSeek Sparse Attention's lightning indexer on the CPU (model-spec §3.3.3),
// the part of a DSA mixer that picks which cached latents each query attends
// to. It keeps its own per-token key region beside the MLA rows; the MLA
// module (mla_layer.cc) owns one when its description has an indexer.
#ifndef STRATA_EXEC_CPU_DSA_INDEXER_H_
#define STRATA_EXEC_CPU_DSA_INDEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "base/status.h"
#include "exec/arch_spec.h"
#include "exec/cpu/cpu_layer.h"

namespace strata::exec {

class DsaIndexer {
 public:
  explicit DsaIndexer(const IndexerSpec& spec) : s_(spec) {}
  // Weights under `prefix` ("…self_attn.indexer."); queries come from the
  // MLA's query latent of width `q_rank`; the first 2·`rope_half` channels
  // of its queries and keys rotate with the MLA's frequencies.
  Status Bind(const std::string& prefix, int64_t hidden, int64_t q_rank, int64_t rope_half,
              WeightBinder& wb);

  // Floats per token of the key region.
  int64_t KeyFloats() const { return s_.head_dim; }
  // Selection is needed once some query has more than top_k causal keys;
  // until then it would be every causal key (dense attention).
  bool Sparse(int64_t past, int64_t num_tokens) const { return past + num_tokens > s_.top_k; }
  int64_t top_k() const { return s_.top_k; }

  struct Buffers {
    float *q, *weights, *scores_scratch, *keys;
    int32_t *rows, *counts;
  };
  Buffers Carve(ScratchArena& a, int64_t T, int64_t past, int threads) const;

  // Appends the slice's keys LayerNorm(wk x), rotated (half-split, sharing the
  // MLA's cos/sin), to `keys` (room for past + T rows), for every token: also
  // while the selection is still everything.
  void AppendKeys(const LayerRun& run, const Buffers& b, const float* x, int64_t T,
                  const float* cos, const float* sin, const RegionView& keys) const;
  // The top_k rows per query, scored from the query latent `cq` [T, q_rank];
  // only when Sparse(past, T).
  cpu::MlaSelection Select(const LayerRun& run, const Buffers& b, const float* x, const float* cq,
                           int64_t T, const float* cos, const float* sin,
                           cpu::CacheRows keys) const;

 private:
  IndexerSpec s_;
  int64_t half_ = 0;
  cpu::WeightMatrix q_;                     // wq_b [HI·dI, qr]
  cpu::WeightMatrix k_;                     // wk [dI, D]
  std::vector<float> k_norm_w_, k_norm_b_;  // [dI]
  cpu::WeightMatrix weights_;               // weights_proj [HI, D]
};

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_DSA_INDEXER_H_
