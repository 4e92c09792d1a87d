// Hostile input through the C ABI on a 256 KB thread stack (issue 27): a
// chat template nested 10,000 deep in tokenizer_config.json, JSON nested
// 100,000 deep in parameters_json, tool_calls_json and
// template_variables_json, and a template that never ends. The header
// promises that no exception, abort or exit leaves the library; each call
// here must return INVALID_ARGUMENT with a message naming the field or file,
// and the host thread must survive.
//
// Uses the demo model that the capi_make_demo_model fixture writes, through
// the shared library only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../unit/small_stack.h"
#include "gtest_util.h"
#include "strata/strata.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using strata_capi_test::LastError;
using strata_capi_test::ReadFile;

const fs::path kDemoDir = strata_capi_test::DemoDir();

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// JSON string literal of `s` (the templates below have no control
// characters but newlines).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A copy of the demo model directory whose tokenizer_config.json has
// `chat_template` as its template (the weights are linked, not copied).
fs::path ModelWithTemplate(const std::string& name, const std::string& chat_template) {
  const fs::path dir = fs::path(STRATA_BINARY_DIR) / "testdata" / ("hostile_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kDemoDir)) {
    const std::string file = entry.path().filename().string();
    if (file == "tokenizer_config.json") continue;
    fs::create_symlink(fs::absolute(entry.path()), dir / file);
  }
  // The demo config with its template swapped: a string replacement keeps
  // the test free of a JSON library.
  std::string config = ReadFile(kDemoDir / "tokenizer_config.json");
  const std::string key = "\"chat_template\":";
  const size_t at = config.find(key);
  EXPECT_NE(at, std::string::npos);
  size_t begin = config.find('"', at + key.size());
  size_t end = begin + 1;
  while (config[end] != '"') end += config[end] == '\\' ? 2 : 1;
  config.replace(begin, end + 1 - begin, JsonString(chat_template));
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << config;
  return dir;
}

class HostileInputTest : public strata_capi_test::EngineTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kDemoDir / "config.json")) << "fixture missing: " << kDemoDir;
    EngineTest::SetUp();
  }

  // Runs `body` on a 256 KB stack; the test fails if the thread did not run.
  static void OnSmallStack(const std::function<void()>& body) {
    ASSERT_TRUE(strata::testing::RunOnSmallStack(body));
  }

};

TEST_F(HostileInputTest, DeepTemplateFailsTokenizerOpenAndModelLoadCleanly) {
  for (const auto& [name, tmpl] :
       {std::pair<std::string, std::string>{
            "ifs", Repeat("{% if x %}", 10'000) + Repeat("{% endif %}", 10'000)},
        {"parens", "{{ " + Repeat("(", 10'000) + "1" + Repeat(")", 10'000) + " }}"},
        {"fors", Repeat("{% for x in y %}", 10'000) + Repeat("{% endfor %}", 10'000)},
        {"filters", "{{ x" + Repeat(" | trim", 10'000) + " }}"},
        {"attributes", "{{ x" + Repeat(".a", 10'000) + " }}"},
        {"literal", "{{ 123456789012345678901234567890 }}"}}) {
    SCOPED_TRACE(name);
    const fs::path dir = ModelWithTemplate(name, tmpl);
    OnSmallStack([&] {
      strata_tokenizer* tok = nullptr;
      EXPECT_EQ(strata_tokenizer_open(dir.c_str(), &tok), STRATA_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(tok, nullptr);
      EXPECT_THAT(LastError(), HasSubstr("tokenizer_config.json:1:"));
      EXPECT_THAT(LastError(), ::testing::AnyOf(HasSubstr("nested deeper than"),
                                                HasSubstr("does not fit in 64 bits")));
      // The model loads on token ids only; its tokenizer says why.
      strata_model* model = nullptr;
      ASSERT_EQ(strata_model_load(engine_, dir.c_str(), nullptr, &model), STRATA_OK) << LastError();
      EXPECT_EQ(strata_model_open_tokenizer(model, &tok), STRATA_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(LastError(), HasSubstr("tokenizer_config.json:1:"));
      strata_model_destroy(model);
    });
  }
}

TEST_F(HostileInputTest, DeepJsonFromTheHostIsRefusedWithItsFieldName) {
  ASSERT_TRUE(Open(kDemoDir));
  const std::string deep = Repeat("[", 100'000) + Repeat("]", 100'000);
  OnSmallStack([&] {
    strata_tool tool;
    strata_tool_init(&tool);
    tool.name = "deep";
    const std::string params = "{\"type\": \"object\", \"properties\": " + deep + "}";
    tool.parameters_json = params.c_str();
    EXPECT_EQ(strata_session_add_tool(session_, &tool), STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(), HasSubstr("parameters_json: JSON nested deeper than 256 levels"));

    strata_chat_message m;
    strata_chat_message_init(&m);
    m.role = STRATA_ROLE_ASSISTANT;
    m.content = "";
    const std::string calls = "[{\"function\": {\"name\": \"f\", \"arguments\": " + deep + "}}]";
    m.tool_calls_json = calls.c_str();
    EXPECT_EQ(strata_session_add_message(session_, &m), STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(), HasSubstr("tool_calls_json: JSON nested deeper than 256 levels"));

    strata_chat_message user;
    strata_chat_message_init(&user);
    user.content = "hi";
    ASSERT_EQ(strata_session_add_message(session_, &user), STRATA_OK) << LastError();
    strata_chat_params cp;
    strata_chat_params_init(&cp);
    const std::string vars = "{\"x\": " + deep + "}";
    cp.template_variables_json = vars.c_str();
    strata_request_params rp;
    strata_request_params_init(&rp);
    rp.max_tokens = 1;
    strata_finish_reason reason;
    EXPECT_EQ(strata_session_chat(session_, &rp, &cp, &reason), STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(),
                HasSubstr("template_variables_json: JSON nested deeper than 256 levels"));

    // At the limit, all three are accepted and the chat renders them.
    const int n = 250;
    const std::string ok = Repeat("[", n) + Repeat("]", n);
    const std::string ok_params = "{\"type\": \"object\", \"properties\": {\"a\": " + ok + "}}";
    tool.parameters_json = ok_params.c_str();
    EXPECT_EQ(strata_session_add_tool(session_, &tool), STRATA_OK) << LastError();
    const std::string ok_vars = "{\"x\": " + ok + "}";
    cp.template_variables_json = ok_vars.c_str();
    EXPECT_EQ(strata_session_chat(session_, &rp, &cp, &reason), STRATA_OK) << LastError();

    // A conversation rendered without a session is bounded the same way.
    strata_tokenizer* tok = nullptr;
    ASSERT_EQ(strata_model_open_tokenizer(model_, &tok), STRATA_OK) << LastError();
    const std::string conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"x\": ";
    size_t len = 0;
    EXPECT_EQ(strata_tokenizer_render_chat(tok, (conv + deep + "}").c_str(), STRATA_NUL_TERMINATED, nullptr, 0,
                                           &len),
              STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(), HasSubstr("conversation_json: JSON nested deeper than 256 levels"));
    EXPECT_EQ(strata_tokenizer_render_chat(tok, (conv + ok + "}").c_str(), STRATA_NUL_TERMINATED, nullptr, 0,
                                           &len),
              STRATA_OK)
        << LastError();
    EXPECT_GT(len, 0u);
    strata_tokenizer_destroy(tok);
  });
}

TEST_F(HostileInputTest, EndlessTemplateFailsTheChatWithItsPosition) {
  const fs::path dir = ModelWithTemplate(
      "endless",
      "{% for m in messages %}{{ m.content }}{% endfor %}\n"
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(Open(dir));
  OnSmallStack([&] {
    strata_chat_message user;
    strata_chat_message_init(&user);
    user.content = "hi";
    ASSERT_EQ(strata_session_add_message(session_, &user), STRATA_OK) << LastError();
    strata_request_params rp;
    strata_request_params_init(&rp);
    rp.max_tokens = 1;
    strata_finish_reason reason;
    EXPECT_EQ(strata_session_chat(session_, &rp, nullptr, &reason), STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(LastError(), HasSubstr("tokenizer_config.json:2:"));
    EXPECT_THAT(LastError(), HasSubstr("render exceeded 10000000 steps"));
  });
}

}  // namespace
