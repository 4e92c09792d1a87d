// Added-token matching (see tokenizer_added_tokens.h).
#include "text/tokenizer_added_tokens.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "text/normalizer.h"
#include "text/pretokenizer_regex.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

// The reference checks single_word boundaries with Rust regex `\w`:
// Alphabetic (letters, letter numbers, the circled letters, marks with
// Other_Alphabetic), marks, decimal digits, connector punctuation, ZWNJ/ZWJ.
bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static const Regex* re =
      Regex::Compile("^[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}]")
          .value()
          .release();
  std::string s;
  AppendUtf8(c, &s);
  std::vector<std::pair<size_t, size_t>> m;
  return re->FindAll(s, &m).ok() && !m.empty();
}

char32_t LastChar(std::string_view s, size_t end, size_t* start) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  char32_t c = 0xFFFD;
  DecodeUtf8(s, p, &c);
  *start = p;
  return c;
}

}  // namespace

Status ReadAddedTokenFlags(const nlohmann::json& j, const std::string& where, AddedToken* t) {
  for (auto [key, flag] : {std::pair<const char*, bool*>{"special", &t->special},
                           {"lstrip", &t->lstrip},
                           {"rstrip", &t->rstrip},
                           {"normalized", &t->normalized},
                           {"single_word", &t->single_word}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": expected true or false"));
    }
    *flag = it->get<bool>();
  }
  return OkStatus();
}

void AddedTokens::Trie::Add(std::string_view key, int32_t token_index) {
  int32_t node = 0;
  for (char ch : key) {
    const uint64_t k = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
    auto it = edges.find(k);
    if (it == edges.end()) {
      const auto next = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(k, next);
      node = next;
    } else {
      node = it->second;
    }
  }
  // The first token with this content wins, as one vocabulary entry would.
  if (terminal[node] < 0) terminal[node] = token_index;
  first_byte[static_cast<uint8_t>(key[0])] = true;
}

std::pair<int32_t, size_t> AddedTokens::Trie::LongestAt(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges.end()) break;
    node = it->second;
    if (terminal[node] >= 0) best = {terminal[node], i + 1 - pos};
  }
  return best;
}

StatusOr<AddedTokens> AddedTokens::Build(std::vector<AddedToken> tokens,
                                         const Normalizer* normalizer) {
  AddedTokens at;
  at.tokens_ = std::move(tokens);
  for (size_t i = 0; i < at.tokens_.size(); ++i) {
    const AddedToken& t = at.tokens_[i];
    if (t.id < 0 || t.id > limits::kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("added token \"", t.content, "\" has id ",
                                                     t.id, ", outside [0, ", limits::kMaxTokenId,
                                                     "]"));
    }
    if (t.content.empty()) continue;
    at.by_id_.try_emplace(t.id, i);
    at.by_content_.try_emplace(t.content, t.id);
    if (t.normalized && normalizer) {
      std::string key = t.content;
      STRATA_RETURN_IF_ERROR(normalizer->Normalize(&key));
      if (!key.empty()) at.normalized_trie_.Add(key, static_cast<int32_t>(i));
    } else if (t.normalized) {
      at.normalized_trie_.Add(t.content, static_cast<int32_t>(i));
    } else {
      at.raw_trie_.Add(t.content, static_cast<int32_t>(i));
    }
  }
  return at;
}

const AddedToken* AddedTokens::ById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::IdOf(std::string_view content) const {
  auto it = by_content_.find(AsAbsl(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedTokens::Split(std::string_view text, bool normalized_pass, bool parse_special,
                        std::vector<Segment>* out) const {
  const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;
  size_t pos = 0;
  const size_t n = text.size();
  if (trie.terminal.size() > 1) {
    while (pos < n) {
      if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
        ++pos;
        continue;
      }
      const auto [index, len] = trie.LongestAt(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = tokens_[index];
      size_t start = pos, stop = pos + len;
      // Like the reference's match iterator, a rejected match still consumes
      // its span.
      pos = stop;
      if (tok.special && !parse_special) continue;
      if (tok.single_word) {
        size_t p;
        const bool start_space = start == 0 || !IsWordChar(LastChar(text, start, &p));
        char32_t c = 0;
        const bool stop_space = stop == n || (DecodeUtf8(text, stop, &c), !IsWordChar(c));
        if (!start_space || !stop_space) continue;
      }
      if (tok.lstrip) {
        size_t s = start;
        while (s > 0) {
          size_t p;
          const char32_t c = LastChar(text, s, &p);
          if (!IsUnicodeWhitespace(c)) break;
          s = p;
        }
        start = std::max(s, start_offset);
      }
      if (tok.rstrip) {
        char32_t c;
        while (stop < n) {
          const size_t l = DecodeUtf8(text, stop, &c);
          if (l == 0 || !IsUnicodeWhitespace(c)) break;
          stop += l;
        }
        pos = stop;
      }
      if (start_offset < start) out->push_back({-1, start_offset, start});
      out->push_back({tok.id, start, stop});
      start_offset = stop;
    }
  }
  if (start_offset < n) out->push_back({-1, start_offset, n});
}

}  // namespace strata::text
