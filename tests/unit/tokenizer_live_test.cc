// Live exactness test: tests/text/gen_tokenizer_cases.py generates 20,000
// varied strings per vocabulary and the reference library's ids and decodes
// (tokenizers for tokenizer.json, tiktoken for rank files); every id and every
// decode must be equal. Missing reference venv or data is a failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "text/tokenizer.h"

namespace strata {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kCases = 20000;
constexpr int kFlagCases = 5000;
constexpr int kMaxReported = 5;

std::string Quoted(const std::string& s) { return Json(s).dump(); }

std::string Ids(const std::vector<int32_t>& ids) { return "[" + absl::StrJoin(ids, ",") + "]"; }

struct Job {
  std::string out;  // the JSONL the harness writes
  std::string cmd;
  FILE* pipe = nullptr;
};

// The harness runs for every vocabulary are started together on first use, so
// reference generation for later vocabularies overlaps checking earlier ones.
std::map<std::string, Job>& Jobs() {
  static std::map<std::string, Job>* jobs = [] {
    auto* m = new std::map<std::string, Job>();
    const std::string python = STRATA_REF_PYTHON;
    const std::string script =
        std::string(STRATA_SOURCE_DIR) + "/tests/text/gen_tokenizer_cases.py";
    struct Entry {
      const char* vocab;
      int count;
      const char* test;
    };
    const Entry vocabs[] = {{"qwen3", kCases, "Qwen3MatchesReference"},
                            {"deepseek_v3", kCases, "DeepSeekV3MatchesReference"},
                            {"qwen3_flags", kFlagCases, "AddedTokenFlagsMatchReference"},
                            {"o200k_base", kCases, "O200kMatchesTiktoken"},
                            {"kimi_cl100k", kFlagCases, "KimiStyleDirectoryMatchesTiktoken"},
                            {"cl100k_base", kCases, "Cl100kMatchesTiktoken"}};
    // Only the vocabularies of tests selected in this process (ctest runs one
    // test per process).
    std::set<std::string> selected;
    const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
    for (int i = 0; i < ut.total_test_suite_count(); ++i) {
      const ::testing::TestSuite& suite = *ut.GetTestSuite(i);
      for (int k = 0; k < suite.total_test_count(); ++k) {
        if (suite.GetTestInfo(k)->should_run()) selected.insert(suite.GetTestInfo(k)->name());
      }
    }
    for (const auto& [vocab, count, test] : vocabs) {
      if (!selected.count(test)) continue;
      Job& j = (*m)[vocab];
      j.out = (fs::temp_directory_path() /
               absl::StrCat("strata_tok_cases_", vocab, "_", getpid(), ".jsonl"))
                  .string();
      const std::string workdir = j.out + ".dir";
      fs::create_directories(workdir);
      j.cmd = absl::StrCat("'", python, "' '", script, "' --data '", STRATA_TEXT_DATA_DIR,
                           "' --vocab ", vocab, " --count ", count, " --out '", j.out,
                           "' --workdir '", workdir, "' 2>&1");
      if (fs::exists(python) && fs::exists(std::string(STRATA_TEXT_DATA_DIR))) {
        j.pipe = popen(j.cmd.c_str(), "r");
      }
    }
    return m;
  }();
  return *jobs;
}

// Waits for the harness run of `vocab`; returns the JSONL path, or "" after
// recording a failure that says what is missing.
std::string GenerateCases(const std::string& vocab) {
  const std::string python = STRATA_REF_PYTHON;
  if (!fs::exists(python)) {
    ADD_FAILURE() << "reference Python " << python
                  << " is missing: run tools/setup.sh (it creates .venv-ref)";
    return "";
  }
  if (!fs::exists(std::string(STRATA_TEXT_DATA_DIR))) {
    ADD_FAILURE() << "text data dir " << STRATA_TEXT_DATA_DIR
                  << " is missing (configure unpacks it from tests/data/text)";
    return "";
  }
  Job& j = Jobs().at(vocab);
  if (!j.pipe) {
    ADD_FAILURE() << "cannot run " << j.cmd;
    return "";
  }
  std::string log;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), j.pipe)) > 0) log.append(buf, n);
  const int rc = pclose(j.pipe);
  j.pipe = nullptr;
  if (rc != 0) {
    ADD_FAILURE() << "reference harness failed (exit " << rc << "): " << j.cmd << "\n" << log;
    return "";
  }
  return j.out;
}

struct Stats {
  int cases = 0, id_mismatches = 0, decode_mismatches = 0;
};

void CheckCases(const std::string& vocab, const std::string& jsonl, int count,
                const std::function<std::unique_ptr<Tokenizer>(const Json& header)>& load) {
  std::ifstream in(jsonl);
  ASSERT_TRUE(in) << jsonl;
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << jsonl << " is empty";
  const Json header = Json::parse(line);
  std::unique_ptr<Tokenizer> tok = load(header);
  ASSERT_NE(tok, nullptr);
  Stats st;
  std::string report;
  int reported = 0;
  auto note = [&](const std::string& what) {
    if (reported++ < kMaxReported) report += what + "\n";
  };
  while (std::getline(in, line)) {
    const Json c = Json::parse(line);
    ++st.cases;
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    auto got = tok->Encode(text);
    if (!got.ok()) {
      ++st.id_mismatches;
      note(absl::StrCat("case ", st.cases, " text=", Quoted(text), ": ", got.status().ToString()));
      continue;
    }
    if (*got != want) {
      ++st.id_mismatches;
      note(absl::StrCat("case ", st.cases, " text=", Quoted(text), "\n  want ", Ids(want),
                        "\n  got  ", Ids(*got)));
    }
    struct Dec {
      const char* field;
      std::vector<int32_t> ids;
      bool skip;
    };
    const auto sl = c["slice"].get<std::vector<size_t>>();
    const Dec decs[] = {
        {"decode", want, false},
        {"decode_skip", want, true},
        {"slice_decode", std::vector<int32_t>(want.begin() + sl[0], want.begin() + sl[1]), false},
    };
    for (const Dec& d : decs) {
      DecodeOptions o;
      o.skip_special_tokens = d.skip;
      auto text_out = tok->Decode(d.ids, o);
      const std::string expect = c[d.field].get<std::string>();
      if (!text_out.ok() || *text_out != expect) {
        ++st.decode_mismatches;
        note(absl::StrCat("case ", st.cases, " ", d.field, " of ", Ids(d.ids), "\n  want ",
                          Quoted(expect), "\n  got  ",
                          text_out.ok() ? Quoted(*text_out) : text_out.status().ToString()));
      }
    }
  }
  fs::remove(jsonl);
  fs::remove_all(jsonl + ".dir");
  EXPECT_EQ(st.cases, count) << vocab;
  EXPECT_EQ(st.id_mismatches, 0) << vocab << ": " << st.id_mismatches << " of " << st.cases
                                 << " strings encode differently; first ones:\n"
                                 << report;
  EXPECT_EQ(st.decode_mismatches, 0)
      << vocab << ": " << st.decode_mismatches << " decodes differ; first ones:\n"
      << report;
  std::printf("%s: %d strings, %d id mismatches, %d decode mismatches\n", vocab.c_str(), st.cases,
              st.id_mismatches, st.decode_mismatches);
}

void RunTokenizerJson(const std::string& vocab, int count = kCases) {
  const std::string jsonl = GenerateCases(vocab);
  if (jsonl.empty()) return;
  CheckCases(vocab, jsonl, count, [&](const Json& h) -> std::unique_ptr<Tokenizer> {
    // The harness names the directory (a temporary one for variants).
    auto t = Tokenizer::FromDirectory(h["dir"].get<std::string>());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(t).value() : nullptr;
  });
}

void RunTiktoken(const std::string& vocab) {
  const std::string jsonl = GenerateCases(vocab);
  if (jsonl.empty()) return;
  CheckCases(vocab, jsonl, kCases, [&](const Json& h) -> std::unique_ptr<Tokenizer> {
    std::vector<std::pair<std::string, int32_t>> specials;
    for (const Json& s : h["specials"])
      specials.emplace_back(s[0].get<std::string>(), s[1].get<int32_t>());
    auto t = Tokenizer::FromTiktoken(
        std::string(STRATA_TEXT_DATA_DIR) + "/tiktoken/" + vocab + ".tiktoken",
        h["pattern"].get<std::string>(), specials);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(t).value() : nullptr;
  });
}

TEST(TokenizerLiveTest, Qwen3MatchesReference) { RunTokenizerJson("qwen3"); }
TEST(TokenizerLiveTest, DeepSeekV3MatchesReference) { RunTokenizerJson("deepseek_v3"); }
// Qwen3 with lstrip/rstrip/single_word/normalized set on some added tokens.
TEST(TokenizerLiveTest, AddedTokenFlagsMatchReference) {
  RunTokenizerJson("qwen3_flags", kFlagCases);
}
// A Kimi-style tiktoken.model directory (cl100k ranks, specials from
// added_tokens_decoder, BOS) against tiktoken with Kimi's own pattern.
TEST(TokenizerLiveTest, KimiStyleDirectoryMatchesTiktoken) {
  RunTokenizerJson("kimi_cl100k", kFlagCases);
}
TEST(TokenizerLiveTest, O200kMatchesTiktoken) { RunTiktoken("o200k_base"); }
TEST(TokenizerLiveTest, Cl100kMatchesTiktoken) { RunTiktoken("cl100k_base"); }

}  // namespace
}  // namespace strata
