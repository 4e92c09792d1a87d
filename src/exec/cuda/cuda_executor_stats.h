// What every GPU executor reports about itself, for tests and benchmarks:
// where its device memory went and how its decode steps ran
// (cuda_exec::GetCudaExecutorStats). Only filled in CUDA builds.
#ifndef STRATA_EXEC_CUDA_CUDA_EXECUTOR_STATS_H_
#define STRATA_EXEC_CUDA_CUDA_EXECUTOR_STATS_H_

#include <cstdint>
#include <map>
#include <string>

namespace strata {

struct CudaExecutorStats {
  // Device memory by purpose (bytes).
  uint64_t weight_bytes = 0;
  uint64_t scratch_bytes = 0;     // activations and op workspaces, planned at load
  uint64_t state_pool_bytes = 0;  // recurrent states + conv windows (KDA, GDN), all slots
  uint64_t kv_pool_bytes = 0;     // paged attention rows (MLA latents, K/V, indexer keys)
  int64_t slots_total = 0, slots_free = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0;
  int64_t max_batch = 0;
  int64_t max_context_tokens = 0;
  int64_t prefill_slice_tokens = 0;
  // Decode steps.
  int64_t graph_captures = 0;  // graphs instantiated
  int64_t graph_launches = 0;  // steps replayed from a graph
  int64_t eager_steps = 0;     // steps enqueued op by op
  int64_t mixed_steps = 0;     // of those, passes of decode rows and a prefill slice
  std::string graph_error;     // why graphs were turned off, if they were
  // Matrices kept FP8 e4m3 on the device (codes + expanded scales; part of
  // weight_bytes), a layer's stacked routed experts counting as two (w13,
  // w2); 0 for bf16 checkpoints and dummy weights.
  uint64_t fp8_weight_bytes = 0;
  int64_t fp8_matrices = 0;
  // The layer modules' counters by name (which paths their passes took,
  // what their kernels counted), e.g. "dsa.sparse_decode_steps".
  std::map<std::string, uint64_t> counters;
};

}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_EXECUTOR_STATS_H_
