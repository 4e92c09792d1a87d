// deepseek_v32 parity against transformers: for every fixture directory
// tests/data/dsv32_* (built by tools/reference/make_dsv32_fixtures.py from
// transformers 5.17 in fp32, eager attention; index_topk well below the
// prompt length, so the lightning indexer's selection decides what MLA
// reads), the CPU executor must reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces,
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). Further checks:
// the rotary tables and softmax scale equal the reference's; selecting every
// key instead (dense MLA) moves the logits far beyond the tolerance, so the
// sparse path is what is being matched; and scaling any layer's o_proj by
// 1.1 moves them by more than 100x the tolerance (for FP8 fixtures through
// the block scales).
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/rope_yarn.h"
#include "harness/parity.h"
#include "model/config_reader.h"
#include "model/models/deepseek_v32_config.h"

namespace strata {
namespace {

using parity::Comparison;

std::vector<std::string> FixtureNames() { return parity::FixtureNames("dsv32_"); }

class Dsv32ParityTest : public parity::ParityTest<> {
 protected:
  Dsv32ParityTest() { architecture_ = "deepseek_v32"; }
};

TEST_P(Dsv32ParityTest, FixtureExercisesTheSparsePath) {
  // The indexer keeps fewer keys than most queries have, so selection matters.
  const nlohmann::json& spec = fixture_.meta["spec"];
  const int64_t topk = spec["index_topk"].get<int64_t>();
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  EXPECT_LT(2 * topk, T);
  EXPECT_GT(T, 128);
  EXPECT_NE(T % 64, 0);
  EXPECT_EQ(spec["heads"].get<int64_t>() % 2, 1) << "odd head count";
  EXPECT_GT(fixture_.meta["sparse_vs_dense"]["rel_logit_difference_all_layers_dense"].get<double>(),
            100 * parity::kCpuTolerance);
}

TEST_P(Dsv32ParityTest, RotaryTablesAndScaleMatchTransformers) {
  auto reader = ConfigReader::FromFile(fixture_.dir + "/config.json");
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto cfg = ParseDeepseekV32Config(*reader);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const nlohmann::json& rope = fixture_.meta["rope"];
  const std::vector<float> inv = cpu::RopeInvFreq(cfg->rope);
  const std::vector<double> want = rope["inv_freq"].get<std::vector<double>>();
  ASSERT_EQ(inv.size(), want.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    // Same fp32 operations as the reference: equal up to the last bit of powf.
    EXPECT_NEAR(inv[i], want[i], 2e-7 * want[i]) << "inv_freq[" << i << "]";
  }
  EXPECT_NEAR(cpu::RopeAttentionFactor(cfg->rope), rope["attention_scaling"].get<double>(), 1e-12);
  EXPECT_NEAR(cfg->softmax_scale, rope["softmax_scale"].get<double>(), 1e-12);
}

// The whole prompt, the standard splits, multi-token continuations from a
// non-empty state (the indexer scores new queries against cached keys; MLA
// picks the expanded or absorbed form) and the greedy continuation.
STRATA_PARITY_CPU_CASES(Dsv32ParityTest, Transformers, {50, 70}, {1, 64, 3}, {33, 33, 33},
                        {2, 2, 2, 2})

// With an indexer that keeps everything, our logits must be far from the
// reference: the sparse selection is what the parity above depends on.
TEST_P(Dsv32ParityTest, DenseAttentionDiffersFromTheReference) {
  Comparison c;
  ASSERT_NO_FATAL_FAILURE(CompareDenseAttention(1 << 20, &c));
  EXPECT_GT(c.rel, 100 * parity::kCpuTolerance);
}

TEST_P(Dsv32ParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  const nlohmann::json& tensors = fixture_.meta["tensors"];
  ExpectEveryLayerMatters(
      [&tensors](int32_t layer) {
        std::string name = parity::OutputProjection(layer);
        // An FP8 matrix is scaled through its block scales.
        if (tensors.contains(name) && tensors[name][0].get<std::string>() == "float8_e4m3fn") {
          name += "_scale_inv";
        }
        return name;
      });
}

STRATA_PARITY_INSTANTIATE(Dsv32ParityTest, FixtureNames());

// The fixtures are committed; finding too few means the data directory is
// wrong. At least one of them is stored in FP8.
TEST(Dsv32ParityFixtures, AtLeastTwoFixturesOneOfThemFp8) {
  const std::vector<std::string> names = FixtureNames();
  EXPECT_GE(names.size(), 2u) << "no dsv32_* fixtures under " << STRATA_TEST_DATA_DIR;
  int fp8 = 0;
  for (const std::string& n : names) {
    std::ifstream f(parity::FixtureDir(n) + "/config.json");
    const nlohmann::json cfg = nlohmann::json::parse(f, nullptr, false);
    fp8 += !cfg.is_discarded() && cfg.contains("quantization_config");
  }
  EXPECT_GE(fp8, 1);
}

// dsv32_g1 / dsv32_g2 are the GPU test's tight-bound fixtures: their recorded
// margins must be the ones bf16 cannot flip, and transformers' own bf16 error
// (measured when they were built) at most 5e-3. The parity cases above check
// that the CPU executor reproduces them at 1e-4 like every other fixture.
TEST(Dsv32ParityFixtures, TwoFixturesCarryMarginsBuiltForBf16) {
  int built_for_bf16 = 0;
  for (const std::string& n : FixtureNames()) {
    const nlohmann::json meta = parity::ReadMeta(parity::FixtureDir(n));
    ASSERT_FALSE(meta.is_discarded()) << n;
    if (!meta["spec"].value("gpu", false)) continue;
    ++built_for_bf16;
    const nlohmann::json& worst = meta["margins"]["worst"];
    EXPECT_GE(worst["index"].get<double>(), 2e-2) << n;
    EXPECT_GE(worst["routing"].get<double>(), 5e-2) << n;
    EXPECT_GE(worst["group"].get<double>(), 5e-2) << n;
    EXPECT_GE(meta["margins"]["greedy_gap_min"].get<double>(), 0.1) << n;
    EXPECT_LE(meta["bf16_floor_l2_rel"].get<double>(), 5e-3) << n;
  }
  EXPECT_GE(built_for_bf16, 2) << "dsv32_g1 / dsv32_g2 missing under " << STRATA_TEST_DATA_DIR;
}

}  // namespace
}  // namespace strata
