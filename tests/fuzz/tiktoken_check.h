// The oracle shared by the tiktoken rank-file fuzzer and its corpus replay:
// the bytes up to the first NUL are a rank file ("<base64 token> <rank>" per
// line, as o200k_base.tiktoken, cl100k_base.tiktoken and Kimi's
// tiktoken.model), the bytes after it a text to encode. Loading may fail
// with a status that names the file; a model that loads must encode every
// piece into ranks whose bytes spell the piece again, and the Kimi-layout
// tokenizer on top of it (256 reserved specials after the ranks) must keep
// CheckTokenizerUse's promises and give the text back from its ids.
#ifndef STRATA_TESTS_FUZZ_TIKTOKEN_CHECK_H_
#define STRATA_TESTS_FUZZ_TIKTOKEN_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe_tiktoken.h"
#include "text/tokenizer_tiktoken.h"
#include "tokenizer_use_check.h"

namespace strata::fuzz {

struct TiktokenResult {
  bool loaded = false;
  std::string violation;
};

// Encodes `piece` (any bytes) and checks that the ranks spell it.
inline std::string CheckRankEncode(const text::RankBpeModel& m, std::string_view piece) {
  std::vector<int32_t> ids, again;
  m.Encode(piece, &ids);
  m.Encode(piece, &again);
  if (ids != again) return "two encodings of the same piece differ";
  std::string spelled;
  for (int32_t id : ids) {
    if (id < 0 || id >= m.size()) return "a rank outside the model";
    spelled += m.TokenBytes(id);
  }
  if (spelled != piece) return "the ranks of a piece do not spell it";
  return "";
}

inline TiktokenResult CheckTiktoken(const uint8_t* data, size_t size) {
  TiktokenResult r;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view ranks = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  const std::string label = "fuzz.tiktoken";
  auto model = text::RankBpeModel::FromText(ranks, label);
  if (!model.ok()) {
    if (model.status().code() != absl::StatusCode::kInvalidArgument ||
        model.status().message().rfind(label + ":", 0) != 0) {
      r.violation = "load error is not a labelled InvalidArgument: " + model.status().ToString();
    }
    return r;
  }
  r.loaded = true;
  const text::RankBpeModel& m = **model;
  for (int32_t id = 0; id < m.size() && id < 512; ++id) {
    const std::string& bytes = m.TokenBytes(id);
    if (!bytes.empty() && m.BytesToId(bytes) != id) {
      r.violation = "BytesToId does not invert TokenBytes";
      return r;
    }
  }
  for (const std::string& piece : TokenizerSampleTexts()) {
    r.violation = CheckRankEncode(m, piece);
    if (!r.violation.empty()) return r;
  }
  r.violation = CheckRankEncode(m, text);
  if (!r.violation.empty()) return r;

  const text::TokenizerConfig config;
  auto specials = text::KimiSpecialTokens(config, m.size(), "tokenizer_config.json", label);
  if (!specials.ok()) {
    r.violation = "no specials for a default config: " + specials.status().ToString();
    return r;
  }
  auto t = text::TiktokenTokenizer::Load(*std::move(model), label, text::kKimiPattern,
                                         *std::move(specials), config);
  if (!t.ok()) {
    if (t.status().message().rfind(label + ":", 0) != 0) {
      r.violation = "tokenizer error does not name the file: " + t.status().ToString();
    }
    return r;
  }
  r.violation = CheckTokenizerUse(**t, text);
  if (!r.violation.empty()) return r;
  // Kimi's pattern matches every character, so nothing is dropped.
  for (std::string_view s : {std::string_view("x <|reserved_token_0|> y"), text}) {
    if (text::FirstInvalidUtf8(s) != s.size()) continue;
    auto ids = (*t)->Encode(s, EncodeOptions());
    auto back =
        ids.ok() ? (*t)->Decode(*ids, DecodeOptions()) : StatusOr<std::string>(ids.status());
    if (!back.ok() || *back != s) {
      r.violation = "decoding the encoded text does not give it back";
      return r;
    }
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_TIKTOKEN_CHECK_H_
