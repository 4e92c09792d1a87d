// Introspection of the qwen3_next CUDA executor (the layer executor,
// exec/cuda/cuda_executor.h), for tests and benchmarks: where its memory went
// and whether decode steps run as CUDA graphs. Only linked in CUDA builds.
#ifndef STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_
#define STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "exec/cuda/cuda_executor_stats.h"
#include "model/model.h"

namespace strata {

using Qwen3NextCudaStats = CudaExecutorStats;

// NotFound unless `model` came from CreateQwen3NextCudaModel.
StatusOr<Qwen3NextCudaStats> GetQwen3NextCudaStats(const Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_H_
