// The GPU executor of a layer list: runs any architecture whose mixers have
// GPU modules (exec/cuda/cuda_mixer.h) as a Model, with the feed-forward
// module (ffn_cuda.h) and the shared host side of LayerExecutor (states,
// the decode driver and its graphs, the decode tunings of the layer stack).
// Weights are bf16 on the device, bound by their checkpoint names, except
// the FP8 block-scaled matrices of checkpoints that store them so
// (ArchSpec::fp8_block; weight_carver.h), which stay FP8. Only linked in CUDA
// builds.
#ifndef STRATA_EXEC_CUDA_CUDA_EXECUTOR_H_
#define STRATA_EXEC_CUDA_CUDA_EXECUTOR_H_

#include <memory>
#include <string>

#include "base/status.h"
#include "exec/arch_spec.h"
#include "exec/cuda/cuda_executor_stats.h"
#include "model/model.h"

namespace strata {
class WeightStore;
}

namespace strata::cuda_exec {

// Loads `spec` from `weights` (null: random weights made on the device,
// LoadOptions::dummy_seed). Unavailable (no usable device), ResourceExhausted
// (too little device memory) and Unimplemented (a layer kind or shape the GPU
// modules do not run) let LoadModel fall back to the CPU; their messages
// complete the sentence "CUDA requested but ...".
StatusOr<std::unique_ptr<Model>> CreateCudaLayerExecutor(exec::ArchSpec spec,
                                                         std::shared_ptr<const WeightStore> weights,
                                                         const LoadOptions& options);

// The executor's statistics; NotFound unless `model` came from
// CreateCudaLayerExecutor.
StatusOr<CudaExecutorStats> GetCudaExecutorStats(const Model& model);

}  // namespace strata::cuda_exec

#endif  // STRATA_EXEC_CUDA_CUDA_EXECUTOR_H_
