// Lexer following jinja2/lexer.py rule by rule (see the comments on each
// whitespace-control case) so that rendered whitespace is byte-identical.
#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "text/jinja/value.h"

namespace strata::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool AllSpace(const std::string& s, size_t from) {
  for (size_t i = from; i < s.size(); ++i) {
    if (!IsSpace(s[i])) return false;
  }
  return true;
}

std::string RStrip(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && IsSpace(s[end - 1])) --end;
  return s.substr(0, end);
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& label, const LexerOptions& options)
      : src_(std::move(source)), label_(label), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        Emit(TokenType::kText, src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        // "{%-": strip all whitespace before the tag, newlines included.
        text = RStrip(text);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        // lstrip_blocks: drop spaces between the line start and a block or
        // comment tag when nothing else is on that line before it.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting_) && l_pos < text.size() && AllSpace(text, l_pos)) {
          text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(TokenType::kText, text, pos_);
      size_t after_open = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        STRATA_RETURN_IF_ERROR(LexComment(tag, after_open));
      } else if (kind == '%') {
        bool is_raw = false;
        STRATA_RETURN_IF_ERROR(TryLexRaw(tag, after_open, &is_raw));
        if (!is_raw) STRATA_RETURN_IF_ERROR(LexTag(tag, after_open, /*block=*/true));
      } else {
        STRATA_RETURN_IF_ERROR(LexTag(tag, after_open, /*block=*/false));
      }
    }
    Token end{TokenType::kEnd, "", 0, 0};
    Locate(src_.size(), &end);
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  void Locate(size_t offset, Token* t) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t->line = static_cast<int>(line_index + 1);
    // Columns count code points from the line start. Tokens come in order, so
    // counting goes on from the previous one on the same line: rescanning
    // from the start would make a template written on one line quadratic.
    size_t from = line_starts_[line_index];
    int64_t column = 1;
    if (last_line_ == line_index && last_offset_ >= from && last_offset_ <= offset) {
      from = last_offset_;
      column = last_column_;
    }
    for (size_t i = from; i < offset; ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++column;
    }
    last_line_ = line_index;
    last_offset_ = offset;
    last_column_ = column;
    t->column = static_cast<int>(std::min<int64_t>(column, std::numeric_limits<int>::max()));
  }

  void Emit(TokenType type, std::string value, size_t offset) {
    Token t{type, std::move(value), 0, 0};
    Locate(offset, &t);
    tokens_.push_back(std::move(t));
  }

  Status ErrorAt(size_t offset, const std::string& message) const {
    Token t;
    Locate(offset, &t);
    return LocatedError(label_, t.line, t.column, message);
  }

  // Consumes the end of a block-like tag ("%}" or "#}") whose closing
  // characters start at `close` (the "%"/"#"), given the modifier before it.
  // "-%}" eats all following whitespace; "+%}" keeps it; plain "%}" eats one
  // newline under trim_blocks.
  size_t ConsumeBlockEnd(size_t close, char modifier) {
    size_t p = close + 2;
    if (modifier == '-') {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
    } else if (modifier != '+' && options_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = src_[p - 1] == '\n';
    return p;
  }

  Status LexComment(size_t tag, size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) return ErrorAt(tag, "Missing end of comment tag");
    char modifier = close > body ? src_[close - 1] : '\0';
    pos_ = ConsumeBlockEnd(close, modifier);
    return OkStatus();
  }

  // {% raw %}...{% endraw %}: the body is emitted verbatim.
  Status TryLexRaw(size_t tag, size_t body, bool* is_raw) {
    size_t p = body;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return OkStatus();
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
      return OkStatus();
    }
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    // The raw opening tag has no trim_blocks newline, only "-%}" stripping.
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return OkStatus();
    }
    *is_raw = true;
    size_t search = p;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) return ErrorAt(tag, "Missing end of raw directive");
      size_t q = open + 2;
      char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : '\0';
      if (sign) ++q;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      char modifier = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) modifier = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string text = src_.substr(p, open - p);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && options_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 && l_pos < text.size() && AllSpace(text, l_pos)) text.resize(l_pos);
      }
      if (!text.empty()) Emit(TokenType::kText, text, p);
      pos_ = ConsumeBlockEnd(q, modifier);
      return OkStatus();
    }
  }

  // Tokens inside {{ }} or {% %} up to the matching end, which only counts
  // when brackets are balanced (so "}}" can close a dict literal).
  Status LexTag(size_t tag, size_t p, bool block) {
    Emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", tag);
    std::vector<char> brackets;
    while (true) {
      if (p >= src_.size())
        return ErrorAt(tag, block ? "unexpected end of template, expected end of block tag"
                                  : "unexpected end of template, expected end of print statement");
      char c = src_[p];
      if (brackets.empty()) {
        if (block) {
          if (src_.compare(p, 3, "-%}") == 0 || src_.compare(p, 3, "+%}") == 0) {
            Emit(TokenType::kBlockEnd, "", p);
            pos_ = ConsumeBlockEnd(p + 1, c);
            return OkStatus();
          }
          if (src_.compare(p, 2, "%}") == 0) {
            Emit(TokenType::kBlockEnd, "", p);
            pos_ = ConsumeBlockEnd(p, '\0');
            return OkStatus();
          }
        } else {
          if (src_.compare(p, 3, "-}}") == 0) {
            Emit(TokenType::kVariableEnd, "", p);
            p += 3;
            while (p < src_.size() && IsSpace(src_[p])) ++p;
            line_starting_ = src_[p - 1] == '\n';
            pos_ = p;
            return OkStatus();
          }
          if (src_.compare(p, 2, "}}") == 0) {
            Emit(TokenType::kVariableEnd, "", p);
            pos_ = p + 2;
            line_starting_ = false;
            return OkStatus();
          }
        }
      }
      if (IsSpace(c)) {
        ++p;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        STRATA_ASSIGN_OR_RETURN(p, LexNumber(p));
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = p;
        while (p < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
          ++p;
        }
        Emit(TokenType::kName, src_.substr(start, p - start), start);
        continue;
      }
      if (c == '\'' || c == '"') {
        STRATA_ASSIGN_OR_RETURN(p, LexString(p));
        continue;
      }
      static const char* kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : kTwoCharOps) {
        if (src_.compare(p, 2, op) == 0) {
          Emit(TokenType::kOperator, op, p);
          p += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static const std::string kOneCharOps = "+-/*%~[](){}<>=.:|,;";
      if (kOneCharOps.find(c) == std::string::npos) {
        return ErrorAt(p, absl::StrCat("unexpected char ", PythonStringRepr(std::string(1, c))));
      }
      if (c == '(' || c == '[' || c == '{') {
        brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (brackets.empty())
          return ErrorAt(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
        char expected = brackets.back();
        brackets.pop_back();
        if (expected != c) {
          return ErrorAt(p, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                         std::string(1, expected), "'"));
        }
      }
      Emit(TokenType::kOperator, std::string(1, c), p);
      ++p;
    }
  }

  StatusOr<size_t> LexNumber(size_t p) {
    size_t start = p;
    auto digits = [&](size_t q) {
      size_t s = q;
      while (q < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[q])) || (src_[q] == '_' && q > s))) {
        ++q;
      }
      return q;
    };
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("xXoObB", src_[p + 1]) != nullptr) {
      int base = std::tolower(src_[p + 1]) == 'x' ? 16 : std::tolower(src_[p + 1]) == 'o' ? 8 : 2;
      size_t q = p + 2;
      while (q < src_.size() &&
             (std::isxdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
        ++q;
      std::string body;
      for (size_t i = p + 2; i < q; ++i) {
        if (src_[i] != '_') body.push_back(src_[i]);
      }
      int64_t value = 0;
      const char* end = body.data() + body.size();
      auto [ptr, ec] = std::from_chars(body.data(), end, value, base);
      if (ec == std::errc::result_out_of_range) {
        return ErrorAt(start, absl::StrCat("integer literal ", src_.substr(start, q - start),
                                           " does not fit in 64 bits"));
      }
      if (ec != std::errc() || ptr != end) {
        return ErrorAt(start,
                       absl::StrCat("invalid integer literal ", src_.substr(start, q - start)));
      }
      Emit(TokenType::kInteger, std::to_string(value), start);
      return q;
    }
    p = digits(p);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      p = digits(p + 1);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        p = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = start; i < p; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInteger, text, start);
    return p;
  }

  // String literal with Python's unicode-escape decoding (unknown escapes
  // are kept verbatim, as Python does).
  StatusOr<size_t> LexString(size_t p) {
    char quote = src_[p];
    size_t start = p;
    ++p;
    std::string out;
    while (true) {
      if (p >= src_.size()) return ErrorAt(start, "unexpected end of string");
      char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return ErrorAt(start, "unexpected end of string");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> StatusOr<char32_t> {
        if (p + n > src_.size()) return ErrorAt(start, "truncated \\x escape");
        char32_t v = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[p + i];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            return ErrorAt(start, "truncated escape");
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                    : (std::tolower(h) - 'a' + 10));
        }
        p += n;
        return v;
      };
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\n':
          break;  // line continuation
        case 'x': {
          STRATA_ASSIGN_OR_RETURN(char32_t v, hex(2));
          AppendUtf8(v, &out);
          break;
        }
        case 'u': {
          STRATA_ASSIGN_OR_RETURN(char32_t v, hex(4));
          AppendUtf8(v, &out);
          break;
        }
        case 'U': {
          STRATA_ASSIGN_OR_RETURN(char32_t v, hex(8));
          AppendUtf8(v, &out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              v = v * 8 + (src_[p++] - '0');
            }
            AppendUtf8(v, &out);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Emit(TokenType::kString, out, start);
    return p;
  }

  std::string src_;
  const std::string& label_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  // Locate's position of the previous token.
  mutable size_t last_line_ = 0;
  mutable size_t last_offset_ = 0;
  mutable int64_t last_column_ = 1;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

std::string NormalizeNewlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  // keep_trailing_newline=False: a single final newline is dropped.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

Status LocatedError(const std::string& label, int line, int column, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(label, ":", line, ":", column, ": ", message));
}

StatusOr<std::vector<Token>> Tokenize(const std::string& source, const std::string& label,
                                      const LexerOptions& options) {
  Lexer lexer(NormalizeNewlines(source), label, options);
  return lexer.Run();
}

}  // namespace strata::jinja
