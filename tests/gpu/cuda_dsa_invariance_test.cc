// Batch and chunk invariance (issue 6) of DeepSeek-V3.2's sparse attention
// pieces, compared bit for bit (memcmp) on random non-zero inputs:
//  * IndexerPrefill: the selection (rows and counts) of every query of a
//    300-token prompt in one call vs calls split at 97, one token before the
//    end and at 64-token block boundaries; the index keys repeat earlier
//    positions' keys, so exact score ties occur and must resolve the same way;
//  * IndexerDecode: a query alone vs inside batches of 16 beside sequences of
//    other lengths (some past one 4096-key split), under several length
//    bounds and both split plans (the short splits of indexer.split_decode
//    depend on the batch, the selection must not);
//  * MlaSparsePrefill with batch_invariant: the latent output of each query in
//    one 300-query call vs split calls and a query alone, top_k 2048 (four
//    fixed 512-key splits and their merge) on the tensor-core kernel and a
//    tiny shape on the generic kernel.
// The executor's batch-invariant deepseek_v32 mode relies on these: every
// prefill and decode query takes the sparse path there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/indexer.h"
#include "backend/cuda/mla.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;
using op_test::Download;
using op_test::RandomBf16;
using op_test::RandomF32;
using op_test::Upload;

template <typename T>
size_t Differ(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0 ? 1 : 0;
  }
  return d;
}

std::vector<int32_t> Permutation(int64_t n, std::mt19937& rng) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// ---------------------------------------------------------------------------
// Indexer.

// `seqs` sequences of up to `max_blocks` blocks of index keys each (block
// table rows in a permuted pool); a key at position s ≥ 37 repeats the key
// at s − 37 when s % 5 == 0, so some scores tie exactly.
struct KeyPool {
  KeyPool(int64_t dim, int64_t seqs, int64_t blocks_per_seq, std::mt19937& rng)
      : max_blocks(blocks_per_seq),
        table(Permutation(seqs * blocks_per_seq, rng)),
        pool(sizeof(bf16) * static_cast<size_t>(seqs * blocks_per_seq * kKvBlockTokens * dim)),
        dev_table(sizeof(int32_t) * table.size()) {
    const int64_t tokens = max_blocks * kKvBlockTokens;
    std::vector<uint16_t> keys(static_cast<size_t>(seqs * max_blocks * kKvBlockTokens * dim));
    for (int64_t q = 0; q < seqs; ++q) {
      std::vector<uint16_t> logical = RandomBf16(static_cast<size_t>(tokens * dim), 1.f, rng);
      for (int64_t s = 37; s < tokens; ++s) {
        if (s % 5 == 0) {
          std::copy(logical.begin() + (s - 37) * dim, logical.begin() + (s - 36) * dim,
                    logical.begin() + s * dim);
        }
      }
      for (int64_t s = 0; s < tokens; ++s) {
        const int64_t blk = table[static_cast<size_t>(q * max_blocks + s / kKvBlockTokens)];
        std::copy(logical.begin() + s * dim, logical.begin() + (s + 1) * dim,
                  keys.begin() + (blk * kKvBlockTokens + s % kKvBlockTokens) * dim);
      }
    }
    Upload(pool, keys);
    Upload(dev_table, table);
  }
  IndexKeyCache Cache(int64_t seq) const {
    IndexKeyCache c;
    c.pool = pool.get<bf16>();
    c.block_table = dev_table.get<int32_t>() + seq * max_blocks;
    c.max_blocks = max_blocks;
    return c;
  }
  int64_t max_blocks;
  std::vector<int32_t> table;
  DevBuf pool, dev_table;
};

struct IndexerCase {
  int64_t heads, dim, top_k;
};

class IndexerInvariance : public ::testing::TestWithParam<IndexerCase> {};

TEST_P(IndexerInvariance, PrefillSplitsMatchOneCall) {
  const IndexerCase c = GetParam();
  constexpr int64_t kT = 300;
  std::mt19937 rng(71 + static_cast<uint32_t>(c.heads));
  IndexerShape shape;
  shape.num_heads = c.heads;
  shape.head_dim = c.dim;
  shape.top_k = c.top_k;
  const KeyPool keys(c.dim, 1, (kT + kKvBlockTokens - 1) / kKvBlockTokens, rng);
  const int64_t qcols = c.heads * c.dim;
  DevBuf q(sizeof(bf16) * static_cast<size_t>(kT * qcols));
  DevBuf w(sizeof(float) * static_cast<size_t>(kT * c.heads));
  Upload(q, RandomBf16(static_cast<size_t>(kT * qcols), 1.f, rng));
  // Head weights of both signs: scores of either sign, ties at exact 0 too.
  Upload(w, RandomF32(static_cast<size_t>(kT * c.heads), 1.f, rng));
  DevBuf rows(sizeof(int32_t) * static_cast<size_t>(kT * c.top_k));
  DevBuf counts(sizeof(int32_t) * kT);

  auto run = [&](const std::vector<int64_t>& calls, std::vector<int32_t>* out_rows,
                 std::vector<int32_t>* out_counts) {
    CUDA_OK(cudaMemset(rows.get(), 0x7f, sizeof(int32_t) * kT * c.top_k));
    CUDA_OK(cudaMemset(counts.get(), 0x7f, sizeof(int32_t) * kT));
    int64_t past = 0;
    for (int64_t n : calls) {
      IndexerPrefillArgs a;
      a.shape = shape;
      a.num_tokens = n;
      a.past = past;
      a.q = q.get<bf16>() + past * qcols;
      a.ld_q = qcols;
      a.weights = w.get<float>() + past * c.heads;
      a.ld_w = c.heads;
      a.cache = keys.Cache(0);
      a.rows = rows.get<int32_t>() + past * c.top_k;
      a.counts = counts.get<int32_t>() + past;
      const size_t ws_bytes = IndexerPrefillWorkspaceBytes(shape, n, past);
      DevBuf ws(ws_bytes);
      const Status st = IndexerPrefill(a, ws.get(), ws_bytes, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      past += n;
    }
    CUDA_OK(cudaDeviceSynchronize());
    *out_rows = Download<int32_t>(rows, static_cast<size_t>(kT * c.top_k));
    *out_counts = Download<int32_t>(counts, kT);
  };
  std::vector<int32_t> want_rows, want_counts;
  run({kT}, &want_rows, &want_counts);
  // Every causal key up to top_k, then a real selection.
  EXPECT_EQ(want_counts[kT - 1], std::min(c.top_k, kT));
  const std::vector<std::vector<int64_t>> splits = {
      {97, kT - 97}, {kT - 1, 1}, {64, 128, kT - 192}, {1, 63, 1, 97, kT - 162}};
  for (const auto& calls : splits) {
    std::vector<int32_t> got_rows, got_counts;
    run(calls, &got_rows, &got_counts);
    EXPECT_EQ(Differ(want_counts, got_counts), 0u) << "counts, " << calls.size() << " calls";
    EXPECT_EQ(Differ(want_rows, got_rows), 0u) << "rows, " << calls.size() << " calls";
  }
}

TEST_P(IndexerInvariance, DecodeAloneMatchesBatchOf16) {
  const IndexerCase c = GetParam();
  constexpr int kSeqs = 16;
  // Lengths after the step's key; 4100 and 5000 take two 4096-key splits.
  const std::vector<int32_t> len = {300,  1,   4100, 64, 65,  2047, 17, 128,
                                    5000, 255, 2,    33, 999, 129,  5,  4096};
  const int64_t max_len = 5000;
  // The block table must cover the largest bound (IndexerDecode checks it).
  const int64_t max_bound = 8192;
  std::mt19937 rng(83 + static_cast<uint32_t>(c.heads));
  IndexerShape shape;
  shape.num_heads = c.heads;
  shape.head_dim = c.dim;
  shape.top_k = c.top_k;
  const KeyPool keys(c.dim, kSeqs, max_bound / kKvBlockTokens, rng);
  const int64_t qcols = c.heads * c.dim;
  const std::vector<uint16_t> q_all = RandomBf16(static_cast<size_t>(kSeqs * qcols), 1.f, rng);
  const std::vector<float> w_all = RandomF32(static_cast<size_t>(kSeqs * c.heads), 1.f, rng);

  // One step of the sequences in `order` (slot b = sequence order[b]) under
  // `bound` and either split plan (`small`: IndexerDecodeArgs::small_splits,
  // whose splits depend on the batch); the selection of the sequence in `slot`.
  auto decode = [&](const std::vector<int>& order, int64_t bound, bool small, int slot,
                    std::vector<int32_t>* out) {
    const int64_t b = static_cast<int64_t>(order.size());
    std::vector<int32_t> table, lens;
    std::vector<uint16_t> q;
    std::vector<float> w;
    for (int s : order) {
      table.insert(table.end(), keys.table.begin() + s * keys.max_blocks,
                   keys.table.begin() + (s + 1) * keys.max_blocks);
      lens.push_back(len[static_cast<size_t>(s)]);
      q.insert(q.end(), q_all.begin() + s * qcols, q_all.begin() + (s + 1) * qcols);
      w.insert(w.end(), w_all.begin() + s * c.heads, w_all.begin() + (s + 1) * c.heads);
    }
    DevBuf dt(4 * table.size()), dl(4 * lens.size()), dq(2 * q.size()), dw(4 * w.size());
    DevBuf rows(sizeof(int32_t) * static_cast<size_t>(b * c.top_k)), counts(4 * b);
    Upload(dt, table);
    Upload(dl, lens);
    Upload(dq, q);
    Upload(dw, w);
    IndexerDecodeArgs a;
    a.shape = shape;
    a.batch = b;
    a.q = dq.get<bf16>();
    a.ld_q = qcols;
    a.weights = dw.get<float>();
    a.ld_w = c.heads;
    a.cache.pool = keys.pool.get<bf16>();
    a.cache.block_table = dt.get<int32_t>();
    a.cache.max_blocks = keys.max_blocks;
    a.seq_lens = dl.get<int32_t>();
    a.max_seq_len = bound;
    a.rows = rows.get<int32_t>();
    a.counts = counts.get<int32_t>();
    a.small_splits = small;
    const size_t ws_bytes = IndexerDecodeWorkspaceBytes(shape, b, bound, small);
    DevBuf ws(ws_bytes);
    const Status st = IndexerDecode(a, ws.get(), ws_bytes, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int32_t> r = Download<int32_t>(rows, static_cast<size_t>(b * c.top_k));
    const std::vector<int32_t> n = Download<int32_t>(counts, static_cast<size_t>(b));
    out->assign(r.begin() + slot * c.top_k, r.begin() + (slot + 1) * c.top_k);
    out->push_back(n[static_cast<size_t>(slot)]);
  };
  for (int target : {0, 2, 8}) {
    std::vector<int32_t> alone;
    decode({target}, len[static_cast<size_t>(target)], false, 0, &alone);
    std::vector<int32_t> alone_small;
    decode({target}, max_bound, true, 0, &alone_small);
    EXPECT_EQ(Differ(alone, alone_small), 0u) << "sequence " << target << " alone, small splits";
    for (int slot : {0, 7, kSeqs - 1}) {
      std::vector<int> order;
      for (int s = 0; s < kSeqs; ++s) {
        if (s != target) order.push_back(s);
      }
      std::reverse(order.begin() + slot / 2, order.end());
      order.insert(order.begin() + slot, target);
      for (int64_t bound : {max_len, max_bound}) {
        for (bool small : {false, true}) {
          std::vector<int32_t> got;
          decode(order, bound, small, slot, &got);
          EXPECT_EQ(Differ(alone, got), 0u) << "sequence " << target << " at slot " << slot
                                            << ", bound " << bound << (small ? ", small" : "");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, IndexerInvariance,
                         ::testing::Values(IndexerCase{64, 128, 64},      // tensor cores
                                           IndexerCase{15, 32, 32},       // generic (test model)
                                           IndexerCase{64, 128, 2048}));  // production top_k

// ---------------------------------------------------------------------------
// Sparse MLA prefill.

MlaShape SparseShape(bool production) {
  MlaShape s;
  if (production) {  // DeepSeek-V3.2's dims, 16 heads
    s.num_heads = 16;
    s.nope_dim = 128;
    s.rope_dim = 64;
    s.v_dim = 128;
    s.kv_rank = 512;
  } else {
    s.num_heads = 3;
    s.nope_dim = 16;
    s.rope_dim = 8;
    s.v_dim = 16;
    s.kv_rank = 32;
  }
  return s;
}

void CheckSparsePrefillInvariance(const MlaShape& shape, int64_t top_k, uint32_t seed) {
  constexpr int64_t kT = 300;
  const int64_t past = top_k + 200;  // early queries select every key, later ones top_k of them
  const int64_t S = past + kT;
  const int64_t max_blocks = (S + kKvBlockTokens - 1) / kKvBlockTokens;
  const int64_t cd = shape.cache_dim(), H = shape.num_heads, r = shape.kv_rank;
  std::mt19937 rng(seed);
  DevBuf pool(sizeof(bf16) * static_cast<size_t>(max_blocks * kKvBlockTokens * cd));
  DevBuf table(sizeof(int32_t) * static_cast<size_t>(max_blocks));
  Upload(pool, RandomBf16(static_cast<size_t>(max_blocks * kKvBlockTokens * cd), 1.f, rng));
  Upload(table, Permutation(max_blocks, rng));
  DevBuf q(sizeof(bf16) * static_cast<size_t>(kT * H * cd));
  Upload(q, RandomBf16(static_cast<size_t>(kT * H * cd), 1.f, rng));
  // Per query: an ascending random subset of min(top_k, causal) positions.
  std::vector<int32_t> sel(static_cast<size_t>(kT * top_k), -1), cnt(kT);
  for (int64_t t = 0; t < kT; ++t) {
    const int64_t causal = past + t + 1;
    std::vector<int32_t> all(static_cast<size_t>(causal));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int64_t k = std::min(top_k, causal);
    std::sort(all.begin(), all.begin() + k);
    std::copy(all.begin(), all.begin() + k, sel.begin() + t * top_k);
    cnt[static_cast<size_t>(t)] = static_cast<int32_t>(k);
  }
  DevBuf dsel(4 * sel.size()), dcnt(4 * cnt.size());
  Upload(dsel, sel);
  Upload(dcnt, cnt);
  DevBuf out(sizeof(bf16) * static_cast<size_t>(kT * H * r));

  auto run = [&](const std::vector<std::pair<int64_t, int64_t>>& calls) {
    std::vector<uint16_t> got(static_cast<size_t>(kT * H * r), 0);
    for (const auto& [t0, n] : calls) {
      MlaSparsePrefillArgs a;
      a.shape = shape;
      a.num_tokens = n;
      a.q_abs = q.get<bf16>() + t0 * H * cd;
      a.cache.pool = pool.get<bf16>();
      a.cache.block_table = table.get<int32_t>();
      a.cache.max_blocks = max_blocks;
      a.rows = dsel.get<int32_t>() + t0 * top_k;
      a.counts = dcnt.get<int32_t>() + t0;
      a.top_k = top_k;
      a.out_latent = out.get<bf16>();
      a.out_type = ActType::kBf16;
      a.batch_invariant = true;
      const size_t ws_bytes = MlaSparsePrefillWorkspaceBytes(shape, n, top_k, true);
      DevBuf ws(ws_bytes);
      const Status st = MlaSparsePrefill(a, ws.get(), ws_bytes, nullptr);
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint16_t> o = Download<uint16_t>(out, static_cast<size_t>(n * H * r));
      std::copy(o.begin(), o.end(), got.begin() + t0 * H * r);
    }
    return got;
  };
  const std::vector<uint16_t> want = run({{0, kT}});
  EXPECT_EQ(Differ(want, run({{0, 97}, {97, kT - 97}})), 0u) << "split at 97";
  EXPECT_EQ(Differ(want, run({{0, kT - 1}, {kT - 1, 1}})), 0u) << "one-query tail";
  EXPECT_EQ(Differ(want, run({{0, 64}, {64, 128}, {192, kT - 192}})), 0u) << "64-aligned";
  // A query alone (batch 1) vs its row of the 300-query call.
  for (int64_t t : {int64_t{0}, int64_t{150}, kT - 1}) {
    const std::vector<uint16_t> one = run({{t, 1}});
    const std::vector<uint16_t> a(want.begin() + t * H * r, want.begin() + (t + 1) * H * r);
    const std::vector<uint16_t> b(one.begin() + t * H * r, one.begin() + (t + 1) * H * r);
    EXPECT_EQ(Differ(a, b), 0u) << "query " << t << " alone";
  }
}

TEST(SparseMlaInvariance, PrefillTensorCoreKernel) {
  CheckSparsePrefillInvariance(SparseShape(true), 2048, 91);
}

TEST(SparseMlaInvariance, PrefillGenericKernel) {
  CheckSparsePrefillInvariance(SparseShape(false), 32, 92);
}

TEST(SparseMlaInvariance, WorkspaceCountsFixedSplits) {
  // 2048 selected rows: four 512-key splits of partials for every query.
  const MlaShape s = SparseShape(true);
  EXPECT_GE(MlaSparsePrefillWorkspaceBytes(s, 300, 2048, true),
            static_cast<size_t>(300 * 4 * s.num_heads * s.kv_rank) * sizeof(float));
}

}  // namespace
}  // namespace strata::cuda
