// Random weights made on the device for a load without a checkpoint
// (LoadOptions::dummy_seed; benchmarks at production shapes): each call
// draws the next seed of one sequence, so a loader that fills its tensors in
// a fixed order makes the same weights for the same seed every time.
#ifndef STRATA_EXEC_CUDA_DUMMY_FILL_H_
#define STRATA_EXEC_CUDA_DUMMY_FILL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/elementwise.h"
#include "base/status.h"

namespace strata {
namespace cuda_exec {

class DummyFill {
 public:
  DummyFill(uint64_t seed, cudaStream_t stream) : seed_(seed), stream_(stream) {}

  // A matrix of n bf16 values, uniform in ±0.02 (small enough that the
  // residual stream stays finite through any depth).
  Status Matrix(cuda::bf16* dst, int64_t n) {
    drawn_ += n;
    return cuda::FillRandomBf16(dst, n, Next(), 0.02f, stream_);
  }
  // n fp32 values uniform in [lo, hi].
  Status Uniform(float* dst, int64_t n, float lo, float hi) {
    drawn_ += n;
    return cuda::FillRandomF32(dst, n, Next(), lo, hi, stream_);
  }
  // A norm's weight: all ones.
  Status Ones(float* dst, int64_t n) { return Uniform(dst, n, 1.f, 1.f); }
  // Elements filled so far by Matrix, Uniform and Ones: the parameters of a
  // loader that fills each checkpoint tensor once.
  int64_t drawn() const { return drawn_; }
  // Values computed on the host (rotary frequencies), as they are; draws no
  // seed and counts no parameter.
  Status Values(const std::vector<float>& v, float* dst) {
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice, stream_));
    return OkStatus();
  }

 private:
  uint64_t Next() { return seed_ * 0x9e3779b97f4a7c15ull + (++counter_) * 0xbf58476d1ce4e5b9ull; }

  uint64_t seed_;
  uint64_t counter_ = 0;
  int64_t drawn_ = 0;
  cudaStream_t stream_;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_DUMMY_FILL_H_
