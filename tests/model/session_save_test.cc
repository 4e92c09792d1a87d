// Saved sessions on every architecture (CPU): a session saved at points that
// fall inside and on the edges of the 64-token state blocks, with and
// without a pending sampled token and a mark, loads into a second load of
// the model on another engine and continues bit-exactly as the original
// (the same generated tokens and logits, and the same bytes saved again);
// a session of another architecture, or of the same one with other weights,
// is refused naming the field that differs.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/session.h"
#include "harness/parity.h"
#include "harness/session_runs.h"

namespace strata {
namespace {

using parity::RandomTokens;

std::shared_ptr<const Model> Load(const std::string& dir) {
  return std::shared_ptr<const Model>(parity::LoadCpu(dir));
}

class SessionSave : public ::testing::TestWithParam<const char*> {};

TEST_P(SessionSave, LoadedSessionsContinueBitExactly) {
  const std::string dir = parity::FixtureDir(GetParam());
  std::shared_ptr<const Model> m = Load(dir), m2 = Load(dir);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(m2, nullptr);
  EXPECT_EQ(m->info().weights_digest, m2->info().weights_digest);
  EXPECT_EQ(m->info().weights_digest.size(), 64u);
  const int32_t vocab = m->info().vocab_size;
  const std::vector<int32_t> prompt = RandomTokens(150, vocab, 3);
  const std::vector<int32_t> more = RandomTokens(21, vocab, 4);
  // Inside and at the edges of the 64-token state blocks, with and without
  // a mark and a pending generated token.
  for (const auto& [cut, generate] : std::vector<std::pair<int64_t, bool>>{
           {0, false}, {64, false}, {100, true}, {128, false}, {150, true}}) {
    SCOPED_TRACE(GetParam());
    parity::ExpectSaveLoadContinuesExactly(m, m2, prompt, cut, generate, more);
  }
}

TEST_P(SessionSave, SessionsOfAnotherModelAreRefusedNamingWhatDiffers) {
  const std::string dir = parity::FixtureDir(GetParam());
  std::shared_ptr<const Model> m = Load(dir);
  ASSERT_NE(m, nullptr);
  auto e = parity::NewEngine();
  ASSERT_NE(e, nullptr);
  SessionOptions so;
  so.max_context_tokens = 256;
  auto s = Session::Create(e.get(), m, so);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Append(RandomTokens(70, m->info().vocab_size, 5)).ok());
  auto saved = (*s)->Save();
  ASSERT_TRUE(saved.ok()) << saved.status();

  // The same shapes with one tensor scaled: only the weights differ.
  parity::ScratchDir scaled("session_save_scaled");
  parity::WriteScaledCopy(dir, scaled.str(), "model.norm.weight", 1.5f);
  std::shared_ptr<const Model> other = Load(scaled.str());
  ASSERT_NE(other, nullptr);
  auto refused = Session::Load(e.get(), other, *saved, so, "test bytes");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("weights_digest"), std::string::npos) << refused.status();

  // Another architecture.
  const std::string foreign =
      std::string(GetParam()) == "kimi_a" ? "qwen3next_a" : "kimi_a";
  std::shared_ptr<const Model> f = Load(parity::FixtureDir(foreign));
  ASSERT_NE(f, nullptr);
  refused = Session::Load(e.get(), f, *saved, so, "test bytes");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("architecture"), std::string::npos) << refused.status();

  // A context too small for the history.
  SessionOptions tiny = so;
  tiny.max_context_tokens = 32;
  refused = Session::Load(e.get(), m, *saved, tiny, "test bytes");
  EXPECT_TRUE(absl::IsOutOfRange(refused.status())) << refused.status();
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, SessionSave,
                         ::testing::Values("kimi_a", "dsv32_a", "qwen3next_a", "strata_hybrid_a"));

}  // namespace
}  // namespace strata
