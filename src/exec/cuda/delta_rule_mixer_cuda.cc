#include "backend/cuda/elementwise.h"
#include "exec/cuda/delta_rule_mixer.h"

namespace strata {
namespace cuda_exec {

Status DeltaRuleMixer::FillSlotForBenchmark(int64_t slot, const std::function<uint64_t()>& next,
                                            cudaStream_t stream) const {
  for (size_t m = 0; m < size(); ++m) {
    STRATA_RETURN_IF_ERROR(
        cuda::FillRandomF32(States(m, slot), state_, next(), -0.1f, 0.1f, stream));
    if (window_ > 0) {
      STRATA_RETURN_IF_ERROR(
          cuda::FillRandomF32(Windows(m, slot), window_, next(), -1.f, 1.f, stream));
    }
  }
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
