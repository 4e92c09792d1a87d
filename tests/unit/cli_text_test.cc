// `strata tokenize`, `strata detokenize` and `strata template` run as built
// (the strata binary of this build tree) on the Qwen3 and DeepSeek-V3
// tokenizer directories of the text data (tokenizer files only: a valid
// --model), compared with the reference libraries run live: `tokenizers` for
// ids and decoding (plus tokenizer_config.json's add_bos_token/add_eos_token,
// as the issue asks: transformers' AutoTokenizer is wrong for the DeepSeek-V3
// file), and transformers' apply_chat_template for rendered prompts, byte for
// byte.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace strata {
namespace {

namespace fs = std::filesystem;

const std::string kStrata = STRATA_BINARY_DIR "/tools/strata";
const std::string kPython = STRATA_REF_PYTHON;
const std::string kTokenizers = STRATA_TEXT_DATA_DIR "/tokenizers";

// The reference side: one script, one mode per call.
constexpr char kReferenceScript[] = R"PY(
import json, sys
mode, model_dir, inp, out = sys.argv[1:5]

def content(v):
    return v.get('content') if isinstance(v, dict) else v

if mode in ('tokenize', 'tokenize_no_special', 'detokenize'):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(model_dir + '/tokenizer.json')
    cfg = json.load(open(model_dir + '/tokenizer_config.json', encoding='utf-8'))
    with open(inp, encoding='utf-8') as f, open(out, 'w', encoding='utf-8') as o:
        for line in f:
            v = json.loads(line)
            if mode == 'detokenize':
                o.write(json.dumps(tok.decode(v, skip_special_tokens=False), ensure_ascii=False) + '\n')
                continue
            special = mode == 'tokenize'
            ids = tok.encode(v, add_special_tokens=special).ids
            if special:
                # BOS/EOS as tokenizer_config.json asks, unless the file's
                # post-processor already adds them.
                empty = tok.encode('', add_special_tokens=True).ids
                bos, eos = content(cfg.get('bos_token')), content(cfg.get('eos_token'))
                if cfg.get('add_bos_token') and bos and tok.token_to_id(bos) not in empty:
                    ids = [tok.token_to_id(bos)] + ids
                if cfg.get('add_eos_token') and eos and tok.token_to_id(eos) not in empty:
                    ids = ids + [tok.token_to_id(eos)]
            o.write(json.dumps(ids) + '\n')
elif mode == 'template':
    # One process for all cases (importing transformers is the slow part):
    # `inp` lists [model_dir, conversation_file, output_file] jobs.
    from transformers import AutoTokenizer
    for model, conv_path, out_path in json.load(open(inp, encoding='utf-8')):
        t = AutoTokenizer.from_pretrained(model)
        conv = json.load(open(conv_path, encoding='utf-8'))
        messages = conv.pop('messages')
        tools = conv.pop('tools', None)
        agp = conv.pop('add_generation_prompt', False)
        s = t.apply_chat_template(messages, tools=tools, add_generation_prompt=agp,
                                  tokenize=False, **conv)
        with open(out_path, 'w', encoding='utf-8', newline='') as o:
            o.write(s)
)PY";

class CliTextTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* model : {"qwen3", "deepseek_v3"}) {
      ASSERT_TRUE(fs::exists(kTokenizers + "/" + model + "/tokenizer.json"))
          << "no " << model << " tokenizer under " << kTokenizers
          << " (configure unpacks it from tests/data/text)";
    }
    dir_ =
        fs::temp_directory_path() / ("strata_cli_text_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    WriteFile("ref.py", kReferenceScript);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteFile(const std::string& name, const std::string& data) const {
    std::ofstream out(Path(name), std::ios::binary);
    out << data;
    ASSERT_TRUE(out.good()) << name;
  }

  std::string ReadFile(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Runs a shell command; returns its exit status.
  static int Shell(const std::string& command) {
    const int rc = std::system(command.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  // `strata <args>` with stdout to `out` and stderr to `err` (in the temp dir).
  int Strata(const std::string& args, const std::string& out, const std::string& err = "err.txt") {
    return Shell("'" + kStrata + "' " + args + " > '" + Path(out) + "' 2> '" + Path(err) + "'");
  }

  void Reference(const std::string& mode, const std::string& model, const std::string& in,
                 const std::string& out) {
    const int rc =
        Shell("'" + kPython + "' '" + Path("ref.py") + "' " + mode + " '" + kTokenizers + "/" +
              model + "' '" + Path(in) + "' '" + Path(out) + "' 2> '" + Path("ref_err.txt") + "'");
    ASSERT_EQ(rc, 0) << "reference " << mode << " failed: " << ReadFile("ref_err.txt");
  }

  std::vector<nlohmann::json> JsonLines(const std::string& name) const {
    std::vector<nlohmann::json> out;
    std::istringstream in(ReadFile(name));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  fs::path dir_;
};

// Scripts, code, emoji ZWJ sequences and flags, whitespace and digit runs,
// special-token literals of both vocabularies inside text.
const std::vector<std::string> kStrings = {
    "Hello, world!",
    "",
    "  leading and trailing spaces  \n\n\ttabs\r\n",
    "Привет мир! Καλημέρα κόσμε. 你好，世界。こんにちは。안녕하세요. مرحبا بالعالم",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "👨‍👩‍👧‍👦 family, 🇫🇷🇯🇵 flags, 👍🏽 skin tone, é vs é",
    "digits 1234567890 3.14159 -42 1e10 0x1F",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
};

std::string StringsJsonl() {
  std::string s;
  for (const std::string& t : kStrings) s += nlohmann::json(t).dump() + "\n";
  return s;
}

TEST_F(CliTextTest, TokenizeMatchesTheReference) {
  WriteFile("in.jsonl", StringsJsonl());
  for (const std::string model : {"qwen3", "deepseek_v3"}) {
    for (const bool special : {true, false}) {
      SCOPED_TRACE(model + (special ? " with special tokens" : " --no-special"));
      const std::string flag = special ? "" : " --no-special";
      ASSERT_EQ(Strata("tokenize --model '" + kTokenizers + "/" + model + "' --jsonl '" +
                           Path("in.jsonl") + "'" + flag,
                       "got.jsonl"),
                0)
          << ReadFile("err.txt");
      Reference(special ? "tokenize" : "tokenize_no_special", model, "in.jsonl", "want.jsonl");
      const auto got = JsonLines("got.jsonl");
      const auto want = JsonLines("want.jsonl");
      ASSERT_EQ(got.size(), kStrings.size());
      ASSERT_EQ(want.size(), kStrings.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[i]) << "line " << i + 1 << ": " << kStrings[i];
      }
    }
  }
  // DeepSeek-V3's config asks for BOS: the two modes must differ by exactly it.
  ASSERT_EQ(Strata("tokenize --model '" + kTokenizers + "/deepseek_v3' --jsonl '" +
                       Path("in.jsonl") + "'",
                   "a.jsonl"),
            0);
  ASSERT_EQ(Strata("tokenize --model '" + kTokenizers + "/deepseek_v3' --jsonl '" +
                       Path("in.jsonl") + "' --no-special",
                   "b.jsonl"),
            0);
  const auto with = JsonLines("a.jsonl"), without = JsonLines("b.jsonl");
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    ASSERT_EQ(with[i].size(), without[i].size() + 1) << "line " << i + 1;
    EXPECT_EQ(with[i][0], 0) << "DeepSeek-V3 BOS is id 0";
  }
}

TEST_F(CliTextTest, DetokenizeMatchesTheReference) {
  WriteFile("in.jsonl", StringsJsonl());
  for (const std::string model : {"qwen3", "deepseek_v3"}) {
    SCOPED_TRACE(model);
    // Ids from the reference tokenizer, plus cuts through multi-byte text.
    Reference("tokenize", model, "in.jsonl", "ids.jsonl");
    std::string ids = ReadFile("ids.jsonl");
    for (const nlohmann::json& line : JsonLines("ids.jsonl")) {
      if (line.size() > 3) {
        ids += nlohmann::json(std::vector<int>(line.begin() + 1, line.end() - 1)).dump() + "\n";
      }
    }
    WriteFile("ids.jsonl", ids);
    ASSERT_EQ(Strata("detokenize --model '" + kTokenizers + "/" + model + "' --jsonl '" +
                         Path("ids.jsonl") + "'",
                     "got.jsonl"),
              0)
        << ReadFile("err.txt");
    Reference("detokenize", model, "ids.jsonl", "want.jsonl");
    const auto got = JsonLines("got.jsonl");
    const auto want = JsonLines("want.jsonl");
    ASSERT_EQ(got.size(), want.size());
    ASSERT_GT(got.size(), kStrings.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "line " << i + 1;
  }
}

// Conversations for the templates: tools, tool calls with object (Qwen) and
// string (DeepSeek) arguments, tool results, reasoning, extra variables.
const char kQwenToolsConversation[] = R"JSON({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris and the time in Tokyo? ünïcödé 😀"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools needed.",
     "tool_calls": [
       {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
       {"type": "function", "function": {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}}]},
    {"role": "tool", "content": "{\"temp\": 18}"},
    {"role": "tool", "content": "21:04"},
    {"role": "assistant", "content": "<think>\nDone.\n</think>\n\nParis 18°C; Tokyo 21:04."},
    {"role": "user", "content": "Thanks!"}
  ],
  "tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time",
      "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
  ],
  "add_generation_prompt": true,
  "enable_thinking": false
})JSON";

const char kQwenPlainConversation[] = R"JSON({
  "messages": [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"}
  ]
})JSON";

const char kDeepSeekToolsConversation[] = R"JSON({
  "messages": [
    {"role": "system", "content": "You call tools."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
    {"role": "tool", "content": "18C"},
    {"role": "tool", "content": "24C"},
    {"role": "assistant", "content": "Paris 18C, Rome 24C."},
    {"role": "user", "content": "Merci"}
  ],
  "add_generation_prompt": true
})JSON";

TEST_F(CliTextTest, TemplateMatchesTransformersByteForByte) {
  struct Case {
    std::string model, conversation;
  };
  const std::vector<Case> cases = {{"qwen3", kQwenToolsConversation},
                                   {"qwen3", kQwenPlainConversation},
                                   {"deepseek_v3", kDeepSeekToolsConversation},
                                   {"deepseek_v3", kQwenPlainConversation}};
  nlohmann::json jobs = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].model + " case " + std::to_string(i));
    const std::string n = std::to_string(i);
    WriteFile("conv" + n + ".json", cases[i].conversation);
    ASSERT_EQ(Strata("template --model '" + kTokenizers + "/" + cases[i].model +
                         "' --conversation '" + Path("conv" + n + ".json") + "'",
                     "got" + n + ".txt"),
              0)
        << ReadFile("err.txt");
    jobs.push_back({kTokenizers + "/" + cases[i].model, Path("conv" + n + ".json"),
                    Path("want" + n + ".txt")});
  }
  WriteFile("jobs.json", jobs.dump());
  Reference("template", "-", "jobs.json", "-");
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].model + " case " + std::to_string(i));
    const std::string want = ReadFile("want" + std::to_string(i) + ".txt");
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(ReadFile("got" + std::to_string(i) + ".txt"), want);
  }
}

TEST_F(CliTextTest, ErrorsNameTheFileAndLine) {
  const std::string model = " --model '" + kTokenizers + "/qwen3'";
  WriteFile("bad.jsonl", "\"fine\"\n42\n");
  EXPECT_EQ(Strata("tokenize" + model + " --jsonl '" + Path("bad.jsonl") + "'", "out.txt"), 1);
  EXPECT_THAT(ReadFile("err.txt"),
              testing::HasSubstr(Path("bad.jsonl") + ":2: expected a JSON string"));
  EXPECT_EQ(ReadFile("out.txt"), "") << "no partial output on failure";

  WriteFile("bad.jsonl", "[1, 2]\n[3, \"x\"]\n");
  EXPECT_EQ(Strata("detokenize" + model + " --jsonl '" + Path("bad.jsonl") + "'", "out.txt"), 1);
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr(Path("bad.jsonl") + ":2: element 1"));

  WriteFile("bad.jsonl", "\"a\"\n\n\"b\"\n");
  EXPECT_EQ(Strata("tokenize" + model + " --jsonl '" + Path("bad.jsonl") + "'", "out.txt"), 1);
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr(Path("bad.jsonl") + ":2:"));

  WriteFile("conv.json", "{\"messages\": [}");
  EXPECT_EQ(Strata("template" + model + " --conversation '" + Path("conv.json") + "'", "out.txt"),
            1);
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr(Path("conv.json") + ": parse error"));

  WriteFile("conv.json", "{\"tools\": []}");
  EXPECT_EQ(Strata("template" + model + " --conversation '" + Path("conv.json") + "'", "out.txt"),
            1);
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr("needs \"messages\""));

  // Nested far past the bound: refused with the place named, never a crash
  // in the copies of a 100,000-deep document. 256 levels still parse.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  WriteFile("bad.jsonl", "[1]\n" + deep + "\n");
  EXPECT_EQ(Strata("detokenize" + model + " --jsonl '" + Path("bad.jsonl") + "'", "out.txt"), 1);
  EXPECT_THAT(ReadFile("err.txt"),
              testing::HasSubstr(Path("bad.jsonl") + ":2: JSON nested deeper than 256 levels"));
  WriteFile("conv.json", "{\"messages\": [], \"x\": " + deep + "}");
  EXPECT_EQ(Strata("template" + model + " --conversation '" + Path("conv.json") + "'", "out.txt"),
            1);
  EXPECT_THAT(ReadFile("err.txt"),
              testing::HasSubstr(Path("conv.json") + ": JSON nested deeper than 256 levels"));
  WriteFile("ok.json", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"x\": " + std::string(254, '[') + std::string(254, ']') + "}");
  EXPECT_EQ(Strata("template" + model + " --conversation '" + Path("ok.json") + "'", "out.txt"),
            0) << ReadFile("err.txt");

  EXPECT_EQ(Strata("tokenize" + model, "out.txt"), 2) << "missing --jsonl is a usage error";
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr("--jsonl is required"));
  EXPECT_EQ(Strata("tokenize --model '" + Path("nowhere") + "' --jsonl '" + Path("bad.jsonl") + "'",
                   "out.txt"),
            1);
  EXPECT_THAT(ReadFile("err.txt"), testing::HasSubstr(Path("nowhere")));
}

}  // namespace
}  // namespace strata
