// Replays the committed fuzz corpus through the parser as an ordinary unit
// test, so inputs that once crashed it (and the seeds) stay covered in every
// build, with or without clang and libFuzzer.
//
// Naming convention in the corpus: ok_* must parse, bad_* must be rejected,
// anything else (inputs the fuzzer found) only has to be handled safely.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safetensors_header_check.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> CorpusFiles() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(STRATA_FUZZ_CORPUS_DIR)) {
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

TEST(FuzzCorpusReplay, EveryInputIsHandledSafely) {
  const std::vector<fs::path> files = CorpusFiles();
  int ok_seeds = 0, bad_seeds = 0;
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    const std::vector<uint8_t> bytes = Read(p);
    const fuzz::CheckResult r = fuzz::CheckSafetensorsHeader(bytes.data(), bytes.size());
    EXPECT_EQ(r.violation, "") << name;
    if (StartsWith(name, "ok_")) {
      EXPECT_TRUE(r.parsed_ok) << name << " is a known-good seed but was rejected";
      ++ok_seeds;
    } else if (StartsWith(name, "bad_")) {
      EXPECT_FALSE(r.parsed_ok) << name << " is a malformed seed but was accepted";
      ++bad_seeds;
    }
  }
  // Guards against an empty or misplaced corpus making this test vacuous.
  EXPECT_GE(ok_seeds, 5);
  EXPECT_GE(bad_seeds, 10);
}

TEST(FuzzCorpusReplay, KnownGoodSeedsHaveTheExpectedTables) {
  const fs::path dir(STRATA_FUZZ_CORPUS_DIR);
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
