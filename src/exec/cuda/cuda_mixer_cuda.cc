// The pieces of the mixer contract that several modules share.
#include "backend/cuda/elementwise.h"
#include "exec/cuda/cuda_mixer.h"

namespace strata {
namespace cuda_exec {

Status RecurrentSlots::FillForBenchmark(size_t members, int64_t slot,
                                        const std::function<uint64_t()>& next,
                                        cudaStream_t stream) const {
  for (size_t m = 0; m < members; ++m) {
    STRATA_RETURN_IF_ERROR(
        cuda::FillRandomF32(At(states, m, slot), state, next(), -0.1f, 0.1f, stream));
    if (window > 0) {
      STRATA_RETURN_IF_ERROR(
          cuda::FillRandomF32(At(windows, m, slot), window, next(), -1.f, 1.f, stream));
    }
  }
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
