// The architectures compiled into the library. Each is one file
// (<arch>.cc) that parses its config.json and describes its layer list; the
// CPU and GPU executors both run that list. Listed explicitly (not by static
// initialisers) so that linking the static core never drops one.
#ifndef STRATA_MODEL_MODELS_BUILTIN_H_
#define STRATA_MODEL_MODELS_BUILTIN_H_

#include "base/status.h"
#include "exec/arch_spec.h"
#include "model/config_reader.h"

namespace strata {

class WeightStore;

// Parses `config` (the whole config.json) and describes its layers. `weights`
// is the checkpoint whose tensor names a description may follow (an
// export's aliases), or null for dummy weights, which take the usual names.
using DescribeArchitecture = StatusOr<exec::ArchSpec> (*)(const ConfigReader& config,
                                                          const WeightStore* weights);

StatusOr<exec::ArchSpec> DescribeKimiLinear(const ConfigReader& config, const WeightStore* weights);
StatusOr<exec::ArchSpec> DescribeDeepseekV32(const ConfigReader& config,
                                             const WeightStore* weights);
StatusOr<exec::ArchSpec> DescribeQwen3Next(const ConfigReader& config, const WeightStore* weights);
// Strata's own KDA + DSA demo architecture.
StatusOr<exec::ArchSpec> DescribeStrataHybrid(const ConfigReader& config,
                                              const WeightStore* weights);

// The layer list of the config.json at `config_path` under the usual tensor
// names (the benchmarks' cost model). NotFound for a model_type without a
// built-in description.
StatusOr<exec::ArchSpec> DescribeConfigFile(const std::string& config_path);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_BUILTIN_H_
