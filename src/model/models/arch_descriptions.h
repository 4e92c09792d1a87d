// The layer lists of the built-in architectures, one function each (in its
// <arch>.cc), for the CPU executor and the GPU loaders alike. `weights` is
// the checkpoint whose names a description may follow (an export's
// aliases), or null for dummy weights, which take the usual names.
#ifndef STRATA_MODEL_MODELS_ARCH_DESCRIPTIONS_H_
#define STRATA_MODEL_MODELS_ARCH_DESCRIPTIONS_H_

#include "exec/arch_spec.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/qwen3_next_config.h"

namespace strata {

class WeightStore;

exec::ArchSpec DescribeKimiLinear(const KimiLinearConfig& c, const WeightStore* weights);
exec::ArchSpec DescribeDeepseekV32(const DeepseekV32Config& c, const WeightStore* weights);
exec::ArchSpec DescribeQwen3Next(const Qwen3NextConfig& c, const WeightStore* weights);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_ARCH_DESCRIPTIONS_H_
