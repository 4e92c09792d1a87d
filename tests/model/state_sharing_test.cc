// CPU sequence states page their attention rows in 64-token blocks and their
// clones and checkpoints share the full blocks (exec/cpu/cpu_state.h). For
// one fixture of every architecture: a checkpoint names exactly the blocks it
// shares with its state and owns only the recurrent state and a partial last
// block; the state writing past the checkpoint never disturbs what the
// checkpoint froze; restores and forks continue bit-exactly as the state
// they came from, and share its blocks rather than copy them.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "harness/parity.h"
#include "model/model.h"

namespace strata {
namespace {

constexpr int64_t kBlockRows = 64;

using parity::RandomTokens;

std::vector<int32_t> Ids(std::span<const int32_t> s) { return {s.begin(), s.end()}; }

// All logits of `tokens` fed to `state`.
std::vector<float> Continue(const Model& m, SequenceState& state, std::span<const int32_t> tokens) {
  std::vector<float> out(tokens.size() * static_cast<size_t>(m.info().vocab_size));
  const Status s = m.Forward(tokens, state, out.data(), /*all_logits=*/true);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The logits of the last of `pieces` fed in order to a fresh state: the
// unshared reference for a state with that history.
std::vector<float> Fresh(const Model& m, const std::vector<std::span<const int32_t>>& pieces) {
  auto st = m.NewState(256);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return {};
  std::vector<float> last;
  for (std::span<const int32_t> p : pieces) last = Continue(m, **st, p);
  return last;
}

class StateSharing : public ::testing::TestWithParam<const char*> {};

TEST_P(StateSharing, CheckpointsShareFullBlocksAndNoHolderSeesAnotherOnesRows) {
  std::unique_ptr<Model> m = parity::LoadCpu(parity::FixtureDir(GetParam()));
  ASSERT_NE(m, nullptr);
  const ModelInfo& info = m->info();
  ASSERT_GT(info.state_bytes_per_token, 0u);
  const uint64_t block_bytes = kBlockRows * info.state_bytes_per_token;
  const std::vector<int32_t> tv = RandomTokens(230, info.vocab_size, 7);
  const std::vector<int32_t> ov = RandomTokens(230, info.vocab_size, 8);
  const std::span<const int32_t> t(tv), o(ov);
  auto cut = [](std::span<const int32_t> s, int64_t a, int64_t b) {
    return s.subspan(static_cast<size_t>(a), static_cast<size_t>(b - a));
  };

  // Checkpoints inside a block and at a block edge.
  for (const int64_t at : {int64_t{100}, int64_t{128}}) {
    SCOPED_TRACE(testing::Message() << GetParam() << ", checkpoint at " << at);
    auto st = m->NewState(256);
    ASSERT_TRUE(st.ok());
    Continue(*m, **st, t.first(static_cast<size_t>(at)));
    auto cp = m->Checkpoint(**st);
    ASSERT_TRUE(cp.ok()) << cp.status();
    const StateFootprint f = (*cp)->footprint();
    EXPECT_EQ(f.block_bytes, block_bytes);
    EXPECT_EQ(static_cast<int64_t>(f.shared_blocks.size()), at / kBlockRows);
    EXPECT_EQ(f.own_bytes,
              info.state_bytes_per_sequence + (at % kBlockRows != 0 ? block_bytes : 0));
    const std::vector<int32_t> frozen = Ids(f.shared_blocks);
    EXPECT_EQ(Ids((*st)->footprint().shared_blocks), frozen);  // the same blocks, not copies

    // The state runs on with other tokens (its partial block and new ones).
    Continue(*m, **st, cut(o, at, at + 70));

    // A restore shares the checkpoint's blocks and continues with the
    // original tokens; the state then reads its own rows, not the restore's.
    std::unique_ptr<SequenceState> r;
    ASSERT_TRUE(m->Restore(**cp, r).ok());
    ASSERT_EQ(r->num_tokens(), at);
    EXPECT_EQ(Ids(r->footprint().shared_blocks), frozen);
    EXPECT_EQ(Continue(*m, *r, cut(t, at, 150)), Fresh(*m, {cut(t, 0, at), cut(t, at, 150)}));
    EXPECT_EQ(Continue(*m, **st, cut(o, at + 70, at + 80)),
              Fresh(*m, {cut(t, 0, at), cut(o, at, at + 70), cut(o, at + 70, at + 80)}));

    // A second restore continues exactly as the first did.
    std::unique_ptr<SequenceState> r2;
    ASSERT_TRUE(m->Restore(**cp, r2).ok());
    EXPECT_EQ(Continue(*m, *r2, cut(t, at, 150)), Fresh(*m, {cut(t, 0, at), cut(t, at, 150)}));

    // A fork of the restore (150 tokens: two full blocks shared, the third
    // copied) and the restore go on with different tokens, interleaved.
    std::unique_ptr<SequenceState> fork = r->Clone();
    ASSERT_NE(fork, nullptr);
    EXPECT_EQ(Ids(fork->footprint().shared_blocks), Ids(r->footprint().shared_blocks));
    EXPECT_EQ(fork->footprint().shared_blocks.size(), 2u);
    Continue(*m, *fork, cut(o, 150, 190));
    Continue(*m, *r, cut(t, 150, 190));
    EXPECT_EQ(Continue(*m, *fork, cut(o, 190, 200)),
              Fresh(*m, {cut(t, 0, at), cut(t, at, 150), cut(o, 150, 190), cut(o, 190, 200)}));
    EXPECT_EQ(Continue(*m, *r, cut(t, 190, 200)),
              Fresh(*m, {cut(t, 0, at), cut(t, at, 150), cut(t, 150, 190), cut(t, 190, 200)}));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, StateSharing,
                         ::testing::Values("kimi_a", "dsv32_a", "qwen3next_a", "strata_hybrid_a"));

}  // namespace
}  // namespace strata
