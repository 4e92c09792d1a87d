// Device buffers and random inputs shared by the GPU op-level tests (the
// invariance tests use all of it; cuda_moe_test, cuda_fp8_gemm_test and
// cuda_dsv32_ops_test the buffers, keeping their own random inputs), which
// each carried their own copy. Header-only: each test is one executable built
// from its own .cc (tests/CMakeLists.txt).
#ifndef STRATA_TESTS_GPU_OP_TEST_UTIL_H_
#define STRATA_TESTS_GPU_OP_TEST_UTIL_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "base/dtype.h"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace strata::cuda::op_test {

// One cudaMalloc'd block (at least 16 bytes), freed with the object.
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(bytes, 16)), cudaSuccess);
  }
  ~DevBuf() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

template <typename T>
void Upload(const DevBuf& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.get(), h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
}
// Fills all of h.
template <typename T>
void Download(std::vector<T>& h, const DevBuf& d) {
  ASSERT_EQ(cudaMemcpy(h.data(), d.get(), sizeof(T) * h.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
}
template <typename T>
std::vector<T> Download(const DevBuf& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Uniform in [-amp, amp] away from zero (|v| ≥ amp/64), so no input is 0.
inline float NonZero(std::mt19937& rng, float amp) {
  std::uniform_real_distribution<float> u(amp / 64, amp);
  const float v = u(rng);
  return (rng() & 1u) != 0 ? v : -v;
}
inline std::vector<uint16_t> RandomBf16(size_t n, float amp, std::mt19937& rng) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = F32ToBf16(NonZero(rng, amp));
  return v;
}
inline std::vector<float> RandomF32(size_t n, float amp, std::mt19937& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = NonZero(rng, amp);
  return v;
}

}  // namespace strata::cuda::op_test

#endif  // STRATA_TESTS_GPU_OP_TEST_UTIL_H_
