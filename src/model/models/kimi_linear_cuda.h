// Introspection of the kimi_linear CUDA executor (the layer executor,
// exec/cuda/cuda_executor.h), for tests and benchmarks: where its memory went
// and whether decode steps run as CUDA graphs. Only linked in CUDA builds.
#ifndef STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_
#define STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "exec/cuda/cuda_executor_stats.h"
#include "model/model.h"

namespace strata {

using KimiCudaStats = CudaExecutorStats;

// NotFound unless `model` came from CreateKimiLinearCudaModel.
StatusOr<KimiCudaStats> GetKimiCudaStats(const Model& model);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_H_
