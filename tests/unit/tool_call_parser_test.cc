// Tool-call parsers: per-family outputs (text around calls, several calls,
// string and object arguments, nested JSON with braces/quotes/unicode, marker
// text inside JSON strings), malformed calls and unknown tools as error events
// with later calls still parsed, and the streaming property: every 2-chunk
// split and thousands of random multi-chunk splits (1-byte chunks, cuts inside
// UTF-8 sequences and markers) give the same events as feeding the whole text.
//
// The Qwen3 and DeepSeek-V3 samples follow what their real chat templates
// (tokenizer_config.json in the shared data) render for assistant tool calls;
// ForTemplate is checked on those template files directly.
#include "text/tool_call_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace strata {

void PrintTo(const ToolCallEvent& e, std::ostream* os) {
  switch (e.kind) {
    case ToolCallEvent::Kind::kText:
      *os << "Text(" << testing::PrintToString(e.text) << ")";
      break;
    case ToolCallEvent::Kind::kToolCall:
      *os << "Call(" << e.id << ", " << e.name << ", " << e.arguments << ")";
      break;
    case ToolCallEvent::Kind::kError:
      *os << "Error(" << testing::PrintToString(e.text) << ", name=" << e.name
          << ", raw=" << testing::PrintToString(e.raw) << ")";
      break;
  }
}

namespace {

using Kind = ToolCallEvent::Kind;

ToolCallEvent Text(std::string s) {
  ToolCallEvent e;
  e.text = std::move(s);
  return e;
}

ToolCallEvent Call(std::string id, std::string name, std::string args) {
  ToolCallEvent e;
  e.kind = Kind::kToolCall;
  e.id = std::move(id);
  e.name = std::move(name);
  e.arguments = std::move(args);
  return e;
}

// Merges adjacent text events: chunking may split text differently.
std::vector<ToolCallEvent> Merge(const std::vector<ToolCallEvent>& events) {
  std::vector<ToolCallEvent> out;
  for (const ToolCallEvent& e : events) {
    if (e.kind == Kind::kText && !out.empty() && out.back().kind == Kind::kText) {
      out.back().text += e.text;
    } else {
      out.push_back(e);
    }
  }
  return out;
}

std::vector<ToolCallEvent> RunChunks(ToolCallFamily family, const ToolCallParserOptions& options,
                                     const std::vector<std::string_view>& chunks) {
  auto parser = ToolCallParser::Create(family, options);
  std::vector<ToolCallEvent> all;
  for (std::string_view c : chunks) {
    for (auto& e : parser->Feed(c)) all.push_back(std::move(e));
  }
  for (auto& e : parser->Finish()) all.push_back(std::move(e));
  return all;
}

std::vector<ToolCallEvent> RunWhole(ToolCallFamily family, std::string_view text,
                                    const ToolCallParserOptions& options = {}) {
  return Merge(RunChunks(family, options, {text}));
}

std::vector<std::string_view> Cut(std::string_view s, const std::vector<size_t>& cuts) {
  std::vector<std::string_view> out;
  size_t prev = 0;
  for (size_t c : cuts) {
    out.push_back(s.substr(prev, c - prev));
    prev = c;
  }
  out.push_back(s.substr(prev));
  return out;
}

// Openers of each family. Before Finish, a text event may end in a prefix of
// one only if the input already continues past it (decided as not a marker).
std::vector<std::string> OpenersOf(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kHermes:
      return {"<tool_call>"};
    case ToolCallFamily::kDeepSeek:
      return {"<｜tool▁calls▁begin｜>"};
    case ToolCallFamily::kKimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"};
  }
  return {};
}

// Whether `text` (just emitted) and `fed` (all input so far) both end in the
// same proper prefix of a marker: the parser showed an undecided half marker.
bool EmitsUndecidedMarker(std::string_view text, std::string_view fed,
                          const std::vector<std::string>& markers) {
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  for (const std::string& m : markers) {
    for (size_t n = 1; n < m.size(); ++n) {
      const std::string_view prefix = std::string_view(m).substr(0, n);
      if (ends_with(text, prefix) && ends_with(fed, prefix)) return true;
    }
  }
  return false;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

struct Sample {
  std::string label;
  ToolCallFamily family;
  std::string text;
  std::vector<ToolCallEvent> expected;  // checked fully unless empty
  ToolCallParserOptions options;
};

// Counts checked splits across the property tests, reported at the end.
int64_t g_two_chunk_splits = 0;
int64_t g_random_splits = 0;

// The streaming property for one sample. Returns the whole-text events.
void CheckStreamingProperty(const Sample& s) {
  SCOPED_TRACE(s.label);
  const std::vector<ToolCallEvent> whole = RunWhole(s.family, s.text, s.options);
  if (!s.expected.empty()) EXPECT_THAT(whole, testing::ElementsAreArray(s.expected));

  // Every way of cutting into two chunks (including empty first/last chunks).
  for (size_t i = 0; i <= s.text.size(); ++i) {
    const auto got = Merge(RunChunks(s.family, s.options, Cut(s.text, {i})));
    ++g_two_chunk_splits;
    if (got != whole) {
      ADD_FAILURE() << "2-chunk split at byte " << i << " differs:\n"
                    << testing::PrintToString(got) << "\nvs whole:\n"
                    << testing::PrintToString(whole);
      return;
    }
  }

  // 1-byte chunks: same events, and no text event emitted before Finish ends
  // in half a UTF-8 sequence or in a prefix of a marker.
  {
    auto parser = ToolCallParser::Create(s.family, s.options);
    std::vector<ToolCallEvent> raw;
    for (size_t i = 0; i < s.text.size(); ++i) {
      for (auto& e : parser->Feed(std::string_view(s.text).substr(i, 1))) {
        if (e.kind == Kind::kText) {
          EXPECT_FALSE(EmitsUndecidedMarker(e.text, std::string_view(s.text).substr(0, i + 1),
                                            OpenersOf(s.family)))
              << "half a marker: " << e.text;
          if (IsValidUtf8(s.text)) {
            EXPECT_TRUE(IsValidUtf8(e.text)) << "text event splits a UTF-8 sequence: " << e.text;
          }
        }
        raw.push_back(std::move(e));
      }
    }
    for (auto& e : parser->Finish()) raw.push_back(std::move(e));
    ++g_random_splits;
    EXPECT_EQ(Merge(raw), whole) << "1-byte chunks";
  }

  // Random multi-chunk splits: mixes of tiny and larger chunks, empty chunks.
  std::mt19937_64 rng(0x5eed ^ std::hash<std::string>()(s.label));
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<size_t> cuts;
    const int mode = trial % 4;
    size_t at = 0;
    while (true) {
      size_t step;
      switch (mode) {
        case 0:
          step = 1 + rng() % 3;  // mostly 1-3 byte chunks
          break;
        case 1:
          step = rng() % 9;  // 0..8, including empty chunks
          break;
        case 2:
          step = 1 + rng() % 40;
          break;
        default:
          step = (rng() % 2) ? 1 : 1 + rng() % 200;
      }
      at += step;
      if (at >= s.text.size()) break;
      cuts.push_back(at);
    }
    const auto got = Merge(RunChunks(s.family, s.options, Cut(s.text, cuts)));
    ++g_random_splits;
    if (got != whole) {
      std::ostringstream where;
      for (size_t c : cuts) where << c << " ";
      ADD_FAILURE() << "random split (cuts " << where.str() << ") differs:\n"
                    << testing::PrintToString(got) << "\nvs whole:\n"
                    << testing::PrintToString(whole);
      return;
    }
  }
}

ToolCallParserOptions Tools(std::vector<std::string> names) {
  ToolCallParserOptions o;
  o.tool_names = std::move(names);
  return o;
}

std::vector<Sample> HermesSamples() {
  std::vector<Sample> v;
  // As the Qwen3 template renders an assistant turn with content and two calls.
  v.push_back(
      {"hermes_two_calls",
       ToolCallFamily::kHermes,
       "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n"
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>",
       {Text("<think>\nThe user wants weather.\n</think>\n\nLet me check."),
        Call("call_0", "get_weather", R"({"city":"Paris"})"),
        Call("call_1", "get_time", R"({"tz":"UTC"})")}});
  v.push_back(
      {"hermes_nested_unicode_marker_in_string",
       ToolCallFamily::kHermes,
       "Searching… 🔍 now\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": "
       "\"naïve \\\"quoted\\\" {braces} [brackets] 日本語 😀 \\u00e9\\n\", \"filters\": "
       "{\"tags\": [\"a\", \"}\"], \"range\": {\"min\": -1, \"max\": 2.5e3}}, \"flag\": true, "
       "\"none\": null}}\n</tool_call>\n<tool_call>\n{\"name\": \"write_note\", \"arguments\": "
       "{\"text\": \"use <tool_call> and </tool_call> literally\"}}\n</tool_call>\n\n"
       "Done 👍 — café.",
       {Text("Searching… 🔍 now"),
        Call(
            "call_0", "search",
            R"({"filters":{"range":{"max":2500.0,"min":-1},"tags":["a","}"]},"flag":true,"none":null,"query":"naïve \"quoted\" {braces} [brackets] 日本語 😀 é\n"})"),
        Call("call_1", "write_note", R"({"text":"use <tool_call> and </tool_call> literally"})"),
        Text("Done 👍 — café.")}});
  v.push_back({"hermes_string_arguments",
               ToolCallFamily::kHermes,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
               "\\\"東京\\\", \\\"days\\\": 3}\"}\n</tool_call>",
               {Call("call_0", "get_weather", R"({"city":"東京","days":3})")}});
  v.push_back({"hermes_no_calls_marker_lookalikes",
               ToolCallFamily::kHermes,
               "Use the <tool_calls> tag, or <tool_call without a bracket, a < b, <tool, "
               "</tool_call> stray and <toolbox>. Ünïcødé ✓",
               {}});
  v.push_back(
      {"hermes_malformed_then_valid",
       ToolCallFamily::kHermes,
       "First:\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}\n"
       "</tool_call>\nThen:\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
       "</tool_call>",
       {}});
  v.push_back({"hermes_missing_brace_then_valid",
               ToolCallFamily::kHermes,
               "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}\n</tool_call>\nok "
               "<tool_call>{\"name\": \"b\", \"arguments\": {\"y\": [1, 2]}}</tool_call>",
               {}});
  v.push_back({"hermes_unterminated_string_then_opener",
               ToolCallFamily::kHermes,
               "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"oops\n<tool_call>\n"
               "{\"name\": \"b\", \"arguments\": {}}\n</tool_call> after",
               {}});
  v.push_back({"hermes_unknown_tool",
               ToolCallFamily::kHermes,
               "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
               "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
               {},
               Tools({"get_time", "get_weather"})});
  v.push_back({"hermes_unterminated",
               ToolCallFamily::kHermes,
               "Calling.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n",
               {}});
  return v;
}

std::vector<Sample> DeepSeekSamples() {
  std::vector<Sample> v;
  // As the DeepSeek-V3 template renders an assistant turn with two calls.
  v.push_back(
      {"deepseek_v3_two_calls",
       ToolCallFamily::kDeepSeek,
       "I'll look that up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
       "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n"
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"q\": \"```json inside "
       "<｜tool▁call▁end｜> a string\", \"n\": {\"deep\": [1, {\"x\": \"}\"}], \"é\": "
       "\"😀\"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>Anything else?",
       {Text("I'll look that up."), Call("call_0", "get_weather", R"({"city":"Paris"})"),
        Call(
            "call_1", "search",
            R"({"n":{"deep":[1,{"x":"}"}],"é":"😀"},"q":"```json inside <｜tool▁call▁end｜> a string"})"),
        Text("Anything else?")}});
  v.push_back({"deepseek_v31_calls",
               ToolCallFamily::kDeepSeek,
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
               "\"Zürich\", \"opts\": {\"unit\": \"c\"}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
               "function<｜tool▁sep｜>{\"note\": \"a tool named function\"}<｜tool▁call▁end｜>"
               "<｜tool▁calls▁end｜>",
               {Call("call_0", "get_weather", R"({"city":"Zürich","opts":{"unit":"c"}})"),
                Call("call_1", "function", R"({"note":"a tool named function"})")}});
  v.push_back(
      {"deepseek_malformed_then_valid",
       ToolCallFamily::kDeepSeek,
       "Try:<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
       "```json\n{\"city\": \"Paris\"\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
       "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {}});
  v.push_back({"deepseek_garbage_and_unknown",
               ToolCallFamily::kDeepSeek,
               "<｜tool▁calls▁begin｜>junk here<｜tool▁call▁begin｜>nuke<｜tool▁sep｜>{}"
               "<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"UTC\"}"
               "<｜tool▁call▁end｜><｜tool▁calls▁end｜> tail",
               {},
               Tools({"get_time"})});
  v.push_back({"deepseek_no_calls",
               ToolCallFamily::kDeepSeek,
               "Plain answer with <｜tool▁call▁begin｜ lookalike and <｜tool▁calls▁end｜> stray.",
               {}});
  v.push_back(
      {"deepseek_unterminated",
       ToolCallFamily::kDeepSeek,
       "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}",
       {}});
  return v;
}

std::vector<Sample> KimiSamples() {
  std::vector<Sample> v;
  v.push_back(
      {"kimi_two_calls",
       ToolCallFamily::kKimiK2,
       "Sure, checking both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Paris\", \"when\": {\"day\": \"今日\"}}"
       "<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>"
       "{\"q\": \"<|tool_call_end|> and <|tool_calls_section_end|> in a \\\"string\\\" {\"}"
       "<|tool_call_end|><|tool_calls_section_end|>",
       {Text("Sure, checking both."),
        Call("functions.get_weather:0", "get_weather", R"({"city":"Paris","when":{"day":"今日"}})"),
        Call("functions.search:1", "search",
             R"({"q":"<|tool_call_end|> and <|tool_calls_section_end|> in a \"string\" {"})")}});
  v.push_back({"kimi_malformed_then_valid",
               ToolCallFamily::kKimiK2,
               "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0"
               "<|tool_call_argument_begin|>{\"x\": 1<|tool_call_end|><|tool_call_begin|>"
               "functions.b:1<|tool_call_argument_begin|>{\"y\": \"ok\"}<|tool_call_end|>"
               "<|tool_calls_section_end|>After. ✓",
               {}});
  v.push_back(
      {"kimi_unknown_tool",
       ToolCallFamily::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.nope:0"
       "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
       "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
       {},
       Tools({"get_time"})});
  v.push_back({"kimi_unterminated_section",
               ToolCallFamily::kKimiK2,
               "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
               "<|tool_call_argument_begin|>{}<|tool_call_end|>",
               {}});
  return v;
}

std::vector<ToolCallEvent> Errors(const std::vector<ToolCallEvent>& events) {
  std::vector<ToolCallEvent> out;
  for (const auto& e : events) {
    if (e.kind == Kind::kError) out.push_back(e);
  }
  return out;
}

TEST(ToolCallParserTest, HermesRecoversFromMalformedCalls) {
  auto ev = RunWhole(ToolCallFamily::kHermes, HermesSamples()[4].text);
  ASSERT_EQ(ev.size(), 4u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0], Text("First:"));
  EXPECT_EQ(ev[1].kind, Kind::kError);
  EXPECT_THAT(ev[1].raw, testing::StartsWith("<tool_call>"));
  EXPECT_THAT(ev[1].raw, testing::EndsWith("</tool_call>"));
  EXPECT_EQ(ev[2], Text("Then:"));
  EXPECT_EQ(ev[3], Call("call_0", "get_time", "{}"));

  ev = RunWhole(ToolCallFamily::kHermes, HermesSamples()[5].text);
  ASSERT_EQ(ev.size(), 3u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].kind, Kind::kError);
  EXPECT_THAT(ev[0].text, testing::HasSubstr("'<'"));
  EXPECT_EQ(ev[1], Text("ok"));
  EXPECT_EQ(ev[2], Call("call_0", "b", R"({"y":[1,2]})"));

  // A string left open by a raw newline: the next <tool_call> starts afresh.
  ev = RunWhole(ToolCallFamily::kHermes, HermesSamples()[6].text);
  ASSERT_EQ(ev.size(), 3u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].kind, Kind::kError);
  EXPECT_THAT(ev[0].text, testing::HasSubstr("control character"));
  EXPECT_EQ(ev[1], Call("call_0", "b", "{}"));
  EXPECT_EQ(ev[2], Text("after"));
}

TEST(ToolCallParserTest, HermesUnknownToolAndUnterminated) {
  auto ev = RunWhole(ToolCallFamily::kHermes, HermesSamples()[7].text, Tools({"get_time"}));
  ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].kind, Kind::kError);
  EXPECT_EQ(ev[0].name, "rm_rf");
  EXPECT_EQ(ev[0].text, "unknown tool 'rm_rf'");
  EXPECT_EQ(ev[1], Call("call_0", "get_time", "{}"));

  ev = RunWhole(ToolCallFamily::kHermes, HermesSamples()[8].text);
  ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0], Text("Calling."));
  EXPECT_EQ(ev[1].kind, Kind::kError);
  EXPECT_THAT(ev[1].text, testing::HasSubstr("unterminated"));
  EXPECT_EQ(ev[1].raw, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n");
}

TEST(ToolCallParserTest, HermesLookalikesStayText) {
  const std::string text = HermesSamples()[3].text;
  EXPECT_THAT(RunWhole(ToolCallFamily::kHermes, text), testing::ElementsAre(Text(text)));
}

TEST(ToolCallParserTest, DeepSeekRecoveryAndUnknownTool) {
  auto ev = RunWhole(ToolCallFamily::kDeepSeek, DeepSeekSamples()[2].text);
  ASSERT_EQ(ev.size(), 3u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0], Text("Try:"));
  EXPECT_EQ(ev[1].kind, Kind::kError);
  EXPECT_THAT(ev[1].raw, testing::StartsWith("<｜tool▁call▁begin｜>function"));
  EXPECT_THAT(ev[1].raw, testing::EndsWith("<｜tool▁call▁end｜>"));
  EXPECT_EQ(ev[2], Call("call_0", "get_time", "{}"));

  ev = RunWhole(ToolCallFamily::kDeepSeek, DeepSeekSamples()[3].text, Tools({"get_time"}));
  ASSERT_EQ(ev.size(), 4u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].kind, Kind::kError);
  EXPECT_EQ(ev[0].raw, "junk here");
  EXPECT_EQ(ev[1].kind, Kind::kError);
  EXPECT_EQ(ev[1].text, "unknown tool 'nuke'");
  EXPECT_EQ(ev[2], Call("call_0", "get_time", R"({"tz":"UTC"})"));
  EXPECT_EQ(ev[3], Text("tail"));

  const std::string plain = DeepSeekSamples()[4].text;
  EXPECT_THAT(RunWhole(ToolCallFamily::kDeepSeek, plain), testing::ElementsAre(Text(plain)));

  ev = RunWhole(ToolCallFamily::kDeepSeek, DeepSeekSamples()[5].text);
  ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0], Text("x"));
  EXPECT_THAT(ev[1].text, testing::HasSubstr("unterminated tool call"));
}

TEST(ToolCallParserTest, KimiRecoveryUnknownToolAndUnterminated) {
  auto ev = RunWhole(ToolCallFamily::kKimiK2, KimiSamples()[1].text);
  ASSERT_EQ(ev.size(), 3u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].kind, Kind::kError);
  EXPECT_EQ(
      ev[0].raw,
      "<|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": 1<|tool_call_end|>");
  EXPECT_EQ(ev[1], Call("functions.b:1", "b", R"({"y":"ok"})"));
  EXPECT_EQ(ev[2], Text("After. ✓"));

  ev = RunWhole(ToolCallFamily::kKimiK2, KimiSamples()[2].text, Tools({"get_time"}));
  ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0].text, "unknown tool 'nope'");
  EXPECT_EQ(ev[1], Call("functions.get_time:1", "get_time", "{}"));

  ev = RunWhole(ToolCallFamily::kKimiK2, KimiSamples()[3].text);
  ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
  EXPECT_EQ(ev[0], Call("functions.get_time:0", "get_time", "{}"));
  EXPECT_THAT(ev[1].text, testing::HasSubstr("unterminated tool-call section"));
}

// A Kimi header whose id names no tool ("functions.:0", ":0") is an error
// event, and the calls after it still parse (found by tool_call_fuzzer).
TEST(ToolCallParserTest, KimiHeaderWithoutANameIsAnError) {
  for (const char* header : {":0", "functions.:0", "functions.:17", "functions."}) {
    const std::string text =
        std::string("<|tool_calls_section_begin|><|tool_call_begin|>") + header +
        "<|tool_call_argument_begin|>{\"x\": 1}<|tool_call_end|><|tool_call_begin|>functions.b:1"
        "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
    const auto ev = RunWhole(ToolCallFamily::kKimiK2, text);
    ASSERT_EQ(ev.size(), 2u) << header << ": " << testing::PrintToString(ev);
    EXPECT_EQ(ev[0].kind, Kind::kError) << header;
    EXPECT_THAT(ev[0].text, testing::HasSubstr("bad tool name")) << header;
    EXPECT_EQ(ev[1], Call("functions.b:1", "b", "{}")) << header;
  }
}

TEST(ToolCallParserTest, EveryChunkingGivesTheWholeTextEvents) {
  std::vector<Sample> all = HermesSamples();
  for (auto& s : DeepSeekSamples()) all.push_back(s);
  for (auto& s : KimiSamples()) all.push_back(s);
  for (const Sample& s : all) CheckStreamingProperty(s);
  // Each sample: all 2-chunk splits, one 1-byte split and 2000 random splits.
  EXPECT_EQ(g_random_splits, static_cast<int64_t>(all.size()) * 2001);
  std::printf("checked %zu samples: %lld two-chunk splits, %lld multi-chunk splits\n", all.size(),
              static_cast<long long>(g_two_chunk_splits), static_cast<long long>(g_random_splits));
}

// Random streams glued from fragments of each family's syntax (markers, half
// markers, JSON pieces, quotes, escapes, multi-byte characters, whole valid
// and broken calls) reach states no hand-written sample does; the streaming
// property must hold on all of them.
TEST(ToolCallParserTest, RandomFragmentStreamsAreChunkingIndependent) {
  const std::vector<std::string> common = {"Hello",
                                           " ",
                                           "\n",
                                           "<",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           "\\",
                                           ": ",
                                           ", ",
                                           "é",
                                           "😀",
                                           "日本",
                                           "\"name\"",
                                           "\"arguments\"",
                                           "\"f\"",
                                           "{\"a\": 1}",
                                           "```json\n",
                                           "```",
                                           "x"};
  struct Family {
    ToolCallFamily family;
    std::vector<std::string> fragments;
  };
  const std::vector<Family> families = {
      {ToolCallFamily::kHermes,
       {"<tool_call>", "</tool_call>", "<tool", "</tool_ca",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"}</tool_call>\"}}\n</tool_call>",
        "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"k\\\": [1]}\"}</tool_call>"}},
      {ToolCallFamily::kDeepSeek,
       {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁ca", "function", "get_time\n",
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": "
        "\"<｜tool▁call▁end｜>\"}\n```"
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>h<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
        "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{\"b\": [true, null]}<｜tool▁call▁end｜>"}},
      {ToolCallFamily::kKimiK2,
       {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<|tool_ca", "functions.f:0",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.h:1<|tool_call_argument_begin|>{}"
        "<|tool_call_end|>",
        "<|tool_call_begin|>functions.f:3<|tool_call_argument_begin|>{\"s\": \"<|tool_call_end|>\"}"
        "<|tool_call_end|>"}},
  };
  std::mt19937_64 rng(20261129);
  int64_t streams = 0, runs = 0;
  for (const Family& f : families) {
    std::vector<std::string> pieces = common;
    pieces.insert(pieces.end(), f.fragments.begin(), f.fragments.end());
    int calls = 0, errors = 0;
    for (int n = 0; n < 150; ++n) {
      std::string text;
      const int count = 1 + static_cast<int>(rng() % 30);
      for (int k = 0; k < count; ++k) text += pieces[rng() % pieces.size()];
      ++streams;
      const auto whole = RunWhole(f.family, text);
      for (const auto& e : whole) {
        calls += e.kind == Kind::kToolCall;
        errors += e.kind == Kind::kError;
      }
      for (size_t i = 0; i <= text.size(); ++i) {
        ++runs;
        ASSERT_EQ(Merge(RunChunks(f.family, {}, Cut(text, {i}))), whole)
            << "stream " << testing::PrintToString(text) << " split at " << i;
      }
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<size_t> cuts;
        for (size_t at = 1 + rng() % 4; at < text.size(); at += 1 + rng() % 6) cuts.push_back(at);
        ++runs;
        ASSERT_EQ(Merge(RunChunks(f.family, {}, Cut(text, cuts))), whole)
            << "stream " << testing::PrintToString(text);
      }
    }
    // The streams must exercise both parsed calls and recovery.
    EXPECT_GT(calls, 20) << ToolCallFamilyName(f.family);
    EXPECT_GT(errors, 20) << ToolCallFamilyName(f.family);
    std::printf("%s: %d calls, %d errors in the whole-text runs\n",
                std::string(ToolCallFamilyName(f.family)).c_str(), calls, errors);
  }
  std::printf("random fragment streams: %lld streams, %lld chunked runs\n",
              static_cast<long long>(streams), static_cast<long long>(runs));
}

TEST(ToolCallParserTest, TextStreamsPromptlyAndHoldsOnlyPossibleMarkers) {
  auto p = ToolCallParser::Create(ToolCallFamily::kHermes);
  EXPECT_THAT(p->Feed("Hello wor"), testing::ElementsAre(Text("Hello wor")));
  // "<tool" may still become <tool_call>: held, and the space before it too.
  EXPECT_THAT(p->Feed("ld <tool"), testing::ElementsAre(Text("ld")));
  EXPECT_THAT(p->Feed("box> x"), testing::ElementsAre(Text(" <toolbox> x")));
  // Half of a UTF-8 sequence waits for the rest.
  EXPECT_THAT(p->Feed("\xC3"), testing::IsEmpty());
  EXPECT_THAT(p->Feed("\xA9!"), testing::ElementsAre(Text("\xC3\xA9!")));
  EXPECT_THAT(p->Feed("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_ca"),
              testing::IsEmpty());
  EXPECT_THAT(p->Feed("ll>"), testing::ElementsAre(Call("call_0", "f", "{}")));
  EXPECT_THAT(p->Finish(), testing::IsEmpty());
  // Ids keep counting across messages of one conversation.
  p->Feed("<tool_call>{\"name\": \"g\", \"arguments\": {\"k\": 1}}</tool_call>");
  EXPECT_THAT(p->Finish(), testing::IsEmpty());
  auto again = p->Feed("<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, "call_2");
  // An undecided marker prefix at the end of the message is plain text.
  p->Finish();
  p->Feed("see <tool_ca");
  EXPECT_THAT(Merge(p->Finish()), testing::ElementsAre(Text(" <tool_ca")));
}

// Returns "" after recording a failure that names the file.
std::string ReadChatTemplate(const std::string& model) {
  const std::string path =
      std::string(STRATA_TEXT_DATA_DIR) + "/tokenizers/" + model + "/tokenizer_config.json";
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string()) {
    ADD_FAILURE() << path << " has no chat_template string";
    return "";
  }
  return j["chat_template"].get<std::string>();
}

TEST(ToolCallParserTest, ForTemplatePicksTheFamilyFromTheTemplate) {
  auto qwen = ToolCallParser::ForTemplate(ReadChatTemplate("qwen3"));
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ((*qwen)->family(), ToolCallFamily::kHermes);
  auto ds = ToolCallParser::ForTemplate(ReadChatTemplate("deepseek_v3"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->family(), ToolCallFamily::kDeepSeek);
  // Kimi K2's template spells its section and call markers like this.
  auto kimi = ToolCallParser::ForTemplate(
      "{%- if message.get('tool_calls') -%}<|tool_calls_section_begin|>{%- for tc in "
      "message.tool_calls -%}<|tool_call_begin|>{{ tc.id }}<|tool_call_argument_begin|>{{ "
      "tc.function.arguments }}<|tool_call_end|>{%- endfor -%}<|tool_calls_section_end|>{%- endif "
      "-%}");
  ASSERT_TRUE(kimi.ok()) << kimi.status();
  EXPECT_EQ((*kimi)->family(), ToolCallFamily::kKimiK2);
  EXPECT_TRUE(absl::IsNotFound(
      ToolCallParser::ForTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").status()));

  for (const char* name : {"hermes", "qwen", "deepseek", "deepseek_v31", "kimi_k2"}) {
    auto p = ToolCallParser::ForFamily(name);
    ASSERT_TRUE(p.ok()) << name;
  }
  EXPECT_EQ((*ToolCallParser::ForFamily("kimi"))->family(), ToolCallFamily::kKimiK2);
  EXPECT_TRUE(absl::IsInvalidArgument(ToolCallParser::ForFamily("llama").status()));
}

TEST(ToolCallParserTest, ErrorsNeverDropLaterCallsAcrossFamilies) {
  // After every kind of error the same parser still parses a clean call.
  struct Case {
    ToolCallFamily family;
    std::string bad, good;
    ToolCallEvent want;
  };
  const std::vector<Case> cases = {
      {ToolCallFamily::kHermes, "<tool_call></tool_call>",
       "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", Call("call_0", "f", "{}")},
      {ToolCallFamily::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": \"f\"}</tool_call>", Call("call_0", "f", "{}")},
      {ToolCallFamily::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
       "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", Call("call_0", "f", "{}")},
      {ToolCallFamily::kDeepSeek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no separator here<｜tool▁call▁end｜>",
       "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       Call("call_0", "f", "{}")},
      {ToolCallFamily::kKimiK2,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
       "[1, 2]<|tool_call_end|>",
       "<|tool_call_begin|>functions.f:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
       "<|tool_calls_section_end|>",
       Call("functions.f:1", "f", "{}")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bad);
    const auto ev = RunWhole(c.family, c.bad + c.good);
    ASSERT_EQ(ev.size(), 2u) << testing::PrintToString(ev);
    EXPECT_EQ(ev[0].kind, Kind::kError);
    EXPECT_EQ(ev[1], c.want);
  }
}

}  // namespace
}  // namespace strata
