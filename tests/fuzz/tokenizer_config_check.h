// The oracle shared by the tokenizer_config.json fuzzer and its corpus
// replay: bytes as a tokenizer_config.json, read as the tokenizers read it
// (BOS/EOS and whether to add them, added_tokens_decoder) and as the chat
// template loader reads it (chat_template, a string or a named list, and the
// special-token variables). A config that reads is applied to a small fixed
// tokenizer.json and to a small fixed rank file in Kimi's layout; each
// tokenizer either refuses it with a status naming a file or keeps
// CheckTokenizerUse's promises. A chat template that compiles is rendered
// under a small budget with jinja_check.h's chat context. Rejection is always
// fine; a crash, UB, a hang or a broken promise is not.
#ifndef STRATA_TESTS_FUZZ_TOKENIZER_CONFIG_CHECK_H_
#define STRATA_TESTS_FUZZ_TOKENIZER_CONFIG_CHECK_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "jinja_check.h"
#include "text/bpe_tiktoken.h"
#include "text/chat_template.h"
#include "text/tokenizer_config.h"
#include "text/tokenizer_hf.h"
#include "text/tokenizer_tiktoken.h"
#include "text/tool_call_parser.h"
#include "tokenizer_use_check.h"

namespace strata::fuzz {

struct TokenizerConfigResult {
  bool read = false;         // ParseTokenizerConfig accepted it
  bool template_ok = false;  // it has a chat template that compiles and renders
  std::string violation;
};

// A byte-level BPE tokenizer.json with the special tokens chat configs name.
inline constexpr char kConfigTokenizerJson[] = R"({
  "added_tokens": [
    {"id": 9, "content": "<s>", "special": true},
    {"id": 10, "content": "</s>", "special": true},
    {"id": 11, "content": "<|im_start|>", "special": true},
    {"id": 12, "content": "<|im_end|>", "special": true}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "\u0120": 5,
                                      "\u0120ab": 6, "h": 7, "i": 8},
            "merges": ["a b", "ab c", "\u0120 ab"]}})";

// A rank file: every byte, then a few merges.
inline const std::string& ConfigRankFile() {
  static const std::string* text = [] {
    auto* s = new std::string;
    int rank = 0;
    for (int b = 0; b < 256; ++b) {
      absl::StrAppend(s, absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", rank++,
                      "\n");
    }
    for (const char* merged : {"ab", "abc", " a", "he", "ll", "hell", "hello", "<|", "|>"}) {
      absl::StrAppend(s, absl::Base64Escape(merged), " ", rank++, "\n");
    }
    return s;
  }();
  return *text;
}

inline std::string LabelledViolation(const Status& s, const std::string& label, const char* what) {
  // Template errors read "<label>[name]:line:column: ...".
  if (s.message().rfind(label, 0) != 0) {
    return std::string(what) + " error does not name " + label + ": " + s.ToString();
  }
  return "";
}

inline std::string CheckConfigOnTokenizers(const text::TokenizerConfig& config) {
  auto hf = text::HfTokenizer::FromText(kConfigTokenizerJson, "tokenizer.json", config);
  if (!hf.ok()) {
    if (std::string v = LabelledViolation(hf.status(), "tokenizer.json", "tokenizer.json");
        !v.empty()) {
      return v;
    }
  } else if (std::string v = CheckTokenizerUse(**hf, ""); !v.empty()) {
    return "tokenizer.json: " + v;
  }

  auto ranks = text::RankBpeModel::FromText(ConfigRankFile(), "tiktoken.model");
  if (!ranks.ok()) return "the fixed rank file does not load: " + ranks.status().ToString();
  auto specials =
      text::KimiSpecialTokens(config, (*ranks)->size(), "tokenizer_config.json", "tiktoken.model");
  if (!specials.ok()) {
    return LabelledViolation(specials.status(), "tokenizer_config.json", "specials");
  }
  std::string contents;
  for (const text::AddedToken& a : config.added_tokens_decoder)
    absl::StrAppend(&contents, a.content, " ");
  if (text::FirstInvalidUtf8(contents) != contents.size()) contents.clear();
  // A plain pattern: the config is what is under test here, and compiling
  // Kimi's for every input would dominate the run (tiktoken_check.h uses it).
  auto tk = text::TiktokenTokenizer::Load(*std::move(ranks), "tiktoken.model", "\\S+|\\s+",
                                          *std::move(specials), config);
  if (!tk.ok()) return LabelledViolation(tk.status(), "tiktoken.model", "tiktoken");
  if (std::string v = CheckTokenizerUse(**tk, contents); !v.empty()) return "tiktoken: " + v;
  return "";
}

inline std::string CheckConfigTemplate(std::string_view text, const std::string& label,
                                       TokenizerConfigResult* r) {
  auto tmpl = ChatTemplate::FromTokenizerConfig(text, label);
  if (!tmpl.ok()) {
    if (absl::IsNotFound(tmpl.status())) return "";
    if (tmpl.status().code() != absl::StatusCode::kInvalidArgument) {
      return "template error is not InvalidArgument: " + tmpl.status().ToString();
    }
    return LabelledViolation(tmpl.status(), label, "template");
  }
  const jinja::RenderOptions options = FuzzRenderOptions();
  auto out = (*tmpl)->RenderOrdered(DefaultJinjaContext(), options);
  if (!out.ok()) {
    if (out.status().code() != absl::StatusCode::kInvalidArgument) {
      return "render error is not InvalidArgument: " + out.status().ToString();
    }
    return "";
  }
  if (static_cast<int64_t>(out->size()) > options.limits.max_output_bytes) {
    return "output exceeds max_output_bytes";
  }
  r->template_ok = true;
  return "";
}

inline TokenizerConfigResult CheckTokenizerConfig(const uint8_t* data, size_t size) {
  TokenizerConfigResult r;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string label = "tokenizer_config.json";
  // The chat template is read whether or not the tokenizers accept the rest.
  r.violation = CheckConfigTemplate(text, label, &r);
  if (!r.violation.empty()) return r;
  // Which tool-call syntax the template spells (text_model.cc reads it so).
  if (auto j = ParseBoundedJson<nlohmann::json>(text, label); j.ok() && j->is_object() &&
                                                              j->contains("chat_template") &&
                                                              (*j)["chat_template"].is_string()) {
    (void)ToolCallParser::ForTemplate((*j)["chat_template"].get<std::string>());
  }
  auto config = text::ParseTokenizerConfig(text, label);
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) {
      r.violation = "read error is not InvalidArgument: " + config.status().ToString();
    } else {
      r.violation = LabelledViolation(config.status(), label, "read");
    }
    return r;
  }
  r.read = true;
  for (const text::AddedToken& a : config->added_tokens_decoder) {
    if (a.id < 0) {
      r.violation = "accepted a negative added_tokens_decoder id";
      return r;
    }
  }
  r.violation = CheckConfigOnTokenizers(*config);
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_TOKENIZER_CONFIG_CHECK_H_
