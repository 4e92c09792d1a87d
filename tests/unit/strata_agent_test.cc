// strata-agent's plumbing, end to end on the CPU: the app's own code
// (samples/agent/agent.c, agent_tools.c, compiled into this binary with the
// capi/ sources) runs against a scripted test-double architecture whose
// replies are fixed token sequences, with the demo model's real tokenizer and
// chat template (tools/demo_model/tokenizer). What this proves is the app's
// side: arguments, the five tools registered as callbacks, the real tool
// implementations run on the model's calls inside the sandbox, their results
// printed as they happen and handed back to the model (they appear in the
// tokens the model is given next), streaming text, the final answer as the
// last line, and the interactive mode. Whether a trained model picks the
// right tool and number is tools/demo_model/evaluate.py's business.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/safetensors_writer.h"
#include "text/tokenizer.h"

extern "C" {
#include "agent.h"
}

namespace strata {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// The scripted architecture: after the k-th "<|im_start|>assistant\n" of the
// sequence it writes reply k, then <|im_end|>. It keeps the last sequence it
// was given, so a test can see what the model read.

struct Script {
  std::mutex mu;
  std::vector<int32_t> marker;
  std::vector<std::vector<int32_t>> replies;
  int32_t eos = 0;
  std::vector<int32_t> last_sequence;
};

Script& GetScript() {
  static Script* s = new Script;
  return *s;
}

class ScriptedState : public SequenceState {
 public:
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens.size()); }
  std::unique_ptr<SequenceState> Clone() const override {
    return std::make_unique<ScriptedState>(*this);
  }
  void Reset() override { tokens.clear(); }
  std::vector<int32_t> tokens;
};

class ScriptedModel : public Model {
 public:
  ScriptedModel(int32_t vocab, int32_t eos) {
    info_.architecture = "scripted_agent_test";
    info_.num_layers = 1;
    info_.layer_kinds = {"scripted"};
    info_.vocab_size = vocab;
    info_.hidden_size = 1;
    info_.max_context = 16384;
    info_.eos_token_id = eos;
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    return std::unique_ptr<SequenceState>(std::make_unique<ScriptedState>());
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool) const override {
    auto& s = static_cast<ScriptedState&>(state);
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    Script& script = GetScript();
    std::lock_guard<std::mutex> lock(script.mu);
    script.last_sequence = s.tokens;
    if (logits == nullptr) return OkStatus();
    int reply = -1;
    size_t after = 0;
    const auto& m = script.marker;
    for (size_t i = 0; i + m.size() <= s.tokens.size(); ++i) {
      if (std::equal(m.begin(), m.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(i))) {
        ++reply;
        after = i + m.size();
      }
    }
    int32_t next = script.eos;
    if (reply >= 0 && reply < static_cast<int>(script.replies.size())) {
      const auto& r = script.replies[static_cast<size_t>(reply)];
      const size_t pos = s.tokens.size() - after;
      if (pos < r.size()) next = r[pos];
    }
    std::fill(logits, logits + info_.vocab_size, -30.0f);
    logits[next] = 30.0f;
    return OkStatus();
  }

 private:
  ModelInfo info_;
};

const bool kRegistered = RegisterModelArchitecture(
    "scripted_agent_test",
    [](std::shared_ptr<const WeightStore>, const std::string& config_path,
       const LoadOptions&) -> StatusOr<std::unique_ptr<Model>> {
      std::ifstream in(config_path);
      const auto config = nlohmann::json::parse(in);
      return std::unique_ptr<Model>(new ScriptedModel(config["vocab_size"].get<int32_t>(),
                                                      config["eos_token_id"].get<int32_t>()));
    });

std::string Call(const std::string& name, const std::string& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

class StrataAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kRegistered);
    // ctest runs each case as its own process, in parallel: own directories.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    root_ = fs::temp_directory_path() /
            ("strata_agent_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    model_dir_ = root_ / "model";
    sandbox_ = root_ / "sandbox";
    fs::create_directories(model_dir_);
    fs::create_directories(sandbox_ / "notes");
    std::ofstream(sandbox_ / "notes" / "a.txt") << "hello sandbox\n";
    std::ofstream(sandbox_ / "numbers.txt") << "12.5\n30\n";
    std::ofstream(root_ / "secret.txt") << "outside";

    const fs::path tok_dir = fs::path(STRATA_SOURCE_DIR) / "tools/demo_model/tokenizer";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      ASSERT_TRUE(fs::exists(tok_dir / f)) << (tok_dir / f);
      fs::copy_file(tok_dir / f, model_dir_ / f, fs::copy_options::overwrite_existing);
    }
    auto tok = Tokenizer::FromDirectory(model_dir_.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    const int32_t eos = *tokenizer_->TokenToId("<|im_end|>");
    std::ofstream(model_dir_ / "config.json")
        << nlohmann::json({{"model_type", "scripted_agent_test"},
                           {"vocab_size", tokenizer_->vocab_size()},
                           {"eos_token_id", eos}})
               .dump();
    SafetensorsWriter w;
    w.AddF32("unused", DType::kF32, {1}, {0.0f});
    ASSERT_TRUE(w.WriteFile((model_dir_ / "model.safetensors").string()).ok());
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    s.marker = Encode("<|im_start|>assistant\n");
    s.eos = eos;
    s.replies.clear();
    s.last_sequence.clear();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::vector<int32_t> Encode(const std::string& text) const {
    EncodeOptions o;
    o.add_special_tokens = false;
    return *tokenizer_->Encode(text, o);
  }
  void SetReplies(const std::vector<std::string>& replies) {
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    s.replies.clear();
    for (const auto& r : replies) s.replies.push_back(Encode(r));
  }
  // What the model was given last, as text (special tokens kept).
  std::string ModelInput() const {
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    DecodeOptions o;
    o.skip_special_tokens = false;
    return *tokenizer_->Decode(s.last_sequence, o);
  }

  // Runs strata_agent_main with `args` (after argv[0]) and `input` on stdin;
  // returns stdout and sets exit_code_ and err_.
  std::string Run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), "strata-agent");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    FILE* in = std::tmpfile();
    FILE* out = std::tmpfile();
    FILE* err = std::tmpfile();
    std::fputs(input.c_str(), in);
    std::rewind(in);
    exit_code_ = strata_agent_main(static_cast<int>(args.size()), argv.data(), in, out, err);
    auto slurp = [](FILE* f) {
      std::rewind(f);
      std::string s;
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
      std::fclose(f);
      return s;
    };
    std::fclose(in);
    err_ = slurp(err);
    return slurp(out);
  }

  static std::string LastLine(const std::string& s) {
    std::string t = s;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    const size_t p = t.rfind('\n');
    return p == std::string::npos ? t : t.substr(p + 1);
  }

  fs::path root_, model_dir_, sandbox_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int exit_code_ = -1;
  std::string err_;
};

TEST_F(StrataAgentTest, QuestionRunsTheCalculatorAndPrintsTheAnswerLast) {
  SetReplies({Call("calculator", "{\"expression\": \"12 * (3 + 4.5)\"}"), "12 * (3 + 4.5) = 90."});
  const std::string out = Run({"--model", model_dir_.string(), "--sandbox", sandbox_.string(),
                               "--question", "What is 12 * (3 + 4.5)?"});
  EXPECT_EQ(exit_code_, 0) << err_;
  EXPECT_NE(out.find("[tool] calculator {\"expression\":\"12 * (3 + 4.5)\"} -> 90\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(LastLine(out), "12 * (3 + 4.5) = 90.") << out;
  // The real result went back to the model inside the template's tool turn,
  // after the system prompt and the five tool schemas.
  const std::string seen = ModelInput();
  EXPECT_NE(seen.find("<tool_response>\n90\n</tool_response>"), std::string::npos) << seen;
  for (const char* tool : {"calculator", "convert_units", "lookup_element", "list_files",
                           "read_file"}) {
    EXPECT_NE(seen.find(std::string("\"name\": \"") + tool + "\""), std::string::npos) << tool;
  }
  EXPECT_NE(seen.find("You are the Strata demo assistant."), std::string::npos);
}

TEST_F(StrataAgentTest, FileToolsReadInsideTheSandboxAndChainIntoTheCalculator) {
  SetReplies({Call("list_files", "{\"path\": \".\"}"),
              Call("read_file", "{\"path\": \"numbers.txt\"}"),
              Call("calculator", "{\"expression\": \"12.5 + 30\"}"),
              "The numbers add up to 42.5."});
  const std::string out = Run({"--model", model_dir_.string(), "--sandbox", sandbox_.string(),
                               "--question", "Add up the numbers in numbers.txt."});
  EXPECT_EQ(exit_code_, 0) << err_;
  EXPECT_NE(out.find("[tool] list_files {\"path\":\".\"} -> notes/\nnumbers.txt\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[tool] read_file {\"path\":\"numbers.txt\"} -> 12.5\n30\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("-> 42.5\n"), std::string::npos) << out;
  EXPECT_EQ(LastLine(out), "The numbers add up to 42.5.");
}

TEST_F(StrataAgentTest, PathsOutsideTheSandboxAreRefused) {
  SetReplies({Call("read_file", "{\"path\": \"../secret.txt\"}"),
              Call("read_file", "{\"path\": \"/etc/passwd\"}"), "I cannot read that."});
  const std::string out = Run({"--model", model_dir_.string(), "--sandbox", sandbox_.string(),
                               "--question", "Read ../secret.txt"});
  EXPECT_EQ(exit_code_, 0) << err_;
  EXPECT_NE(out.find("{\"path\":\"../secret.txt\"} -> error: path outside the sandbox"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("{\"path\":\"/etc/passwd\"} -> error: path outside the sandbox"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("outside\n"), std::string::npos) << "the file's text leaked: " << out;
  EXPECT_NE(ModelInput().find("error: path outside the sandbox"), std::string::npos);
}

TEST_F(StrataAgentTest, InteractiveChatAnswersEachLineUntilQuit) {
  SetReplies({"Hello! What do you need?", Call("lookup_element", "{\"name\": \"iron\"}"),
              "Iron has atomic number 26."});
  const std::string out = Run({"--model", model_dir_.string(), "--sandbox", sandbox_.string()},
                              "Hi!\nWhat is the atomic number of iron?\n/quit\n");
  EXPECT_EQ(exit_code_, 0) << err_;
  EXPECT_NE(out.find("> Hello! What do you need?\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[tool] lookup_element {\"name\":\"iron\"} -> name: Iron, symbol: Fe, "
                     "atomic number: 26, atomic mass: 55.845\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("Iron has atomic number 26.\n> "), std::string::npos) << out;
}

TEST_F(StrataAgentTest, MissingModelIsAnErrorNotACrash) {
  const std::string out = Run({"--model", (root_ / "nowhere").string(), "--question", "Hi"});
  EXPECT_EQ(exit_code_, 1);
  EXPECT_NE(err_.find("strata-agent: "), std::string::npos) << err_;
  EXPECT_EQ(Run({"--question"}), "");
  EXPECT_EQ(exit_code_, 2);
}

}  // namespace
}  // namespace strata
