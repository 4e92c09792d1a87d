// The tool loop through the C ABI, in-process, against a scripted test-double
// architecture: its logits put all mass on a scripted reply after each
// generation prompt, and it records how many tokens every Forward call was
// asked to evaluate. That proves the loop's central promise: after a tool
// result only the new suffix is evaluated (nothing the session holds is
// evaluated twice), and a template that re-renders an earlier turn
// differently (Qwen3 dropping old reasoning) costs a re-evaluation from the
// checkpoint, not from scratch.
//
// This binary compiles the capi/ sources in (tests/CMakeLists.txt), so the C
// functions and the architecture registry are the same instance.
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/safetensors_writer.h"
#include "strata/strata.h"
#include "text/demo_tokenizer.h"
#include "text/tokenizer.h"

namespace strata {
namespace {

// ---------------------------------------------------------------------------
// The scripted architecture.

struct Script {
  std::mutex mu;
  std::vector<int32_t> marker;                  // "<|im_start|>assistant\n": a generation prompt ends here
  std::vector<std::vector<int32_t>> responses;  // reply k follows the k-th marker of the sequence
  int32_t eos = 0;                              // after a reply
  std::vector<size_t> forward_sizes;            // tokens per Forward call, in call order
};

Script& GetScript() {
  static Script* s = new Script;
  return *s;
}

class ScriptedState : public SequenceState {
 public:
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens.size()); }
  std::unique_ptr<SequenceState> Clone() const override { return std::make_unique<ScriptedState>(*this); }
  void Reset() override { tokens.clear(); }
  std::vector<int32_t> tokens;
};

class ScriptedModel : public Model {
 public:
  ScriptedModel(int32_t vocab, int32_t eos) {
    info_.architecture = "scripted_test";
    info_.num_layers = 1;
    info_.layer_kinds = {"scripted"};
    info_.vocab_size = vocab;
    info_.hidden_size = 1;
    info_.max_context = 8192;
    info_.eos_token_id = eos;
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    return std::unique_ptr<SequenceState>(std::make_unique<ScriptedState>());
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits, bool) const override {
    for (int32_t t : tokens) {
      if (t < 0 || t >= info_.vocab_size) return absl::InvalidArgumentError("bad token");
    }
    auto& s = static_cast<ScriptedState&>(state);
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    Script& script = GetScript();
    std::lock_guard<std::mutex> lock(script.mu);
    script.forward_sizes.push_back(tokens.size());
    if (logits == nullptr) return OkStatus();
    // Which reply, and how far into it: count the markers, measure from the last.
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
    if (reply >= 0 && reply < static_cast<int>(script.responses.size())) {
      const auto& r = script.responses[static_cast<size_t>(reply)];
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
    "scripted_test", [](std::shared_ptr<const WeightStore>, const std::string& config_path, const LoadOptions&)
                         -> StatusOr<std::unique_ptr<Model>> {
      std::ifstream in(config_path);
      const auto config = nlohmann::json::parse(in);
      return std::unique_ptr<Model>(
          new ScriptedModel(config["vocab_size"].get<int32_t>(), config["eos_token_id"].get<int32_t>()));
    });

// ---------------------------------------------------------------------------
// Fixture: a model directory with the scripted architecture and a real
// tokenizer (the demo byte-level BPE with Qwen3's template, or the real Qwen3
// tokenizer from the text data the build unpacks).

constexpr char kToolCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
constexpr char kAnswer[] = "It is sunny in Paris.";
constexpr char kWeatherSchema[] =
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}";

// Returns "" after recording a failure when the directory cannot be made.
std::string MakeModelDir(const std::string& name, const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(STRATA_BINARY_DIR) / "testdata" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (tokenizer_dir.empty()) {
    const Status written = WriteDemoTokenizer(dir.string());
    if (!written.ok()) {
      ADD_FAILURE() << "demo tokenizer in " << dir << ": " << written;
      return "";
    }
  } else {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::error_code ec;
      fs::copy_file(fs::path(tokenizer_dir) / f, dir / f, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        ADD_FAILURE() << "copying " << fs::path(tokenizer_dir) / f << ": " << ec.message();
        return "";
      }
    }
  }
  auto tok = Tokenizer::FromDirectory(dir.string());
  if (!tok.ok()) {
    ADD_FAILURE() << "tokenizer in " << dir << ": " << tok.status();
    return "";
  }
  const int32_t vocab = (*tok)->vocab_size();
  const std::optional<int32_t> eos = (*tok)->TokenToId("<|im_end|>");
  if (!eos) {
    ADD_FAILURE() << "the tokenizer in " << dir << " has no <|im_end|>";
    return "";
  }
  std::ofstream(dir / "config.json")
      << nlohmann::json(
             {{"model_type", "scripted_test"}, {"vocab_size", vocab}, {"eos_token_id", *eos}})
             .dump();
  SafetensorsWriter w;
  w.AddF32("unused", DType::kF32, {1}, {0.0f});
  EXPECT_TRUE(w.WriteFile((dir / "model.safetensors").string()).ok());
  return dir.string();
}

class ChatLoopTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kRegistered);
    std::string tokenizer_dir;
    if (GetParam() == "qwen3") {
      tokenizer_dir = std::string(STRATA_TEXT_DATA_DIR) + "/tokenizers/qwen3";
      // Configure unpacks it from tests/data/text: absent is a failure, not a skip.
      ASSERT_TRUE(std::filesystem::exists(tokenizer_dir + "/tokenizer.json"))
          << "no Qwen3 tokenizer at " << tokenizer_dir;
    }
    // ctest runs every test case as its own process in parallel: each gets its
    // own directory, or one case's set-up deletes the files another is loading.
    std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : test_name) {
      if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    dir_ = MakeModelDir("chat_loop_" + test_name, tokenizer_dir);
    ASSERT_FALSE(dir_.empty());
    auto tok = Tokenizer::FromDirectory(dir_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    s.marker = Encode("<|im_start|>assistant\n");
    s.eos = *tokenizer_->TokenToId("<|im_end|>");
    s.responses.clear();
    s.forward_sizes.clear();
    ASSERT_EQ(strata_engine_create(nullptr, &engine_), STRATA_OK);
    ASSERT_EQ(strata_model_load(engine_, dir_.c_str(), nullptr, &model_), STRATA_OK) << strata_last_error_message();
    ASSERT_EQ(strata_session_create(model_, nullptr, &session_), STRATA_OK);
  }
  void TearDown() override {
    if (session_ != nullptr) EXPECT_EQ(strata_session_destroy(session_), STRATA_OK);
    if (model_ != nullptr) EXPECT_EQ(strata_model_destroy(model_), STRATA_OK);
    if (engine_ != nullptr) EXPECT_EQ(strata_engine_destroy(engine_), STRATA_OK);
  }

  std::vector<int32_t> Encode(const std::string& text) const {
    EncodeOptions o;
    o.add_special_tokens = false;
    return *tokenizer_->Encode(text, o);
  }
  void SetReplies(const std::vector<std::string>& replies) {
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    s.responses.clear();
    for (const auto& r : replies) s.responses.push_back(Encode(r));
  }
  std::vector<size_t> TakeForwardSizes() {
    Script& s = GetScript();
    std::lock_guard<std::mutex> lock(s.mu);
    return std::exchange(s.forward_sizes, {});
  }
  void AddMessage(strata_role role, const char* content) {
    strata_chat_message m;
    strata_chat_message_init(&m);
    m.role = role;
    m.content = content;
    ASSERT_EQ(strata_session_add_message(session_, &m), STRATA_OK) << strata_last_error_message();
  }
  void AddWeatherTool(strata_tool_callback cb, void* user_data) {
    strata_tool t;
    strata_tool_init(&t);
    t.name = "get_weather";
    t.description = "Current weather in a city";
    t.parameters_json = kWeatherSchema;
    t.callback = cb;
    t.user_data = user_data;
    ASSERT_EQ(strata_session_add_tool(session_, &t), STRATA_OK) << strata_last_error_message();
  }
  nlohmann::json Conversation() {
    size_t len = 0;
    EXPECT_EQ(strata_session_get_conversation(session_, nullptr, 0, &len), STRATA_OK);
    std::string buf(len + 1, '\0');
    EXPECT_EQ(strata_session_get_conversation(session_, buf.data(), buf.size(), &len), STRATA_OK);
    buf.resize(len);
    return nlohmann::json::parse(buf);
  }
  size_t NumTokens() {
    size_t n = 0;
    EXPECT_EQ(strata_session_get_num_tokens(session_, &n), STRATA_OK);
    return n;
  }

  std::string dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
  strata_engine* engine_ = nullptr;
  strata_model* model_ = nullptr;
  strata_session* session_ = nullptr;
};

// What the blocking callbacks saw.
struct Seen {
  std::string text;
  std::vector<std::string> calls;   // "name(arguments)"
  std::vector<std::string> errors;  // "name: text"
  std::string result = "{\"temperature_c\": 21, \"sky\": \"sunny\"}";
  int32_t return_code = 0;
  bool answer = true;
  std::vector<strata_status> submits;  // what strata_request_submit_tool_result returned
};

int OnEvent(strata_request*, const strata_event* ev, void* user_data) {
  auto* seen = static_cast<Seen*>(user_data);
  if (ev->type == STRATA_EVENT_TEXT) seen->text.append(ev->text, ev->text_len);
  if (ev->type == STRATA_EVENT_TOOL_ERROR) {
    seen->errors.push_back(std::string(ev->tool_name ? ev->tool_name : "?") + ": " +
                           std::string(ev->text, ev->text_len));
  }
  return 0;
}

int32_t GetWeather(strata_request* request, const strata_event* call, void* user_data) {
  auto* seen = static_cast<Seen*>(user_data);
  seen->calls.push_back(std::string(call->tool_name) + "(" +
                        std::string(call->tool_arguments, call->tool_arguments_len) + ")");
  if (seen->answer) {
    seen->submits.push_back(strata_request_submit_tool_result(request, call->tool_call_id, seen->result.c_str(),
                                                              STRATA_NUL_TERMINATED));
  }
  return seen->return_code;
}

strata_chat_params ChatParams(Seen* seen) {
  strata_chat_params c;
  strata_chat_params_init(&c);
  c.event_callback = OnEvent;
  c.user_data = seen;
  return c;
}

TEST_P(ChatLoopTest, CallbackToolLoopEvaluatesOnlyTheNewSuffix) {
  SetReplies({kToolCall, kAnswer});
  Seen seen;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "What is the weather in Paris?");
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  ASSERT_EQ(seen.calls.size(), 1u);
  EXPECT_EQ(seen.calls[0], "get_weather({\"city\":\"Paris\"})");
  EXPECT_EQ(seen.submits, std::vector<strata_status>{STRATA_OK});
  EXPECT_EQ(seen.text, kAnswer);
  EXPECT_TRUE(seen.errors.empty());

  const std::vector<size_t> sizes = TakeForwardSizes();
  // Round 1: the rendered prompt, then one token per generated token (the
  // last, <|im_end|>, stays pending). Round 2: that pending token plus the
  // template's continuation, and nothing else.
  const size_t call_tokens = Encode(kToolCall).size();
  ASSERT_GE(sizes.size(), call_tokens + 2);
  const size_t resume = sizes[call_tokens + 1];
  const std::vector<int32_t> suffix =
      Encode(std::string("\n<|im_start|>user\n<tool_response>\n") + seen.result +
             "\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(resume, 1 + suffix.size());
  size_t evaluated = 0;
  for (size_t n : sizes) evaluated += n;
  // Every history token evaluated exactly once (the final <|im_end|> is pending).
  EXPECT_EQ(evaluated, NumTokens() - 1);

  const nlohmann::json conv = Conversation();
  ASSERT_EQ(conv.size(), 4u);
  EXPECT_EQ(conv[1]["role"], "assistant");
  EXPECT_EQ(conv[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(conv[2]["role"], "tool");
  EXPECT_EQ(conv[2]["name"], "get_weather");
  EXPECT_EQ(conv[2]["content"], seen.result);
  EXPECT_EQ(conv[3]["content"], kAnswer);
}

TEST_P(ChatLoopTest, NonBlockingHostAnswersThroughEvents) {
  SetReplies({kToolCall, kAnswer});
  AddWeatherTool(nullptr, nullptr);
  AddMessage(STRATA_ROLE_USER, "Weather in Paris?");
  strata_request* req = nullptr;
  ASSERT_EQ(strata_session_submit_chat(session_, nullptr, nullptr, &req), STRATA_OK) << strata_last_error_message();
  std::string text, call_id, args;
  strata_event ev;
  ev.struct_size = sizeof(ev);
  for (;;) {
    ASSERT_EQ(strata_engine_poll_event(engine_, &ev, 10000), STRATA_OK);
    ASSERT_EQ(ev.request, req);
    if (ev.type == STRATA_EVENT_TEXT) text.append(ev.text, ev.text_len);
    if (ev.type == STRATA_EVENT_TOOL_CALL) {
      call_id = ev.tool_call_id;
      args.assign(ev.tool_arguments, ev.tool_arguments_len);
      EXPECT_STREQ(ev.tool_name, "get_weather");
      // Unknown ids and a second answer are refused; the request keeps waiting.
      EXPECT_EQ(strata_request_submit_tool_result(req, "nope", "x", 1), STRATA_ERR_NOT_FOUND);
      ASSERT_EQ(strata_request_submit_tool_result(req, call_id.c_str(), "{\"sky\": \"sunny\"}",
                                                  STRATA_NUL_TERMINATED),
                STRATA_OK);
      // Answered already, or (the scripted model is fast) finished already.
      const strata_status again = strata_request_submit_tool_result(req, call_id.c_str(), "again", 5);
      EXPECT_TRUE(again == STRATA_ERR_ALREADY_EXISTS || again == STRATA_ERR_FAILED_PRECONDITION) << again;
    }
    if (ev.type == STRATA_EVENT_FINISHED) break;
  }
  EXPECT_EQ(ev.finish_reason, STRATA_FINISH_EOS);
  EXPECT_EQ(ev.status, STRATA_OK);
  EXPECT_EQ(args, "{\"city\":\"Paris\"}");
  EXPECT_EQ(text, kAnswer);
  EXPECT_EQ(strata_request_submit_tool_result(req, call_id.c_str(), "late", 4), STRATA_ERR_FAILED_PRECONDITION);
  EXPECT_EQ(strata_request_destroy(req), STRATA_OK);
  EXPECT_EQ(Conversation()[2]["tool_call_id"], call_id);
}

TEST_P(ChatLoopTest, UnknownToolIsAnErrorEventAndTheConversationGoesOn) {
  SetReplies({"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "Sorry, I cannot.",
              "Hello again."});
  Seen seen;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "What time is it?");
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  ASSERT_EQ(seen.errors.size(), 1u);
  EXPECT_EQ(seen.errors[0], "get_time: unknown tool 'get_time'");
  EXPECT_TRUE(seen.calls.empty());
  EXPECT_EQ(seen.text, "Sorry, I cannot.");
  const nlohmann::json conv = Conversation();
  EXPECT_EQ(conv[2]["role"], "tool");
  EXPECT_NE(conv[2]["content"].get<std::string>().find("unknown tool"), std::string::npos);

  // The conversation stays usable, and the next turn only adds its suffix.
  TakeForwardSizes();
  const size_t before = NumTokens();
  seen.text.clear();
  AddMessage(STRATA_ROLE_USER, "Hi");
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(seen.text, "Hello again.");
  const std::vector<size_t> sizes = TakeForwardSizes();
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes[0], 1 + Encode("\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n").size());
  EXPECT_LT(sizes[0], before);
}

TEST_P(ChatLoopTest, MalformedCallIsAnErrorEventWithoutARound) {
  SetReplies({"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {oops}\n</tool_call>", "Fine."});
  Seen seen;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  EXPECT_EQ(seen.errors.size(), 1u);
  EXPECT_TRUE(seen.calls.empty());
  // The rejected markup is kept as the message's text; no tool message follows.
  const nlohmann::json conv = Conversation();
  ASSERT_EQ(conv.size(), 2u);
  EXPECT_NE(conv[1]["content"].get<std::string>().find("{oops}"), std::string::npos);
  // Usable afterwards.
  AddMessage(STRATA_ROLE_USER, "ok?");
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
}

TEST_P(ChatLoopTest, CallbackErrorBecomesAnErrorToolMessage) {
  SetReplies({kToolCall, kAnswer});
  Seen seen;
  seen.answer = false;
  seen.return_code = 7;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  EXPECT_EQ(Conversation()[2]["content"], "{\"error\":\"tool 'get_weather' failed with code 7\"}");
}

TEST_P(ChatLoopTest, ToolWithoutCallbackIsDeclinedThenAnsweredByAMessage) {
  SetReplies({kToolCall, kAnswer});
  AddWeatherTool(nullptr, nullptr);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  Seen seen;
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_TOOL_CALLS);
  nlohmann::json conv = Conversation();
  ASSERT_EQ(conv.size(), 2u);
  const std::string id = conv[1]["tool_calls"][0]["id"];

  TakeForwardSizes();
  strata_chat_message m;
  strata_chat_message_init(&m);
  m.role = STRATA_ROLE_TOOL;
  m.content = "{\"sky\": \"sunny\"}";
  m.tool_call_id = id.c_str();
  m.name = "get_weather";
  ASSERT_EQ(strata_session_add_message(session_, &m), STRATA_OK) << strata_last_error_message();
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  EXPECT_EQ(seen.text, kAnswer);
  const std::vector<size_t> sizes = TakeForwardSizes();
  EXPECT_EQ(sizes[0], 1 + Encode("\n<|im_start|>user\n<tool_response>\n{\"sky\": \"sunny\"}\n</tool_response>"
                                 "<|im_end|>\n<|im_start|>assistant\n")
                              .size());
}

TEST_P(ChatLoopTest, MaxToolRoundsZeroEndsAtTheFirstCall) {
  SetReplies({kToolCall, kAnswer});
  Seen seen;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  strata_chat_params chat = ChatParams(&seen);
  chat.max_tool_rounds = 0;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_TOOL_CALLS);
  // The callback saw the call; its answer came too late for this request
  // (or just in time to be recorded), and the call is in the conversation.
  EXPECT_EQ(seen.calls.size(), 1u);
  ASSERT_EQ(seen.submits.size(), 1u);
  EXPECT_TRUE(seen.submits[0] == STRATA_OK || seen.submits[0] == STRATA_ERR_FAILED_PRECONDITION);
  EXPECT_EQ(Conversation()[1]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST_P(ChatLoopTest, CancelWhileWaitingForAToolResult) {
  SetReplies({kToolCall, kAnswer, "Still here."});
  AddWeatherTool(nullptr, nullptr);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  strata_request* req = nullptr;
  ASSERT_EQ(strata_session_submit_chat(session_, nullptr, nullptr, &req), STRATA_OK);
  strata_event ev;
  ev.struct_size = sizeof(ev);
  bool saw_call = false;
  for (;;) {
    ASSERT_EQ(strata_engine_poll_event(engine_, &ev, 10000), STRATA_OK);
    if (ev.type == STRATA_EVENT_TOOL_CALL) saw_call = true;
    if (ev.type == STRATA_EVENT_FINISHED) break;
    // Once the message is complete the request waits; nothing else arrives.
    if (saw_call) {
      strata_event none;
      none.struct_size = sizeof(none);
      EXPECT_EQ(strata_engine_poll_event(engine_, &none, 50), STRATA_AGAIN);
      ASSERT_EQ(strata_request_cancel(req), STRATA_OK);
    }
  }
  EXPECT_TRUE(saw_call);
  EXPECT_EQ(ev.finish_reason, STRATA_FINISH_CANCELLED);
  EXPECT_EQ(ev.status, STRATA_ERR_CANCELLED);
  EXPECT_EQ(strata_request_destroy(req), STRATA_OK);
  // The unanswered call stays in the conversation; the session stays usable.
  AddMessage(STRATA_ROLE_USER, "Never mind.");
  Seen seen;
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  SetReplies({kToolCall, "Still here."});
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_EOS);
  EXPECT_EQ(seen.text, "Still here.");
}

TEST_P(ChatLoopTest, DroppedReasoningRestartsFromTheCheckpoint) {
  // Qwen3's template drops the reasoning of assistant turns before the last
  // user message, so turn 2's rendering differs from what turn 1 generated.
  SetReplies({"<think>\nThe user greets me.\n</think>\n\nHello!", "Fine, thanks."});
  AddMessage(STRATA_ROLE_USER, "Hi");
  Seen seen;
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(seen.text, "<think>\nThe user greets me.\n</think>\n\nHello!");
  const size_t prompt1 = TakeForwardSizes()[0];

  AddMessage(STRATA_ROLE_USER, "How are you?");
  seen.text.clear();
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(seen.text, "Fine, thanks.");
  const std::vector<size_t> sizes = TakeForwardSizes();
  // From the checkpoint at the end of turn 1's prompt: turn 1's reply as the
  // template now renders it, then turn 2's prompt. Not from scratch.
  const std::vector<int32_t> rerendered =
      Encode("Hello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(sizes[0], rerendered.size());
  EXPECT_EQ(NumTokens(), prompt1 + rerendered.size() + Encode("Fine, thanks.").size() + 1);
}

TEST_P(ChatLoopTest, StopStringEndsTheText) {
  SetReplies({"Hello world. STOP here."});
  AddMessage(STRATA_ROLE_USER, "Hi");
  Seen seen;
  strata_chat_params chat = ChatParams(&seen);
  const char* stops[] = {"STOP"};
  chat.stop_strings = stops;
  chat.num_stop_strings = 1;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, nullptr, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_STOP_STRING);
  EXPECT_EQ(seen.text, "Hello world. ");
}

TEST_P(ChatLoopTest, MaxTokensCountsTheWholeRequest) {
  SetReplies({kToolCall, kAnswer});
  Seen seen;
  AddWeatherTool(GetWeather, &seen);
  AddMessage(STRATA_ROLE_USER, "Weather?");
  strata_request_params params;
  strata_request_params_init(&params);
  params.max_tokens = static_cast<int32_t>(Encode(kToolCall).size()) + 1 + 2;
  strata_chat_params chat = ChatParams(&seen);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  ASSERT_EQ(strata_session_chat(session_, &params, &chat, &reason), STRATA_OK) << strata_last_error_message();
  EXPECT_EQ(reason, STRATA_FINISH_MAX_TOKENS);
  EXPECT_EQ(seen.calls.size(), 1u);
  EXPECT_FALSE(seen.text.empty());
  EXPECT_LT(seen.text.size(), std::strlen(kAnswer));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ChatLoopTest, ::testing::Values("demo", "qwen3"));

}  // namespace
}  // namespace strata
