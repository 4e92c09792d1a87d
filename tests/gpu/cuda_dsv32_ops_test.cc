// The small GPU ops the deepseek_v32 executor adds, against their CPU
// references: rotary embedding (both pair layouts, YaRN table, positions from
// the host or the device), the indexer's LayerNorm with bias, and the
// group-limited sigmoid routing (bit-compatible with
// cpu::RouteSigmoidGroupedTopK, as the ungrouped routing is with
// cpu::RouteSigmoidTopK).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope_yarn.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::ToBf16Bits;
using op_test::Upload;

float HashUniform(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);
}

// bf16-representable random values (so the CPU sees exactly the GPU's input).
std::vector<float> Bf16Values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Bf16ToF32(F32ToBf16(HashUniform(seed, i, -2.f, 2.f)));
  return v;
}

// A YaRN schedule like DeepSeek-V3.2's (factor 40, mscale 1) at dr = 64.
cpu::RopeParams YarnParams(int64_t dim) {
  cpu::RopeParams p;
  p.type = cpu::RopeType::kYarn;
  p.theta = 10000.0;
  p.dim = dim;
  p.factor = 40.0;
  p.original_max_position = 4096;
  p.mscale = 1.0;
  p.mscale_all_dim = 0.8;  // attention factor != 1: the table's scaling shows
  return p;
}

void CheckRope(bool interleaved, bool device_positions) {
  const int64_t T = 37, heads = 5, dn = 24, half = 32, head_stride = dn + 2 * half + 8;
  const int64_t token_stride = heads * head_stride + 16, max_pos = 5000;
  const cpu::RopeParams params = YarnParams(2 * half);
  const std::vector<float> inv = cpu::RopeInvFreq(params);
  const float factor = static_cast<float>(cpu::RopeAttentionFactor(params));
  std::vector<float> cos(static_cast<size_t>(max_pos * half)), sin(cos.size());
  cpu::RopeCosSin(inv.data(), half, 0, max_pos, factor, cos.data(), sin.data());
  // Positions: consecutive from 4000 (host form) or scattered (device form).
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    pos[static_cast<size_t>(t)] = device_positions ? static_cast<int32_t>((t * 131 + 7) % max_pos)
                                                   : static_cast<int32_t>(4000 + t);
  }
  std::vector<float> x = Bf16Values(static_cast<size_t>(T * token_stride), 11);
  // CPU: per token its own cos/sin row.
  std::vector<float> want = x;
  for (int64_t t = 0; t < T; ++t) {
    const size_t row = static_cast<size_t>(pos[static_cast<size_t>(t)] * half);
    cpu::ApplyRope(interleaved ? cpu::RopeLayout::kInterleaved : cpu::RopeLayout::kHalfSplit,
                   want.data() + t * token_stride, 1, heads, token_stride, head_stride, dn, half,
                   cos.data() + row, sin.data() + row, nullptr);
  }
  DevBuf dx(2 * x.size()), dcos(4 * cos.size()), dsin(4 * sin.size()), dpos(4 * pos.size());
  Upload(dx, ToBf16Bits(x));
  Upload(dcos, cos);
  Upload(dsin, sin);
  Upload(dpos, pos);
  RopeArgs a;
  a.pairs = interleaved ? RopePairs::kInterleaved : RopePairs::kHalfSplit;
  a.x = dx.get<bf16>();
  a.num_tokens = T;
  a.num_heads = heads;
  a.token_stride = token_stride;
  a.head_stride = head_stride;
  a.offset = dn;
  a.half = half;
  a.cos = dcos.get<float>();
  a.sin = dsin.get<float>();
  a.max_positions = max_pos;
  a.positions = device_positions ? dpos.get<int32_t>() : nullptr;
  a.pos0 = 4000;
  ASSERT_TRUE(ApplyRope(a, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> got(x.size());
  Download(got, dx);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(static_cast<double>(Bf16ToF32(got[i])) - want[i]);
    // One bf16 rounding of the output (elements outside the rotary slice are untouched).
    EXPECT_LE(d, std::abs(want[i]) * (1.0 / 256) + 1e-6) << "element " << i;
    worst = std::max(worst, d);
  }
  std::printf("[dsv32-ops] rope %s, %s positions: worst |Δ| %.3g\n",
              interleaved ? "interleaved" : "half-split", device_positions ? "device" : "host",
              worst);
}

TEST(CudaDsv32Ops, RopeInterleavedMatchesCpu) { CheckRope(true, false); }
TEST(CudaDsv32Ops, RopeHalfSplitMatchesCpu) { CheckRope(false, false); }
TEST(CudaDsv32Ops, RopeWithDevicePositionsMatchesCpu) {
  CheckRope(true, true);
  CheckRope(false, true);
}

TEST(CudaDsv32Ops, RopeRejectsHostPositionsOutsideTheTable) {
  DevBuf d(64), t(64);
  RopeArgs a;
  a.x = d.get<bf16>();
  a.num_tokens = 2;
  a.half = 4;
  a.cos = t.get<float>();
  a.sin = t.get<float>();
  a.max_positions = 3;
  a.pos0 = 2;
  EXPECT_TRUE(absl::IsOutOfRange(ApplyRope(a, nullptr)));
  a.half = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyRope(a, nullptr)));
}

TEST(CudaDsv32Ops, LayerNormRowsMatchesCpuInPlaceWithStride) {
  const int64_t n = 19, dim = 48, ld = 72;
  std::vector<float> x = Bf16Values(static_cast<size_t>(n * ld), 5);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < dim; ++i) x[static_cast<size_t>(r * ld + i)] += 3.f;  // a mean to remove
  }
  // The device reads bf16: the reference must see the same rounded inputs
  // (x + 3 is not bf16-exact; its rounding alone moves outputs by ~1%).
  for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
  std::vector<float> w(static_cast<size_t>(dim)), b(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i) {
    w[static_cast<size_t>(i)] = HashUniform(7, static_cast<uint64_t>(i), 0.5f, 1.5f);
    b[static_cast<size_t>(i)] = HashUniform(8, static_cast<uint64_t>(i), -0.5f, 0.5f);
  }
  std::vector<float> want = x;
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<float> in(x.begin() + r * ld, x.begin() + r * ld + dim);
    cpu::LayerNorm(in.data(), 1, dim, w.data(), b.data(), 1e-6f, want.data() + r * ld, nullptr);
  }
  DevBuf dx(2 * x.size()), dw(4 * w.size()), db(4 * b.size());
  Upload(dx, ToBf16Bits(x));
  Upload(dw, w);
  Upload(db, b);
  ASSERT_TRUE(LayerNormRows(dx.get(), ld, dx.get(), ld, ActType::kBf16, n, dim, dw.get<float>(),
                            db.get<float>(), 1e-6f, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> got(x.size());
  Download(got, dx);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < ld; ++i) {
      const size_t at = static_cast<size_t>(r * ld + i);
      const float g = Bf16ToF32(got[at]);
      if (i < dim) {
        EXPECT_NEAR(g, want[at], std::abs(want[at]) / 128 + 1e-3) << "row " << r << " col " << i;
      } else {
        EXPECT_EQ(g, Bf16ToF32(F32ToBf16(x[at]))) << "padding changed at row " << r << " col " << i;
      }
    }
  }
}

// Group-limited routing: every pick, its order and its weight equal the CPU's
// bit for bit, over shapes like DeepSeek-V3.2's (256 experts, 8 groups, 4
// eligible, 8 picks) and the fixtures' small ones, with and without
// renormalisation, including tied scores (repeated logits) and NaN.
void CheckGroupedRouting(int64_t E, int64_t groups, int64_t topk_groups, int64_t k, bool renorm) {
  const int64_t n = 300;
  std::vector<float> logits(static_cast<size_t>(n * E)), bias(static_cast<size_t>(E));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = HashUniform(21, i, -4.f, 4.f);
  for (int64_t t = 0; t < n; t += 7) {
    for (int64_t e = 1; e < E; e += 3) logits[static_cast<size_t>(t * E + e)] = logits[static_cast<size_t>(t * E)];
  }
  logits[5] = std::nanf("");
  for (int64_t e = 0; e < E; ++e) bias[static_cast<size_t>(e)] = HashUniform(22, static_cast<uint64_t>(e), -0.1f, 0.1f);
  std::vector<int32_t> want_idx(static_cast<size_t>(n * k));
  std::vector<float> want_w(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) {
    cpu::RouteSigmoidGroupedTopK(logits.data() + t * E, E, bias.data(), groups, topk_groups, k, renorm,
                                 2.5f, want_idx.data() + t * k, want_w.data() + t * k);
  }
  DevBuf dl(4 * logits.size()), db(4 * bias.size()), di(4 * want_idx.size()), dw(4 * want_w.size());
  Upload(dl, logits);
  Upload(db, bias);
  MoeShape s;
  s.num_experts = E;
  s.hidden = 64;
  s.inter = 64;
  s.top_k = k;
  s.renormalize = renorm;
  s.routed_scaling = 2.5f;
  s.num_groups = groups;
  s.topk_groups = topk_groups;
  ASSERT_TRUE(MoeRoute(s, dl.get<float>(), db.get<float>(), n, di.get<int32_t>(), dw.get<float>(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> idx(want_idx.size());
  std::vector<float> w(want_w.size());
  Download(idx, di);
  Download(w, dw);
  int mismatches = 0;
  for (size_t i = 0; i < idx.size() && mismatches < 10; ++i) {
    if (idx[i] != want_idx[i] || w[i] != want_w[i]) {
      ++mismatches;
      ADD_FAILURE() << "E=" << E << " groups=" << groups << "/" << topk_groups << " token " << i / k
                    << " pick " << i % k << ": got expert " << idx[i] << " weight " << w[i]
                    << ", want " << want_idx[i] << " weight " << want_w[i];
    }
  }
}

TEST(CudaDsv32Ops, GroupLimitedRoutingMatchesCpuBitForBit) {
  CheckGroupedRouting(256, 8, 4, 8, true);
  CheckGroupedRouting(12, 4, 2, 3, true);
  CheckGroupedRouting(8, 4, 2, 2, false);
  CheckGroupedRouting(6, 2, 1, 2, true);
}

TEST(CudaDsv32Ops, GroupLimitedRoutingRejectsImpossibleGroups) {
  DevBuf d(4096);
  MoeShape s;
  s.num_experts = 12;
  s.hidden = 64;
  s.inter = 64;
  s.top_k = 3;
  s.num_groups = 5;  // does not divide 12
  s.topk_groups = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(
      MoeRoute(s, d.get<float>(), nullptr, 1, d.get<int32_t>(), d.get<float>(), nullptr)));
  s.num_groups = 4;
  s.topk_groups = 1;  // 3 eligible experts < top_k 3? no: exactly 3, allowed
  EXPECT_TRUE(MoeRoute(s, d.get<float>(), nullptr, 0, d.get<int32_t>(), d.get<float>(), nullptr).ok());
  s.top_k = 4;  // more picks than the one eligible group holds
  EXPECT_TRUE(absl::IsInvalidArgument(
      MoeRoute(s, d.get<float>(), nullptr, 1, d.get<int32_t>(), d.get<float>(), nullptr)));
}

}  // namespace
}  // namespace strata::cuda
