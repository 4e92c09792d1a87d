// `strata run` chatting, run as built: the demo (token ids, then one chat
// turn), a one-shot --prompt turn on a model directory with tokenizer and
// chat template, the stdin REPL (/reset, /quit), and the refusal to chat on a
// directory without tokenizer, and a chat saved by one process and continued
// by another (--save-session, --load-session). The demo model has random weights, so the
// checks are about the output's shape, not its words.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kStrata = STRATA_BINARY_DIR "/tools/strata";

// ctest runs each test case as its own process, in parallel: every process
// works in its own directory, or one rewrites the demo model another is loading.
fs::path WorkDir() {
  return fs::path(STRATA_BINARY_DIR) / "testdata" / ("cli_chat_" + std::to_string(::getpid()));
}

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs the CLI with `args`, feeding `input` on stdin.
Result RunCli(const std::string& args, const std::string& input = "") {
  const fs::path in = WorkDir() / "stdin.txt";
  fs::create_directories(in.parent_path());
  std::ofstream(in) << input;
  const std::string cmd = kStrata + " " + args + " < " + in.string() + " 2>&1";
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

std::string DemoDir() { return (WorkDir() / "demo").string(); }

class CliChatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(kStrata)) << kStrata << " is not built";
    // The demo writes its model, tokenizer and chat template here, runs the
    // token-id generation and then one chat turn.
    demo_ = RunCli("run --demo-dir " + DemoDir() + " --max-new 8 --threads 1");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(WorkDir(), ec);
  }
  static Result demo_;
};
Result CliChatTest::demo_;

TEST_F(CliChatTest, DemoRunsTokensThenAChatTurn) {
  ASSERT_EQ(demo_.exit_code, 0) << demo_.out;
  EXPECT_THAT(demo_.out, ::testing::HasSubstr("RANDOM weights"));
  EXPECT_THAT(demo_.out, ::testing::ContainsRegex("generated:( [0-9]+)+\n"));
  EXPECT_THAT(demo_.out, ::testing::HasSubstr("\nuser: Hello! What can you do?\nassistant: "));
  EXPECT_THAT(demo_.out, ::testing::ContainsRegex("\nfinish: [a-z_]+ after [0-9]+ tokens \\([0-9.]+ tokens/s\\)\n"));
  EXPECT_TRUE(fs::exists(fs::path(DemoDir()) / "tokenizer.json"));
}

TEST_F(CliChatTest, OneShotPromptOnAModelDirectory) {
  ASSERT_EQ(demo_.exit_code, 0) << demo_.out;
  const Result r = RunCli("run --model " + DemoDir() + " --prompt 'What is 2+2?' --max-new 6 --threads 1 --no-think");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Exactly one turn: the user line, the streamed reply, the finish line.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "\nuser: What is 2\\+2\\?\nassistant: [^\n]*(\n[^\n]*)*\nfinish: [a-z_]+ after [1-6] tokens"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("generated:")));
  EXPECT_EQ(r.out.find("assistant: "), r.out.rfind("assistant: "));
}

TEST_F(CliChatTest, ReplReadsStdinLines) {
  ASSERT_EQ(demo_.exit_code, 0) << demo_.out;
  const Result r = RunCli("run --model " + DemoDir() + " --max-new 4 --threads 1 --system 'Be brief.'",
                       "Hi\n\n/reset\nBye\n/quit\nnot read\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("user: Hi\nassistant: "));
  EXPECT_THAT(r.out, ::testing::HasSubstr("(conversation reset)\nuser: Bye\nassistant: "));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("not read")));
  size_t turns = 0;
  for (size_t at = r.out.find("\nfinish: "); at != std::string::npos; at = r.out.find("\nfinish: ", at + 1)) ++turns;
  EXPECT_EQ(turns, 2u);
  // End of input ends the REPL as /quit does.
  const Result eof = RunCli("run --model " + DemoDir() + " --max-new 2 --threads 1", "Hi\n");
  EXPECT_EQ(eof.exit_code, 0) << eof.out;
}

// The replies of a run, in order (the text between "assistant: " and its finish line).
std::vector<std::string> Replies(const std::string& out) {
  std::vector<std::string> replies;
  for (size_t at = out.find("assistant: "); at != std::string::npos; at = out.find("assistant: ", at + 1)) {
    const size_t end = out.find("\nfinish: ", at);
    if (end == std::string::npos) break;
    replies.push_back(out.substr(at, end - at));
  }
  return replies;
}

TEST_F(CliChatTest, SavedSessionContinuesInAnotherProcess) {
  ASSERT_EQ(demo_.exit_code, 0) << demo_.out;
  const std::string model = "run --model " + DemoDir() + " --max-new 6 --threads 1 --system 'Be brief.'";
  const Result one = RunCli(model, "Hi\nAnd then?\n");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const std::vector<std::string> want = Replies(one.out);
  ASSERT_EQ(want.size(), 2u) << one.out;

  const std::string file = (WorkDir() / "chat.session").string();
  const Result first = RunCli(model + " --prompt Hi --save-session " + file);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_THAT(first.out, ::testing::HasSubstr("session: saved " + file));
  const Result second = RunCli(model + " --prompt 'And then?' --load-session " + file);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_THAT(second.out, ::testing::HasSubstr("session: loaded " + file));
  ASSERT_EQ(Replies(first.out).size(), 1u) << first.out;
  ASSERT_EQ(Replies(second.out).size(), 1u) << second.out;
  EXPECT_EQ(Replies(first.out)[0], want[0]);
  EXPECT_EQ(Replies(second.out)[0], want[1]);

  // A damaged file is refused, naming it.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const Result bad = RunCli(model + " --prompt 'And then?' --load-session " + file);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_THAT(bad.out, ::testing::HasSubstr(file));
  EXPECT_THAT(bad.out, ::testing::HasSubstr("SHA-256"));
  // Sessions are chat sessions.
  const Result tokens = RunCli("run --model " + DemoDir() + " --tokens --save-session " + file);
  EXPECT_EQ(tokens.exit_code, 2) << tokens.out;
}

TEST_F(CliChatTest, DirectoryWithoutTokenizerCannotChat) {
  ASSERT_EQ(demo_.exit_code, 0) << demo_.out;
  const fs::path bare = WorkDir() / "bare";
  fs::remove_all(bare);
  fs::create_directories(bare);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(DemoDir()) / f, bare / f);
  const Result r = RunCli("run --model " + bare.string() + " --prompt Hi --threads 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("cannot chat"));
  // Without --prompt it generates token ids, as before.
  const Result ids = RunCli("run --model " + bare.string() + " --max-new 4 --threads 1");
  EXPECT_EQ(ids.exit_code, 0) << ids.out;
  EXPECT_THAT(ids.out, ::testing::ContainsRegex("generated:( [0-9]+)+\n"));
}

}  // namespace
}  // namespace strata
