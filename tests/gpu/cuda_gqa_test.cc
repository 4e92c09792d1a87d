// CUDA gated GQA attention (GqaAppend + GqaAttention) against a plain CPU
// reference on random inputs: q/k RMSNorm with weights, partial half-split
// rope at the token's position, causal softmax over the paged cache, output
// gate sigmoid. The reference rounds q, k and v to bf16 where the GPU stores
// them (q in place, the cache), so the remaining difference is fp32 order and
// the bf16 output rounding.
//  * prefill of one sequence over a permuted block table, in one call and as
//    two calls (a continuation with pos0 > 0), lengths not multiples of 64
//    and > 128, GQA ratios 1, 2, 4, 5, 8 and 16 (two head chunks), hd 16..256
//    (48 and 16: lanes with fewer channels than the warp);
//  * a decode batch of 3 sequences of different lengths (per-token rows and
//    device positions) after their prefills, unsplit and in the split form
//    under three bounds;
//  * misuse → InvalidArgument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/gqa.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::ToBf16Bits;

float R(float x) { return Bf16ToF32(F32ToBf16(x)); }

struct Case {
  int64_t H, Hkv, hd, rot;
};

// Host model of one layer's cache and the reference math.
class Reference {
 public:
  Reference(const Case& c, const std::vector<float>& qn, const std::vector<float>& kn,
            const std::vector<float>& inv_freq)
      : c_(c), qn_(qn), kn_(kn), inv_(inv_freq) {}

  // Normalise and rotate one head vector in place (fp32), as the kernel does.
  void NormRope(float* x, const std::vector<float>& w, int64_t pos) const {
    float ss = 0.f;
    for (int64_t i = 0; i < c_.hd; ++i) ss += x[i] * x[i];
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(c_.hd) + 1e-6f);
    for (int64_t i = 0; i < c_.hd; ++i) x[i] = x[i] * inv * w[static_cast<size_t>(i)];
    const int64_t half = c_.rot / 2;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_[static_cast<size_t>(i)];
      const float cs = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float sn = static_cast<float>(std::sin(static_cast<double>(angle)));
      const float a = x[i], b = x[i + half];
      x[i] = a * cs - b * sn;
      x[i + half] = b * cs + a * sn;
    }
    for (int64_t i = 0; i < c_.hd; ++i) x[i] = R(x[i]);
  }

  // row: [q (H·hd) | gate (H·hd) | k (Hkv·hd) | v (Hkv·hd)] of one token at
  // `pos` of sequence `seq`; appends k/v and returns the gated output [H·hd].
  std::vector<float> Token(int seq, int64_t pos, const float* row) {
    const int64_t hd = c_.hd, qw = c_.H * hd, kvw = c_.Hkv * hd;
    auto& kc = k_[seq];
    auto& vc = v_[seq];
    kc.resize(static_cast<size_t>((pos + 1) * kvw));
    vc.resize(static_cast<size_t>((pos + 1) * kvw));
    for (int64_t g = 0; g < c_.Hkv; ++g) {
      float* kd = kc.data() + pos * kvw + g * hd;
      std::copy(row + 2 * qw + g * hd, row + 2 * qw + (g + 1) * hd, kd);
      NormRope(kd, kn_, pos);
      std::copy(row + 2 * qw + kvw + g * hd, row + 2 * qw + kvw + (g + 1) * hd,
                vc.data() + pos * kvw + g * hd);
    }
    std::vector<float> out(static_cast<size_t>(qw));
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    for (int64_t h = 0; h < c_.H; ++h) {
      std::vector<float> q(row + h * hd, row + (h + 1) * hd);
      NormRope(q.data(), qn_, pos);
      const int64_t g = h / (c_.H / c_.Hkv);
      std::vector<double> s(static_cast<size_t>(pos + 1));
      double mx = -1e30;
      for (int64_t j = 0; j <= pos; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += double{q[i]} * kc[(j * c_.Hkv + g) * hd + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double den = 0;
      for (auto& x : s) den += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t j = 0; j <= pos; ++j) o += s[j] * vc[(j * c_.Hkv + g) * hd + i];
        const float gate = row[qw + h * hd + i];
        out[h * hd + i] = static_cast<float>(o / den) / (1.f + std::exp(-gate));
      }
    }
    return out;
  }

 private:
  Case c_;
  std::vector<float> qn_, kn_, inv_;
  std::vector<float> k_[8], v_[8];
};

void ExpectClose(const std::vector<float>& want, const std::vector<uint16_t>& got,
                 const char* what) {
  ASSERT_EQ(want.size(), got.size());
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = Bf16ToF32(got[i]);
    if (!(std::fabs(g - want[i]) <= 4e-3f + 8e-3f * std::fabs(want[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << " [" << i << "]: " << g << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class GqaTest : public ::testing::TestWithParam<Case> {};

// Runs sequences (each: a list of call lengths for prefill) then one decode
// step of all of them; every output is checked against the reference.
TEST_P(GqaTest, PrefillContinuationAndDecodeBatchMatchReference) {
  const Case c = GetParam();
  const int64_t hd = c.hd, qw = c.H * hd, kvw = c.Hkv * hd, width = 2 * qw + 2 * kvw;
  std::mt19937_64 rng(1234 + c.H * 7 + c.hd);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> qn(static_cast<size_t>(hd)), kn(static_cast<size_t>(hd));
  for (auto& x : qn) x = 1.f + 0.3f * u(rng);
  for (auto& x : kn) x = 1.f + 0.3f * u(rng);
  const std::vector<float> inv = cpu::RopeInverseFrequencies(c.rot, 10000.0);
  Reference ref(c, qn, kn, inv);

  const std::vector<std::vector<int64_t>> calls = {{130}, {70, 67}, {1}};
  const int64_t max_blocks = 8, blocks = 3 * max_blocks;
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  // Rows 0..2: the sequences (decode); prefill uses a sequence's row directly.
  DevBuf table(sizeof(int32_t) * 3 * max_blocks);
  ASSERT_EQ(
      cudaMemcpy(table.get(), perm.data(), sizeof(int32_t) * perm.size(), cudaMemcpyHostToDevice),
      cudaSuccess);
  const size_t cache_elems = static_cast<size_t>(blocks * 64 * kvw);
  DevBuf kc(2 * cache_elems), vc(2 * cache_elems);
  DevBuf dqn(4 * hd), dkn(4 * hd), dinv(4 * std::max<int64_t>(1, c.rot / 2));
  ASSERT_EQ(cudaMemcpy(dqn.get(), qn.data(), 4 * hd, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dkn.get(), kn.data(), 4 * hd, cudaMemcpyHostToDevice), cudaSuccess);
  if (c.rot > 0) {
    ASSERT_EQ(cudaMemcpy(dinv.get(), inv.data(), 4 * inv.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  const int64_t max_rows = 130;
  DevBuf proj(2 * max_rows * width), out(2 * max_rows * qw), pos_dev(4 * 3);

  auto run = [&](int64_t n, GqaCacheArgs cache, std::vector<float>& rows) {
    for (auto& x : rows) x = R(u(rng) * 2.f);
    std::vector<uint16_t> b = ToBf16Bits(rows);
    ASSERT_EQ(cudaMemcpy(proj.get(), b.data(), 2 * b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    GqaAppendArgs ap;
    ap.shape = {c.H, c.Hkv, hd, c.rot};
    ap.num_tokens = n;
    ap.q = proj.get<bf16>();
    ap.ldq = width;
    ap.k = proj.get<bf16>() + 2 * qw;
    ap.v = proj.get<bf16>() + 2 * qw + kvw;
    ap.ldkv = width;
    ap.q_norm = dqn.get<float>();
    ap.k_norm = dkn.get<float>();
    ap.eps = 1e-6f;
    ap.inv_freq = dinv.get<float>();
    ap.cache = cache;
    ASSERT_TRUE(GqaAppend(ap, nullptr).ok());
    GqaAttentionArgs at;
    at.shape = ap.shape;
    at.num_tokens = n;
    at.q = proj.get<bf16>();
    at.ldq = width;
    at.gate = proj.get<bf16>() + qw;
    at.ldg = width;
    at.cache = cache;
    at.out = out.get<bf16>();
    ASSERT_TRUE(GqaAttention(at, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };

  std::vector<int64_t> len(3, 0);
  for (int s = 0; s < 3; ++s) {
    for (int64_t n : calls[static_cast<size_t>(s)]) {
      GqaCacheArgs cache;
      cache.k_cache = kc.get<bf16>();
      cache.v_cache = vc.get<bf16>();
      cache.block_table = table.get<int32_t>() + s * max_blocks;
      cache.table_stride = max_blocks;
      cache.pos0 = len[s];
      std::vector<float> rows(static_cast<size_t>(n * width));
      run(n, cache, rows);
      std::vector<float> want;
      for (int64_t t = 0; t < n; ++t) {
        std::vector<float> o = ref.Token(s, len[s] + t, rows.data() + t * width);
        want.insert(want.end(), o.begin(), o.end());
      }
      std::vector<uint16_t> got(static_cast<size_t>(n * qw));
      ASSERT_EQ(cudaMemcpy(got.data(), out.get(), 2 * got.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ExpectClose(want, got, "prefill");
      len[s] += n;
    }
  }
  // One decode step of all three (lengths 130, 137, 1 before it).
  std::vector<int32_t> pos = {static_cast<int32_t>(len[0]), static_cast<int32_t>(len[1]),
                              static_cast<int32_t>(len[2])};
  ASSERT_EQ(cudaMemcpy(pos_dev.get(), pos.data(), 12, cudaMemcpyHostToDevice), cudaSuccess);
  GqaCacheArgs cache;
  cache.k_cache = kc.get<bf16>();
  cache.v_cache = vc.get<bf16>();
  cache.block_table = table.get<int32_t>();
  cache.table_stride = max_blocks;
  cache.per_token_rows = true;
  cache.positions = pos_dev.get<int32_t>();
  std::vector<float> rows(static_cast<size_t>(3 * width));
  run(3, cache, rows);
  std::vector<float> want;
  for (int s = 0; s < 3; ++s) {
    std::vector<float> o = ref.Token(s, len[s], rows.data() + s * width);
    want.insert(want.end(), o.begin(), o.end());
  }
  std::vector<uint16_t> got(static_cast<size_t>(3 * qw));
  ASSERT_EQ(cudaMemcpy(got.data(), out.get(), 2 * got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ExpectClose(want, got, "decode");

  // The same step in the split form (q is already normalised and rotated in
  // place, the cache holds the step's rows): bounds that cut the 138 keys
  // into ranges of 32 (five, the last after every row's position; eight)
  // and a 4K bound (128 ranges, most of them after every position).
  for (int64_t bound : {160, 256, 4096}) {
    const size_t ws_bytes = GqaDecodeWorkspaceBytes({c.H, c.Hkv, hd, c.rot}, 3, bound);
    ASSERT_GT(ws_bytes, 0u);
    DevBuf ws(ws_bytes);
    ASSERT_EQ(cudaMemset(out.get(), 0, 2 * 3 * qw), cudaSuccess);
    GqaAttentionArgs at;
    at.shape = {c.H, c.Hkv, hd, c.rot};
    at.num_tokens = 3;
    at.q = proj.get<bf16>();
    at.ldq = width;
    at.gate = proj.get<bf16>() + qw;
    at.ldg = width;
    at.cache = cache;
    at.out = out.get<bf16>();
    at.max_seq_len = bound;
    at.workspace = ws.get();
    at.workspace_bytes = ws_bytes;
    ASSERT_TRUE(GqaAttention(at, nullptr).ok());
    // Too small a workspace is refused.
    at.workspace_bytes = ws_bytes - 1;
    EXPECT_TRUE(absl::IsInvalidArgument(GqaAttention(at, nullptr)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> split(static_cast<size_t>(3 * qw));
    ASSERT_EQ(cudaMemcpy(split.data(), out.get(), 2 * split.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ExpectClose(want, split, "split decode");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaTest,
                         ::testing::Values(Case{4, 4, 64, 32}, Case{8, 2, 128, 64},
                                           Case{16, 2, 256, 64}, Case{16, 1, 64, 64},
                                           Case{6, 3, 96, 0}, Case{5, 1, 48, 24},
                                           Case{3, 3, 16, 16}));

TEST(GqaArgs, RejectsUnsupportedShapes) {
  GqaAttentionArgs a;
  a.shape = {8, 3, 128, 64};  // 3 does not divide 8
  EXPECT_TRUE(absl::IsInvalidArgument(GqaAttention(a, nullptr)));
  a.shape = {8, 2, 101, 64};  // odd hd
  EXPECT_TRUE(absl::IsInvalidArgument(GqaAttention(a, nullptr)));
  a.shape = {8, 2, 512, 64};  // hd > 256
  EXPECT_TRUE(absl::IsInvalidArgument(GqaAttention(a, nullptr)));
  GqaAppendArgs b;
  b.shape = {8, 2, 128, 130};  // rotary_dim > hd
  EXPECT_TRUE(absl::IsInvalidArgument(GqaAppend(b, nullptr)));
}

}  // namespace
}  // namespace strata::cuda
