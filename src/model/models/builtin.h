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

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_BUILTIN_H_
