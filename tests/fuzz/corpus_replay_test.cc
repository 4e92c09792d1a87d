// Replays the committed fuzz corpora through their oracles as ordinary unit
// tests, so inputs that once crashed the code (and the seeds) stay covered in
// every build, with or without clang and libFuzzer.
//
// Naming convention in each corpus: ok_* must be accepted (parse, render,
// yield a tool call), bad_* must be rejected, anything else (inputs the
// fuzzer found) only has to be handled safely.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "config_check.h"
#include "host_json_check.h"
#include "jinja_check.h"
#include "safetensors_header_check.h"
#include "safetensors_index_check.h"
#include "session_file_check.h"
#include "state_object_check.h"
#include "tiktoken_check.h"
#include "tokenizer_config_check.h"
#include "tokenizer_json_check.h"
#include "tool_call_check.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpusRoot(STRATA_FUZZ_CORPUS_ROOT);

std::vector<fs::path> CorpusFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> Read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Runs every file of `corpus` through the oracle `check` (whose result has a
// `violation`), and checks the seeds' names against `accepted`. Returns the
// numbers of ok_* and bad_* seeds, which guard against an empty or misplaced
// corpus making the test vacuous.
template <typename Result>
std::pair<int, int> Replay(const std::string& corpus, Result (*check)(const uint8_t*, size_t),
                           bool (*accepted)(const Result&)) {
  int ok_seeds = 0, bad_seeds = 0;
  for (const fs::path& p : CorpusFiles(kCorpusRoot / corpus)) {
    const std::string name = corpus + "/" + p.filename().string();
    const std::vector<uint8_t> bytes = Read(p);
    const Result r = check(bytes.data(), bytes.size());
    EXPECT_EQ(r.violation, "") << name;
    if (StartsWith(p.filename().string(), "ok_")) {
      EXPECT_TRUE(accepted(r)) << name << " is a known-good seed but was rejected";
      ++ok_seeds;
    } else if (StartsWith(p.filename().string(), "bad_")) {
      EXPECT_FALSE(accepted(r)) << name << " is a malformed seed but was accepted";
      ++bad_seeds;
    }
  }
  return {ok_seeds, bad_seeds};
}

TEST(FuzzCorpusReplay, EveryInputIsHandledSafely) {
  const auto seeds = Replay<fuzz::CheckResult>("safetensors_header", fuzz::CheckSafetensorsHeader,
                                               [](const auto& r) { return r.parsed_ok; });
  EXPECT_GE(seeds.first, 5);
  EXPECT_GE(seeds.second, 10);
}

TEST(FuzzCorpusReplay, ChatTemplatesRenderOrFailCleanly) {
  const auto seeds = Replay<fuzz::JinjaResult>("jinja", fuzz::CheckJinja,
                                               [](const auto& r) { return r.rendered; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 5);
}

TEST(FuzzCorpusReplay, ToolCallParsersIgnoreChunking) {
  const auto seeds = Replay<fuzz::ToolCallResult>("tool_calls", fuzz::CheckToolCalls,
                                                  [](const auto& r) { return r.calls > 0; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 2);
}

TEST(FuzzCorpusReplay, HostJsonIsBoundedAndRoundTrips) {
  const auto seeds = Replay<fuzz::HostJsonResult>("host_json", fuzz::CheckHostJson,
                                                  [](const auto& r) { return r.accepted; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 2);
}

TEST(FuzzCorpusReplay, ShardIndexesOpenOrFailCleanly) {
  const auto seeds = Replay<fuzz::IndexResult>("safetensors_index", fuzz::CheckSafetensorsIndex,
                                               [](const auto& r) { return r.opened; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 10);
}

TEST(FuzzCorpusReplay, ConfigsParseOrFailNamingTheField) {
  const auto seeds = Replay<fuzz::ConfigResult>("config", fuzz::CheckConfig,
                                                [](const auto& r) { return r.accepted > 0; });
  EXPECT_GE(seeds.first, 20);
  EXPECT_GE(seeds.second, 5);
}

TEST(FuzzCorpusReplay, TokenizerJsonLoadsOrFailsCleanly) {
  const auto seeds = Replay<fuzz::TokenizerJsonResult>("tokenizer_json", fuzz::CheckTokenizerJson,
                                                       [](const auto& r) { return r.loaded; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 5);
}

TEST(FuzzCorpusReplay, TokenizerConfigsApplyOrFailCleanly) {
  const auto seeds = Replay<fuzz::TokenizerConfigResult>(
      "tokenizer_config", fuzz::CheckTokenizerConfig, [](const auto& r) { return r.read; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 3);
}

TEST(FuzzCorpusReplay, TiktokenRankFilesLoadOrFailCleanly) {
  const auto seeds = Replay<fuzz::TiktokenResult>("tiktoken", fuzz::CheckTiktoken,
                                                  [](const auto& r) { return r.loaded; });
  EXPECT_GE(seeds.first, 2);
  EXPECT_GE(seeds.second, 5);
}

TEST(FuzzCorpusReplay, SavedSessionsRoundTripOrFailCleanly) {
  const auto seeds = Replay<fuzz::SessionFileResult>("session_file", fuzz::CheckSessionFile,
                                                     [](const auto& r) { return r.accepted; });
  EXPECT_GE(seeds.first, 3);
  EXPECT_GE(seeds.second, 5);
}

TEST(FuzzCorpusReplay, StateObjectsRoundTripOrFailCleanly) {
  const auto seeds = Replay<fuzz::StateObjectResult>("state_object", fuzz::CheckStateObject,
                                                     [](const auto& r) { return r.accepted; });
  EXPECT_GE(seeds.first, 2);
  EXPECT_GE(seeds.second, 4);
}

TEST(FuzzCorpusReplay, KnownGoodSeedsHaveTheExpectedTables) {
  const fs::path dir = kCorpusRoot / "safetensors_header";
  std::vector<uint8_t> bytes = Read(dir / "ok_all_dtypes.safetensors");
  StatusOr<SafetensorsHeader> h =
      ParseSafetensorsHeader("ok_all_dtypes", bytes.data(), bytes.size());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->tensors.size(), 6u);

  bytes = Read(dir / "ok_metadata.safetensors");
  h = ParseSafetensorsHeader("ok_metadata", bytes.data(), bytes.size());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

}  // namespace
}  // namespace strata
