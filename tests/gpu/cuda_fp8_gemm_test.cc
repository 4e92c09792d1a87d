// cuda::Fp8Gemm and cuda::DequantizeFp8ToBf16 (backend/cuda/fp8_gemm.h)
// against the CPU: random e4m3 codes (every finite code can occur) and random
// non-zero block scales, shapes with partial scale blocks at the right and
// bottom edges, x rows 1, 3, 17, 64 (the streaming kernel's 1, 1, 4 and 8
// x tiles) and 300 (the prefill path, through a tile small enough to take
// several row chunks).
//
// Two references per product:
//  * the model's CPU path: DequantizeFp8Blocks (fp32 weights) then a double
//    matmul. The GPU rounds each code · scale to bf16 (relative error ≤ 2^-9),
//    so |error| ≤ 2^-8 · Σ|x·w| bounds it;
//  * the GPU's own rounding mirrored on the host (bf16(code · scale), exact
//    bf16 x): only fp32 accumulation (order, tensor-core internal rounding)
//    differs, so 1e-4 · Σ|x·w|. This is the bound that catches a misplaced
//    scale or k element (which moves a result by percents of Σ|x·w|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "base/dtype.h"
#include "model/fp8_weights.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::Upload;

uint64_t Mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
float Uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(Mix(seed, i) >> 40) / static_cast<float>(1u << 24);
}

// Random e4m3 codes; the two NaN codes (S.1111.111) become ±448.
std::vector<uint8_t> RandomCodes(size_t n, uint64_t seed) {
  std::vector<uint8_t> c(n);
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = static_cast<uint8_t>(Mix(seed, i) >> 56);
    if ((b & 0x7f) == 0x7f) b ^= 1;
    c[i] = b;
  }
  return c;
}

struct Shape {
  int64_t n, k, block_rows, block_cols;
};

struct Problem {
  Shape s;
  int64_t grid_rows = 0, grid_cols = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> w_ref;   // DequantizeFp8Blocks
  std::vector<float> w_bf16;  // bf16(code · scale), what the GPU multiplies
};

Problem MakeProblem(const Shape& s, uint64_t seed) {
  Problem p;
  p.s = s;
  p.grid_rows = (s.n + s.block_rows - 1) / s.block_rows;
  p.grid_cols = (s.k + s.block_cols - 1) / s.block_cols;
  p.codes = RandomCodes(static_cast<size_t>(s.n * s.k), seed);
  p.scales.resize(static_cast<size_t>(p.grid_rows * p.grid_cols));
  // Scales spread over a factor of 8 so a scale taken from the wrong block
  // shows; the magnitude keeps w (codes up to 448) near 1.
  for (size_t i = 0; i < p.scales.size(); ++i) p.scales[i] = Uniform(seed + 1, i, 0.5f, 4.f) / 256.f;
  p.w_ref.resize(p.codes.size());
  DequantizeFp8Blocks(p.codes.data(), s.n, s.k, p.scales.data(), {s.block_rows, s.block_cols},
                      p.w_ref.data());
  p.w_bf16.resize(p.codes.size());
  for (size_t i = 0; i < p.w_ref.size(); ++i) p.w_bf16[i] = Bf16ToF32(F32ToBf16(p.w_ref[i]));
  return p;
}

std::vector<float> RandomBf16(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Bf16ToF32(F32ToBf16(Uniform(seed, i, -1.f, 1.f)));
  return v;
}
std::vector<uint16_t> Bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}

class Fp8GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = BlasContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
  }
  std::unique_ptr<BlasContext> ctx_;
};

// y = alpha · x · Wᵀ + beta · y0 for every (shape, m, y type), both
// references, with the tile for m = 300 holding 100 rows of W.
TEST_F(Fp8GemmTest, MatchesCpuDequantisationForEveryRowCountAndEdgeBlock) {
  const Shape shapes[] = {
      {300, 208, 128, 128},  // partial blocks on both edges; fast kernel (k % 16 == 0)
      {77, 100, 128, 128},   // k % 16 != 0: the scalar kernel
      {250, 1040, 8, 128},   // 8-row scale groups (the executor's layout), k split over warps
      {40, 96, 128, 32},     // narrow scale blocks: 3 per row
  };
  const int64_t rows_list[] = {1, 3, 17, 64, 300};
  uint64_t seed = 11;
  for (const Shape& s : shapes) {
    const Problem p = MakeProblem(s, seed++);
    DevBuf d_codes(p.codes.size());
    DevBuf d_scales(sizeof(float) * p.scales.size());
    Upload(d_codes, p.codes);
    Upload(d_scales, p.scales);
    const int64_t tile_elems = 100 * s.k;
    DevBuf d_tile(2 * static_cast<size_t>(tile_elems));
    for (int64_t m : rows_list) {
      for (bool y_f32 : {true, false}) {
        const std::vector<float> x = RandomBf16(static_cast<size_t>(m * s.k), seed++);
        const std::vector<float> y0 = RandomBf16(static_cast<size_t>(m * s.n), seed++);
        const float alpha = 0.75f;
        const float beta = y_f32 ? 0.5f : 0.f;
        DevBuf d_x(2 * x.size());
        Upload(d_x, Bits(x));
        DevBuf d_y((y_f32 ? 4 : 2) * y0.size());
        if (y_f32) {
          Upload(d_y, y0);
        } else {
          ASSERT_EQ(cudaMemset(d_y.get(), 0, 2 * y0.size()), cudaSuccess);
        }
        Fp8GemmArgs a;
        a.m = m;
        a.n = s.n;
        a.k = s.k;
        a.x = d_x.get<bf16>();
        a.w.w = d_codes.get<uint8_t>();
        a.w.scale = d_scales.get<float>();
        a.w.block_rows = s.block_rows;
        a.w.block_cols = s.block_cols;
        a.y = d_y.get();
        a.y_type = y_f32 ? ActType::kF32 : ActType::kBf16;
        a.alpha = alpha;
        a.beta = beta;
        a.tile = d_tile.get<bf16>();
        a.tile_elems = tile_elems;
        ASSERT_TRUE(Fp8Gemm(*ctx_, a, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> y(y0.size());
        if (y_f32) {
          Download(y, d_y);
        } else {
          std::vector<uint16_t> bits(y0.size());
          Download(bits, d_y);
          for (size_t i = 0; i < y.size(); ++i) y[i] = Bf16ToF32(bits[i]);
        }
        int64_t bad_ref = 0, bad_mirror = 0;
        double worst_mirror = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double ref = 0, mirror = 0, mag = 0;
            for (int64_t kk = 0; kk < s.k; ++kk) {
              const double xv = x[static_cast<size_t>(i * s.k + kk)];
              ref += xv * p.w_ref[static_cast<size_t>(j * s.k + kk)];
              mirror += xv * p.w_bf16[static_cast<size_t>(j * s.k + kk)];
              mag += std::abs(xv * p.w_ref[static_cast<size_t>(j * s.k + kk)]);
            }
            const double prior = beta * y0[static_cast<size_t>(i * s.n + j)];
            ref = alpha * ref + prior;
            mirror = alpha * mirror + prior;
            mag = alpha * mag + std::abs(prior);
            const double got = y[static_cast<size_t>(i * s.n + j)];
            // A bf16 y adds one rounding of the result.
            const double out_round = y_f32 ? 0.0 : std::ldexp(std::abs(mirror), -8);
            if (!(std::abs(got - ref) <= std::ldexp(mag, -8) + out_round + 1e-6)) ++bad_ref;
            const double err = std::abs(got - mirror);
            // Rows > 64 go through the bf16 tile and cuBLASLt. With a bf16 y,
            // cuBLASLt may reduce split-K partial sums in the output type, so
            // each partial is rounded once: measured on the H200 up to
            // 1.26e-3 of Σ|xw| at k = 1040 (fp32 y through the same path:
            // 4e-7, so the dequantised tile itself is exact).
            const double path_round = (!y_f32 && m > 64) ? 2e-3 * mag : 0.0;
            if (!(err <= 1e-4 * mag + out_round + path_round + 1e-6)) ++bad_mirror;
            worst_mirror = std::max(worst_mirror, err / std::max(mag, 1e-30));
          }
        }
        std::printf("[fp8-gemm] n=%lld k=%lld m=%lld y=%s: worst |err| / Σ|xw| vs mirror %.3e\n",
                    static_cast<long long>(s.n), static_cast<long long>(s.k),
                    static_cast<long long>(m), y_f32 ? "fp32" : "bf16", worst_mirror);
        EXPECT_EQ(bad_ref, 0) << "n=" << s.n << " k=" << s.k << " m=" << m << " y_f32=" << y_f32;
        EXPECT_EQ(bad_mirror, 0) << "n=" << s.n << " k=" << s.k << " m=" << m
                                 << " y_f32=" << y_f32 << " worst err/Σ|xw| " << worst_mirror;
      }
    }
  }
}

TEST_F(Fp8GemmTest, DequantisationIsBitExactWithTheHostsBf16Rounding) {
  for (const Shape& s : {Shape{300, 208, 128, 128}, Shape{77, 100, 128, 128},
                         Shape{250, 1040, 8, 128}}) {
    const Problem p = MakeProblem(s, 99 + static_cast<uint64_t>(s.k));
    DevBuf d_codes(p.codes.size());
    DevBuf d_scales(sizeof(float) * p.scales.size());
    Upload(d_codes, p.codes);
    Upload(d_scales, p.scales);
    Fp8Matrix w;
    w.w = d_codes.get<uint8_t>();
    w.scale = d_scales.get<float>();
    w.block_rows = s.block_rows;
    w.block_cols = s.block_cols;
    // Rows [37, n): a chunk that starts inside a scale block.
    const int64_t row0 = 37, rows = s.n - row0;
    DevBuf d_out(2 * static_cast<size_t>(rows * s.k));
    ASSERT_TRUE(DequantizeFp8ToBf16(w, row0, rows, s.k, d_out.get<bf16>(), nullptr).ok());
    std::vector<uint16_t> out(static_cast<size_t>(rows * s.k));
    Download(out, d_out);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < s.k; ++j) {
        const size_t src = static_cast<size_t>((row0 + i) * s.k + j);
        mismatches += out[static_cast<size_t>(i * s.k + j)] != F32ToBf16(p.w_ref[src]);
      }
    }
    EXPECT_EQ(mismatches, 0) << "n=" << s.n << " k=" << s.k;
  }
}

TEST_F(Fp8GemmTest, PrefillRowCountsWithoutATileAreRejected) {
  const Problem p = MakeProblem({64, 128, 128, 128}, 5);
  DevBuf d_codes(p.codes.size());
  DevBuf d_scales(sizeof(float) * p.scales.size());
  Upload(d_codes, p.codes);
  Upload(d_scales, p.scales);
  DevBuf d_x(2 * 65 * 128);
  ASSERT_EQ(cudaMemset(d_x.get(), 0, 2 * 65 * 128), cudaSuccess);
  DevBuf d_y(4 * 65 * 64);
  Fp8GemmArgs a;
  a.m = 65;
  a.n = 64;
  a.k = 128;
  a.x = d_x.get<bf16>();
  a.w.w = d_codes.get<uint8_t>();
  a.w.scale = d_scales.get<float>();
  a.y = d_y.get();
  a.y_type = ActType::kF32;
  const Status st = Fp8Gemm(*ctx_, a, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  a.tile = nullptr;
  a.m = 64;  // the streaming kernel needs no tile
  EXPECT_TRUE(Fp8Gemm(*ctx_, a, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace strata::cuda
