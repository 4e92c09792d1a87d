// What every loaded tokenizer must do with any text, shared by the oracles of
// the tokenizer-file fuzzers: Encode refuses invalid UTF-8 and otherwise gives
// ids inside the vocabulary, the same ids every time (the BPE caches must not
// change an answer), and every id it gives can be decoded and looked up;
// ids outside the vocabulary are refused by Decode and TokenBytes.
#ifndef STRATA_TESTS_FUZZ_TOKENIZER_USE_CHECK_H_
#define STRATA_TESTS_FUZZ_TOKENIZER_USE_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"
#include "text/unicode.h"

namespace strata::fuzz {

// Texts every tokenizer is run on besides the input's own: words, runs of
// spaces, digits, CJK, combining marks, emoji and common special-token
// spellings, so that pre-tokenizers, normalizers and added tokens all fire.
inline const std::vector<std::string>& TokenizerSampleTexts() {
  static const auto* texts = new std::vector<std::string>{
      "",
      "Hello world! It's 2024, isn't it?",
      "  a  b\n\n\tc   ",
      "ab abc aab <s> </s>",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e caf\xc3\xa9 e\xcc\x81 \xf0\x9f\x98\x80",  // 日本語 café
                                                                                      // é 😀
      "<|im_start|>user\nhi<|im_end|><|endoftext|>",
      "1234567 x==y; \\\\ ''",
  };
  return *texts;
}

inline std::string CheckEncode(const Tokenizer& t, std::string_view text) {
  const bool valid = text::FirstInvalidUtf8(text) == text.size();
  const int32_t vocab = t.vocab_size();
  for (const bool specials : {true, false}) {
    EncodeOptions options;
    options.add_special_tokens = specials;
    options.parse_special = specials;
    StatusOr<std::vector<int32_t>> ids = t.Encode(text, options);
    if (!valid) {
      if (ids.ok()) return "encoded invalid UTF-8";
      continue;
    }
    if (!ids.ok()) {
      // A pre-tokenizer's own regex may give up on a pathological subject.
      if (ids.status().code() == absl::StatusCode::kInternal) continue;
      return "Encode failed on valid UTF-8: " + ids.status().ToString();
    }
    StatusOr<std::vector<int32_t>> again = t.Encode(text, options);
    if (!again.ok() || *again != *ids) return "two encodings of the same text differ";
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab) return "Encode gave an id outside the vocabulary";
      if (!t.TokenBytes(id).ok()) return "TokenBytes failed on an encoded id";
    }
    for (const bool skip : {false, true}) {
      DecodeOptions d;
      d.skip_special_tokens = skip;
      StatusOr<std::string> text_back = t.Decode(*ids, d);
      if (!text_back.ok()) return "Decode failed on encoded ids: " + text_back.status().ToString();
      if (text::FirstInvalidUtf8(*text_back) != text_back->size())
        return "Decode gave invalid UTF-8";
    }
  }
  return "";
}

inline std::string CheckTokenizerUse(const Tokenizer& t, std::string_view own_text) {
  const int32_t vocab = t.vocab_size();
  if (vocab < 0) return "negative vocab_size";
  if (t.Decode({-1}, {}).ok() || t.Decode({vocab}, {}).ok() || t.TokenBytes(vocab).ok() ||
      t.IsSpecial(-1) || t.IsSpecial(vocab)) {
    return "an id outside the vocabulary was accepted";
  }
  // Every id on its own (the first few hundred), as streaming decodes them.
  for (int32_t id = 0; id < vocab && id < 512; ++id) {
    if (!t.TokenBytes(id).ok()) return "TokenBytes failed inside the vocabulary";
    StatusOr<std::string> s = t.Decode({id}, {});
    if (!s.ok()) return "Decode of one id failed: " + s.status().ToString();
  }
  for (const std::string& text : TokenizerSampleTexts()) {
    if (std::string v = CheckEncode(t, text); !v.empty()) return v;
  }
  if (std::string v = CheckEncode(t, own_text); !v.empty()) return v;
  for (const auto& token : {t.bos_token(), t.eos_token()}) {
    if (!token) continue;
    if (std::optional<int32_t> id = t.TokenToId(*token); id && (*id < 0 || *id >= vocab)) {
      return "TokenToId gave an id outside the vocabulary";
    }
  }
  return "";
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_TOKENIZER_USE_CHECK_H_
