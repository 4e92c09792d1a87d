// The physical limits the benchmarks report against, for any layer list: the
// bytes a decode step must move and the FLOPs a prefill must compute, with
// bf16 weights and attention caches and fp32 recurrent state (the GPU
// executor's storage). Dividing by the HBM bandwidth or the bf16 peak gives
// the lower bound of a step's time.
#ifndef STRATA_EXEC_COST_MODEL_H_
#define STRATA_EXEC_COST_MODEL_H_

#include <cstdint>

#include "base/status.h"
#include "exec/arch_spec.h"

namespace strata::exec {

// Parameters by role (elements).
struct ParameterCounts {
  double embedding = 0;  // V·D
  double lm_head = 0;    // V·D, read at every step (the embedding when tied)
  // Every tensor read for every token: mixers, dense MLPs, routers, shared
  // experts, norms.
  double dense_path = 0;
  double routed = 0;         // all routed experts of all layers
  double routed_active = 0;  // the top_k experts one token runs, all layers
  double Total() const { return embedding + (tied ? 0 : lm_head) + dense_path + routed; }
  bool tied = false;
};
StatusOr<ParameterCounts> CountParameters(const ArchSpec& spec);

// Expected number of distinct experts B tokens touch in one MoE layer when
// each picks top_k of E uniformly: E·(1 − (1 − k/E)^B).
double ExpectedDistinctExperts(int64_t experts, int64_t top_k, int64_t batch);

struct DecodeBytes {
  double weights = 0;  // dense path + lm_head + one embedding row per sequence
  double experts = 0;  // the expected distinct routed experts, all MoE layers
  // Recurrent states and conv windows read and written; attention cache rows
  // read (those attended to, and all indexer keys) and one row written.
  double state = 0;
  double Total() const { return weights + experts + state; }
};
// One decode step of `batch` sequences at `context` cached tokens each.
StatusOr<DecodeBytes> DecodeStepBytes(const ArchSpec& spec, int64_t batch, int64_t context);

// FLOPs (2 per multiply-add) of a prefill of `tokens` tokens into an empty
// state: every projection and the top_k experts per token, one logits row,
// causal attention over the pairs each query attends (all earlier tokens, or
// the indexer's top_k, plus the indexer's scoring of all of them), and the
// chunked delta rule (chunks of 64) of the linear mixers.
StatusOr<double> PrefillFlops(const ArchSpec& spec, int64_t tokens);

}  // namespace strata::exec

#endif  // STRATA_EXEC_COST_MODEL_H_
