// What the GPU op-level tests share, each of which used to carry its own
// copy: device memory (DevBuf: raw bytes, optionally misaligned on purpose;
// DeviceArray<T>: typed, with checked copies), host/device copies, random
// inputs, bf16 conversions on both sides of the copy (the device's
// __nv_bfloat16 and the bits base/dtype.h stores), and the error metrics and
// reference comparisons the tests bound (Errors, ExpectCloseL2). Header-only:
// each test is one executable built from its own .cc (tests/CMakeLists.txt).
#ifndef STRATA_TESTS_GPU_OP_TEST_UTIL_H_
#define STRATA_TESTS_GPU_OP_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace strata::cuda::op_test {

// One cudaMalloc'd block, freed with the object. `offset_bytes` shifts the
// pointer get() hands out, to test misaligned operands; the block keeps at
// least 256 bytes and 16 more past the end, so small and offset views stay
// inside it.
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes, size_t offset_bytes = 0) : offset_(offset_bytes) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(bytes, 256) + offset_bytes + 16), cudaSuccess);
  }
  ~DevBuf() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  // `extra_bytes` further on: one buffer, several misalignments.
  template <typename T = void>
  T* get(size_t extra_bytes = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + offset_ + extra_bytes);
  }

 private:
  void* p_ = nullptr;
  size_t offset_ = 0;
};

// n elements of T on the device (at least one allocated); get() is null when
// cudaMalloc failed, and the copies then report false / come back empty.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(std::max<size_t>(n, 1)) {
    if (cudaMalloc(&ptr_, n_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  bool Upload(const std::vector<T>& host) {
    return ptr_ != nullptr && host.size() <= n_ &&
           cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
               cudaSuccess;
  }
  std::vector<T> Download(size_t n) const {
    std::vector<T> host(n);
    if (cudaMemcpy(host.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
      host.clear();
    }
    return host;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

// Copies to and from raw device pointers (a DevBuf's get() at some offset).
template <typename T>
void Upload(void* dst, const std::vector<T>& v) {
  ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}
template <typename T>
std::vector<T> Download(const void* src, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

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

// Uniform in [lo, hi).
template <typename Rng>
std::vector<float> Uniform(size_t n, Rng& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = u(rng);
  return v;
}

// bf16 as the device rounds it (round to nearest even), on the host.
inline float RoundBf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Uniform in [-amp, amp], rounded to bf16 so host and device see the same numbers.
inline std::vector<float> RoundedUniform(size_t n, float amp, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(u(rng));
  return v;
}

// Host values to the device's bf16 type and back.
inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16_rn(x[i]);
  return out;
}
inline std::vector<float> ToFloat(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

// Host values to bf16 bits (base/dtype.h), for buffers typed as uint16_t.
inline std::vector<uint16_t> ToBf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
  return b;
}

// Ours against a reference, element by element.
struct Errors {
  double max_abs = 0;
  double max_rel = 0;  // max_abs / max |ref|
  double l2_rel = 0;   // ‖got − ref‖ / ‖ref‖
  double ref_max = 0;  // max |ref|
  bool finite = true;  // every element of got
  bool ref_nonzero = false;
};

// A non-finite element of `got` makes max_abs, max_rel and l2_rel infinite,
// so no upper bound passes on it. An all-zero reference divides by 1e-30
// (any error fails), or with `absolute_if_ref_is_zero` gives ‖got − ref‖.
inline Errors Compare(const std::vector<float>& got, const std::vector<float>& ref,
                      bool absolute_if_ref_is_zero = false) {
  Errors e;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    e.finite = e.finite && std::isfinite(got[i]);
    const double d = static_cast<double>(got[i]) - ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.ref_max = std::max(e.ref_max, std::fabs(static_cast<double>(ref[i])));
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  e.ref_nonzero = den > 0;
  e.l2_rel = den == 0 && absolute_if_ref_is_zero ? std::sqrt(num)
                                                 : std::sqrt(num / std::max(den, 1e-30));
  if (!e.finite) e.max_abs = e.l2_rel = std::numeric_limits<double>::infinity();
  e.max_rel = e.max_abs / std::max(e.ref_max, 1e-30);
  return e;
}

// Equal sizes, every element finite and the L2-relative error within
// `tolerance` (absolute against an all-zero reference: a zero state stays
// zero); prints one line tagged `tag` ("[kda]") either way.
inline void ExpectCloseL2(const char* tag, const std::string& label,
                          const std::vector<float>& got, const std::vector<float>& want,
                          double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << label;
  const Errors e = Compare(got, want, /*absolute_if_ref_is_zero=*/true);
  std::printf("%s %-58s rel_l2 %.3e  max_abs %.3e  (max|ref| %.3e, tol %.0e)\n", tag,
              label.c_str(), e.l2_rel, e.max_abs, e.ref_max, tolerance);
  EXPECT_TRUE(e.finite) << label << ": non-finite output";
  EXPECT_LE(e.l2_rel, tolerance) << label;
}

// Bitwise equality (batch-invariant kernels), reporting how many elements
// differ and the first one.
inline void ExpectSameBits(const std::string& label, const std::vector<float>& got,
                           const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << label;
  ASSERT_FALSE(want.empty()) << label;
  if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0) return;
  size_t diffs = 0, first = want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (first == want.size()) first = i;
      ++diffs;
    }
  }
  ADD_FAILURE() << label << ": " << diffs << " of " << want.size()
                << " elements differ in their bits; first at " << first << ": " << got[first]
                << " vs " << want[first];
}

}  // namespace strata::cuda::op_test

#endif  // STRATA_TESTS_GPU_OP_TEST_UTIL_H_
