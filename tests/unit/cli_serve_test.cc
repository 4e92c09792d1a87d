// `strata generate --prompts-jsonl` and `strata bench serve` on the demo
// model: one JSON array per input line in input order, the same greedy ids
// whatever the concurrency, prefill chunk or prefix cache, the same ids as
// the single-prompt mode; bench serve's JSON report; errors naming the line;
// the tuning --options flag (checked, listed, refused where nothing loads).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "model/demo_model.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kStrata = STRATA_BINARY_DIR "/tools/strata";

// Each test case runs as its own process: its own directory.
fs::path WorkDir() {
  return fs::path(STRATA_BINARY_DIR) / "testdata" /
         ("cli_serve_" + std::to_string(::getpid()) + "_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
};

Result RunCli(const std::string& args) {
  const std::string cmd = kStrata + " " + args + " 2>" + (WorkDir() / "stderr.txt").string();
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Stderr() {
  std::ifstream f(WorkDir() / "stderr.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class CliServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kStrata)) << kStrata << " is not built";
    fs::create_directories(WorkDir());
    model_ = (WorkDir() / "demo").string();
    ASSERT_TRUE(WriteDemoKimiLinearModel(model_).ok());
    prompts_ = (WorkDir() / "prompts.jsonl").string();
    std::ofstream f(prompts_);
    f << "[1, 17, 42, 99, 7]\n[5]\n[300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311]\n"
         "[1, 17, 42, 99, 8, 9]\n[260, 2, 3]\n";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(WorkDir(), ec);
  }

  std::vector<std::vector<int32_t>> Lines(const std::string& out) {
    std::vector<std::vector<int32_t>> v;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line).get<std::vector<int32_t>>());
    return v;
  }

  std::string model_, prompts_;
};

TEST_F(CliServeTest, GenerateIsTheSameForAnyConcurrencyChunkAndCache) {
  const std::string base = "generate --model " + model_ + " --prompts-jsonl " + prompts_ +
                           " --max-new 6 --ignore-eos --threads 1";
  const Result one = RunCli(base + " --concurrency 1 --no-prefix-cache");
  ASSERT_EQ(one.exit_code, 0) << Stderr();
  const auto want = Lines(one.out);
  ASSERT_EQ(want.size(), 5u);
  for (const auto& ids : want) EXPECT_EQ(ids.size(), 6u);
  for (const std::string extra : {" --concurrency 4 --prefill-chunk 3", " --concurrency 5 --prefill-chunk 1",
                                  " --concurrency 2 --no-prefix-cache --max-batch 1",
                                  // Accepted on the CPU, whose kernels always are invariant.
                                  " --concurrency 3 --prefill-chunk 2 --batch-invariant"}) {
    const Result r = RunCli(base + extra);
    ASSERT_EQ(r.exit_code, 0) << extra << ": " << Stderr();
    EXPECT_EQ(Lines(r.out), want) << extra;
  }
  // The single-prompt mode agrees on the first line.
  const std::string npy = (WorkDir() / "p.npy").string();
  const std::vector<int32_t> p = {1, 17, 42, 99, 7};
  const std::vector<int64_t> shape = {5};
  ASSERT_TRUE(WriteNpyInt32(npy, shape, p).ok());
  const Result single = RunCli("generate --model " + model_ + " --tokens " + npy + " --max-new 6 --ignore-eos");
  ASSERT_EQ(single.exit_code, 0) << Stderr();
  std::string expect;
  for (size_t i = 0; i < want[0].size(); ++i) expect += (i ? " " : "") + std::to_string(want[0][i]);
  EXPECT_EQ(single.out, expect + "\n");
}

TEST_F(CliServeTest, GenerateNamesTheBadLine) {
  std::ofstream(prompts_) << "[1, 2]\n[1, \"x\"]\n";
  const Result r = RunCli("generate --model " + model_ + " --prompts-jsonl " + prompts_ + " --max-new 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(Stderr().find(":2"), std::string::npos) << Stderr();
  EXPECT_EQ(r.exit_code, 1) << "a bad line is bad input, not a usage error";
  // Usage errors, with a file that reads.
  std::ofstream(prompts_) << "[1, 2]\n";
  EXPECT_EQ(RunCli("generate --prompts-jsonl " + prompts_).exit_code, 2);  // no --model
  EXPECT_EQ(RunCli("generate --model " + model_ + " --prompts-jsonl " + prompts_ + " --concurrency 0").exit_code, 2);
}

TEST_F(CliServeTest, BenchServeReportsThroughputLatencyAndCacheHits) {
  const Result r = RunCli("bench serve --model " + model_ +
                          " --input-len 24 --output-len 4 --requests 6 --concurrency 1 --shared-prefix 16"
                          " --prefix-block 8 --json --threads 1");
  ASSERT_EQ(r.exit_code, 0) << Stderr();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["ttft_ms"]["p50"].get<double>(), 0);
  EXPECT_GE(j["ttft_ms"]["p99"].get<double>(), j["ttft_ms"]["p50"].get<double>());
  EXPECT_GT(j["tpot_ms"]["p50"].get<double>(), 0);
  // One at a time: requests 2..6 each restore the shared 16 tokens (the
  // first one's snapshot at 2 blocks of 8) out of 24.
  EXPECT_EQ(j["prefix_hit_tokens"], 5 * 16);
  EXPECT_NEAR(j["prefix_cache_hit_rate"].get<double>(), 5.0 * 16 / (6 * 24), 1e-9);
  const Result table = RunCli("bench serve --model " + model_ +
                              " --input-len 8 --output-len 2 --requests 2 --concurrency 2 --threads 1");
  ASSERT_EQ(table.exit_code, 0) << Stderr();
  EXPECT_NE(table.out.find("output tokens/s"), std::string::npos);
  EXPECT_NE(table.out.find("prefix cache hit"), std::string::npos);
  EXPECT_EQ(table.out.find("scheduler phases"), std::string::npos);  // only with --verbose
}

TEST_F(CliServeTest, BenchServeVerboseShowsWhereTheSchedulersTimeWent) {
  const Result r = RunCli("bench serve --model " + model_ +
                          " --input-len 8 --output-len 6 --requests 3 --concurrency 3 --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << Stderr();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["phases"]["iterations"].get<int64_t>(), 0);
  EXPECT_GT(j["phases"]["decode"]["total_ms"].get<double>(), 0);
  EXPECT_GT(j["phases"]["prefill"]["total_ms"].get<double>(), 0);
  EXPECT_EQ(j["device_sampled_rows"], 0);  // a CPU model samples on the host
  EXPECT_EQ(j["host_sampled_rows"].get<int64_t>(), 3 * 5);
  const Result table = RunCli("bench serve --model " + model_ +
                              " --input-len 8 --output-len 2 --requests 2 --concurrency 2 --threads 1 --verbose"
                              " --prefill-chunk 4 --prefill-while-decoding 2");
  ASSERT_EQ(table.exit_code, 0) << Stderr();
  for (const char* phase : {"scheduler phases", "schedule", "prefill", "decode", "sample", "emit"}) {
    EXPECT_NE(table.out.find(phase), std::string::npos) << phase;
  }
  EXPECT_EQ(RunCli("bench serve --model " + model_ + " --input-len 8 --output-len 2 --prefill-while-decoding 0")
                .exit_code,
            2);
}

TEST_F(CliServeTest, OptionsAreCheckedListedAndOnlyForCommandsThatLoadAModel) {
  const Result list = RunCli("info --options");
  ASSERT_EQ(list.exit_code, 0) << Stderr();
  for (const char* name : {"cuda.pdl", "moe.gemm", "kda.prefill", "step.branches", "rollback"}) {
    EXPECT_NE(list.out.find(name), std::string::npos) << name;
  }
  const Result mma = RunCli("info --options moe.gemm=mma");
  ASSERT_EQ(mma.exit_code, 0) << Stderr();
  EXPECT_NE(mma.out.find("--options: moe.gemm=mma"), std::string::npos) << mma.out;

  const std::string base = "generate --model " + model_ + " --prompts-jsonl " + prompts_ +
                           " --max-new 3 --ignore-eos --threads 1";
  const Result plain = RunCli(base);
  ASSERT_EQ(plain.exit_code, 0) << Stderr();
  const Result tuned = RunCli(base + " --options cuda.pdl=0,rollback=moe");
  ASSERT_EQ(tuned.exit_code, 0) << Stderr();
  EXPECT_EQ(tuned.out, plain.out);
  EXPECT_NE(Stderr().find("no tuning option applies on the CPU"), std::string::npos) << Stderr();

  // The library checks the value at load (the ABI commands cannot): a
  // failed load, naming it.
  EXPECT_EQ(RunCli(base + " --options moe.gemm=cublas").exit_code, 1);
  EXPECT_NE(Stderr().find("options: moe.gemm=cublas: not a choice"), std::string::npos) << Stderr();
  EXPECT_EQ(RunCli(base + " --options").exit_code, 2);
  EXPECT_NE(Stderr().find("--options needs a value"), std::string::npos) << Stderr();
  EXPECT_EQ(RunCli("tokenize --model " + model_ + " --options cuda.pdl=0").exit_code, 2);
  EXPECT_NE(Stderr().find("loads no model"), std::string::npos) << Stderr();
  EXPECT_EQ(RunCli("info --options step.poll=1 --options step.poll=0").exit_code, 2);
  const std::string bad_env = "STRATA_OPTIONS=step.poll=2 '" + kStrata + "' info --options";
  EXPECT_NE(
      std::system((bad_env + " > /dev/null 2> " + (WorkDir() / "stderr.txt").string()).c_str()), 0);
  EXPECT_NE(Stderr().find("STRATA_OPTIONS: step.poll=2"), std::string::npos) << Stderr();
}

}  // namespace
}  // namespace strata
