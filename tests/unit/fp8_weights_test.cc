// FP8 e4m3 conversions (base/dtype.h) and block-scaled weight dequantisation
// (model/fp8_weights.h): every code against an independent decoding, the
// encoder's rounding and saturation, partial edge blocks, and the loader's
// errors naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "loader_test_util.h"
#include "model/fp8_weights.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTestDir;

// e4m3fn: bias 7, 3 mantissa bits, no infinities, S.1111.111 = NaN.
double DecodeReference(int code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return NAN;
  const double v = exp == 0 ? man / 8.0 * std::pow(2.0, -6) : (1 + man / 8.0) * std::pow(2.0, exp - 7);
  return sign ? -v : v;
}

TEST(Fp8Test, EveryCodeDecodesAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const double want = DecodeReference(c);
    const float got = F8E4M3ToF32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(F32ToF8E4M3(got) & 0x7f, 0x7f);
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    // Every finite value encodes back to its code (±0 keep their sign).
    EXPECT_EQ(F32ToF8E4M3(got), static_cast<uint8_t>(c)) << "code " << c;
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.f, -9));
}

TEST(Fp8Test, EncoderRoundsToNearestEvenAndSaturates) {
  // Between 1.0 (0x38) and 1.125 (0x39) the midpoint ties to the even code.
  EXPECT_EQ(F32ToF8E4M3(1.0625f), 0x38);
  EXPECT_EQ(F32ToF8E4M3(1.07f), 0x39);
  EXPECT_EQ(F32ToF8E4M3(1.1875f), 0x3a);  // 1.125..1.25 midpoint -> even 1.25
  EXPECT_EQ(F32ToF8E4M3(1000.f), 0x7e);    // saturates to 448
  EXPECT_EQ(F32ToF8E4M3(-1e9f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.f, -11)), 0x00);  // a quarter of the smallest step
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(3.f, -10)), 0x02);  // 1.5 steps -> even 2
  // Nearest on random values: no finite code is closer.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-500.f, 500.f);
  for (int i = 0; i < 2000; ++i) {
    const float x = dist(rng) * (i % 2 ? 1.f : 0.01f);
    const float y = F8E4M3ToF32(F32ToF8E4M3(x));
    const float clamped = std::clamp(x, -448.f, 448.f);
    for (int c = 0; c < 256; ++c) {
      const float v = F8E4M3ToF32(static_cast<uint8_t>(c));
      if (!std::isnan(v)) ASSERT_LE(std::abs(y - clamped), std::abs(v - clamped)) << x;
    }
  }
}

TEST(Fp8Test, DtypeIsKnownToSafetensors) {
  DType t;
  ASSERT_TRUE(ParseDTypeName("F8_E4M3", &t));
  EXPECT_EQ(t, DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(t), 1u);
  EXPECT_EQ(DTypeName(t), "F8_E4M3");
  const uint8_t codes[3] = {0x38, 0xc0, 0x7e};
  float out[3];
  ConvertToF32(DType::kF8E4M3, codes, out, 3);
  EXPECT_EQ(out[0], 1.f);
  EXPECT_EQ(out[1], -2.f);
  EXPECT_EQ(out[2], 448.f);
}

TEST(Fp8Test, PartialEdgeBlocksUseTheirOwnScale) {
  // 5 x 7 with 2 x 3 blocks: a 3 x 3 grid whose last row and column are partial.
  const int64_t rows = 5, cols = 7;
  const Fp8BlockSize block{2, 3};
  std::vector<uint8_t> q(rows * cols);
  std::mt19937 rng(1);
  for (auto& c : q) c = static_cast<uint8_t>(rng() % 0x7e) | (rng() % 2 ? 0x80 : 0);
  const std::vector<float> scale = {0.5f, 2.f, 0.25f, 3.f, 0.125f, 1.5f, 7.f, 0.75f, 0.0625f};
  std::vector<float> out(rows * cols);
  DequantizeFp8Blocks(q.data(), rows, cols, scale.data(), block, out.data());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float want = F8E4M3ToF32(q[static_cast<size_t>(i * cols + j)]) *
                         scale[static_cast<size_t>((i / 2) * 3 + j / 3)];
      EXPECT_EQ(out[static_cast<size_t>(i * cols + j)], want) << i << "," << j;
    }
  }
}

class Fp8LoadTest : public ::testing::Test {
 protected:
  // A 130 x 260 FP8 matrix (grid 2 x 3 with 128 blocks) plus what else the
  // test asks for.
  void Write(bool with_scale, std::vector<int64_t> grid, DType scale_dtype = DType::kF32) {
    std::mt19937 rng(9);
    q_.resize(130 * 260);
    for (auto& c : q_) c = static_cast<uint8_t>(rng() % 0x7e);
    SafetensorsWriter w;
    w.Add("m.weight", DType::kF8E4M3, {130, 260}, q_);
    int64_t n = 1;
    for (int64_t g : grid) n *= g;
    scale_.assign(static_cast<size_t>(n), 0.f);
    for (size_t i = 0; i < scale_.size(); ++i) scale_[i] = 0.01f * static_cast<float>(i + 1);
    if (with_scale) w.AddF32("m.weight_scale_inv", scale_dtype, grid, scale_);
    w.AddF32("bf16.weight", DType::kBF16, {2, 2}, {1, 2, 3, 4});
    ASSERT_TRUE(w.WriteFile(dir_.File("model.safetensors")).ok());
    auto store = WeightStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  ScopedTestDir dir_;
  std::vector<uint8_t> q_;
  std::vector<float> scale_;
  std::unique_ptr<WeightStore> store_;
};

TEST_F(Fp8LoadTest, DequantisesWithCeilGrid) {
  Write(true, {2, 3});
  auto w = LoadFp8BlockScaled(*store_, "m.weight", 130, 260, {128, 128});
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < 130; i += 3) {
    for (int64_t j = 0; j < 260; j += 7) {
      EXPECT_EQ((*w)[static_cast<size_t>(i * 260 + j)],
                F8E4M3ToF32(q_[static_cast<size_t>(i * 260 + j)]) * scale_[static_cast<size_t>((i / 128) * 3 + j / 128)]);
    }
  }
}

TEST_F(Fp8LoadTest, ErrorsNameTheTensor) {
  Write(false, {2, 3});
  Status s = LoadFp8BlockScaled(*store_, "m.weight", 130, 260, {128, 128}).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("m.weight_scale_inv"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'m.weight'"));

  Write(true, {1, 3});  // a floor grid (transformers' Fp8Dequantize assumption) is refused
  s = LoadFp8BlockScaled(*store_, "m.weight", 130, 260, {128, 128}).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("m.weight_scale_inv"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("[2, 3]"));

  Write(true, {2, 3});
  s = LoadFp8BlockScaled(*store_, "m.weight", 260, 130, {128, 128}).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected shape [260, 130]"));
  s = LoadFp8BlockScaled(*store_, "bf16.weight", 2, 2, {128, 128}).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("dtype BF16, expected F8_E4M3"));
}

TEST_F(Fp8LoadTest, AcceptsBf16Scales) {
  Write(true, {2, 3}, DType::kBF16);
  auto w = LoadFp8BlockScaled(*store_, "m.weight", 130, 260, {128, 128});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)[259], F8E4M3ToF32(q_[259]) * Bf16ToF32(F32ToBf16(scale_[2])));
}

}  // namespace
}  // namespace strata
