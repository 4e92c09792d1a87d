// PCRE2 (UTF + UCP, JIT) regular expressions for pre-tokenization. Patterns
// written for Oniguruma (tokenizer.json) or Rust's regex crate (tiktoken) are
// translated where PCRE2 differs: `\s` there is Unicode White_Space, which
// includes U+0085, `$` means the end of the subject only, and `\p{Han}` is the
// Script property (PCRE2 would test Script_Extensions).
#ifndef STRATA_TEXT_PRETOKENIZER_REGEX_H_
#define STRATA_TEXT_PRETOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata::text {

class Regex {
 public:
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Errors name the pattern position PCRE2 reports.
  static StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A pattern matching `literal` exactly.
  static StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);

  // Appends the [start, end) byte spans of all non-overlapping leftmost
  // matches in `subject` (valid UTF-8; the whole subject is the match context,
  // so lookarounds see its ends as text boundaries). Empty matches are skipped.
  Status FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// `\s`/`\S` rewritten to White_Space semantics and script names to the
// Script property (see the file comment).
std::string TranslatePattern(std::string_view pattern);

}  // namespace strata::text

#endif  // STRATA_TEXT_PRETOKENIZER_REGEX_H_
