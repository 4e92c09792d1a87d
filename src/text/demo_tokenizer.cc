// The demo tokenizer: GPT-2 byte alphabet, merges of frequent English pairs
// (then letter pairs) up to the vocabulary size, and Qwen3's added tokens.
#include "text/demo_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/file_error.h"

namespace strata {
namespace {

// Qwen3's chat template (Apache-2.0, from its tokenizer_config.json): real
// reasoning and tool-call formatting, so the demo exercises the same paths as
// a Qwen3 model.
constexpr char kChatTemplate[] = R"JINJA({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})JINJA";

// Added tokens, in id order after the BPE vocabulary (special as in Qwen3).
constexpr std::pair<const char*, bool> kAddedTokens[] = {
    {"<|endoftext|>", true}, {"<|im_start|>", true},  {"<|im_end|>", true},
    {"<think>", false},      {"</think>", false},     {"<tool_call>", false},
    {"</tool_call>", false}, {"<tool_response>", false}, {"</tool_response>", false},
};

// GPT-2's reversible byte -> printable code point map (ByteLevel).
std::vector<std::string> ByteAlphabet() {
  std::vector<int> code(256, -1);
  for (int b = '!'; b <= '~'; ++b) code[b] = b;
  for (int b = 0xA1; b <= 0xAC; ++b) code[b] = b;
  for (int b = 0xAE; b <= 0xFF; ++b) code[b] = b;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (code[b] < 0) code[b] = next++;
  }
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int c = code[b];
    // Code points below 0x800: one or two UTF-8 bytes.
    if (c < 0x80) {
      out[b] = std::string(1, static_cast<char>(c));
    } else {
      out[b] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return out;
}

}  // namespace

Status WriteDemoTokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FileError(absl::StrCat(dir, ": cannot create directory"), ec);

  const std::vector<std::string> bytes = ByteAlphabet();
  const std::string space = bytes[' '];
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::vector<std::string> id_to_token;
  for (int b = 0; b < 256; ++b) {
    vocab[bytes[b]] = b;
    id_to_token.push_back(bytes[b]);
  }
  const int32_t bpe_size = kDemoTokenizerVocabSize - static_cast<int32_t>(std::size(kAddedTokens));
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  std::set<std::string> have(id_to_token.begin(), id_to_token.end());
  auto merge = [&](const std::string& a, const std::string& b) {
    if (static_cast<int32_t>(id_to_token.size()) >= bpe_size) return;
    if (!have.count(a) || !have.count(b) || have.count(a + b)) return;
    merges.push_back(nlohmann::ordered_json::array({a, b}));
    vocab[a + b] = static_cast<int32_t>(id_to_token.size());
    id_to_token.push_back(a + b);
    have.insert(a + b);
  };
  // Frequent English pieces first, then a space before each letter, then
  // every letter pair until the vocabulary is full.
  const char* const kPairs[][2] = {{"t", "h"}, {"h", "e"}, {"i", "n"}, {"e", "r"}, {"a", "n"}, {"r", "e"},
                                   {"o", "n"}, {"a", "t"}, {"e", "n"}, {"n", "d"}, {"o", "u"}, {"i", "s"},
                                   {"o", "r"}, {"e", "s"}, {"i", "t"}, {"a", "l"}, {"a", "r"}, {"s", "t"},
                                   {"in", "g"}, {"th", "e"}, {"e", "d"}, {"l", "l"}, {"o", "w"}, {"l", "e"}};
  for (const auto& p : kPairs) merge(p[0], p[1]);
  for (char c = 'a'; c <= 'z'; ++c) merge(space, std::string(1, c));
  for (const char* w : {"the", "in", "an", "re", "on", "is", "it", "al", "ar", "st", "ing", "ed", "er", "or"}) {
    merge(space + std::string(1, w[0]), std::string(w + 1));
  }
  merge(bytes['\n'], bytes['\n']);
  merge(space, space);
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) merge(std::string(1, a), std::string(1, b));
  }

  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  nlohmann::ordered_json decoder_map = nlohmann::ordered_json::object();
  int32_t id = static_cast<int32_t>(id_to_token.size());
  for (const auto& [content, special] : kAddedTokens) {
    nlohmann::ordered_json t = {{"id", id},         {"content", content}, {"single_word", false},
                                {"lstrip", false},  {"rstrip", false},    {"normalized", false},
                                {"special", special}};
    added.push_back(t);
    t.erase("id");
    decoder_map[std::to_string(id)] = t;
    ++id;
  }
  const nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  const nlohmann::ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  const nlohmann::ordered_json config = {{"add_bos_token", false},
                                         {"add_eos_token", false},
                                         {"added_tokens_decoder", decoder_map},
                                         {"bos_token", nullptr},
                                         {"chat_template", kChatTemplate},
                                         {"eos_token", "<|im_end|>"},
                                         {"pad_token", "<|endoftext|>"},
                                         {"model_max_length", 4096}};
  for (const auto& [name, json] : {std::pair<const char*, const nlohmann::ordered_json*>{"tokenizer.json", &tokenizer},
                                   {"tokenizer_config.json", &config}}) {
    const fs::path path = fs::path(dir) / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << json->dump(1);
    out.close();
    if (!out) return FileErrorFromErrno(absl::StrCat(path.string(), ": cannot write"));
  }
  if (id != kDemoTokenizerVocabSize) {
    return absl::InternalError(absl::StrCat("demo tokenizer has ", id, " ids, expected ", kDemoTokenizerVocabSize));
  }
  return OkStatus();
}

}  // namespace strata
