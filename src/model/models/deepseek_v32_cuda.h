// Introspection of the deepseek_v32 CUDA executor (the layer executor,
// exec/cuda/cuda_executor.h), for tests and benchmarks: where its memory
// went, whether decode steps run as CUDA graphs, and which attention path
// (dense or DSA sparse) the layers took. Only linked in CUDA builds.
#ifndef STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_H_
#define STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "exec/cuda/cuda_executor_stats.h"
#include "model/model.h"

namespace strata {

struct DeepseekV32CudaStats : CudaExecutorStats {
  int64_t index_topk = 0;
  // Attention paths taken: a prefill slice counts once per layer; a decode
  // step once (all its layers take the same path).
  int64_t sparse_prefill_layers = 0, dense_prefill_layers = 0;
  int64_t sparse_decode_steps = 0, dense_decode_steps = 0;
  // Σ over every indexer call (all layers, prefill and decode) of the rows it
  // selected (the kernels' selected_total): min(index_topk, causal keys) per
  // query row.
  uint64_t selected_rows = 0;
};

// NotFound unless `model` came from CreateDeepseekV32CudaModel.
StatusOr<DeepseekV32CudaStats> GetDeepseekV32CudaStats(const Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_H_
