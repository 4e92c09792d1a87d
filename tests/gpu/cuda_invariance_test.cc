// Batch and chunk invariance (issue 6) of the per-row GPU kernels, compared
// bit for bit (memcmp) on random inputs (never zeros):
//  * MlaDecode with batch_invariant: a sequence's output alone (batch 1) and
//    in batches of 16 (in the first, a middle and the last slot, beside
//    sequences of other lengths), under several max_seq_len bounds, on the
//    tensor-core kernel (production shape; one split and several) and the
//    generic one (a tiny shape);
//  * MlaPrefill (always per-query invariant): queries [0, T) in one call vs
//    [0, 97) + [97, T) vs [0, 64) + [64, 203) + [203, T), T ∈ {130, 300}, on
//    the wgmma kernel (production head dims), the mma.sync kernel
//    (mla.prefill=mma) and the generic kernel (odd dims);
//  * CausalConvSiluPrefill: [0, T) in one call vs the same split points with
//    the carried window (outputs and the final window), plus a 2-token chunk
//    (shorter than the window);
//  * AddRmsNorm, RmsNormRows and GatedRmsNormSigmoid: a row alone (n = 1)
//    vs the same row inside an n = 300 call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/norm.h"
#include "base/dtype.h"
#include "base/tuning.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::RandomBf16;
using op_test::RandomF32;
using op_test::Upload;

// Elements of a and b that differ bitwise.
template <typename T>
size_t Differ(const T* a, const T* b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, sizeof(T)) != 0 ? 1 : 0;
  return d;
}

// ---------------------------------------------------------------------------
// MLA decode.

MlaShape ProductionMla() {
  MlaShape s;
  s.num_heads = 32;
  s.nope_dim = 128;
  s.rope_dim = 64;
  s.v_dim = 128;
  s.kv_rank = 512;
  return s;
}

MlaShape TinyMla() {
  MlaShape s;
  s.num_heads = 3;
  s.nope_dim = 24;
  s.rope_dim = 8;
  s.v_dim = 20;
  s.kv_rank = 40;
  return s;
}

// Sequences with their own pages of one pool, and their own q rows.
struct DecodeWorld {
  MlaShape shape;
  std::vector<int32_t> lens;
  std::vector<std::vector<int32_t>> pages;  // physical blocks per sequence
  std::vector<uint16_t> q;                  // [num_seqs, H, r + dr]
  std::unique_ptr<DevBuf> pool;
  int64_t max_blocks = 0;

  DecodeWorld(const MlaShape& s, std::vector<int32_t> seq_lens, int64_t bound, uint32_t seed)
      : shape(s), lens(std::move(seq_lens)) {
    std::mt19937 rng(seed);
    max_blocks = (bound + kKvBlockTokens - 1) / kKvBlockTokens;
    int32_t next = 0;
    std::vector<int32_t> all;
    for (int32_t len : lens) {
      std::vector<int32_t> p;
      for (int64_t b = 0; b < (len + kKvBlockTokens - 1) / kKvBlockTokens; ++b) p.push_back(next++);
      pages.push_back(p);
    }
    // Scatter the physical blocks so neighbours in the pool are not neighbours in a sequence.
    std::vector<int32_t> perm(static_cast<size_t>(next));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (auto& p : pages) {
      for (auto& b : p) b = perm[static_cast<size_t>(b)];
    }
    const size_t cd = static_cast<size_t>(s.cache_dim());
    const std::vector<uint16_t> rows =
        RandomBf16(static_cast<size_t>(std::max(next, 1)) * kKvBlockTokens * cd, 1.f, rng);
    pool = std::make_unique<DevBuf>(sizeof(uint16_t) * rows.size());
    Upload(*pool, rows);
    q = RandomBf16(lens.size() * static_cast<size_t>(s.num_heads) * cd, 1.f, rng);
  }

  // Runs the batch of sequences `order` (indices into lens) with bound
  // max_seq_len; returns the fp32 output [B, H, r].
  std::vector<float> Run(const std::vector<int>& order, int64_t max_seq_len) {
    const int64_t B = static_cast<int64_t>(order.size());
    const size_t cd = static_cast<size_t>(shape.cache_dim());
    const size_t qrow = static_cast<size_t>(shape.num_heads) * cd;
    std::vector<int32_t> table(static_cast<size_t>(B * max_blocks), 0);
    std::vector<int32_t> seq_lens(static_cast<size_t>(B));
    std::vector<uint16_t> qb(static_cast<size_t>(B) * qrow);
    for (int64_t b = 0; b < B; ++b) {
      const int i = order[static_cast<size_t>(b)];
      seq_lens[static_cast<size_t>(b)] = lens[static_cast<size_t>(i)];
      const auto& p = pages[static_cast<size_t>(i)];
      std::copy(p.begin(), p.end(), table.begin() + b * max_blocks);
      std::copy(q.begin() + i * qrow, q.begin() + (i + 1) * qrow, qb.begin() + b * qrow);
    }
    DevBuf d_table(sizeof(int32_t) * table.size()), d_lens(sizeof(int32_t) * B),
        d_q(sizeof(uint16_t) * qb.size());
    Upload(d_table, table);
    Upload(d_lens, seq_lens);
    Upload(d_q, qb);
    const size_t out_n = static_cast<size_t>(B * shape.num_heads * shape.kv_rank);
    DevBuf out(sizeof(float) * out_n);
    EXPECT_EQ(cudaMemset(out.get(), 0xff, sizeof(float) * out_n), cudaSuccess);  // poison
    MlaDecodeArgs a;
    a.shape = shape;
    a.batch = B;
    a.q_abs = d_q.get<bf16>();
    a.cache.pool = pool->get<bf16>();
    a.cache.block_table = d_table.get<int32_t>();
    a.cache.max_blocks = max_blocks;
    a.seq_lens = d_lens.get<int32_t>();
    a.max_seq_len = max_seq_len;
    a.out_latent = out.get();
    a.out_type = ActType::kF32;
    a.batch_invariant = true;
    const size_t ws_bytes = MlaDecodeWorkspaceBytes(shape, B, max_seq_len, true);
    DevBuf ws(ws_bytes);
    const Status st = MlaDecode(a, ws.get(), ws_bytes, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Download<float>(out, out_n);
  }
};

// Sequences 0 and 1 are the ones checked; 2.. fill the batches.
void CheckDecodeInvariance(const MlaShape& s, uint32_t seed) {
  constexpr int64_t kBound = 8192;
  DecodeWorld w(s,
                {1500, 300, 1, 64, 65, 511, 512, 513, 1000, 2047, 3000, 4096, 100, 777, 1234, 2500,
                 33, 8000},
                kBound, seed);
  const size_t per_seq = static_cast<size_t>(s.num_heads * s.kv_rank);
  for (int target : {0, 1}) {
    const int32_t len = w.lens[static_cast<size_t>(target)];
    SCOPED_TRACE(testing::Message() << "H=" << s.num_heads << " r=" << s.kv_rank << " len=" << len);
    const std::vector<float> alone = w.Run({target}, len);
    for (int64_t bound : {int64_t{len}, int64_t{2048}, int64_t{4096}, kBound}) {
      const std::vector<float> r = w.Run({target}, bound);
      EXPECT_EQ(Differ(alone.data(), r.data(), per_seq), 0u) << "batch 1, max_seq_len " << bound;
    }
    // 15 companions: every other sequence but the 33-token one.
    std::vector<int> others;
    for (int i = 2; i < static_cast<int>(w.lens.size()); ++i) {
      if (i != 16) others.push_back(i);
    }
    for (size_t slot : {size_t{0}, size_t{7}, size_t{15}}) {
      std::vector<int> order(others.begin(), others.begin() + 15);
      std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(slot), order.end());
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(slot), target);
      ASSERT_EQ(order.size(), 16u);
      for (int64_t bound : {int64_t{4096}, kBound}) {
        // Lengths above the bound would be clamped: keep them out of this batch.
        std::vector<int> ok = order;
        for (int& i : ok) {
          if (w.lens[static_cast<size_t>(i)] > bound) i = 12;  // length 100 instead
        }
        const std::vector<float> r = w.Run(ok, bound);
        EXPECT_EQ(Differ(alone.data(), r.data() + slot * per_seq, per_seq), 0u)
            << "batch 16, slot " << slot << ", max_seq_len " << bound;
      }
    }
  }
}

TEST(CudaInvariance, MlaDecodeTensorCoreKernel) { CheckDecodeInvariance(ProductionMla(), 11); }

TEST(CudaInvariance, MlaDecodeGenericKernel) { CheckDecodeInvariance(TinyMla(), 12); }

TEST(CudaInvariance, MlaDecodeWorkspaceCountsFixedSplits) {
  const MlaShape s = ProductionMla();
  // One split of 512 keys: no workspace; more: B · splits · H · (r + 1) floats.
  EXPECT_EQ(MlaDecodeWorkspaceBytes(s, 4, 512, true), 0u);
  const size_t parts = size_t{16} * 64 * 32;  // batch 16, 32768 keys → 64 splits, 32 heads
  EXPECT_GE(MlaDecodeWorkspaceBytes(s, 16, 32768, true), parts * 513 * sizeof(float));
  EXPECT_LE(MlaDecodeWorkspaceBytes(s, 16, 32768, true), parts * 513 * sizeof(float) + 512);
}

TEST(CudaInvariance, MlaDecodeRejectsBoundsBeyondTheMergeLimit) {
  DevBuf any(4096);
  MlaDecodeArgs a;
  a.shape = ProductionMla();
  a.batch = 1;
  a.q_abs = any.get<bf16>();
  a.cache.pool = any.get<bf16>();
  a.cache.block_table = any.get<int32_t>();
  a.cache.max_blocks = (int64_t{1} << 20) / kKvBlockTokens + 1;
  a.seq_lens = any.get<int32_t>();
  a.max_seq_len = (int64_t{1} << 20) + 1;  // 2049 splits of 512 keys
  a.out_latent = any.get();
  a.batch_invariant = true;
  const Status st = MlaDecode(a, any.get(), 4096, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("max_seq_len"), std::string::npos) << st;
}

// ---------------------------------------------------------------------------
// MLA prefill.

// Runs the queries [t0, t1) of a T-token prompt (keys 0..t1−1) into out.
void PrefillRange(const MlaShape& s, const DevBuf& q, const DevBuf& kv, const DevBuf& k_rope,
                  const DevBuf& out, int64_t t0, int64_t t1) {
  const int64_t ld_q = s.num_heads * (s.nope_dim + s.rope_dim);
  MlaPrefillArgs a;
  a.shape = s;
  a.num_tokens = t1 - t0;
  a.past = t0;
  a.q = q.get<bf16>() + t0 * ld_q;
  a.kv = kv.get<bf16>();
  a.k_rope = k_rope.get<bf16>();
  a.out = out.get<bf16>() + t0 * s.num_heads * s.v_dim;
  const Status st = MlaPrefill(a, nullptr);
  EXPECT_TRUE(st.ok()) << st;
}

void CheckPrefillInvariance(const MlaShape& s, int64_t T, uint32_t seed, const char* label) {
  SCOPED_TRACE(testing::Message() << label << " T=" << T);
  std::mt19937 rng(seed);
  const int64_t H = s.num_heads;
  const std::vector<uint16_t> q = RandomBf16(static_cast<size_t>(T * H * (s.nope_dim + s.rope_dim)), 1.f, rng);
  const std::vector<uint16_t> kv = RandomBf16(static_cast<size_t>(T * H * (s.nope_dim + s.v_dim)), 1.f, rng);
  const std::vector<uint16_t> kr = RandomBf16(static_cast<size_t>(T * s.rope_dim), 1.f, rng);
  DevBuf d_q(2 * q.size()), d_kv(2 * kv.size()), d_kr(2 * kr.size());
  Upload(d_q, q);
  Upload(d_kv, kv);
  Upload(d_kr, kr);
  const size_t out_n = static_cast<size_t>(T * H * s.v_dim);
  auto run = [&](const std::vector<int64_t>& cuts) {
    DevBuf out(2 * out_n);
    EXPECT_EQ(cudaMemset(out.get(), 0xff, 2 * out_n), cudaSuccess);
    int64_t t0 = 0;
    for (int64_t c : cuts) {
      PrefillRange(s, d_q, d_kv, d_kr, out, t0, std::min(c, T));
      t0 = std::min(c, T);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Download<uint16_t>(out, out_n);
  };
  const std::vector<uint16_t> one = run({T});
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{97, T}, std::vector<int64_t>{64, 203, T},
        std::vector<int64_t>{1, 2, 129, T}}) {
    if (cuts.size() > 2 && cuts[cuts.size() - 2] >= T) continue;
    const std::vector<uint16_t> got = run(cuts);
    EXPECT_EQ(Differ(one.data(), got.data(), out_n), 0u)
        << "split after " << cuts[0] << (cuts.size() > 2 ? " and more" : "");
  }
}

MlaShape PrefillProduction() {
  MlaShape s = ProductionMla();
  s.num_heads = 8;  // the kernel choice depends on dn, dr, dv only
  return s;
}

TEST(CudaInvariance, MlaPrefillWgmmaKernel) {
  for (int64_t T : {130, 300}) CheckPrefillInvariance(PrefillProduction(), T, 21, "wgmma");
}

TEST(CudaInvariance, MlaPrefillMmaSyncKernel) {
  const tuning::ScopedOptions arm("mla.prefill=mma");
  ASSERT_TRUE(arm.status().ok()) << arm.status();
  for (int64_t T : {130, 300}) CheckPrefillInvariance(PrefillProduction(), T, 22, "mma.sync");
}

TEST(CudaInvariance, MlaPrefillGenericKernel) {
  for (int64_t T : {130, 300}) CheckPrefillInvariance(TinyMla(), T, 23, "generic");
}

// ---------------------------------------------------------------------------
// Causal conv prefill with the carried window.

TEST(CudaInvariance, ConvPrefillSplitMatchesOneCall) {
  constexpr int64_t kT = 300, kK = 4, kW = kK - 1;
  for (int64_t C : {int64_t{384}, int64_t{131}}) {  // vector and scalar paths
    SCOPED_TRACE(testing::Message() << "C=" << C);
    std::mt19937 rng(31 + static_cast<uint32_t>(C));
    const std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(kT * C), 1.f, rng);
    const std::vector<float> w = RandomF32(static_cast<size_t>(C * kK), 0.5f, rng);
    const std::vector<float> win0 = RandomF32(static_cast<size_t>(kW * C), 1.f, rng);
    DevBuf d_x(2 * x.size()), d_w(4 * w.size());
    Upload(d_x, x);
    Upload(d_w, w);
    auto run = [&](const std::vector<int64_t>& cuts, std::vector<float>* window) {
      DevBuf out(2 * kT * C), win(4 * win0.size());
      Upload(win, win0);
      EXPECT_EQ(cudaMemset(out.get(), 0xff, 2 * kT * C), cudaSuccess);
      int64_t t0 = 0;
      for (int64_t c : cuts) {
        const Status st = CausalConvSiluPrefill(d_x.get<bf16>() + t0 * C, ActType::kBf16, C,
                                                c - t0, C, d_w.get<float>(), kK,
                                                win.get<float>(), out.get<bf16>() + t0 * C, nullptr);
        EXPECT_TRUE(st.ok()) << st;
        t0 = c;
      }
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      *window = Download<float>(win, win0.size());
      return Download<uint16_t>(out, static_cast<size_t>(kT * C));
    };
    std::vector<float> win_one, win_split;
    const std::vector<uint16_t> one = run({kT}, &win_one);
    for (const std::vector<int64_t>& cuts :
         {std::vector<int64_t>{97, kT}, std::vector<int64_t>{64, 203, kT},
          std::vector<int64_t>{97, 99, kT}}) {
      const std::vector<uint16_t> got = run(cuts, &win_split);
      EXPECT_EQ(Differ(one.data(), got.data(), one.size()), 0u) << "cut at " << cuts[0];
      EXPECT_EQ(Differ(win_one.data(), win_split.data(), win_one.size()), 0u)
          << "final window, cut at " << cuts[0];
    }
  }
}

// ---------------------------------------------------------------------------
// Norms: a row alone vs in a call of 300 rows.

constexpr int64_t kRows = 300;

TEST(CudaInvariance, AddRmsNormRowAloneMatchesBatch) {
  constexpr int64_t D = 2304;
  std::mt19937 rng(41);
  const std::vector<float> h = RandomF32(static_cast<size_t>(kRows * D), 2.f, rng);
  const std::vector<uint16_t> delta = RandomBf16(h.size(), 1.f, rng);
  const std::vector<float> w = RandomF32(D, 1.f, rng);
  DevBuf d_delta(2 * delta.size()), d_w(4 * D);
  Upload(d_delta, delta);
  Upload(d_w, w);
  auto run = [&](int64_t r0, int64_t n, std::vector<float>* h_out) {
    DevBuf d_h(4 * h.size()), out(2 * h.size());
    Upload(d_h, h);
    const Status st = AddRmsNorm(d_h.get<float>() + r0 * D, d_delta.get<bf16>() + r0 * D,
                                 ActType::kBf16, n, D, d_w.get<float>(), 1e-6f,
                                 out.get<bf16>() + r0 * D, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    *h_out = Download<float>(d_h, h.size());
    return Download<uint16_t>(out, h.size());
  };
  std::vector<float> h_all, h_one;
  const std::vector<uint16_t> all = run(0, kRows, &h_all);
  for (int64_t r : {int64_t{0}, int64_t{150}, kRows - 1}) {
    const std::vector<uint16_t> one = run(r, 1, &h_one);
    EXPECT_EQ(Differ(all.data() + r * D, one.data() + r * D, D), 0u) << "row " << r;
    EXPECT_EQ(Differ(h_all.data() + r * D, h_one.data() + r * D, D), 0u) << "h row " << r;
  }
}

TEST(CudaInvariance, RmsNormRowsRowAloneMatchesBatch) {
  constexpr int64_t D = 512, ld = 576;  // the latent part of MLA cache rows
  std::mt19937 rng(42);
  const std::vector<uint16_t> x = RandomBf16(static_cast<size_t>(kRows * ld), 2.f, rng);
  const std::vector<float> w = RandomF32(D, 1.f, rng);
  DevBuf d_x(2 * x.size()), d_w(4 * D);
  Upload(d_x, x);
  Upload(d_w, w);
  auto run = [&](int64_t r0, int64_t n) {
    DevBuf y(2 * x.size());
    const Status st = RmsNormRows(d_x.get<bf16>() + r0 * ld, ld, y.get<bf16>() + r0 * ld, ld,
                                  ActType::kBf16, n, D, d_w.get<float>(), 1e-6f, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    return Download<uint16_t>(y, x.size());
  };
  const std::vector<uint16_t> all = run(0, kRows);
  for (int64_t r : {int64_t{0}, int64_t{150}, kRows - 1}) {
    const std::vector<uint16_t> one = run(r, 1);
    EXPECT_EQ(Differ(all.data() + r * ld, one.data() + r * ld, D), 0u) << "row " << r;
  }
}

TEST(CudaInvariance, GatedRmsNormSigmoidRowAloneMatchesBatch) {
  constexpr int64_t kHeads = 32, D = 128, rows = kRows * kHeads;
  std::mt19937 rng(43);
  const std::vector<float> o = RandomF32(static_cast<size_t>(rows * D), 2.f, rng);
  const std::vector<uint16_t> gate = RandomBf16(o.size(), 3.f, rng);
  const std::vector<float> w = RandomF32(D, 1.f, rng);
  DevBuf d_o(4 * o.size()), d_g(2 * gate.size()), d_w(4 * D);
  Upload(d_o, o);
  Upload(d_g, gate);
  Upload(d_w, w);
  auto run = [&](int64_t t0, int64_t n) {
    DevBuf out(2 * o.size());
    const Status st = GatedRmsNormSigmoid(d_o.get<float>() + t0 * kHeads * D, ActType::kF32,
                                          d_g.get<bf16>() + t0 * kHeads * D, ActType::kBf16,
                                          n * kHeads, D, d_w.get<float>(), 1e-5f,
                                          out.get<bf16>() + t0 * kHeads * D, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    return Download<uint16_t>(out, o.size());
  };
  const std::vector<uint16_t> all = run(0, kRows);
  for (int64_t t : {int64_t{0}, int64_t{150}, kRows - 1}) {
    const std::vector<uint16_t> one = run(t, 1);
    const size_t at = static_cast<size_t>(t * kHeads * D);
    EXPECT_EQ(Differ(all.data() + at, one.data() + at, kHeads * D), 0u) << "token " << t;
  }
}

}  // namespace
}  // namespace strata::cuda
