// CUDA causal conv + SiLU against cpu::CausalConv1dSilu on random inputs and
// random (non-zero: a continued sequence) windows:
//  * prefill at T from 1 to past a thread's 64-token run, including T < K−1
//    (the window keeps its newest old rows), every K in [1, 8], odd channel
//    counts (scalar path) and the production q|k|v width 3·32·128 (vector
//    path), bf16 and fp32 x with a row stride; out and the updated window;
//  * prefill in chunks equals one prefill; decode steps equal prefill;
//  * decode over a window pool with permuted slots, a padding slot (−1);
//  * misuse → InvalidArgument naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/conv.h"
#include "backend/cuda/conv.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::Compare;
using op_test::DevBuf;
using op_test::Download;
using op_test::Errors;
using op_test::Uniform;
using op_test::Upload;

std::vector<float> Bf16Out(const void* dev, size_t n) {
  std::vector<uint16_t> b = Download<uint16_t>(dev, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = Bf16ToF32(b[i]);
  return f;
}

// x as the device sees it: [T, ldx] in x_type, plus its fp32 values packed [T, C].
struct Input {
  std::vector<float> packed;
  std::vector<uint8_t> bytes;
};
Input MakeX(ActType t, int64_t tokens, int64_t channels, int64_t ldx, std::mt19937_64& rng) {
  Input in;
  std::vector<float> raw = Uniform(static_cast<size_t>(tokens * ldx), rng, -2.f, 2.f);
  in.packed.resize(static_cast<size_t>(tokens * channels));
  in.bytes.resize(raw.size() * ActBytes(t));
  for (size_t i = 0; i < raw.size(); ++i) {
    if (t == ActType::kBf16) {
      const uint16_t b = F32ToBf16(raw[i]);
      raw[i] = Bf16ToF32(b);
      std::memcpy(&in.bytes[i * 2], &b, 2);
    } else {
      std::memcpy(&in.bytes[i * 4], &raw[i], 4);
    }
  }
  for (int64_t r = 0; r < tokens; ++r)
    for (int64_t c = 0; c < channels; ++c) in.packed[r * channels + c] = raw[r * ldx + c];
  return in;
}

// One prefill on the GPU and the CPU from the same window; compares out and
// the new window.
void CheckPrefill(int64_t T, int64_t C, int64_t K, int64_t ldx, ActType xt, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " C=" << C << " K=" << K << " ldx=" << ldx
                                  << " x=" << (xt == ActType::kBf16 ? "bf16" : "f32"));
  std::mt19937_64 rng(seed);
  const Input x = MakeX(xt, T, C, ldx, rng);
  std::vector<float> w = Uniform(static_cast<size_t>(C * K), rng, -1.f, 1.f);
  std::vector<float> window = Uniform(static_cast<size_t>((K - 1) * C), rng, -2.f, 2.f);
  DevBuf xd(std::max<size_t>(x.bytes.size(), 1)), wd(w.size() * 4),
      wind(std::max<size_t>(window.size(), 1) * 4), od(static_cast<size_t>(T * C) * 2);
  Upload(xd.get(), x.bytes);
  Upload(wd.get(), w);
  Upload(wind.get(), window);
  const Status st = CausalConvSiluPrefill(xd.get(), xt, ldx, T, C, wd.get<float>(), K,
                                          wind.get<float>(), od.get<bf16>(), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> ref(static_cast<size_t>(T * C));
  std::vector<float> ref_window = window;
  cpu::CausalConv1dSilu(x.packed.data(), T, C, w.data(), K, ref_window.data(), ref.data(), nullptr);
  const Errors e = Compare(Bf16Out(od.get(), ref.size()), ref);
  std::printf("[conv] prefill T=%lld C=%lld K=%lld ldx=%lld x=%s max_abs=%.3e l2_rel=%.3e\n",
              static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(K),
              static_cast<long long>(ldx), xt == ActType::kBf16 ? "bf16" : "f32", e.max_abs,
              e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  // The window is a copy of inputs: exact.
  std::vector<float> got_window = Download<float>(wind.get(), window.size());
  EXPECT_EQ(got_window, ref_window) << "window after prefill";
}

TEST(CudaConv, PrefillMatchesCpuAcrossLengthsAndKernelSizes) {
  uint64_t seed = 1;
  for (int64_t K : {1, 2, 3, 4, 5, 8}) {
    for (int64_t T : {1, 2, 3, 5, 63, 64, 65, 130}) {
      CheckPrefill(T, 37, K, 37, ActType::kBf16, seed++);  // odd C: scalar path
      CheckPrefill(T, 72, K, 80, ActType::kF32, seed++);   // vector path, strided x
    }
  }
}

TEST(CudaConv, PrefillTinyFixtureAndProductionWidths) {
  uint64_t seed = 100;
  // Fused q|k|v of the tiny fixtures (3·H·dk) and of Kimi-Linear-48B (3·32·128),
  // x read from a wider projection row (ldx > C) as the executor does.
  for (auto [C, ldx] : std::vector<std::pair<int64_t, int64_t>>{
           {3 * 3 * 24, 3 * 3 * 24 + 40}, {3 * 5 * 48, 3 * 5 * 48}, {12288, 12288 + 4096}}) {
    for (int64_t T : {1, 2, 7, 300}) {
      CheckPrefill(T, C, 4, ldx, ActType::kBf16, seed++);
    }
  }
  CheckPrefill(1000, 12288, 4, 12288, ActType::kBf16, seed++);
  CheckPrefill(129, 12288, 4, 12288, ActType::kF32, seed++);
}

// Prefill of T1 then T2 tokens (window carried on the device) equals one
// prefill of T1 + T2, and decode steps continue it identically.
TEST(CudaConv, ChunkedPrefillAndDecodeContinueExactly) {
  std::mt19937_64 rng(200);
  const int64_t C = 384, K = 4, T1 = 2, T2 = 70, steps = 5;
  const int64_t T = T1 + T2 + steps;
  const Input x = MakeX(ActType::kBf16, T, C, C, rng);
  std::vector<float> w = Uniform(static_cast<size_t>(C * K), rng, -1.f, 1.f);
  std::vector<float> window = Uniform(static_cast<size_t>((K - 1) * C), rng, -2.f, 2.f);
  DevBuf xd(x.bytes.size()), wd(w.size() * 4), wind(window.size() * 4),
      od(static_cast<size_t>(T * C) * 2), slots(4);
  Upload(xd.get(), x.bytes);
  Upload(wd.get(), w);
  Upload(wind.get(), window);
  Upload(slots.get(), std::vector<int32_t>{0});
  const bf16* xb = xd.get<bf16>();
  bf16* ob = od.get<bf16>();
  ASSERT_TRUE(CausalConvSiluPrefill(xb, ActType::kBf16, C, T1, C, wd.get<float>(), K,
                                    wind.get<float>(), ob, nullptr)
                  .ok());
  ASSERT_TRUE(CausalConvSiluPrefill(xb + T1 * C, ActType::kBf16, C, T2, C, wd.get<float>(), K,
                                    wind.get<float>(), ob + T1 * C, nullptr)
                  .ok());
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = T1 + T2 + s;
    ASSERT_TRUE(CausalConvSiluDecode(xb + t * C, ActType::kBf16, C, 1, C, wd.get<float>(), K,
                                     wind.get<float>(), slots.get<int32_t>(), ob + t * C, nullptr)
                    .ok());
  }
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ref(static_cast<size_t>(T * C));
  std::vector<float> ref_window = window;
  cpu::CausalConv1dSilu(x.packed.data(), T, C, w.data(), K, ref_window.data(), ref.data(), nullptr);
  const Errors e = Compare(Bf16Out(od.get(), ref.size()), ref);
  std::printf("[conv] chunked %lld+%lld + %lld decode steps: max_abs=%.3e l2_rel=%.3e\n",
              static_cast<long long>(T1), static_cast<long long>(T2), static_cast<long long>(steps),
              e.max_abs, e.l2_rel);
  EXPECT_LE(e.l2_rel, 1e-2);
  EXPECT_EQ(Download<float>(wind.get(), window.size()), ref_window);
}

TEST(CudaConv, DecodeOverWindowPoolWithSlots) {
  std::mt19937_64 rng(300);
  for (auto [C, K, xt] :
       std::vector<std::tuple<int64_t, int64_t, ActType>>{{37, 4, ActType::kBf16},
                                                          {216, 3, ActType::kF32},
                                                          {12288, 4, ActType::kBf16},
                                                          {64, 1, ActType::kBf16}}) {
    SCOPED_TRACE(testing::Message() << "C=" << C << " K=" << K);
    const int64_t B = 6, pool_slots = 9, ldx = C + 8, W = K - 1;
    const std::vector<int32_t> slots = {7, 2, -1, 0, 5, 8};  // -1: padding row
    const Input x = MakeX(xt, B, C, ldx, rng);
    std::vector<float> w = Uniform(static_cast<size_t>(C * K), rng, -1.f, 1.f);
    std::vector<float> pool =
        Uniform(static_cast<size_t>(std::max<int64_t>(pool_slots * W * C, 1)), rng, -2.f, 2.f);
    DevBuf xd(x.bytes.size()), wd(w.size() * 4), pd(pool.size() * 4), sd(slots.size() * 4),
        od(static_cast<size_t>(B * C) * 2);
    Upload(xd.get(), x.bytes);
    Upload(wd.get(), w);
    Upload(pd.get(), pool);
    Upload(sd.get(), slots);
    const Status st =
        CausalConvSiluDecode(xd.get(), xt, ldx, B, C, wd.get<float>(), K, pd.get<float>(),
                             sd.get<int32_t>(), od.get<bf16>(), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> ref(static_cast<size_t>(B * C), 0.f);
    std::vector<float> ref_pool = pool;
    for (int64_t b = 0; b < B; ++b) {
      if (slots[b] < 0) continue;
      cpu::CausalConv1dSilu(&x.packed[b * C], 1, C, w.data(), K, &ref_pool[slots[b] * W * C],
                            &ref[b * C], nullptr);
    }
    const Errors e = Compare(Bf16Out(od.get(), ref.size()), ref);
    std::printf("[conv] decode B=%lld C=%lld K=%lld max_abs=%.3e l2_rel=%.3e\n",
                static_cast<long long>(B), static_cast<long long>(C), static_cast<long long>(K),
                e.max_abs, e.l2_rel);
    EXPECT_LE(e.l2_rel, 1e-2);
    EXPECT_EQ(Download<float>(pd.get(), pool.size()), ref_pool) << "window pool after decode";
  }
}

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field << ": " << st;
  EXPECT_NE(std::string(st.message()).find(field), std::string::npos) << st;
}

TEST(CudaConv, MisuseIsInvalidArgument) {
  DevBuf a(1 << 16), w(1 << 16), win(1 << 16), o(1 << 16), s(64);
  const void* x = a.get();
  const float* wp = w.get<float>();
  float* wn = win.get<float>();
  bf16* out = o.get<bf16>();
  const auto bf = ActType::kBf16;
  ASSERT_TRUE(CausalConvSiluPrefill(x, bf, 64, 4, 64, wp, 4, wn, out, nullptr).ok());
  ExpectInvalid(CausalConvSiluPrefill(nullptr, bf, 64, 4, 64, wp, 4, wn, out, nullptr), "x");
  ExpectInvalid(
      CausalConvSiluPrefill(x, static_cast<ActType>(3), 64, 4, 64, wp, 4, wn, out, nullptr),
      "x_type");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 63, 4, 64, wp, 4, wn, out, nullptr), "ldx");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, -1, 64, wp, 4, wn, out, nullptr), "num_tokens");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 0, wp, 4, wn, out, nullptr), "channels");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 64, nullptr, 4, wn, out, nullptr), "w");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 64, wp, 0, wn, out, nullptr), "kernel");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 64, wp, 9, wn, out, nullptr), "kernel");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 64, wp, 4, nullptr, out, nullptr), "window");
  ExpectInvalid(CausalConvSiluPrefill(x, bf, 64, 4, 64, wp, 4, wn, nullptr, nullptr), "out");
  EXPECT_TRUE(CausalConvSiluPrefill(x, bf, 64, 0, 64, wp, 4, wn, out, nullptr).ok());

  const int32_t* sl = s.get<int32_t>();
  CUDA_OK(cudaMemset(s.get(), 0, 64));
  ASSERT_TRUE(CausalConvSiluDecode(x, bf, 64, 2, 64, wp, 4, wn, sl, out, nullptr).ok());
  ExpectInvalid(CausalConvSiluDecode(x, bf, 64, -1, 64, wp, 4, wn, sl, out, nullptr), "batch");
  ExpectInvalid(CausalConvSiluDecode(x, bf, 64, 2, 64, wp, 4, wn, nullptr, out, nullptr), "slots");
  ExpectInvalid(CausalConvSiluDecode(x, bf, 64, 2, 64, wp, 4, nullptr, sl, out, nullptr),
                "window_pool");
  ExpectInvalid(CausalConvSiluDecode(x, bf, 32, 2, 64, wp, 4, wn, sl, out, nullptr), "ldx");
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace strata::cuda
