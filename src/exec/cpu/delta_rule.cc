// Decode or chunked prefill of the delta rule.
#include "exec/cpu/delta_rule.h"

namespace strata::exec {

Status DeltaRule(const LayerRun& run, const cpu::KdaArgs& args, void* workspace,
                 size_t workspace_bytes) {
  if (args.num_tokens == 1 && run.past > 0) return cpu::KdaRecurrent(args, run.pool);
  return cpu::KdaChunked(args, workspace, workspace_bytes, run.pool);
}

}  // namespace strata::exec
