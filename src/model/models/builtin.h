// The architecture adapters compiled into the library. Listed explicitly (not
// by static initialisers) so that linking the static core never drops one.
#ifndef STRATA_MODEL_MODELS_BUILTIN_H_
#define STRATA_MODEL_MODELS_BUILTIN_H_

#include "model/model.h"

namespace strata {

// kimi_linear.cc
StatusOr<std::unique_ptr<Model>> CreateKimiLinearModel(std::shared_ptr<const WeightStore> weights,
                                                       const std::string& config_path,
                                                       const LoadOptions& options);

// deepseek_v32.cc (CPU).
StatusOr<std::unique_ptr<Model>> CreateDeepseekV32Model(std::shared_ptr<const WeightStore> weights,
                                                        const std::string& config_path,
                                                        const LoadOptions& options);

// qwen3_next.cc (CPU).
StatusOr<std::unique_ptr<Model>> CreateQwen3NextModel(std::shared_ptr<const WeightStore> weights,
                                                      const std::string& config_path,
                                                      const LoadOptions& options);

// strata_hybrid.cc (CPU): the project's own KDA + DSA demo architecture.
StatusOr<std::unique_ptr<Model>> CreateStrataHybridModel(std::shared_ptr<const WeightStore> weights,
                                                         const std::string& config_path,
                                                         const LoadOptions& options);

// kimi_linear_weights.cc: writes random host weights for `config_path` into
// `dir`/model.safetensors (the CPU's --load-format dummy; small configs only).
Status WriteKimiLinearDummyCheckpoint(const std::string& config_path, const std::string& dir,
                                      uint64_t seed);

#if defined(STRATA_HAVE_CUDA)
// kimi_linear.cc: the GPU executor, the layer executor on kimi_linear's
// layer list. `weights` null means dummy weights
// made on the device. Unavailable (no driver or device), ResourceExhausted
// (too little device memory) and Unimplemented (shapes the kernels reject)
// tell LoadModel to fall back to the CPU; their messages complete the sentence
// "CUDA requested but ...".
StatusOr<std::unique_ptr<Model>> CreateKimiLinearCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options);

// deepseek_v32.cc: the GPU executor of deepseek_v32, the layer executor on its
// layer list (same contract and fallback statuses as CreateKimiLinearCudaModel).
StatusOr<std::unique_ptr<Model>> CreateDeepseekV32CudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options);

// qwen3_next.cc: the GPU executor of qwen3_next, the layer executor on its
// layer list (same contract and fallback statuses as CreateKimiLinearCudaModel).
StatusOr<std::unique_ptr<Model>> CreateQwen3NextCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options);

// strata_hybrid.cc: the GPU executor of strata_hybrid, the layer executor on
// its layer list (same contract and fallback statuses as
// CreateKimiLinearCudaModel).
StatusOr<std::unique_ptr<Model>> CreateStrataHybridCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options);
#endif

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_BUILTIN_H_
