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
#include "exec/cpu/weight_binder.h"
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

// Every tensor `spec` binds, in binding order, with its canonical shape: the
// checkpoint a layer list expects (lm_head omitted when the embeddings are
// tied). Matrices are [out, in].
StatusOr<std::vector<BoundTensor>> ListTensors(const ArchSpec& spec);

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_EXECUTOR_H_
