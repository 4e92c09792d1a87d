// The matmul every CPU module runs its projections with.
#include "exec/cpu/cpu_layer.h"

#include "base/thread_pool.h"

namespace strata::exec {

void Linear(const LayerRun& run, const float* x, int64_t num_tokens, const cpu::WeightMatrix& w,
            float* y) {
  cpu::MatMul(x, num_tokens, w, y, run.matmul_scratch, run.pool);
}

}  // namespace strata::exec
