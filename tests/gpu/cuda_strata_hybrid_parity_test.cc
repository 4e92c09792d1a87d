// strata_hybrid (the demo architecture: KDA and DSA mixers, dense and MoE
// FFNs in one layer list) on the H200's layer executor, on the fixtures built
// for bf16 (strata_hybrid_g*, "gpu": true in meta.json's spec;
// tools/demo_model/make_fixtures.py with make_dsv32_fixtures.py's fitting):
// bf16-exact weights, every indexer fitted so the k-th vs (k+1)-th index
// score gap is >= 2e-2 of the row's largest score and every router so expert
// and group choices have gaps >= 5e-2, over the prompt and the greedy
// continuation, greedy top-2 gaps >= 0.1, and the reference's own bf16 error
// recorded (meta.json bf16_floor_l2_rel <= 5e-3). No discrete choice flips
// under bf16, so the bounds are the other GPU suites' max(1e-2, 1.25 ×
// floor) on both the overall L2 and the median per-position error, and the
// greedy continuation must equal the reference's on every step.
// This holds for
//   * every prompt position's logits from one prefill (sparse: T > index_topk),
//   * a prefill of N tokens then single-token decode steps, N in
//     {1, 63, 64, 65, T−1} (KDA's chunk and the cache blocks at 64; dense
//     DSA prefill while N ≤ index_topk, then sparse decode),
//   * multi-token continuations and short prefill slices (48 tokens);
// and, GPU against GPU: DecodeBatch of 3 sequences (one short enough to be
// dense alone) equals each run alone, graph replay equals eager steps, a
// clone continues like the original. The DSA layers' sparse path is checked
// to be taken: the executor's counters hold the indexer's selected rows,
// which must equal Σ min(index_topk, causal keys) per DSA layer exactly.
// The committed CPU fixtures (strata_hybrid_a/b) are the CPU parity test's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "exec/cuda/cuda_executor.h"
#include "harness/parity.h"
#include "model/model.h"

namespace strata {
namespace {

using parity::Describe;

constexpr double kTolerance = 1e-2;  // where bf16 itself is accurate (recorded floor)
constexpr double kFloorFactor = 1.25;
constexpr double kBatchTolerance = 5e-3;  // batched vs one sequence at a time
// The short row attends densely alone and through gathered rows in the
// sparse batch: the same keys summed in another order.
constexpr double kMixedPathTolerance = 5e-2;
constexpr double kGraphTolerance = 1e-3;  // graph replay vs eager, clone vs original

std::vector<std::string> Bf16MarginFixtureNames() {
  std::vector<std::string> names;
  for (const std::string& n : parity::FixtureNames("strata_hybrid_")) {
    const nlohmann::json meta = parity::ReadMeta(parity::FixtureDir(n));
    if (!meta.is_discarded() && meta["spec"].value("gpu", false)) names.push_back(n);
  }
  return names;
}

struct Fixture : parity::Fixture {
  int64_t index_topk = 0;
  int64_t dsa_layers = 0;
  parity::Bounds bounds{kTolerance};
};

std::map<std::string, uint64_t> Counters(const Model& m) {
  auto s = cuda_exec::GetCudaExecutorStats(m);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->counters : std::map<std::string, uint64_t>{};
}

parity::GraphCounts GraphCountsOf(const Model& m) {
  auto s = cuda_exec::GetCudaExecutorStats(m);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  return {s->graph_captures, s->graph_launches, s->eager_steps, s->graph_error,
          s->prefill_slice_tokens};
}

class CudaStrataHybridParity : public parity::GpuParityTest<Fixture> {
 protected:
  CudaStrataHybridParity() {
    tag_ = "[cuda-strata-hybrid]";
    architecture_ = "strata_hybrid";
    gpu_.options.max_context_tokens = 1024;
    gpu_.graph_counts = GraphCountsOf;
    // Decode crosses index_topk: dense then sparse steps, a graph shape each.
    gpu_.graph_min_captures = 2;
    gpu_.graph_warmups = 4;
    gpu_.same_device_tolerance = kGraphTolerance;
  }
  void ReadFixture(const std::string& name, Fixture* f) override {
    parity::LoadFixture(name, f);
    ASSERT_FALSE(f->meta.is_discarded()) << name << ": no meta.json";
    ASSERT_TRUE(f->meta.contains("bf16_floor_l2_rel")) << name << " has no bf16 floor";
    f->index_topk = f->meta["spec"]["index_topk"].get<int64_t>();
    for (const auto& kind : f->meta["spec"]["layer_types"]) f->dsa_layers += kind == "dsa";
    f->bounds.l2 = f->bounds.median =
        std::max(kTolerance, kFloorFactor * f->meta["bf16_floor_l2_rel"].get<double>());
    std::ostringstream s;
    s << " [bounds: median " << f->bounds.median << ", L2 " << f->bounds.l2 << "]";
    f->bounds.note = s.str();
    bounds_ = f->bounds;
    gpu_.sample_len_b = f->index_topk + 9;  // the second sequence decodes sparsely
  }
};

STRATA_PARITY_PREFILL_CASES(CudaStrataHybridParity, Reference)

TEST_P(CudaStrataHybridParity, ChunkedContinuationsAndShortSlicesMatchTheReference) {
  ExpectPiecesWithin({{50, 70}, {1, 64, 3}, {33, 33, 33}}, bounds_);
  // 48: slices straddle index_topk and the 64-token blocks.
  ExpectShortSlicesWithin(48, "48-token slices");
}

// The GPU's own greedy loop (each step feeds its token) gives the
// reference's continuation on every step.
TEST_P(CudaStrataHybridParity, GreedyContinuationEqualsTheReferenceOnEveryStep) {
  const int64_t g = fixture_.generate_prompt_len;
  ASSERT_GT(g, fixture_.index_topk);  // every decode step is sparse
  std::vector<int32_t> ours;
  ASSERT_NO_FATAL_FAILURE(
      parity::GreedyTokens(*model_, fixture_.generate, g, parity::Feed::kOwn, &ours));
  const std::vector<int32_t> want(fixture_.generate.begin() + g, fixture_.generate.end());
  EXPECT_EQ(ours, want);
}

// A prefill of T > index_topk tokens selects Σ_t min(K, t+1) rows in every
// DSA layer, a decode step at length T+1 min(K, T+1); a prefill of at most
// K tokens is dense and selects nothing. KDA layers select nothing.
TEST_P(CudaStrataHybridParity, DsaLayersTakeTheSparsePathWithTheExpectedSelectionCounts) {
  const int64_t K = fixture_.index_topk, L = fixture_.dsa_layers;
  ASSERT_GE(L, 1);
  ASSERT_EQ(Counters(*model_)["dsa.index_topk"], static_cast<uint64_t>(K));
  auto c0 = Counters(*model_);
  auto st = model_->NewState(T() + 2);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(model_->Forward(fixture_.prompt, **st, nullptr, false).ok());
  auto c1 = Counters(*model_);
  uint64_t want = 0;
  for (int64_t t = 0; t < T(); ++t) want += static_cast<uint64_t>(std::min(K, t + 1));
  EXPECT_EQ(c1["dsa.sparse_prefill_layers"] - c0["dsa.sparse_prefill_layers"], L);
  EXPECT_EQ(c1["dsa.dense_prefill_layers"] - c0["dsa.dense_prefill_layers"], 0u);
  EXPECT_EQ(c1["dsa.selected_rows"] - c0["dsa.selected_rows"], static_cast<uint64_t>(L) * want);

  const int32_t next = fixture_.prompt[0];
  ASSERT_TRUE(model_->Forward(std::span(&next, 1), **st, nullptr, false).ok());
  auto c2 = Counters(*model_);
  EXPECT_EQ(c2["dsa.sparse_decode_steps"] - c1["dsa.sparse_decode_steps"], 1u);
  EXPECT_EQ(c2["dsa.selected_rows"] - c1["dsa.selected_rows"],
            static_cast<uint64_t>(L * std::min(K, T() + 1)));

  auto short_st = model_->NewState(K + 1);
  ASSERT_TRUE(short_st.ok());
  ASSERT_TRUE(model_
                  ->Forward(std::span(fixture_.prompt.data(), static_cast<size_t>(K)), **short_st,
                            nullptr, false)
                  .ok());
  auto c3 = Counters(*model_);
  EXPECT_EQ(c3["dsa.dense_prefill_layers"] - c2["dsa.dense_prefill_layers"], L);
  EXPECT_EQ(c3["dsa.selected_rows"], c2["dsa.selected_rows"]);
}

TEST_P(CudaStrataHybridParity, DecodeBatchOfThreeEqualsEachRunAlone) {
  const int64_t K = fixture_.index_topk;
  ASSERT_GE(T(), 80);
  // One prompt short enough that alone it decodes densely; in the batch the
  // others (longer than index_topk) make the step sparse.
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, std::max<int64_t>(2, K - 8)},
                                                          {5, std::min<int64_t>(70, T() - 12)},
                                                          {10, std::min<int64_t>(66, T() - 16)}};
  std::vector<double> vs_cpu;
  double worst_batch = 0;
  ASSERT_NO_FATAL_FAILURE(parity::DecodeBatchAgainstAloneAndCpu(
      *model_, fixture_.dir, fixture_.prompt, spans, /*steps=*/6, nullptr,
      [&](const parity::BatchRow& r) {
        worst_batch = std::max(worst_batch, r.vs_alone.rel);
        vs_cpu.push_back(r.vs_cpu.rel);
        EXPECT_LE(r.vs_alone.rel, r.row == 0 ? kMixedPathTolerance : kBatchTolerance)
            << "step " << r.step << " row " << r.row << ": " << Describe(r.vs_alone);
      }));
  const double median_cpu = parity::Median(vs_cpu);
  std::printf(
      "[cuda-strata-hybrid] %s DecodeBatch(3) x 6 steps: worst rel vs alone %.3g, median "
      "vs CPU %.3g%s\n",
      GetParam().c_str(), worst_batch, median_cpu, bounds_.note.c_str());
  EXPECT_LE(median_cpu, bounds_.median) << "batched rows vs the CPU executor" << bounds_.note;
}

// Graph replay, Clone/Reset, device greedy sampling, misuse.
STRATA_PARITY_GPU_CASES(CudaStrataHybridParity)

STRATA_PARITY_INSTANTIATE(CudaStrataHybridParity, Bf16MarginFixtureNames());

TEST(CudaStrataHybridFixtures, AFixtureHasMarginsBuiltForBf16) {
  EXPECT_GE(Bf16MarginFixtureNames().size(), 1u)
      << "strata_hybrid_g1 missing under " << STRATA_TEST_DATA_DIR;
}

}  // namespace
}  // namespace strata
