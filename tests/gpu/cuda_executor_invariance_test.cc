// The GPU executors in batch-invariant mode (LoadOptions::batch_invariant),
// end to end on the test models (tests/data/{kimi,qwen3next,dsv32}_a): the
// logits of a sequence must be bit-identical (memcmp) whatever the prompt's
// cut into Forward calls (one call, 97 + rest, 64-token pieces, T−1 + 1: the
// last cut puts one prompt token in a call of its own) and whatever batch its
// decode steps share (alone, or at different rows of a batch of 20 beside
// sequences of other lengths). tools/gpu/exactness.sh checks the same through
// the serving engine on greedy outputs; this is the executor-level guard.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness/parity.h"
#include "model/model.h"

namespace strata {
namespace {

using parity::FixtureDir;
using parity::LoadFixture;
using parity::Fixture;

constexpr int kDecodeSteps = 6;

std::unique_ptr<Model> LoadInvariant(const std::string& dir) {
  LoadOptions o = parity::CudaOptions();
  // Room for a decode batch past the GEMV's 16 rows (the default kernels
  // switch there, which the batched check must cross to mean anything).
  o.max_batch = 32;
  o.max_sequences = 40;
  o.batch_invariant = true;
  return parity::LoadCuda(dir, o);
}

int32_t Argmax(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// Prefills `prompt` cut at `cuts` (ascending, inside (0, T)), then decodes
// kDecodeSteps greedy tokens alone. Returns the last prompt logits followed by
// each decode step's logits.
std::vector<float> PrefillCutThenDecode(const Model& m, const std::vector<int32_t>& prompt,
                                        const std::vector<int64_t>& cuts) {
  const int64_t vocab = m.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  std::vector<float> out(static_cast<size_t>((1 + kDecodeSteps) * vocab));
  auto state = m.NewState(T + kDecodeSteps + 1);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return {};
  int64_t begin = 0;
  std::vector<int64_t> ends = cuts;
  ends.push_back(T);
  for (int64_t end : ends) {
    const Status st = m.Forward(std::span(prompt.data() + begin, static_cast<size_t>(end - begin)),
                                **state, out.data(), /*all_logits=*/false);
    EXPECT_TRUE(st.ok()) << "piece [" << begin << ", " << end << "): " << st;
    if (!st.ok()) return {};
    begin = end;
  }
  for (int s = 0; s < kDecodeSteps; ++s) {
    const int32_t next = Argmax(out.data() + s * vocab, vocab);
    SequenceState* const one[1] = {state->get()};
    const Status st =
        m.DecodeBatch(std::span(&next, 1), std::span(one, 1), out.data() + (s + 1) * vocab);
    EXPECT_TRUE(st.ok()) << "decode step " << s << ": " << st;
    if (!st.ok()) return {};
  }
  return out;
}

size_t CountDiffering(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

class ExecutorInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutorInvariance, PromptCutsGiveIdenticalLogits) {
  Fixture f;
  LoadFixture(GetParam(), &f);
  ASSERT_GT(f.prompt.size(), 130u) << "the fixture prompt must be longer than the cuts";
  auto m = LoadInvariant(f.dir);
  ASSERT_NE(m, nullptr);
  const int64_t T = static_cast<int64_t>(f.prompt.size());
  const std::vector<float> whole = PrefillCutThenDecode(*m, f.prompt, {});
  ASSERT_FALSE(whole.empty());
  const std::vector<std::vector<int64_t>> cut_sets = {{97}, {64, 128}, {T - 1}, {1, 2, 65, T - 1}};
  for (const auto& cuts : cut_sets) {
    std::string name;
    for (int64_t c : cuts) name += std::to_string(c) + " ";
    const std::vector<float> got = PrefillCutThenDecode(*m, f.prompt, cuts);
    EXPECT_EQ(CountDiffering(got, whole), 0u) << GetParam() << ": cuts at " << name;
  }
}

TEST_P(ExecutorInvariance, DecodeRowIsTheSameAloneOrBatched) {
  Fixture f;
  LoadFixture(GetParam(), &f);
  auto m = LoadInvariant(f.dir);
  ASSERT_NE(m, nullptr);
  const int64_t vocab = m->info().vocab_size;
  const int64_t T = static_cast<int64_t>(f.prompt.size());
  // Four neighbours of other lengths and contents (the prompt's ids rotated).
  std::vector<std::vector<int32_t>> prompts = {f.prompt};
  for (int64_t len : {int64_t{7}, T / 2, T - 3, int64_t{2}}) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      p[static_cast<size_t>(i)] = f.prompt[static_cast<size_t>((i * 7 + len) % T)];
    }
    prompts.push_back(p);
  }
  // Runs kDecodeSteps batched steps with the test sequence at row `row` of a
  // batch of `batch` (row 0 of a batch of 1: alone); returns its logits.
  auto run = [&](int batch, int row) -> std::vector<float> {
    std::vector<std::unique_ptr<SequenceState>> states;
    std::vector<int32_t> next(static_cast<size_t>(batch));
    std::vector<float> logits(static_cast<size_t>(batch * vocab));
    for (int b = 0; b < batch; ++b) {
      const std::vector<int32_t>& p =
          prompts[static_cast<size_t>(b == row ? 0 : 1 + (b + row) % 4)];
      auto s = m->NewState(static_cast<int64_t>(p.size()) + kDecodeSteps + 1);
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) return {};
      const Status st = m->Forward(p, **s, logits.data() + b * vocab, false);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return {};
      states.push_back(std::move(*s));
    }
    std::vector<float> mine;
    for (int step = 0; step < kDecodeSteps; ++step) {
      std::vector<SequenceState*> ptrs;
      for (int b = 0; b < batch; ++b) {
        next[static_cast<size_t>(b)] = Argmax(logits.data() + b * vocab, vocab);
        ptrs.push_back(states[static_cast<size_t>(b)].get());
      }
      const Status st = m->DecodeBatch(next, ptrs, logits.data());
      EXPECT_TRUE(st.ok()) << "step " << step << ": " << st;
      if (!st.ok()) return {};
      mine.insert(mine.end(), logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
    }
    return mine;
  };
  const std::vector<float> alone = run(1, 0);
  ASSERT_EQ(alone.size(), static_cast<size_t>(kDecodeSteps * vocab));
  for (int row : {0, 9, 19}) {
    EXPECT_EQ(CountDiffering(run(20, row), alone), 0u) << GetParam() << ": row " << row << " of 20";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExecutorInvariance,
                         ::testing::Values("kimi_a", "qwen3next_a", "dsv32_a"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace strata
