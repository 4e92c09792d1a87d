// The CPU executor: runs any architecture's layer list (embedding, decoder
// layers of mixer + FFN with pre-norms and residuals, final norm, lm head) as
// a Model. Activations are fp32 end to end; weights are bound by their
// checkpoint names (model-spec §9: parity against transformers in fp32).
#ifndef STRATA_EXEC_CPU_CPU_EXECUTOR_H_
#define STRATA_EXEC_CPU_CPU_EXECUTOR_H_

#include <memory>
#include <string>

#include "base/status.h"
#include "exec/arch_spec.h"
#include "model/config_reader.h"
#include "model/model.h"

namespace strata {
class WeightStore;
}

namespace strata::exec {

// Binds every layer's weights from `weights` (reporting progress from 0.9 to
// 0.99 as layers bind) and returns the model.
StatusOr<std::unique_ptr<Model>> CreateCpuExecutor(ArchSpec spec,
                                                   std::shared_ptr<const WeightStore> weights,
                                                   const LoadOptions& options);

// The CPU factory of an architecture adapter: reads `config_path`, parses it
// with `parse`, describes the layers with `describe` (which may look at the
// checkpoint's tensor names for aliases) and builds the executor.
template <typename Config>
StatusOr<std::unique_ptr<Model>> LoadCpuModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options, StatusOr<Config> (*parse)(const ConfigReader&),
    ArchSpec (*describe)(const Config&, const WeightStore*)) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(Config config, parse(reader));
  ArchSpec spec = describe(config, weights.get());
  return CreateCpuExecutor(std::move(spec), std::move(weights), options);
}

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_EXECUTOR_H_
