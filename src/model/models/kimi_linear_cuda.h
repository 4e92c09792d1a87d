// Introspection of the kimi_linear CUDA executor (kimi_linear_cuda.cc), for
// tests and benchmarks: where its memory went and whether decode steps run as
// CUDA graphs. Only linked in CUDA builds.
#ifndef STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_
#define STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/model.h"

namespace strata {

struct KimiCudaStats {
  // Device memory by purpose (bytes).
  uint64_t weight_bytes = 0;
  uint64_t scratch_bytes = 0;     // activations and op workspaces, planned at load
  uint64_t state_pool_bytes = 0;  // KDA states + conv windows, all slots
  uint64_t kv_pool_bytes = 0;     // paged MLA latent cache, all blocks
  int64_t slots_total = 0, slots_free = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0;
  int64_t max_batch = 0;
  int64_t max_context_tokens = 0;
  int64_t prefill_slice_tokens = 0;
  // Decode steps.
  int64_t graph_captures = 0;  // graphs instantiated
  int64_t graph_launches = 0;  // steps replayed from a graph
  int64_t eager_steps = 0;     // steps enqueued op by op
  std::string graph_error;     // why graphs were turned off, if they were
};

// NotFound unless `model` came from CreateKimiLinearCudaModel.
StatusOr<KimiCudaStats> GetKimiCudaStats(const Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_
