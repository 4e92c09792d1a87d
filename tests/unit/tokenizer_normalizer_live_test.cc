// Live exactness test of the normalizers, decoders, Metaspace pre-tokenizer
// and byte-fallback BPE against the reference `tokenizers` library:
// tests/text/gen_normalizer_cases.py writes the reference's output
//   - of each normalizer on every code point and on 5,000 varied strings
//     (many scripts, compatibility characters such as ﬁ ① ｶ, full-width
//     forms, Turkish İ, Greek final sigma, emoji, combining marks), and
//   - of small tokenizer.json files it trains (a byte-level BPE under NFKC +
//     Lowercase; sentencepiece-style BPEs with byte fallback under Metaspace
//     or Llama-2's Prepend + Replace, decoded by Replace/ByteFallback/Fuse/
//     Strip or Metaspace): ids and decodes of 5,000 strings, and decodes of
//     2,500 random id sequences.
// Every output must be equal. A missing reference venv is a failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace strata {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kCases = 5000;
constexpr int kMaxReported = 5;

std::string Quoted(const std::string& s) { return Json(s).dump(); }
std::string Ids(const std::vector<int32_t>& ids) { return "[" + absl::StrJoin(ids, ",") + "]"; }

// Runs the harness with `args`; returns the JSONL path, or "" after recording
// a failure. `workdir` (created) receives the trained tokenizer files.
std::string RunHarness(const std::string& name, const std::string& args, std::string* workdir) {
  const std::string python = STRATA_REF_PYTHON;
  if (!fs::exists(python)) {
    ADD_FAILURE() << "reference Python " << python
                  << " is missing: run tools/setup.sh (it creates .venv-ref)";
    return "";
  }
  const std::string out = (fs::temp_directory_path() /
                           absl::StrCat("strata_norm_cases_", name, "_", getpid(), ".jsonl"))
                              .string();
  *workdir = out + ".dir";
  fs::create_directories(*workdir);
  const std::string cmd =
      absl::StrCat("'", python, "' '", STRATA_SOURCE_DIR, "/tests/text/gen_normalizer_cases.py' ",
                   args, " --workdir '", *workdir, "' --out '", out, "' 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << cmd;
    return "";
  }
  std::string log;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) log.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    ADD_FAILURE() << "reference harness failed (exit " << rc << "): " << cmd << "\n" << log;
    return "";
  }
  return out;
}

void Cleanup(const std::string& jsonl, const std::string& workdir) {
  fs::remove(jsonl);
  fs::remove_all(workdir);
}

// Our normalizer on every code point, in the harness's chunks.
int CheckCodePoints(const text::Normalizer& n, const Json& rec, const std::string& sep,
                    size_t chunk, std::string* report, int* reported) {
  absl::flat_hash_map<uint32_t, std::string> changed;
  for (const Json& e : rec["changed"]) changed[e[0].get<uint32_t>()] = e[1].get<std::string>();
  std::vector<uint32_t> cps;
  char32_t sep_cp;
  text::DecodeUtf8(sep, 0, &sep_cp);
  for (uint32_t c = 0; c < 0x110000; ++c) {
    if ((c >= 0xD800 && c < 0xE000) || c == sep_cp) continue;
    cps.push_back(c);
  }
  int mismatches = 0;
  for (size_t k = 0; k < cps.size(); k += chunk) {
    const size_t end = std::min(cps.size(), k + chunk);
    std::string in;
    for (size_t i = k; i < end; ++i) {
      if (i > k) in += sep;
      text::AppendUtf8(cps[i], &in);
    }
    Status st = n.Normalize(&in);
    if (!st.ok()) {
      ++mismatches;
      *report += absl::StrCat("chunk at U+", absl::Hex(cps[k]), ": ", st.ToString(), "\n");
      continue;
    }
    std::vector<std::string> parts = absl::StrSplit(in, sep);
    if (parts.size() != end - k) {
      ++mismatches;
      *report += absl::StrCat("chunk at U+", absl::Hex(cps[k]), ": ", parts.size(), " parts, want ",
                              end - k, "\n");
      continue;
    }
    for (size_t i = k; i < end; ++i) {
      auto it = changed.find(cps[i]);
      std::string want;
      if (it != changed.end()) {
        want = it->second;
      } else {
        text::AppendUtf8(cps[i], &want);
      }
      if (parts[i - k] != want) {
        ++mismatches;
        if ((*reported)++ < kMaxReported) {
          *report +=
              absl::StrCat(rec["name"].get<std::string>(), " U+", absl::StrFormat("%04X", cps[i]),
                           ": want ", Quoted(want), " got ", Quoted(parts[i - k]), "\n");
        }
      }
    }
  }
  return mismatches;
}

TEST(TokenizerNormalizerLiveTest, NormalizersMatchReferenceOnEveryCodePointAndString) {
  std::string workdir;
  const std::string jsonl =
      RunHarness("normalizers", absl::StrCat("--mode normalizers --count ", kCases), &workdir);
  if (jsonl.empty()) return;
  std::ifstream in(jsonl);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << jsonl << " is empty";
  const Json header = Json::parse(line);
  const std::string sep = header["sep"].get<std::string>();
  const size_t chunk = header["chunk"].get<size_t>();
  int codepoint_sets = 0, string_sets = 0;
  while (std::getline(in, line)) {
    const Json rec = Json::parse(line);
    const std::string name = rec["name"].get<std::string>();
    auto n = text::Normalizer::FromJson(rec["normalizer"], "normalizer " + name);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_NE(*n, nullptr);
    std::string report;
    int reported = 0;
    if (rec["kind"] == "codepoints") {
      ++codepoint_sets;
      const int bad = CheckCodePoints(**n, rec, sep, chunk, &report, &reported);
      EXPECT_EQ(bad, 0) << name << ": " << bad << " code points differ; first ones:\n" << report;
      std::printf("%s: every code point, %d mismatches (%zu changed by the reference)\n",
                  name.c_str(), bad, rec["changed"].size());
      continue;
    }
    ++string_sets;
    int bad = 0;
    for (const Json& c : rec["cases"]) {
      std::string s = c[0].get<std::string>();
      const std::string want = c[1].get<std::string>();
      Status st = (*n)->Normalize(&s);
      if (!st.ok() || s != want) {
        ++bad;
        if (reported++ < kMaxReported) {
          report += absl::StrCat(Quoted(c[0].get<std::string>()), "\n  want ", Quoted(want),
                                 "\n  got  ", st.ok() ? Quoted(s) : st.ToString(), "\n");
        }
      }
    }
    EXPECT_EQ(rec["cases"].size(), static_cast<size_t>(kCases)) << name;
    EXPECT_EQ(bad, 0) << name << ": " << bad << " strings differ; first ones:\n" << report;
    std::printf("%s: %zu strings, %d mismatches\n", name.c_str(), rec["cases"].size(), bad);
  }
  EXPECT_EQ(codepoint_sets, 7);
  EXPECT_EQ(string_sets, 14);
  Cleanup(jsonl, workdir);
}

void RunTokenizerVariant(const std::string& variant) {
  std::string workdir;
  const std::string jsonl = RunHarness(
      variant, absl::StrCat("--mode tokenizer --variant ", variant, " --count ", kCases), &workdir);
  if (jsonl.empty()) return;
  std::ifstream in(jsonl);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << jsonl << " is empty";
  const Json header = Json::parse(line);
  auto tok = Tokenizer::FromDirectory(header["dir"].get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status();
  int cases = 0, random_cases = 0, id_mismatches = 0, decode_mismatches = 0, reported = 0;
  std::string report;
  auto note = [&](const std::string& what) {
    if (reported++ < kMaxReported) report += what + "\n";
  };
  auto check_decode = [&](const std::vector<int32_t>& ids, bool skip, const std::string& want,
                          const std::string& what) {
    DecodeOptions o;
    o.skip_special_tokens = skip;
    auto got = (*tok)->Decode(ids, o);
    if (!got.ok() || *got != want) {
      ++decode_mismatches;
      note(absl::StrCat(what, " of ", Ids(ids), "\n  want ", Quoted(want), "\n  got  ",
                        got.ok() ? Quoted(*got) : got.status().ToString()));
    }
  };
  while (std::getline(in, line)) {
    const Json c = Json::parse(line);
    if (c.contains("rand_ids")) {
      ++random_cases;
      const auto ids = c["rand_ids"].get<std::vector<int32_t>>();
      check_decode(ids, false, c["decode"].get<std::string>(), "random decode");
      check_decode(ids, true, c["decode_skip"].get<std::string>(), "random decode_skip");
      continue;
    }
    ++cases;
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    auto got = (*tok)->Encode(text);
    if (!got.ok() || *got != want) {
      ++id_mismatches;
      note(absl::StrCat("case ", cases, " text=", Quoted(text), "\n  want ", Ids(want), "\n  got  ",
                        got.ok() ? Ids(*got) : got.status().ToString()));
    }
    check_decode(want, false, c["decode"].get<std::string>(), "decode");
    check_decode(want, true, c["decode_skip"].get<std::string>(), "decode_skip");
    const auto sl = c["slice"].get<std::vector<size_t>>();
    check_decode(std::vector<int32_t>(want.begin() + sl[0], want.begin() + sl[1]), false,
                 c["slice_decode"].get<std::string>(), "slice_decode");
  }
  Cleanup(jsonl, workdir);
  EXPECT_EQ(cases, kCases) << variant;
  EXPECT_EQ(random_cases, kCases / 2) << variant;
  EXPECT_EQ(id_mismatches, 0) << variant << ": " << id_mismatches << " of " << cases
                              << " strings encode differently; first ones:\n"
                              << report;
  EXPECT_EQ(decode_mismatches, 0) << variant << ": " << decode_mismatches
                                  << " decodes differ; first ones:\n"
                                  << report;
  std::printf("%s: %d strings, %d random id sequences, %d id mismatches, %d decode mismatches\n",
              variant.c_str(), cases, random_cases, id_mismatches, decode_mismatches);
}

// Byte-level BPE trained under NFKC + Lowercase, with a normalized added token
// written in full-width capitals.
TEST(TokenizerNormalizerLiveTest, NfkcLowercaseByteLevelBpeMatchesReference) {
  RunTokenizerVariant("nfkc_lower");
}
// Mistral / Llama-2 (legacy=False) layout: Metaspace pre-tokenizer with
// prepend_scheme "first" and no split; byte_fallback + fuse_unk BPE; decoder
// Replace(▁→' '), ByteFallback, Fuse, Strip(' ', 1, 0).
TEST(TokenizerNormalizerLiveTest, MetaspaceFirstByteFallbackBpeMatchesReference) {
  RunTokenizerVariant("metaspace_first");
}
// Llama-2 (legacy) layout: Prepend(▁) + Replace(' '→▁) normalizers, no
// pre-tokenizer, the same byte-fallback BPE and decoder.
TEST(TokenizerNormalizerLiveTest, LlamaLegacyByteFallbackBpeMatchesReference) {
  RunTokenizerVariant("llama_legacy");
}
// Metaspace split into words and always prepended, Metaspace decoder, under
// Nmt + NFKD + StripAccents + Lowercase; BOS from tokenizer_config.json.
TEST(TokenizerNormalizerLiveTest, MetaspaceAlwaysNfkdBpeMatchesReference) {
  RunTokenizerVariant("metaspace_always_nfkd");
}

}  // namespace
}  // namespace strata
