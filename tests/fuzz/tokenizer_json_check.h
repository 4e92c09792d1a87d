// The oracle shared by the tokenizer.json fuzzer and its corpus replay: the
// bytes up to the first NUL are a tokenizer.json, the bytes after it a text
// to encode. Loading may fail with a status that names the file; a tokenizer
// that loads must then keep CheckTokenizerUse's promises on that text and on
// fixed samples. A crash, UB, a hang or an allocation without bound is caught
// by the sanitizers and libFuzzer themselves.
#ifndef STRATA_TESTS_FUZZ_TOKENIZER_JSON_CHECK_H_
#define STRATA_TESTS_FUZZ_TOKENIZER_JSON_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "text/tokenizer_hf.h"
#include "tokenizer_use_check.h"

namespace strata::fuzz {

struct TokenizerJsonResult {
  bool loaded = false;
  std::string violation;
};

inline std::string TokenizerLoadViolation(const Status& s, const std::string& label) {
  if (s.message().rfind(label + ":", 0) != 0)
    return "load error does not name the file: " + s.ToString();
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kUnimplemented) {
    return "load error is neither InvalidArgument nor Unimplemented: " + s.ToString();
  }
  return "";
}

inline TokenizerJsonResult CheckTokenizerJson(const uint8_t* data, size_t size) {
  TokenizerJsonResult r;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  const std::string label = "tokenizer.json";
  auto t = text::HfTokenizer::FromText(json, label, text::TokenizerConfig());
  if (!t.ok()) {
    r.violation = TokenizerLoadViolation(t.status(), label);
    return r;
  }
  r.loaded = true;
  r.violation = CheckTokenizerUse(**t, text);
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_TOKENIZER_JSON_CHECK_H_
