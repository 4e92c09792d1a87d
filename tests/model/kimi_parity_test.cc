// kimi_linear parity against transformers: for every fixture directory
// tests/data/kimi_* (built by tools/reference/make_kimi_fixtures.py from
// transformers 5.17 in fp32, eager attention), the CPU executor must reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces (chunked
//     continuation from a non-empty state),
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). A perturbation test
// shows the tolerance is meaningful: scaling any one layer's o_proj by 1.1 moves
// our logits by more than 100x the tolerance, so no layer can be silently wrong.
// One test drives `strata logits` and `strata generate` on a fixture.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/npy.h"
#include "harness/parity.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> FixtureNames() { return parity::FixtureNames("kimi_"); }

class KimiParityTest : public parity::ParityTest<> {};

// The whole prompt, the standard splits, multi-token continuations (a prefill
// that starts from a non-empty state, with chunk boundaries falling inside
// the continuation) and the greedy continuation.
STRATA_PARITY_CPU_CASES(KimiParityTest, Transformers, {50, 70}, {1, 64, 3}, {33, 33, 33})

TEST_P(KimiParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  ExpectEveryLayerMatters(parity::OutputProjection);
}

STRATA_PARITY_INSTANTIATE(KimiParityTest, FixtureNames());

// The fixtures are committed; finding none means the data directory is wrong.
TEST(KimiParityFixtures, AtLeastThreeFixturesArePresent) {
  EXPECT_GE(FixtureNames().size(), 3u) << "no kimi_* fixtures under " << STRATA_TEST_DATA_DIR;
}

// --- the command-line tool on one fixture ------------------------------------

TEST(KimiParityCli, StrataLogitsAndGenerateMatchTransformers) {
  parity::Fixture f;
  ASSERT_NO_FATAL_FAILURE(parity::LoadFirstFixture("kimi_", &f));
  ASSERT_NO_FATAL_FAILURE(parity::ExpectCliLogitsWithin(f, "--prefill 65", parity::kCpuTolerance));
  const std::string exe = parity::StrataCliPath();

  // `strata generate` (engine + greedy sampler) reproduces the reference continuation.
  const std::string prompt_path =
      (fs::temp_directory_path() / ("strata_parity_cli_prompt_" + std::to_string(::getpid()) + ".npy")).string();
  const std::vector<int32_t> gen_prompt(f.generate.begin(), f.generate.begin() + f.generate_prompt_len);
  const std::vector<int64_t> gen_shape = {f.generate_prompt_len};
  ASSERT_TRUE(WriteNpyInt32(prompt_path, gen_shape, gen_prompt).ok());
  const int64_t new_tokens = static_cast<int64_t>(f.generate.size()) - f.generate_prompt_len;
  const std::string gen_cmd = exe + " generate --model " + f.dir + " --tokens " + prompt_path +
                              " --ignore-eos --max-new " + std::to_string(new_tokens) + " 2>/dev/null";
  FILE* pipe = popen(gen_cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[256];
  while (fgets(buf, sizeof buf, pipe)) text += buf;
  ASSERT_EQ(pclose(pipe), 0) << gen_cmd;
  std::istringstream in(text);
  std::vector<int32_t> got;
  for (int32_t t; in >> t;) got.push_back(t);
  EXPECT_EQ(got, std::vector<int32_t>(f.generate.begin() + f.generate_prompt_len, f.generate.end())) << text;
  std::remove(prompt_path.c_str());

  // `--device cuda` runs on the GPU when one is usable and otherwise falls back
  // to the CPU with a notice: either way it succeeds and stays close to the
  // reference (bf16 activations on the GPU: 1e-2). An unknown device is a usage
  // error (exit 2), not a crash.
  ASSERT_NO_FATAL_FAILURE(parity::ExpectCliLogitsWithin(f, "--device cuda", 1e-2));
  const std::string out =
      (fs::temp_directory_path() / ("strata_parity_cli_" + std::to_string(::getpid()) + ".npy"))
          .string();
  const std::string bad = exe + " logits --model " + f.dir + " --tokens " + f.dir +
                          "/prompt.npy --device tpu --out " + out + " > /dev/null 2>&1";
  const int rc = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace strata
