// End-to-end check of the shipped pipeline on the embedded default model: the
// real `strata-agent` binary (C ABI, chat template, tool-call parser, tool
// loop, the C calculator) runs the trained strata-demo weights on the CPU and
// must answer arithmetic questions with the right number. The expected values
// are computed here, independently of the agent's calculator, and the answer
// line (after the last tool result) must contain that number.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

namespace fs = std::filesystem;

const std::string kAgent = STRATA_BINARY_DIR "/samples/strata-agent";
const std::string kModel = STRATA_SOURCE_DIR "/models/strata-demo";

struct Question {
  const char* text;
  double expected;
};

// Worded like, but not copied from, the generated training and held-out sets.
const Question kQuestions[] = {
    {"What is 12.5 * 8 - 3?", 12.5 * 8 - 3},
    {"Compute (37.2 + 815) * 6.", (37.2 + 815) * 6},
    {"Can you tell me what 64.8 * 2.5 equals?", 64.8 * 2.5},
    {"Subtract 48.75 from 1290.", 1290 - 48.75},
    {"What is the sum of 417 and 3.06?", 417 + 3.06},
    {"Evaluate 91 / 4 for me.", 91.0 / 4},
    {"3 / 8 - 25.5 = ?", 3.0 / 8 - 25.5},
    {"What is 7283 * 19?", 7283.0 * 19},
};

struct AgentRun {
  int status = -1;
  std::string out;
};

AgentRun RunAgent(const std::string& question, const fs::path& sandbox) {
  std::string quoted;
  for (char c : question) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  const std::string cmd = kAgent + " --model '" + kModel + "' --sandbox '" + sandbox.string() +
                          "' --question '" + quoted + "' 2>&1";
  AgentRun run;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) run.out.append(buf, n);
  run.status = pclose(p);
  return run;
}

// The text after the last "[tool] ... -> result" line.
std::string AnswerAfterTools(const std::string& out) {
  size_t pos = 0;
  for (size_t at = out.find("[tool] "); at != std::string::npos; at = out.find("\n[tool] ", at + 1)) {
    pos = out.find('\n', at + 1);
  }
  return pos == std::string::npos ? "" : out.substr(pos);
}

bool ContainsNumber(const std::string& text, double expected) {
  static const std::regex kNumber(R"(-?\d+(\.\d+)?(e[+-]?\d+)?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kNumber); it != std::sregex_iterator(); ++it) {
    const double v = std::stod(it->str());
    if (std::fabs(v - expected) <= 1e-9 * std::max(1.0, std::fabs(expected))) return true;
  }
  return false;
}

TEST(StrataDemoAgentTest, CalculatorQuestionsGetTheRightNumber) {
  ASSERT_TRUE(fs::exists(kAgent)) << kAgent << " was not built";
  ASSERT_TRUE(fs::exists(fs::path(kModel) / "config.json")) << kModel << " is missing";
  const fs::path sandbox = fs::path(STRATA_BINARY_DIR) / "testdata" / ("agent_box_" + std::to_string(::getpid()));
  fs::create_directories(sandbox);
  for (const Question& q : kQuestions) {
    SCOPED_TRACE(q.text);
    const AgentRun run = RunAgent(q.text, sandbox);
    ASSERT_EQ(run.status, 0) << run.out;
    EXPECT_NE(run.out.find("[tool] calculator {\"expression\":"), std::string::npos)
        << "no calculator call:\n" << run.out;
    EXPECT_TRUE(ContainsNumber(AnswerAfterTools(run.out), q.expected))
        << "expected " << q.expected << " in the answer:\n" << run.out;
  }
  fs::remove_all(sandbox);
}

// A question about the sandbox is answered through list_files/read_file, and
// the file's text reaches the answer.
TEST(StrataDemoAgentTest, FileQuestionReadsTheSandbox) {
  const fs::path sandbox = fs::path(STRATA_BINARY_DIR) / "testdata" / ("agent_files_" + std::to_string(::getpid()));
  fs::create_directories(sandbox / "notes");
  {
    FILE* f = std::fopen((sandbox / "notes" / "plan.txt").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("The green lamp is next to the quiet window.", f);
    std::fclose(f);
  }
  const AgentRun run = RunAgent("What is in the file notes/plan.txt?", sandbox);
  ASSERT_EQ(run.status, 0) << run.out;
  EXPECT_NE(run.out.find("[tool] read_file {\"path\":\"notes/plan.txt\"}"), std::string::npos) << run.out;
  EXPECT_NE(AnswerAfterTools(run.out).find("green lamp"), std::string::npos) << run.out;
  fs::remove_all(sandbox);
}

}  // namespace
