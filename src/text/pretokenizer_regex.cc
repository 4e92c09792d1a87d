// PCRE2 wrapper for pre-tokenization regexes (see pretokenizer_regex.h).
#include "text/pretokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace strata::text {
namespace {

// Per-thread match state: match data with one pair (no captures are read) and
// a JIT stack big enough for long whitespace runs under lookahead.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string TranslatePattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 2 < p.size() && (p[i + 1] == 'p' || p[i + 1] == 'P') && p[i + 2] == '{') {
      // Script names: Oniguruma and Rust's regex crate test the Script
      // property, PCRE2 >= 10.40 tests Script_Extensions (so U+3002 would be
      // Han): ask PCRE2 for the Script property explicitly.
      const size_t close = p.find('}', i + 3);
      if (close != std::string_view::npos) {
        std::string_view name = p.substr(i + 3, close - i - 3);
        std::string_view neg;
        if (!name.empty() && name[0] == '^') {
          neg = "^";
          name.remove_prefix(1);
        }
        const bool general = name.size() <= 2 || name == "Any" || name == "Xan" || name == "Xps" ||
                             name == "Xsp" || name == "Xwd" || name == "Xuc" ||
                             name.find_first_of(":=") != std::string_view::npos;
        out += p.substr(i, 3);
        out += neg;
        if (!general) out += "sc:";
        out += name;
        out += '}';
        i = close;
        continue;
      }
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  const std::string translated = TranslatePattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    return absl::InvalidArgumentError(
        absl::StrCat("bad regex at offset ", offset, ": ", reinterpret_cast<const char*>(msg)));
  }
  re->code_ = code;
  // JIT is an optimisation; the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return re;
}

StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  std::string p;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      if (c == '\n') {
        p += "\\n";
        continue;
      }
      if (c == '\r') {
        p += "\\r";
        continue;
      }
      if (c == '\t') {
        p += "\\t";
        continue;
      }
      if (u < 0x20) {
        p += absl::StrCat("\\x{", absl::Hex(u), "}");
        continue;
      }
      p += '\\';
    }
    p += c;
  }
  return Compile(p);
}

Status Regex::FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>* out) const {
  MatchState& st = ThreadMatchState();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    const int rc =
        pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      const std::string what = absl::StrCat("pre-tokenizer pattern, matching from byte ", start,
                                            " of the text: ", reinterpret_cast<const char*>(msg));
      // The pattern comes from the tokenizer's file and the text from the
      // caller: a limit hit is their combination being too costly (a pattern
      // that backtracks without bound), not a bug.
      switch (rc) {
        case PCRE2_ERROR_MATCHLIMIT:
        case PCRE2_ERROR_DEPTHLIMIT:
        case PCRE2_ERROR_HEAPLIMIT:
        case PCRE2_ERROR_JIT_STACKLIMIT:
          return absl::InvalidArgumentError(what);
        case PCRE2_ERROR_NOMEMORY:
          return absl::ResourceExhaustedError(what);
        default:
          return absl::InternalError(what);
      }
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out->emplace_back(b, e);
      start = e;
    } else {
      // Step over one whole character after an empty match.
      if (b >= subject.size()) break;
      size_t n = b + 1;
      while (n < subject.size() && (static_cast<unsigned char>(subject[n]) & 0xC0) == 0x80) ++n;
      start = n;
    }
  }
  return OkStatus();
}

}  // namespace strata::text
