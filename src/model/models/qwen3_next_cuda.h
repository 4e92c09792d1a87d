// Introspection of the qwen3_next CUDA executor (qwen3_next_cuda.cc), for
// tests and benchmarks: where its memory went and whether decode steps run
// as CUDA graphs. Only linked in CUDA builds.
#ifndef STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_
#define STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/model.h"

namespace strata {

struct Qwen3NextCudaStats {
  uint64_t weight_bytes = 0;
  uint64_t scratch_bytes = 0;
  uint64_t state_pool_bytes = 0;  // GDN states + conv windows, all slots
  uint64_t kv_pool_bytes = 0;     // paged K/V of the full-attention layers, all blocks
  int64_t slots_total = 0, slots_free = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0;
  int64_t max_batch = 0;
  int64_t max_context_tokens = 0;
  int64_t prefill_slice_tokens = 0;
  int64_t graph_captures = 0;
  int64_t graph_launches = 0;
  int64_t eager_steps = 0;
  std::string graph_error;
};

// NotFound unless `model` came from CreateQwen3NextCudaModel.
StatusOr<Qwen3NextCudaStats> GetQwen3NextCudaStats(const Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_
