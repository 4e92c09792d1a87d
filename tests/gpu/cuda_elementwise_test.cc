// CUDA element-wise ops against plain host references on random inputs, at
// odd sizes and alignments (scalar paths and vector tails) and production
// sizes (D = 2304, I = 9216 and 1024):
//  * EmbeddingGather: exact (a bf16 → fp32 widening);
//  * SiluMul: bf16 and fp32 gate|up against cpu's g/(1+e^−g)·u;
//  * AddInto, CastF32ToBf16, CastBf16ToF32: exact;
//  * FillRandomBf16/F32: deterministic, equal to the documented splitmix64
//    formula, within range, mean/variance of a uniform, seeds differ,
//    independent of pointer alignment (vector vs scalar path);
//  * UploadWords: exact, from pinned host memory, nothing written around the
//    destination spans;
//  * misuse → InvalidArgument naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::ToBf16Bits;
using op_test::Uniform;
using op_test::Upload;

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field << ": " << st;
  EXPECT_NE(std::string(st.message()).find(field), std::string::npos) << st;
}

TEST(CudaElementwise, EmbeddingGatherIsExact) {
  std::mt19937_64 rng(1);
  for (int64_t dim : {64, 72, 37, 2304}) {
    for (size_t h_off : {size_t{0}, size_t{4}}) {
      const int64_t vocab = 1000, n = 37;
      std::vector<uint16_t> embed =
          ToBf16Bits(Uniform(static_cast<size_t>(vocab * dim), rng, -1, 1));
      std::vector<int32_t> tokens(n);
      std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
      for (auto& t : tokens) t = pick(rng);
      tokens[0] = 0;
      tokens[1] = static_cast<int32_t>(vocab - 1);
      DevBuf ed(embed.size() * 2), td(tokens.size() * 4),
          hd(static_cast<size_t>(n * dim) * 4, h_off);
      Upload(ed.get(), embed);
      Upload(td.get(), tokens);
      const Status st =
          EmbeddingGather(ed.get<bf16>(), dim, td.get<int32_t>(), n, hd.get<float>(), nullptr);
      ASSERT_TRUE(st.ok()) << st;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> h = Download<float>(hd.get(), static_cast<size_t>(n * dim));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < dim; ++c)
          ASSERT_EQ(h[i * dim + c], Bf16ToF32(embed[tokens[i] * dim + c]))
              << "dim=" << dim << " row " << i << " col " << c;
      std::printf("[elementwise] EmbeddingGather dim=%lld h_off=%zu exact\n",
                  static_cast<long long>(dim), h_off);
    }
  }
}

TEST(CudaElementwise, SiluMulMatchesCpuFormula) {
  std::mt19937_64 rng(2);
  struct Shape {
    int64_t n, inter;
  };
  for (const Shape& s :
       {Shape{1, 24}, Shape{3, 37}, Shape{5, 1024}, Shape{7, 9216}, Shape{300, 1024}}) {
    for (ActType t : {ActType::kBf16, ActType::kF32}) {
      const size_t count = static_cast<size_t>(s.n * 2 * s.inter);
      std::vector<float> gu = Uniform(count, rng, -6, 6);
      DevBuf gd(count * 4), od(static_cast<size_t>(s.n * s.inter) * 2);
      if (t == ActType::kBf16) {
        std::vector<uint16_t> b = ToBf16Bits(gu);
        for (size_t i = 0; i < count; ++i) gu[i] = Bf16ToF32(b[i]);
        Upload(gd.get(), b);
      } else {
        Upload(gd.get(), gu);
      }
      const Status st = SiluMul(gd.get(), t, s.n, s.inter, od.get<bf16>(), nullptr);
      ASSERT_TRUE(st.ok()) << st;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint16_t> out = Download<uint16_t>(od.get(), static_cast<size_t>(s.n * s.inter));
      double num = 0, den = 0, max_abs = 0;
      for (int64_t r = 0; r < s.n; ++r) {
        for (int64_t c = 0; c < s.inter; ++c) {
          const float g = gu[r * 2 * s.inter + c], u = gu[r * 2 * s.inter + s.inter + c];
          const float ref = g / (1.f + std::exp(-g)) * u;
          const double d = Bf16ToF32(out[r * s.inter + c]) - ref;
          num += d * d;
          den += static_cast<double>(ref) * ref;
          max_abs = std::max(max_abs, std::fabs(d));
        }
      }
      const double l2 = std::sqrt(num / den);
      std::printf("[elementwise] SiluMul n=%lld I=%lld %s max_abs=%.3e l2_rel=%.3e\n",
                  static_cast<long long>(s.n), static_cast<long long>(s.inter),
                  t == ActType::kBf16 ? "bf16" : "f32", max_abs, l2);
      EXPECT_LE(l2, 1e-2);
    }
  }
}

TEST(CudaElementwise, AddIntoAndCastsAreExact) {
  std::mt19937_64 rng(3);
  for (int64_t count : {1, 3, 4, 5, 1023, 2304, 2304 * 37 + 3, 1 << 20}) {
    for (size_t off : {size_t{0}, size_t{4}}) {  // 4 bytes: scalar path for fp32 sources
      const size_t n = static_cast<size_t>(count);
      std::vector<float> dst0 = Uniform(n, rng, -5, 5);
      std::vector<float> srcf = Uniform(n, rng, -5, 5);
      std::vector<uint16_t> srcb = ToBf16Bits(Uniform(n, rng, -5, 5));
      DevBuf dd(n * 4, off), sf(n * 4, off), sb(n * 2, off / 2), cb(n * 2, off / 2);
      // AddInto fp32 source.
      Upload(dd.get(), dst0);
      Upload(sf.get(), srcf);
      ASSERT_TRUE(AddInto(dd.get<float>(), sf.get(), ActType::kF32, count, nullptr).ok());
      std::vector<float> got = Download<float>(dd.get(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], dst0[i] + srcf[i]) << "f32 add, i=" << i;
      // AddInto bf16 source.
      Upload(dd.get(), dst0);
      Upload(sb.get(), srcb);
      ASSERT_TRUE(AddInto(dd.get<float>(), sb.get(), ActType::kBf16, count, nullptr).ok());
      got = Download<float>(dd.get(), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], dst0[i] + Bf16ToF32(srcb[i])) << "bf16 add, i=" << i;
      // Casts.
      ASSERT_TRUE(CastF32ToBf16(sf.get<float>(), cb.get<bf16>(), count, nullptr).ok());
      std::vector<uint16_t> cast = Download<uint16_t>(cb.get(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(cast[i], F32ToBf16(srcf[i])) << "to bf16, i=" << i;
      ASSERT_TRUE(CastBf16ToF32(sb.get<bf16>(), dd.get<float>(), count, nullptr).ok());
      got = Download<float>(dd.get(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], Bf16ToF32(srcb[i])) << "to f32, i=" << i;
      CUDA_OK(cudaDeviceSynchronize());
    }
  }
  std::printf("[elementwise] AddInto / casts exact at all sizes\n");
}

// The documented generator, on the host.
float HostUniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.f / 16777216.f);
}

TEST(CudaElementwise, FillRandomIsDeterministicUniformAndDocumented) {
  const int64_t count = (1 << 22) + 5;
  const float scale = 0.02f;
  DevBuf a(count * 2), b(count * 2, 2), c(count * 2);
  ASSERT_TRUE(FillRandomBf16(a.get<bf16>(), count, 42, scale, nullptr).ok());
  ASSERT_TRUE(FillRandomBf16(b.get<bf16>(), count, 42, scale, nullptr).ok());  // scalar path
  ASSERT_TRUE(FillRandomBf16(c.get<bf16>(), count, 43, scale, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> va = Download<uint16_t>(a.get(), count),
                        vb = Download<uint16_t>(b.get(), count),
                        vc = Download<uint16_t>(c.get(), count);
  EXPECT_EQ(va, vb) << "same seed, different alignment";
  size_t same = 0;
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float v = Bf16ToF32(va[i]);
    ASSERT_GE(v, -scale);
    ASSERT_LT(v, scale);
    sum += v;
    sum2 += static_cast<double>(v) * v;
    same += va[i] == vc[i];
  }
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, count - 1}) {
    const float u = HostUniform(42, static_cast<uint64_t>(i));
    const float expect = (2.f * u - 1.f) * scale;
    EXPECT_NEAR(Bf16ToF32(va[i]), expect, std::fabs(expect) / 128 + 1e-9) << "i=" << i;
  }
  const double mean = sum / count, var = sum2 / count - mean * mean;
  std::printf(
      "[elementwise] FillRandomBf16 mean=%.3e var=%.4e (uniform: 0, %.4e) same-as-seed43=%zu\n",
      mean, var, scale * scale / 3.0, same);
  EXPECT_NEAR(mean, 0.0, scale * 1e-2);
  EXPECT_NEAR(var, scale * scale / 3.0, scale * scale / 3.0 * 2e-2);
  EXPECT_LT(same, static_cast<size_t>(count / 50)) << "seeds 42 and 43 look alike";

  DevBuf f(count * 4), g(count * 4, 4);
  ASSERT_TRUE(FillRandomF32(f.get<float>(), count, 7, -1.f, 3.f, nullptr).ok());
  ASSERT_TRUE(FillRandomF32(g.get<float>(), count, 7, -1.f, 3.f, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> vf = Download<float>(f.get(), count), vg = Download<float>(g.get(), count);
  EXPECT_EQ(vf, vg);
  double fsum = 0;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_GE(vf[i], -1.f);
    ASSERT_LE(vf[i], 3.f);
    fsum += vf[i];
  }
  for (int64_t i : {int64_t{0}, int64_t{3}, int64_t{4}, count - 1}) {
    EXPECT_FLOAT_EQ(vf[i], -1.f + 4.f * HostUniform(7, static_cast<uint64_t>(i))) << "i=" << i;
  }
  EXPECT_NEAR(fsum / count, 1.0, 1e-2);
}

// Two spans of random words from pinned host memory, read by the kernel
// itself; the words around each destination span stay as they were, and a
// host write to the sources after the stream has passed the kernel does not
// reach the device copy.
TEST(CudaElementwise, UploadWordsCopiesPinnedHostSpansExactly) {
  std::mt19937_64 rng(17);
  for (const auto& [n0, n1] : std::vector<std::pair<int64_t, int64_t>>{
           {1027, 61}, {256, 0}, {1, 3}, {0, 5}, {5000, 2100}}) {
    SCOPED_TRACE(std::to_string(n0) + " + " + std::to_string(n1) + " words");
    uint32_t* host = nullptr;
    CUDA_OK(cudaMallocHost(&host, sizeof(uint32_t) * static_cast<size_t>(n0 + n1)));
    for (int64_t i = 0; i < n0 + n1; ++i) host[i] = static_cast<uint32_t>(rng());
    constexpr uint32_t kGuard = 0xabababab;
    const int64_t total = n0 + n1 + 4;  // [guard, span 0, guard, span 1, guard]
    DevBuf dev(sizeof(uint32_t) * static_cast<size_t>(total));
    CUDA_OK(cudaMemset(dev.get(), 0xab, sizeof(uint32_t) * static_cast<size_t>(total)));
    uint32_t* d0 = dev.get<uint32_t>() + 1;
    uint32_t* d1 = d0 + n0 + 1;
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreate(&s));
    ASSERT_TRUE(UploadWords(host, d0, n0, host + n0, d1, n1, s).ok());
    CUDA_OK(cudaStreamSynchronize(s));
    const std::vector<uint32_t> want(host, host + n0 + n1);
    for (int64_t i = 0; i < n0 + n1; ++i) host[i] = ~host[i];  // after the kernel: not seen
    std::vector<uint32_t> got(static_cast<size_t>(total));
    CUDA_OK(
        cudaMemcpy(got.data(), dev.get(), sizeof(uint32_t) * got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got[0], kGuard);
    EXPECT_EQ(got[static_cast<size_t>(n0 + 1)], kGuard);
    for (size_t i = static_cast<size_t>(n0 + n1 + 2); i < got.size(); ++i) {
      EXPECT_EQ(got[i], kGuard);
    }
    for (int64_t i = 0; i < n0; ++i) {
      ASSERT_EQ(got[static_cast<size_t>(1 + i)], want[static_cast<size_t>(i)]) << i;
    }
    for (int64_t i = 0; i < n1; ++i) {
      ASSERT_EQ(got[static_cast<size_t>(n0 + 2 + i)], want[static_cast<size_t>(n0 + i)]) << i;
    }
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFreeHost(host));
  }
}

TEST(CudaElementwise, MisuseIsInvalidArgument) {
  DevBuf a(1 << 16), b(1 << 16);
  ExpectInvalid(EmbeddingGather(nullptr, 8, b.get<int32_t>(), 2, a.get<float>(), nullptr), "embed");
  ExpectInvalid(EmbeddingGather(b.get<bf16>(), 0, b.get<int32_t>(), 2, a.get<float>(), nullptr),
                "dim");
  ExpectInvalid(EmbeddingGather(b.get<bf16>(), 8, nullptr, 2, a.get<float>(), nullptr), "tokens");
  ExpectInvalid(EmbeddingGather(b.get<bf16>(), 8, b.get<int32_t>(), -1, a.get<float>(), nullptr),
                "n");
  ExpectInvalid(SiluMul(nullptr, ActType::kBf16, 2, 8, a.get<bf16>(), nullptr), "gu");
  ExpectInvalid(SiluMul(b.get(), ActType::kBf16, 2, 0, a.get<bf16>(), nullptr), "inter");
  ExpectInvalid(SiluMul(b.get(), static_cast<ActType>(4), 2, 8, a.get<bf16>(), nullptr), "gu_type");
  ExpectInvalid(SiluMul(b.get(), ActType::kBf16, 2, 8, nullptr, nullptr), "out");
  ExpectInvalid(AddInto(nullptr, b.get(), ActType::kF32, 8, nullptr), "dst");
  ExpectInvalid(AddInto(a.get<float>(), nullptr, ActType::kF32, 8, nullptr), "src");
  ExpectInvalid(AddInto(a.get<float>(), b.get(), ActType::kF32, -8, nullptr), "count");
  ExpectInvalid(AddInto(a.get<float>(), b.get(), static_cast<ActType>(2), 8, nullptr), "src_type");
  ExpectInvalid(CastF32ToBf16(nullptr, a.get<bf16>(), 8, nullptr), "src");
  ExpectInvalid(CastBf16ToF32(b.get<bf16>(), nullptr, 8, nullptr), "dst");
  ExpectInvalid(FillRandomBf16(nullptr, 8, 1, 1.f, nullptr), "dst");
  ExpectInvalid(FillRandomBf16(a.get<bf16>(), 8, 1, -1.f, nullptr), "scale");
  ExpectInvalid(FillRandomF32(a.get<float>(), 8, 1, 2.f, 1.f, nullptr), "lo <= hi");
  ExpectInvalid(UploadWords(nullptr, a.get<uint32_t>(), 4, nullptr, nullptr, 0, nullptr), "src0");
  ExpectInvalid(UploadWords(b.get<uint32_t>(), a.get<uint32_t>(), -1, nullptr, nullptr, 0, nullptr),
                "n0");
  ExpectInvalid(
      UploadWords(b.get<uint32_t>(), a.get<uint32_t>(), 4, b.get<uint32_t>(), nullptr, 2, nullptr),
      "dst1");
  ExpectInvalid(UploadWords(nullptr, nullptr, 0, nullptr, nullptr, -2, nullptr), "n1");
  EXPECT_TRUE(UploadWords(nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(AddInto(a.get<float>(), b.get(), ActType::kF32, 0, nullptr).ok());
  EXPECT_TRUE(SiluMul(b.get(), ActType::kBf16, 0, 8, a.get<bf16>(), nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace strata::cuda
