// strata_hybrid parity against its PyTorch definition: for every fixture
// directory tests/data/strata_hybrid_* (built by tools/demo_model/
// make_fixtures.py in fp32 from transformers 5.17's own KimiLinearDeltaAttention,
// DeepseekV32Attention and DeepseekV32MoE/MLP modules; prompts longer than 128
// and not multiples of 64; index_topk well below the prompt length), the CPU
// adapter must reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits after a prefill of N tokens plus single-token decode
//     steps (N in {1, 63, 64, 65, T-1}) and when fed as several pieces,
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). The checks can
// fail: with an indexer that keeps every key the logits move far beyond the
// tolerance (the sparse selection is what is matched), and scaling any
// layer's mixer output projection by 1.1 moves them by more than 100x it.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/parity.h"

namespace strata {
namespace {

using parity::Comparison;

std::vector<std::string> FixtureNames() { return parity::FixtureNames("strata_hybrid_"); }

class StrataHybridParityTest : public parity::ParityTest<> {
 protected:
  StrataHybridParityTest() { architecture_ = "strata_hybrid"; }
};

TEST_P(StrataHybridParityTest, FixtureMixesBothLayerKindsOnTheSparsePath) {
  const nlohmann::json& spec = fixture_.meta["spec"];
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  EXPECT_LT(2 * spec["index_topk"].get<int64_t>(), T);
  EXPECT_GT(T, 128);
  EXPECT_NE(T % 64, 0);
  std::set<std::string> kinds(model_->info().layer_kinds.begin(), model_->info().layer_kinds.end());
  bool kda = false, dsa = false, moe = false, dense = false;
  for (const std::string& k : kinds) {
    kda |= k.rfind("kda", 0) == 0;
    dsa |= k.rfind("dsa", 0) == 0;
    moe |= k.find("+moe") != std::string::npos;
    dense |= k.find("+dense") != std::string::npos;
  }
  EXPECT_TRUE(kda && dsa && moe && dense) << "layer kinds of " << GetParam();
}

// The whole prompt, the standard splits, multi-token continuations from a
// non-empty state (KDA carries its state and conv windows, the indexer scores
// new queries against cached keys) and the greedy continuation.
STRATA_PARITY_CPU_CASES(StrataHybridParityTest, Torch, {50, 70}, {1, 64, 3}, {33, 33, 33},
                        {2, 2, 2, 2})

// With an indexer that keeps everything, our logits must be far from the
// reference: the sparse selection is what the parity above depends on.
TEST_P(StrataHybridParityTest, DenseAttentionDiffersFromTheReference) {
  Comparison c;
  ASSERT_NO_FATAL_FAILURE(CompareDenseAttention(1 << 20, &c));
  EXPECT_GT(c.rel, 100 * parity::kCpuTolerance);
}

TEST_P(StrataHybridParityTest, ScalingAnyLayersMixerOutputMovesLogitsFarBeyondTolerance) {
  ExpectEveryLayerMatters(parity::OutputProjection);
}

STRATA_PARITY_INSTANTIATE(StrataHybridParityTest, FixtureNames());

// The fixtures are committed; finding fewer means the data directory is wrong.
TEST(StrataHybridParityFixtures, AtLeastTwoFixtures) {
  EXPECT_GE(FixtureNames().size(), 2u)
      << "no strata_hybrid_* fixtures under " << STRATA_TEST_DATA_DIR;
}

}  // namespace
}  // namespace strata
