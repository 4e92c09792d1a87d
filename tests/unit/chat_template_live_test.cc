// Live parity test: conversations generated and rendered by transformers'
// apply_chat_template (tests/text/gen_chat_cases.py, run with the reference
// venv) must render byte-identically here, and must fail here whenever they
// fail there. Missing venv or text data is a failure, never a skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "text/chat_template.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Shows where two renderings first differ, with context around it.
std::string FirstDifference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  size_t from = i > 80 ? i - 80 : 0;
  auto excerpt = [&](const std::string& s) {
    return nlohmann::json(
               s.substr(from, std::min<size_t>(s.size() - std::min(from, s.size()), 200)))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  return "first difference at byte " + std::to_string(i) + "\n  expected: " + excerpt(expected) +
         "\n  actual:   " + excerpt(actual);
}

TEST(ChatTemplateLiveTest, MatchesTransformersOnGeneratedConversations) {
  const std::string python = STRATA_REF_PYTHON;
  const std::string data = STRATA_TEXT_DATA_DIR;
  ASSERT_TRUE(fs::exists(python)) << "reference venv missing: " << python
                                  << " (run tools/setup.sh)";
  ASSERT_TRUE(fs::exists(fs::path(data) / "tokenizers/qwen3/tokenizer_config.json"))
      << "text data missing under " << data;
  ASSERT_TRUE(fs::exists(fs::path(data) / "tokenizers/deepseek_v3/tokenizer_config.json"))
      << "text data missing under " << data;

  const fs::path out = fs::path(STRATA_BINARY_DIR) / "chat_template_live_cases.jsonl";
  fs::remove(out);
  const std::string command =
      "\"" + python + "\" \"" STRATA_SOURCE_DIR "/tests/text/gen_chat_cases.py\" --data \"" + data +
      "\" --templates \"" STRATA_SOURCE_DIR "/tests/data/templates\" --out \"" + out.string() +
      "\" --cases 400 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "reference generator failed: " << command;

  std::ifstream in(out);
  ASSERT_TRUE(in) << "no cases written to " << out;
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  std::map<std::string, int> compared, rendered_ok, raised, mismatches;
  std::string line;
  int reported = 0;
  while (std::getline(in, line)) {
    const auto c = nlohmann::ordered_json::parse(line);
    const std::string name = c["template"].get<std::string>();
    auto& tmpl = templates[name];
    nlohmann::ordered_json context = c["context"];
    std::unique_ptr<ChatTemplate> snippet;
    ChatTemplate* renderer = nullptr;
    if (c.contains("template_text")) {
      // A feature snippet (tests/text/snippets.py); compile errors count as
      // errors of the case.
      auto compiled = ChatTemplate::Compile(c["template_text"].get<std::string>(),
                                            "snippet" + std::to_string(c["index"].get<int>()));
      if (compiled.ok()) snippet = std::move(compiled).value();
      context = c["special_tokens"];
      for (auto it = c["context"].begin(); it != c["context"].end(); ++it)
        context[it.key()] = it.value();
    } else if (c.contains("template_file")) {
      // A template text of ours: compiled directly, with the special tokens
      // transformers passed added to the context.
      const std::string path = c["template_file"].get<std::string>();
      if (!tmpl) {
        std::ifstream file(path, std::ios::binary);
        ASSERT_TRUE(file) << "cannot read " << path;
        std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
        auto compiled = ChatTemplate::Compile(text, path);
        ASSERT_TRUE(compiled.ok()) << compiled.status();
        tmpl = std::move(compiled).value();
      }
      context = c["special_tokens"];
      for (auto it = c["context"].begin(); it != c["context"].end(); ++it)
        context[it.key()] = it.value();
    } else if (!tmpl) {
      auto compiled = ChatTemplate::FromDirectory(c["dir"].get<std::string>());
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      tmpl = std::move(compiled).value();
    }
    ++compared[name];
    renderer = c.contains("template_text") ? snippet.get() : tmpl.get();
    StatusOr<std::string> result =
        renderer ? renderer->RenderOrdered(context)
                 : StatusOr<std::string>(absl::InvalidArgumentError("snippet did not compile"));
    const std::string where = name + " case " + std::to_string(c["index"].get<int>());
    bool ok;
    if (c.contains("error")) {
      ++raised[name];
      ok = !result.ok();
      if (!ok && reported++ < 12) {
        ADD_FAILURE() << where << ": transformers raised (" << c["error"].get<std::string>()
                      << ") but we rendered:\n"
                      << *result;
      }
    } else {
      ok = result.ok() && *result == c["expected"].get<std::string>();
      if (result.ok()) ++rendered_ok[name];
      if (!ok && reported++ < 12) {
        ADD_FAILURE() << where << ": "
                      << (result.ok() ? FirstDifference(c["expected"].get<std::string>(), *result)
                                      : "we failed: " + std::string(result.status().message()))
                      << "\n  context: " << c["context"].dump();
      }
    }
    if (!ok) ++mismatches[name];
  }
  for (const char* name : {"qwen3", "deepseek_v3", "tool_json_style", "feature_mix", "snippets"}) {
    const bool snippets = std::string(name) == "snippets";
    EXPECT_GE(compared[name], snippets ? 50 : 300) << name;
    // Most cases must render (not just raise on both sides).
    EXPECT_GE(rendered_ok[name], snippets ? 35 : 250) << name;
    EXPECT_EQ(mismatches[name], 0) << name;
    std::printf("%s: %d conversations compared (%d raised in transformers), %d mismatches\n", name,
                compared[name], raised[name], mismatches[name]);
  }
}

}  // namespace
}  // namespace strata
