// The delta-rule core shared by the KDA and Gated DeltaNet modules.
#ifndef STRATA_EXEC_CPU_DELTA_RULE_H_
#define STRATA_EXEC_CPU_DELTA_RULE_H_

#include <cstddef>

#include "backend/cpu/kda.h"
#include "exec/cpu/cpu_layer.h"

namespace strata::exec {

// Runs `args` (state and output included) as one recurrent step when the
// slice is a single token continuing a sequence (decode), else in chunked
// form with `workspace` (KdaChunkedWorkspaceBytes for the slice).
Status DeltaRule(const LayerRun& run, const cpu::KdaArgs& args, void* workspace,
                 size_t workspace_bytes);

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_DELTA_RULE_H_
