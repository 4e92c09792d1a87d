// The matmul every CPU module runs its projections with, and the row copy
// of a state region.
#include "exec/cpu/cpu_layer.h"

#include <cstring>

#include "base/thread_pool.h"

namespace strata::exec {

void Linear(const LayerRun& run, const float* x, int64_t num_tokens, const cpu::WeightMatrix& w,
            float* y) {
  cpu::MatMul(x, num_tokens, w, y, run.matmul_scratch, run.pool);
}

void RegionView::Write(int64_t first, int64_t n, const float* src) const {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(row(first + i), src + i * rows.stride,
                sizeof(float) * static_cast<size_t>(rows.stride));
  }
}

}  // namespace strata::exec
