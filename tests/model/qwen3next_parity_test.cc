// qwen3_next parity against transformers: for every fixture directory
// tests/data/qwen3next_* (built by tools/reference/make_qwen3next_fixtures.py
// from transformers 5.17 in fp32, eager attention), the CPU executor must
// reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces (chunked
//     continuation from a non-empty state),
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). The fixtures cover
// GVA (value heads 2x and 3x the key heads), odd head counts, dk != dv, GQA
// with one KV head, partial and full rotary, interval 2/3/4 layer patterns,
// dense layers by mlp_only_layers and by decoder_sparse_step, top-k with and
// without renormalisation, bf16 / fp32 / mixed storage and both config
// spellings (checkpoint and save_pretrained). A perturbation test shows the
// tolerance is meaningful: scaling any one layer's mixer output projection by
// 1.1 moves our logits by more than 100x the tolerance.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/parity.h"

namespace strata {
namespace {

using parity::Compare;
using parity::Comparison;
using parity::Describe;

std::vector<std::string> FixtureNames() { return parity::FixtureNames("qwen3next_"); }

struct Fixture : parity::Fixture {
  std::string layer_kinds;  // meta.json: 'L' (GDN) / 'F' (attention) per layer
};

class Qwen3NextParityTest : public parity::ParityTest<Fixture> {
 protected:
  void ReadFixture(const std::string& name, Fixture* f) override {
    parity::LoadFixture(name, f);
    if (!f->meta.is_discarded()) f->layer_kinds = f->meta["layer_kinds"].get<std::string>();
  }
};

TEST_P(Qwen3NextParityTest, LayerKindsMatchTheReferenceModel) {
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.architecture, "qwen3_next");
  ASSERT_EQ(static_cast<size_t>(info.num_layers), fixture_.layer_kinds.size());
  for (size_t i = 0; i < fixture_.layer_kinds.size(); ++i) {
    const bool attention = fixture_.layer_kinds[i] == 'F';
    EXPECT_EQ(info.layer_kinds[i].rfind(attention ? "attention+" : "gdn+", 0), 0u)
        << "layer " << i << ": " << info.layer_kinds[i];
  }
}

// The whole prompt, the standard splits, multi-token continuations (a prefill
// that starts from a non-empty state, with chunk boundaries falling inside
// the continuation) and the greedy continuation.
STRATA_PARITY_CPU_CASES(Qwen3NextParityTest, Transformers, {50, 70}, {1, 64, 3}, {33, 33, 33},
                        {2, 2, 2, 129})

// A cloned state continues exactly like the original (recurrent states, conv
// windows and K/V caches are all copied).
TEST_P(Qwen3NextParityTest, ClonedStateContinuesLikeTheOriginal) {
  const int64_t vocab = fixture_.vocab;
  const int64_t n = 70;
  auto state = model_->NewState(T());
  ASSERT_TRUE(state.ok());
  std::vector<float> scratch(static_cast<size_t>(n * vocab));
  ASSERT_TRUE(
      model_->Forward(std::span(fixture_.prompt.data(), n), **state, scratch.data(), true).ok());
  std::unique_ptr<SequenceState> clone = (*state)->Clone();
  std::vector<float> a(static_cast<size_t>((T() - n) * vocab)), b(a.size());
  const std::span rest(fixture_.prompt.data() + n, static_cast<size_t>(T() - n));
  ASSERT_TRUE(model_->Forward(rest, **state, a.data(), true).ok());
  ASSERT_TRUE(model_->Forward(rest, *clone, b.data(), true).ok());
  EXPECT_EQ(a, b);
  const std::vector<float> ref(fixture_.logits.begin() + n * vocab, fixture_.logits.end());
  const Comparison c = Compare(b, ref, vocab);
  EXPECT_LE(c.rel, parity::kCpuTolerance) << Describe(c);
}

TEST_P(Qwen3NextParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  ExpectEveryLayerMatters(
      [this](int32_t layer) {
        const bool attention = fixture_.layer_kinds[static_cast<size_t>(layer)] == 'F';
        return attention ? parity::OutputProjection(layer)
                         : "model.layers." + std::to_string(layer) + ".linear_attn.out_proj.weight";
      });
}

STRATA_PARITY_INSTANTIATE(Qwen3NextParityTest, FixtureNames());

// The fixtures are committed; finding fewer means the data directory is wrong.
TEST(Qwen3NextParityFixtures, AtLeastThreeFixturesArePresent) {
  EXPECT_GE(FixtureNames().size(), 3u) << "no qwen3next_* fixtures under " << STRATA_TEST_DATA_DIR;
}

// --- the command-line tool on one fixture ------------------------------------

TEST(Qwen3NextParityCli, StrataLogitsMatchesTransformers) {
  parity::Fixture f;
  ASSERT_NO_FATAL_FAILURE(parity::LoadFirstFixture("qwen3next_", &f));
  parity::ExpectCliLogitsWithin(f, "--prefill 65", parity::kCpuTolerance);
}

}  // namespace
}  // namespace strata
