// The built `strata` binary on hostile command lines (issue 27 point 2):
// missing values, unknown flags and stray arguments, numbers beyond their
// range or beyond 64 bits, files that do not exist, directories and FIFOs
// where a file belongs, and file contents that are not what the command
// reads. Every run must end with exit code 1 (the work failed) or 2 (the
// command line is wrong) and a message "strata <command>: error: ..." naming
// the flag or file, never with a signal; and a file too large for memory is
// "out of memory", exit 1, not an abort.
//
// The model is one the binary writes itself (`strata make-demo-model`); the
// tokenizer is the Qwen3 one of the text data.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kStrata = STRATA_BINARY_DIR "/tools/strata";
const std::string kQwen3 = STRATA_TEXT_DATA_DIR "/tokenizers/qwen3";

struct Outcome {
  int exit_code = -1;  // -1 when a signal ended the run
  int signal = 0;
  std::string out, err;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliHostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("strata_cli_hostile_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const Outcome made = Run({"make-demo-model", "--out", Path("model")});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }

  static std::string Write(const std::string& name, const std::string& data) {
    std::ofstream(Path(name), std::ios::binary) << data;
    return Path(name);
  }

  // Runs `strata args...` (no shell), stdout and stderr to files.
  static Outcome Run(const std::vector<std::string>& args, const std::string& shell_prefix = "") {
    const std::string out = Path("stdout.txt"), err = Path("stderr.txt");
    std::vector<std::string> argv_s;
    if (shell_prefix.empty()) {
      argv_s.push_back(kStrata);
      argv_s.insert(argv_s.end(), args.begin(), args.end());
    } else {
      // `shell_prefix` runs first in a shell (e.g. a ulimit); the command is exec'd.
      std::string line = shell_prefix + "; exec '" + kStrata + "'";
      for (const std::string& a : args) line += " '" + a + "'";
      argv_s = {"/bin/sh", "-c", line};
    }
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    Outcome o;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << rc;
      return o;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
    o.out = ReadAll(out);
    o.err = ReadAll(err);
    return o;
  }

  // `strata args...` must exit with `code` and an error naming `needle`,
  // in a message that starts "strata <command>: error: " (or "strata: " when
  // there is no command).
  static void ExpectFails(const std::vector<std::string>& args, int code, const std::string& needle) {
    const Outcome o = Run(args);
    std::string shown = "strata";
    for (const std::string& a : args) shown += " " + a;
    SCOPED_TRACE(shown);
    EXPECT_EQ(o.signal, 0) << "killed by signal " << o.signal << "; stderr: " << o.err;
    EXPECT_EQ(o.exit_code, code) << o.err;
    const std::string prefix = args.empty() || args[0].rfind("--", 0) == 0 ? "" : "strata " + args[0] + ": error: ";
    if (!prefix.empty() && !(args.size() >= 2 && args[0] == "bench" && args[1] == "serve")) {
      EXPECT_THAT(o.err, StartsWith(prefix));
    }
    EXPECT_THAT(o.err, HasSubstr(needle));
    EXPECT_THAT(o.err, Not(HasSubstr("internal error")));
  }

  static fs::path* dir_;
};

fs::path* CliHostileTest::dir_ = nullptr;

const std::vector<std::string> kCommands = {"run",      "generate",   "info",     "logits", "bench",
                                            "tokenize", "detokenize", "template", "make-demo-model"};

TEST_F(CliHostileTest, NoOrUnknownCommand) {
  Outcome o = Run({});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("usage: strata <command>"));
  for (const char* bad : {"nope", "--bogus", "", "-x"}) {
    o = Run({bad});
    EXPECT_EQ(o.exit_code, 2) << bad;
    EXPECT_THAT(o.err, HasSubstr(std::string("unknown command '") + bad + "'"));
  }
}

TEST_F(CliHostileTest, UnknownFlagsStrayArgumentsAndMissingValues) {
  for (const std::string& cmd : kCommands) {
    ExpectFails({cmd, "--bogus"}, 2, "unknown flag --bogus");
    ExpectFails({cmd, "--bogus=1"}, 2, "unknown flag --bogus");
    ExpectFails({cmd, "stray"}, 2, "unexpected argument 'stray'");
    ExpectFails({cmd, "--"}, 2, "unexpected argument '--'");
    ExpectFails({cmd, "--help=1"}, 2, "--help takes no value");
    const Outcome help = Run({cmd, "--help"});
    EXPECT_EQ(help.exit_code, 0) << cmd << ": " << help.err;
  }
  ExpectFails({"bench", "serve", "--bogus"}, 2, "unknown flag --bogus");
  ExpectFails({"tokenize", "--model"}, 2, "--model needs a value");
  ExpectFails({"generate", "--model", Path("model"), "--tokens"}, 2, "--tokens needs a value");
  ExpectFails({"tokenize", "--model", kQwen3, "--model", kQwen3, "--jsonl", "x"}, 2, "--model given twice");
  ExpectFails({"tokenize", "--jsonl", "x"}, 2, "--model is required");
  ExpectFails({"tokenize", "--model=", "--jsonl", "x"}, 2, "--model is required");
  ExpectFails({"template", "--model", kQwen3}, 2, "--conversation is required");
  ExpectFails({"logits", "--model", Path("model"), "--tokens", "t.npy"}, 2, "--out is required");
  ExpectFails({"make-demo-model"}, 2, "--out is required");
  ExpectFails({"generate", "--model", Path("model"), "--tokens", "t.npy", "--device", "gpu"}, 2,
              "--device: expected cpu, cuda or auto, got 'gpu'");
  ExpectFails({"info", "--model", Path("model"), "--load-format", "zip"}, 2, "--load-format");
}

TEST_F(CliHostileTest, NumbersOutOfRange) {
  const std::vector<std::string> gen = {"generate", "--model", Path("model"), "--tokens", Path("none.npy")};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = gen;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::string huge = "99999999999999999999999999";
  ExpectFails(with({"--max-new", huge}), 2, "--max-new: " + huge + " is outside [1, 1048576]");
  ExpectFails(with({"--max-new", "-" + huge}), 2, "is outside");
  ExpectFails(with({"--max-new", "0"}), 2, "--max-new: 0 is outside");
  ExpectFails(with({"--max-new", "-1"}), 2, "--max-new: -1 is outside");
  ExpectFails(with({"--max-new", "1e3"}), 2, "--max-new: expected an integer, got '1e3'");
  ExpectFails(with({"--max-new", ""}), 2, "--max-new: expected an integer");
  ExpectFails(with({"--max-new", "12abc"}), 2, "expected an integer");
  ExpectFails(with({"--threads", "99999999"}), 2, "--threads: 99999999 is outside");
  ExpectFails(with({"--seed", "-1"}), 2, "--seed: -1 is outside");
  ExpectFails(with({"--seed", huge}), 2, "--seed: " + huge + " is outside");
  ExpectFails(with({"--top-k", "3000000000"}), 2, "--top-k");
  for (const char* t : {"1e999", "-1", "nan", "inf", "x"}) ExpectFails(with({"--temperature", t}), 2, "--temperature");
  ExpectFails(with({"--top-p", "1.5"}), 2, "--top-p: 1.5 is outside");
  ExpectFails(with({"--stop", "1,x"}), 2, "--stop: expected comma-separated integers");
  ExpectFails(with({"--stop", "99999999999"}), 2, "--stop");
  ExpectFails({"run", "--prompt-len", "0"}, 2, "--prompt-len: 0 is outside");
  ExpectFails({"run", "--max-new", huge}, 2, "--max-new");
  ExpectFails({"make-demo-model", "--out", Path("m2"), "--vocab", huge}, 2, "--vocab");
  ExpectFails({"make-demo-model", "--out", Path("m2"), "--layers", "0"}, 2, "--layers: 0 is outside");
  ExpectFails({"make-demo-model", "--out", Path("m2"), "--dtype", "f8"}, 2, "--dtype");
  ExpectFails({"bench", "--model", Path("model"), "--repeats", "0"}, 2, "--repeats");
  ExpectFails({"bench", "--model", Path("model"), "--batch", "1,x"}, 2, "--batch");
  ExpectFails({"bench", "serve", "--model", Path("model"), "--requests", "0"}, 2, "--requests: 0 is outside");
  ExpectFails({"bench", "serve", "--model", Path("model"), "--concurrency", "99999"}, 2, "--concurrency");
  ExpectFails({"bench", "serve", "--model", Path("model"), "--input-len", huge}, 2, "--input-len");
  ExpectFails({"generate", "--model", Path("model"), "--prompts-jsonl", "x", "--max-new", huge}, 2, "--max-new");
}

TEST_F(CliHostileTest, MissingFilesDirectoriesAndFifos) {
  const std::string missing = Path("missing");
  const std::string a_dir = Path("a_dir");
  fs::create_directories(a_dir);
  const std::string fifo = Path("a_fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string a_file = Write("a_file.txt", "\"hello\"\n");

  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", missing}, 1, missing + ": cannot open");
  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", a_dir}, 1, a_dir + ": is a directory");
  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", fifo}, 1, fifo + ": not a regular file");
  ExpectFails({"tokenize", "--model", missing, "--jsonl", a_file}, 1, missing);
  ExpectFails({"tokenize", "--model", a_file, "--jsonl", a_file}, 1, a_file);
  ExpectFails({"detokenize", "--model", kQwen3, "--jsonl", a_dir}, 1, "is a directory");
  ExpectFails({"template", "--model", kQwen3, "--conversation", missing}, 1, missing + ": cannot open");
  ExpectFails({"template", "--model", kQwen3, "--conversation", a_dir}, 1, a_dir + ": is a directory");
  ExpectFails({"template", "--model", kQwen3, "--conversation", fifo}, 1, "not a regular file");
  ExpectFails({"generate", "--model", Path("model"), "--tokens", missing}, 1, missing);
  ExpectFails({"generate", "--model", Path("model"), "--tokens", a_dir}, 1, a_dir + ": is a directory");
  ExpectFails({"generate", "--model", Path("model"), "--tokens", fifo}, 1, "not a regular file");
  ExpectFails({"generate", "--model", Path("model"), "--prompts-jsonl", a_dir}, 1, "is a directory");
  ExpectFails({"logits", "--model", Path("model"), "--tokens", a_dir, "--out", Path("o.npy")}, 1,
              "is a directory");
  ExpectFails({"info", "--model", missing}, 1, missing);
  ExpectFails({"info", "--model", a_file}, 1, a_file);
  ExpectFails({"run", "--model", missing, "--prompt", "hi"}, 1, missing);
  ExpectFails({"run", "--model", a_file}, 1, a_file);
  ExpectFails({"bench", "serve", "--model", missing, "--requests", "1"}, 1, missing);
  ExpectFails({"make-demo-model", "--out", a_file}, 1, a_file);
  // A model directory whose files are directories.
  const std::string hollow = Path("hollow");
  fs::create_directories(fs::path(hollow) / "config.json");
  ExpectFails({"info", "--model", hollow}, 1, "config.json: is a directory");
}

TEST_F(CliHostileTest, FileContentsThatAreNotWhatTheCommandReads) {
  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", Write("bad_utf8.jsonl", "\"a\xff\"\n")}, 1,
              "bad_utf8.jsonl:1:");
  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", Write("deep.jsonl", std::string(100000, '[') + "\n")}, 1,
              "deep.jsonl:1: JSON nested deeper than 256 levels");
  ExpectFails({"tokenize", "--model", kQwen3, "--jsonl", Write("number.jsonl", "5\n")}, 1,
              "number.jsonl:1: expected a JSON string");
  for (const char* ids : {"[-1]", "[1e30]", "[99999999999999999999]", "[\"a\"]", "[151936000]"}) {
    ExpectFails({"detokenize", "--model", kQwen3, "--jsonl", Write("ids.jsonl", std::string(ids) + "\n")}, 1,
                "ids.jsonl:1: element 0");
  }
  ExpectFails({"template", "--model", kQwen3, "--conversation", Write("c.json", "{\"messages\": 5}")}, 1,
              "needs \"messages\", an array");
  ExpectFails({"template", "--model", kQwen3, "--conversation",
               Write("deep.json", "{\"messages\": [], \"x\": " + std::string(100000, '[') + "}")},
              1, "JSON nested deeper than 256 levels");
  ExpectFails({"template", "--model", Path("model"), "--conversation", Write("ok.json", "{\"messages\": []}")}, 1,
              "");
  ExpectFails({"generate", "--model", Path("model"), "--tokens", Write("t.npy", "not an npy file")}, 1, "t.npy");
  ExpectFails({"generate", "--model", Path("model"), "--prompts-jsonl", Write("p.jsonl", "[1, -5]\n")}, 1,
              "p.jsonl:1: not a token id: -5");
}

TEST_F(CliHostileTest, OutOfMemoryIsAnErrorNamingTheCommand) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit leaves";
#else
  // A sparse file of 8 GiB under a 2 GiB address-space limit: reading it
  // cannot allocate, and the command says so instead of aborting.
  const std::string big = Path("big.jsonl");
  {
    std::ofstream f(big, std::ios::binary);
  }
  fs::resize_file(big, uintmax_t{8} << 30);
  const Outcome o = Run({"tokenize", "--model", kQwen3, "--jsonl", big}, "ulimit -v 2097152");
  fs::remove(big);
  EXPECT_EQ(o.signal, 0) << o.err;
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_THAT(o.err, StartsWith("strata tokenize: error: out of memory"));
#endif
}

}  // namespace
}  // namespace strata
