// Batch-invariant mode of the CUDA GEMM (BlasContext::set_batch_invariant):
// a row of y must come out bit-identical whatever m is and wherever the row
// sits in the call. For each shape the m = 300 product (the tiled kernel) is
// the reference; every m in {1, 2, 5, 8, 9, 16} (the GEMV, both N-tile
// variants) and {17, 33, 64, 97, 300} (the tiled kernel, partial x tiles)
// computes the first m rows, and again the rows from x row 100 on, and each
// must equal the reference's rows byte for byte (memcmp). Covered: the
// Kimi-Linear production shapes, odd n and k (partial W tiles, partial and
// single k blocks, k groups of uneven length), bf16 y, fp32 y with alpha and
// beta accumulation, strided batches (count 3), the scalar kernel for shapes
// the mma kernels cannot take; the reference is also checked against a
// double-precision host product. Inputs are random and never zero, so a
// missed or repeated k block shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;

// bf16 bits of magnitude in [0.1, 1] with a random sign: never zero.
std::vector<uint16_t> NonZeroBf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.1f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = F32ToBf16((rng() & 1) ? mag(rng) : -mag(rng));
  return v;
}

constexpr int64_t kRefRows = 300;
constexpr int64_t kMidOffset = 100;
constexpr int64_t kXRows = kMidOffset + kRefRows;
constexpr int64_t kMs[] = {1, 2, 5, 8, 9, 16, 17, 33, 64, 97, 300};

class CudaGemmInvariantTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ctx = BlasContext::Create();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx).release();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  static void TearDownTestSuite() {
    delete ctx_;
    ctx_ = nullptr;
    cudaStreamDestroy(stream_);
  }
  void SetUp() override { ctx_->set_batch_invariant(true); }
  void TearDown() override { ctx_->set_batch_invariant(false); }
  static BlasContext* ctx_;
  static cudaStream_t stream_;
};
BlasContext* CudaGemmInvariantTest::ctx_ = nullptr;
cudaStream_t CudaGemmInvariantTest::stream_ = nullptr;

struct Case {
  int64_t n, k;
  ActType y_type = ActType::kBf16;
  float alpha = 1.f, beta = 0.f;
  int64_t count = 0;                  // 0: Gemm; ≥ 1: StridedBatchedGemm
  int64_t ldx = 0, ldw = 0, ldy = 0;  // 0: packed
  size_t x_offset = 0;                // bytes: misaligned x takes the scalar kernel
};

std::string Describe(const Case& c) {
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "n=%lld k=%lld y=%s alpha=%g beta=%g count=%lld ldx=%lld ldw=%lld "
                "ldy=%lld xoff=%zu",
                static_cast<long long>(c.n), static_cast<long long>(c.k),
                c.y_type == ActType::kF32 ? "f32" : "bf16", c.alpha, c.beta,
                static_cast<long long>(c.count), static_cast<long long>(c.ldx),
                static_cast<long long>(c.ldw), static_cast<long long>(c.ldy), c.x_offset);
  return buf;
}

// Runs the reference (rows 0 … 299) and every (m, offset) call of `c`, and
// compares as described in the file comment.
void CheckRowsInvariant(BlasContext& ctx, cudaStream_t stream, const Case& c, uint64_t seed) {
  SCOPED_TRACE(Describe(c));
  std::mt19937_64 rng(seed);
  const bool y_f32 = c.y_type == ActType::kF32;
  const size_t yb = y_f32 ? 4 : 2;
  const int64_t ldx = c.ldx ? c.ldx : c.k;
  const int64_t ldw = c.ldw ? c.ldw : c.k;
  const int64_t ldy = c.ldy ? c.ldy : c.n;
  const int64_t batches = std::max<int64_t>(c.count, 1);
  // Batch strides with a little slack, so products are not adjacent.
  const int64_t sx = kXRows * ldx + 8, sw = c.n * ldw + 16, sy = kXRows * ldy + 4;

  const std::vector<uint16_t> w = NonZeroBf16(static_cast<size_t>(batches * sw), rng);
  const std::vector<uint16_t> x = NonZeroBf16(static_cast<size_t>(batches * sx), rng);
  // y's starting values: random for beta ≠ 0 (accumulated), NaN otherwise
  // (must be overwritten).
  std::vector<uint8_t> y0(static_cast<size_t>(batches * sy) * yb);
  if (y_f32) {
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (size_t i = 0; i < y0.size() / 4; ++i) {
      const float v = c.beta != 0.f ? u(rng) : std::nanf("");
      std::memcpy(&y0[4 * i], &v, 4);
    }
  } else {
    for (size_t i = 0; i < y0.size() / 2; ++i) {
      const uint16_t v = 0x7fc0;  // bf16 NaN
      std::memcpy(&y0[2 * i], &v, 2);
    }
  }
  DevBuf wd(w.size() * 2), xd(x.size() * 2 + c.x_offset), y0d(y0.size()), yd(y0.size());
  char* xbase = xd.get<char>() + c.x_offset;
  CUDA_OK(cudaMemcpy(wd.get<char>(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(xbase, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(y0d.get<char>(), y0.data(), y0.size(), cudaMemcpyHostToDevice));

  // y rows [row0, row0 + m) of every product, from y0, after one call.
  auto run = [&](int64_t row0, int64_t m, std::vector<uint8_t>* out) {
    CUDA_OK(cudaMemcpyAsync(yd.get<char>(), y0d.get<char>(), y0.size(), cudaMemcpyDeviceToDevice,
                            stream));
    GemmArgs a;
    a.m = m;
    a.n = c.n;
    a.k = c.k;
    a.x = xbase + row0 * ldx * 2;
    a.ldx = c.ldx;
    a.w = reinterpret_cast<const bf16*>(wd.get<char>());
    a.ldw = c.ldw;
    a.y = yd.get<char>() + row0 * ldy * yb;
    a.y_type = c.y_type;
    a.ldy = c.ldy;
    a.alpha = c.alpha;
    a.beta = c.beta;
    Status st;
    if (c.count == 0) {
      st = Gemm(ctx, a, stream);
    } else {
      StridedBatchedGemmArgs b;
      b.g = a;
      b.count = c.count;
      b.stride_x = sx;
      b.stride_w = sw;
      b.stride_y = sy;
      st = StridedBatchedGemm(ctx, b, stream);
    }
    ASSERT_TRUE(st.ok()) << "m=" << m << ": " << st;
    out->resize(y0.size());
    CUDA_OK(
        cudaMemcpyAsync(out->data(), yd.get<char>(), out->size(), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
  };

  std::vector<uint8_t> ref;
  run(0, kRefRows, &ref);
  if (::testing::Test::HasFatalFailure()) return;

  auto y_at = [&](const std::vector<uint8_t>& y, int64_t b, int64_t r, int64_t col) {
    const size_t i = static_cast<size_t>(b * sy + r * ldy + col);
    if (y_f32) {
      float v;
      std::memcpy(&v, &y[4 * i], 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, &y[2 * i], 2);
    return Bf16ToF32(h);
  };

  // The reference against a double-precision product, on a few rows.
  double num = 0, den = 0, worst = 0;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{150}, kRefRows - 1}) {
      for (int64_t col = 0; col < c.n; ++col) {
        double dot = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          dot += static_cast<double>(Bf16ToF32(w[b * sw + col * ldw + q])) *
                 Bf16ToF32(x[b * sx + r * ldx + q]);
        }
        double want = c.alpha * dot;
        if (c.beta != 0.f) want += c.beta * static_cast<double>(y_at(y0, b, r, col));
        const double got = y_at(ref, b, r, col);
        const double d = std::isfinite(got) ? got - want : 1e30;
        num += d * d;
        den += want * want;
        worst = std::max(worst, std::fabs(d) / std::max(1.0, std::fabs(want)));
      }
    }
  }
  const double l2 = std::sqrt(num / std::max(den, 1e-30));
  std::printf("[invariant] %-90s vs fp64: l2_rel=%.3e worst=%.3e\n", Describe(c).c_str(), l2,
              worst);
  EXPECT_LE(l2, y_f32 ? 5e-4 : 1e-2);

  for (int64_t m : kMs) {
    for (int64_t row0 : {int64_t{0}, kMidOffset}) {
      SCOPED_TRACE(testing::Message() << "m=" << m << " first row=" << row0);
      std::vector<uint8_t> got;
      run(row0, m, &got);
      if (::testing::Test::HasFatalFailure()) return;
      // Rows that the reference also computed (it stops at row 299).
      const int64_t last = std::min(row0 + m, kRefRows);
      int64_t bad_rows = 0;
      for (int64_t b = 0; b < batches; ++b) {
        for (int64_t r = row0; r < last; ++r) {
          const size_t at = static_cast<size_t>(b * sy + r * ldy) * yb;
          if (std::memcmp(&got[at], &ref[at], static_cast<size_t>(c.n) * yb) == 0) continue;
          if (bad_rows++ == 0) {
            for (int64_t col = 0; col < c.n; ++col) {
              const float gv = y_at(got, b, r, col), rv = y_at(ref, b, r, col);
              if (std::memcmp(&got[at + col * yb], &ref[at + col * yb], yb) != 0) {
                ADD_FAILURE() << "first difference: batch " << b << " row " << r << " col " << col
                              << ": " << gv << " vs " << rv << " (m=300)";
                break;
              }
            }
          }
        }
      }
      EXPECT_EQ(bad_rows, 0) << "rows differing from the m=300 product";
    }
  }
}

// Kimi-Linear-48B-A3B: fused KDA q|k|v, o_proj, the KDA f/g/b projections
// (k = 128: one k group), the router, and a tall W (a large-n stand-in for
// the 163840-row LM head).
TEST_F(CudaGemmInvariantTest, ProductionShapesRowsMatchWhateverM) {
  uint64_t seed = 1;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {12576, 2304}, {2304, 4096}, {4096, 128}, {256, 2304}, {20000, 2304}}) {
    Case c{n, k};
    CheckRowsInvariant(*ctx_, stream_, c, seed++);
    c.y_type = ActType::kF32;
    c.alpha = 0.75f;
    c.beta = 0.5f;
    CheckRowsInvariant(*ctx_, stream_, c, seed++);
  }
}

// Partial W tiles (n = 37, 1000), k of 1.25, 3.25 and 64.25 k blocks (a
// partial last k block; uneven k groups).
TEST_F(CudaGemmInvariantTest, OddShapesRowsMatchWhateverM) {
  uint64_t seed = 100;
  for (int64_t n : {37, 1000}) {
    for (int64_t k : {40, 104, 2056}) {
      Case c{n, k};
      CheckRowsInvariant(*ctx_, stream_, c, seed++);
      c.y_type = ActType::kF32;
      c.beta = 1.f;
      CheckRowsInvariant(*ctx_, stream_, c, seed++);
    }
  }
}

// Leading dimensions wider than the rows, still on the mma kernels.
TEST_F(CudaGemmInvariantTest, PaddedLeadingDimensions) {
  Case c{1000, 2056};
  c.ldx = 2064;
  c.ldw = 2072;
  c.ldy = 1003;
  c.y_type = ActType::kF32;
  c.alpha = -1.25f;
  c.beta = 0.25f;
  CheckRowsInvariant(*ctx_, stream_, c, 200);
}

// Shapes the mma kernels cannot take go to the scalar kernel in 16-row
// slices at every m, which is per-row identical too.
TEST_F(CudaGemmInvariantTest, ScalarFallbackRowsMatchWhateverM) {
  Case odd_k{37, 45};  // k % 8 != 0
  odd_k.y_type = ActType::kF32;
  odd_k.beta = 1.f;
  CheckRowsInvariant(*ctx_, stream_, odd_k, 300);
  Case mis_x{129, 136};  // x 2 bytes off 16-byte alignment
  mis_x.x_offset = 2;
  CheckRowsInvariant(*ctx_, stream_, mis_x, 301);
  Case odd_ldw{50, 64};
  odd_ldw.ldw = 67;
  CheckRowsInvariant(*ctx_, stream_, odd_ldw, 302);
}

TEST_F(CudaGemmInvariantTest, StridedBatchedRowsMatchWhateverM) {
  uint64_t seed = 400;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{256, 2304}, {37, 104}, {512, 128}}) {
    Case c{n, k};
    c.count = 3;
    CheckRowsInvariant(*ctx_, stream_, c, seed++);
    c.y_type = ActType::kF32;
    c.alpha = 1.5f;
    c.beta = -0.5f;
    CheckRowsInvariant(*ctx_, stream_, c, seed++);
  }
  Case odd{37, 45};  // scalar kernel with a batch dimension
  odd.count = 3;
  odd.y_type = ActType::kF32;
  CheckRowsInvariant(*ctx_, stream_, odd, seed++);
}

TEST_F(CudaGemmInvariantTest, TransposedWeightIsRejected) {
  DevBuf x(1 << 12), w(1 << 12), y(1 << 12);
  StridedBatchedGemmArgs b;
  b.g.m = 4;
  b.g.n = 8;
  b.g.k = 16;
  b.g.x = x.get<char>();
  b.g.w = reinterpret_cast<const bf16*>(w.get<char>());
  b.g.y = y.get<char>();
  b.count = 2;
  b.stride_x = 64;
  b.stride_w = 128;
  b.stride_y = 32;
  b.transpose_w = true;
  const Status st = StridedBatchedGemm(*ctx_, b, stream_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("transpose_w"), std::string::npos) << st;
  // The same call is fine with the mode off (cuBLASLt).
  ctx_->set_batch_invariant(false);
  EXPECT_TRUE(StridedBatchedGemm(*ctx_, b, stream_).ok());
  CUDA_OK(cudaStreamSynchronize(stream_));
}

// The mode is off by default and switches back: large m is then cuBLASLt
// again, still within tolerance of the fp64 product (cuda_gemm_test runs
// the whole suite in this mode).
TEST_F(CudaGemmInvariantTest, OffByDefaultAndSwitchesBack) {
  auto fresh = BlasContext::Create();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE((*fresh)->batch_invariant());
  (*fresh)->set_batch_invariant(true);
  EXPECT_TRUE((*fresh)->batch_invariant());
  (*fresh)->set_batch_invariant(false);
  EXPECT_FALSE((*fresh)->batch_invariant());
  std::mt19937_64 rng(500);
  const int64_t m = 300, n = 256, k = 2304;
  const std::vector<uint16_t> w = NonZeroBf16(static_cast<size_t>(n * k), rng);
  const std::vector<uint16_t> x = NonZeroBf16(static_cast<size_t>(m * k), rng);
  DevBuf wd(w.size() * 2), xd(x.size() * 2), yd(static_cast<size_t>(m * n) * 4);
  CUDA_OK(cudaMemcpy(wd.get<char>(), w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(xd.get<char>(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = xd.get<char>();
  a.w = reinterpret_cast<const bf16*>(wd.get<char>());
  a.y = yd.get<char>();
  a.y_type = ActType::kF32;
  ASSERT_TRUE(Gemm(**fresh, a, stream_).ok());
  std::vector<float> y(static_cast<size_t>(m * n));
  CUDA_OK(cudaMemcpyAsync(y.data(), yd.get<char>(), y.size() * 4, cudaMemcpyDeviceToHost, stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  double num = 0, den = 0;
  for (int64_t r = 0; r < m; r += 37) {
    for (int64_t col = 0; col < n; ++col) {
      double dot = 0;
      for (int64_t q = 0; q < k; ++q) {
        dot += static_cast<double>(Bf16ToF32(w[col * k + q])) * Bf16ToF32(x[r * k + q]);
      }
      const double d = y[r * n + col] - dot;
      num += d * d;
      den += dot * dot;
    }
  }
  EXPECT_LE(std::sqrt(num / den), 5e-4);
}

}  // namespace
}  // namespace strata::cuda
