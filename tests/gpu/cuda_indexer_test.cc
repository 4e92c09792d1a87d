// Lightning indexer + fused top-k on the GPU (backend/cuda/indexer.h) against
// cpu::IndexerTopK on random inputs: q and keys ~ N(0, 1) rounded to bf16,
// per-head weights ~ N(0, 1)/sqrt(H) (some negative, as weights_proj gives),
// keys in a paged cache with shuffled blocks. The selected SETS are compared:
// counts must match, GPU rows must be ascending, causal and padded with −1,
// and any key selected by one side only must have a CPU score within
// rounding (1e-4 of the row's largest |score|) of the CPU's k-th score — the
// GPU's fp32 scores are summed in another order, so keys tied to within the
// last bits may swap. Exact ties (zero keys score exactly 0) must resolve as
// on the CPU: to the lower position, across split boundaries too. Decode
// (per-sequence block tables, lengths below/at/above top_k and the 4096-key
// split; each case under both split plans, which must select the same rows)
// and prefill (passes of 128 queries, rows straddling a split) at
// DeepSeek-V3.2's shape (64 heads, d = 128, top_k 2048) and small odd ones
// (the fp32 fallback).
#include "backend/cuda/indexer.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/indexer.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DeviceArray;
using op_test::RoundBf16;
using op_test::ToBf16;

struct Shape {
  int64_t heads, dim, top_k;
};

std::string ShapeName(const Shape& s) {
  return absl::StrCat("H", s.heads, "_d", s.dim, "_k", s.top_k);
}

IndexerShape ToShape(const Shape& s) {
  IndexerShape x;
  x.num_heads = s.heads;
  x.head_dim = s.dim;
  x.top_k = s.top_k;
  return x;
}

float Scale(const Shape& s) { return 1.f / std::sqrt(static_cast<float>(s.dim)); }

// Random keys for sequences of the given lengths; with `zero_every` > 0 only
// every zero_every-th key is random and the others are zero vectors (their
// score is exactly 0).
std::vector<std::vector<float>> MakeKeys(const Shape& s, const std::vector<int64_t>& lens,
                                         std::mt19937& rng, int zero_every) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> keys(lens.size());
  for (size_t b = 0; b < lens.size(); ++b) {
    keys[b].resize(lens[b] * s.dim);
    for (int64_t p = 0; p < lens[b]; ++p) {
      const bool zero = zero_every > 0 && p % zero_every != 0;
      for (int64_t d = 0; d < s.dim; ++d) {
        keys[b][p * s.dim + d] = zero ? 0.f : RoundBf16(normal(rng));
      }
    }
  }
  return keys;
}

// A paged cache holding each sequence's keys in shuffled 64-row blocks.
struct PagedKeys {
  PagedKeys(const Shape& s, const std::vector<std::vector<float>>& keys, std::mt19937& rng) {
    for (const auto& k : keys) {
      max_blocks = std::max<int64_t>(max_blocks, (k.size() / s.dim + 63) / 64);
    }
    max_blocks = std::max<int64_t>(max_blocks, 1);
    const int64_t total_blocks = static_cast<int64_t>(keys.size()) * max_blocks + 2;
    std::vector<int32_t> perm(total_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> host(total_blocks * 64 * s.dim, 0.f);
    std::vector<int32_t> table(keys.size() * max_blocks, 0);
    int64_t next = 0;
    for (size_t b = 0; b < keys.size(); ++b) {
      const int64_t len = static_cast<int64_t>(keys[b].size()) / s.dim;
      for (int64_t blk = 0; blk * 64 < len; ++blk) {
        const int32_t phys = perm[next++];
        table[b * max_blocks + blk] = phys;
        for (int64_t r = 0; r < 64 && blk * 64 + r < len; ++r) {
          std::copy_n(keys[b].begin() + (blk * 64 + r) * s.dim, s.dim,
                      host.begin() + (phys * 64 + r) * s.dim);
        }
      }
    }
    pool = std::make_unique<DeviceArray<bf16>>(host.size());
    block_table = std::make_unique<DeviceArray<int32_t>>(table.size());
    ok = pool->Upload(ToBf16(host)) && block_table->Upload(table);
  }
  IndexKeyCache Cache() const {
    IndexKeyCache c;
    c.pool = pool->get();
    c.block_table = block_table->get();
    c.max_blocks = max_blocks;
    return c;
  }
  int64_t max_blocks = 0;
  std::unique_ptr<DeviceArray<bf16>> pool;
  std::unique_ptr<DeviceArray<int32_t>> block_table;
  bool ok = false;
};

// Tie tests use positive weights so that every non-zero key scores > 0 and
// the zero keys (exactly 0) are the only ties at the selection boundary.
void MakeQueries(const Shape& s, int64_t rows, std::mt19937& rng, bool positive_weights,
                 std::vector<float>* q, std::vector<float>* w) {
  std::normal_distribution<float> normal(0.f, 1.f);
  q->resize(rows * s.heads * s.dim);
  for (float& x : *q) x = RoundBf16(normal(rng));
  w->resize(rows * s.heads);
  const float inv = 1.f / std::sqrt(static_cast<float>(s.heads));
  for (float& x : *w) x = (positive_weights ? std::abs(normal(rng)) + 0.1f : normal(rng)) * inv;
}

// The CPU selection of T queries over `keys` (past + T rows).
struct CpuSelection {
  std::vector<int32_t> rows, counts;
  std::vector<float> scores;  // [T, past + T]
};

CpuSelection CpuSelect(const Shape& s, const float* q, const float* w, int64_t T,
                       const std::vector<float>& keys, int64_t past) {
  ThreadPool* pool = ThreadPool::Default();
  cpu::IndexerDims d;
  d.num_heads = s.heads;
  d.head_dim = s.dim;
  d.top_k = s.top_k;
  CpuSelection out;
  out.rows.resize(T * s.top_k);
  out.counts.resize(T);
  out.scores.resize(T * (past + T));
  std::vector<float> scratch(cpu::IndexerScratchFloats(T, past + T, pool->num_threads()));
  cpu::IndexerTopK(d, q, w, T, keys.data(), past, Scale(s), out.rows.data(), out.counts.data(),
                   out.scores.data(), scratch.data(), pool);
  return out;
}

// Compares one query's GPU selection with the CPU's (see the file comment).
// `exact`: the sets must be identical.
void CheckRow(const std::string& label, const float* scores, int64_t n, const int32_t* cpu_rows,
              int32_t cpu_count, const int32_t* gpu_rows, int32_t gpu_count, int64_t top_k,
              bool exact, int* swaps) {
  ASSERT_EQ(gpu_count, cpu_count) << label;
  ASSERT_EQ(cpu_count, std::min<int64_t>(top_k, n)) << label;
  for (int64_t j = 0; j < top_k; ++j) {
    if (j < gpu_count) {
      ASSERT_GE(gpu_rows[j], 0) << label << " j=" << j;
      ASSERT_LT(gpu_rows[j], n) << label << " j=" << j << ": not causal";
      if (j > 0) {
        ASSERT_GT(gpu_rows[j], gpu_rows[j - 1]) << label << ": not ascending";
      }
    } else {
      ASSERT_EQ(gpu_rows[j], -1) << label << " j=" << j << ": padding";
    }
  }
  std::vector<char> in_cpu(n, 0), in_gpu(n, 0);
  float kth = std::numeric_limits<float>::infinity(), max_abs = 0.f;
  for (int32_t j = 0; j < cpu_count; ++j) {
    in_cpu[cpu_rows[j]] = 1;
    kth = std::min(kth, scores[cpu_rows[j]]);
  }
  for (int32_t j = 0; j < gpu_count; ++j) in_gpu[gpu_rows[j]] = 1;
  for (int64_t p = 0; p < n; ++p) max_abs = std::max(max_abs, std::abs(scores[p]));
  const float tol = 1e-4f * max_abs;
  for (int64_t p = 0; p < n; ++p) {
    if (in_cpu[p] == in_gpu[p]) continue;
    ++*swaps;
    ASSERT_FALSE(exact) << label << ": position " << p << " selected by "
                        << (in_cpu[p] ? "CPU only" : "GPU only") << " (score " << scores[p]
                        << ", k-th " << kth << ")";
    ASSERT_LE(std::abs(scores[p] - kth), tol)
        << label << ": position " << p << " (score " << scores[p] << ") is not near the k-th "
        << kth;
  }
}

// ---------------------------------------------------------------------------
// Decode.

struct DecodeCase {
  Shape shape;
  std::vector<int64_t> lens;
  int zero_every = 0;  // > 0: tie test (exact comparison)
};

std::string DecodeName(const ::testing::TestParamInfo<DecodeCase>& info) {
  std::string lens;
  for (int64_t l : info.param.lens) lens += absl::StrCat("_", l);
  return absl::StrCat(ShapeName(info.param.shape), "_lens", lens,
                      info.param.zero_every > 0 ? "_ties" : "");
}
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << DecodeName({c, 0}); }

class IndexerDecodeTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(IndexerDecodeTest, SelectsTheCpuTopKPerSequence) {
  const DecodeCase& c = GetParam();
  const Shape& s = c.shape;
  const int64_t B = static_cast<int64_t>(c.lens.size());
  std::mt19937 rng(5150 + static_cast<uint32_t>(s.heads * 7 + s.dim + B));
  const auto keys = MakeKeys(s, c.lens, rng, c.zero_every);
  PagedKeys paged(s, keys, rng);
  ASSERT_TRUE(paged.ok);
  std::vector<float> q, w;
  MakeQueries(s, B, rng, c.zero_every > 0, &q, &w);
  const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end());

  DeviceArray<bf16> d_q(q.size());
  DeviceArray<float> d_w(w.size());
  DeviceArray<int32_t> d_lens(B), d_rows(B * s.top_k), d_counts(B);
  std::vector<int32_t> lens32(c.lens.begin(), c.lens.end());
  ASSERT_TRUE(d_q.Upload(ToBf16(q)) && d_w.Upload(w) && d_lens.Upload(lens32));
  IndexerDecodeArgs a;
  a.shape = ToShape(s);
  a.batch = B;
  a.q = d_q.get();
  a.weights = d_w.get();
  a.cache = paged.Cache();
  a.seq_lens = d_lens.get();
  a.max_seq_len = max_len;
  a.rows = d_rows.get();
  a.counts = d_counts.get();
  // Both split plans (indexer.split_decode): 4096-key splits, and the short
  // splits a small batch takes, whose candidates are every key of a split.
  std::vector<int32_t> first_rows;
  for (const bool small : {false, true}) {
    SCOPED_TRACE(small ? "small splits" : "4096-key splits");
    DeviceArray<unsigned long long> d_total(1);
    ASSERT_TRUE(d_total.Upload({5}));  // accumulates onto what is there
    a.selected_total = d_total.get();
    a.small_splits = small;
    const size_t ws_bytes = IndexerDecodeWorkspaceBytes(a.shape, B, max_len, small);
    DeviceArray<char> ws(ws_bytes);
    const Status st = IndexerDecode(a, ws.get(), ws_bytes, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> rows = d_rows.Download(B * s.top_k);
    const std::vector<int32_t> counts = d_counts.Download(B);

    const std::vector<unsigned long long> total = d_total.Download(1);
    ASSERT_EQ(total.size(), 1u);
    unsigned long long want_total = 5;
    for (int64_t b = 0; b < B; ++b) want_total += std::min<int64_t>(s.top_k, c.lens[b]);
    EXPECT_EQ(total[0], want_total) << "selected_total";

    int swaps = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = c.lens[b];
      const CpuSelection cs =
          CpuSelect(s, q.data() + b * s.heads * s.dim, w.data() + b * s.heads, 1, keys[b], n - 1);
      CheckRow(absl::StrCat(DecodeName({c, 0}), " seq ", b), cs.scores.data(), n, cs.rows.data(),
               cs.counts[0], rows.data() + b * s.top_k, counts[b], s.top_k, c.zero_every > 0,
               &swaps);
      if (HasFatalFailure()) return;
    }
    // The plans select the same rows: the selection is exact under one order.
    if (!small) {
      first_rows = rows;
    } else {
      EXPECT_EQ(rows, first_rows) << "the two split plans selected different rows";
    }
    std::printf("[indexer] %-50s %s near-tie swaps %d\n", DecodeName({c, 0}).c_str(),
                small ? "small" : "4096 ", swaps);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerDecodeTest,
    ::testing::Values(
        // DeepSeek-V3.2: fewer keys than top_k, just above it, the split edges.
        DecodeCase{{64, 128, 2048}, {1500, 2049, 4096, 4097, 9000}},
        DecodeCase{{64, 128, 2048}, {1, 70000}},
        // Ties across three splits: only every 8th key is non-zero, so fewer
        // than top_k keys score > 0 and the rest are picked among exact zeros.
        DecodeCase{{64, 128, 2048}, {12000, 2100}, 8},
        // Small shapes: tensor-core path with 8 heads, the fp32 fallback.
        DecodeCase{{8, 64, 50}, {49, 50, 51, 4200, 8193}},
        DecodeCase{{5, 40, 37}, {1, 30, 100, 5000}},
        DecodeCase{{5, 40, 37}, {300, 4500}, 150}),
    DecodeName);

// ---------------------------------------------------------------------------
// Prefill.

struct PrefillCase {
  Shape shape;
  int64_t tokens;
  int64_t past;
  int zero_every = 0;
};

std::string PrefillName(const ::testing::TestParamInfo<PrefillCase>& info) {
  const PrefillCase& c = info.param;
  return absl::StrCat(ShapeName(c.shape), "_T", c.tokens, "_past", c.past,
                      c.zero_every > 0 ? "_ties" : "");
}
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << PrefillName({c, 0}); }

class IndexerPrefillTest : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(IndexerPrefillTest, SelectsTheCpuCausalTopKPerToken) {
  const PrefillCase& c = GetParam();
  const Shape& s = c.shape;
  const int64_t total = c.past + c.tokens;
  std::mt19937 rng(8080 + static_cast<uint32_t>(c.tokens * 3 + c.past));
  const auto keys = MakeKeys(s, {total}, rng, c.zero_every);
  PagedKeys paged(s, keys, rng);
  ASSERT_TRUE(paged.ok);
  std::vector<float> q, w;
  MakeQueries(s, c.tokens, rng, c.zero_every > 0, &q, &w);
  DeviceArray<bf16> d_q(q.size());
  DeviceArray<float> d_w(w.size());
  DeviceArray<int32_t> d_rows(c.tokens * s.top_k), d_counts(c.tokens);
  ASSERT_TRUE(d_q.Upload(ToBf16(q)) && d_w.Upload(w));
  IndexerPrefillArgs a;
  a.shape = ToShape(s);
  a.num_tokens = c.tokens;
  a.past = c.past;
  a.q = d_q.get();
  a.weights = d_w.get();
  a.cache = paged.Cache();
  a.rows = d_rows.get();
  a.counts = d_counts.get();
  const size_t ws_bytes = IndexerPrefillWorkspaceBytes(a.shape, c.tokens, c.past);
  DeviceArray<char> ws(ws_bytes);
  const Status st = IndexerPrefill(a, ws.get(), ws_bytes, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> rows = d_rows.Download(c.tokens * s.top_k);
  const std::vector<int32_t> counts = d_counts.Download(c.tokens);

  const CpuSelection cs = CpuSelect(s, q.data(), w.data(), c.tokens, keys[0], c.past);
  int swaps = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    CheckRow(absl::StrCat(PrefillName({c, 0}), " token ", t), cs.scores.data() + t * total,
             c.past + t + 1, cs.rows.data() + t * s.top_k, cs.counts[t],
             rows.data() + t * s.top_k, counts[t], s.top_k, c.zero_every > 0, &swaps);
    if (HasFatalFailure()) return;
  }
  std::printf("[indexer] %-50s near-tie swaps %d\n", PrefillName({c, 0}).c_str(), swaps);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerPrefillTest,
    ::testing::Values(
        // Fresh prompt: early tokens keep all their keys, later ones select.
        PrefillCase{{64, 128, 2048}, 2300, 0},
        // Rows straddling the 4096-key split, over two passes of queries.
        PrefillCase{{64, 128, 2048}, 150, 4000},
        PrefillCase{{64, 128, 2048}, 140, 4030, 4},
        PrefillCase{{8, 64, 100}, 130, 4000},
        PrefillCase{{5, 40, 37}, 150, 20},
        PrefillCase{{5, 40, 37}, 77, 4090, 200}),
    PrefillName);

TEST(IndexerArgsTest, RejectsMissingOutputsAndShortWorkspace) {
  DeviceArray<bf16> x(4096);
  DeviceArray<float> f(64);
  DeviceArray<int32_t> table(4), lens(1), rows(64), counts(1);
  IndexerDecodeArgs a;
  a.shape.num_heads = 8;
  a.shape.head_dim = 64;
  a.shape.top_k = 16;
  a.batch = 1;
  a.q = x.get();
  a.weights = f.get();
  a.cache.pool = x.get();
  a.cache.block_table = table.get();
  a.cache.max_blocks = 200;
  a.seq_lens = lens.get();
  a.max_seq_len = 9000;  // 3 splits: needs a workspace
  a.rows = rows.get();
  a.counts = nullptr;
  Status st = IndexerDecode(a, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("counts"), std::string::npos) << st;
  a.counts = counts.get();
  ASSERT_GT(IndexerDecodeWorkspaceBytes(a.shape, 1, 9000), 0u);
  st = IndexerDecode(a, x.get(), 16, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("workspace"), std::string::npos) << st;
  a.max_seq_len = 200 * 64 + 1;
  st = IndexerDecode(a, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("block table"), std::string::npos) << st;
}

}  // namespace
}  // namespace strata::cuda
