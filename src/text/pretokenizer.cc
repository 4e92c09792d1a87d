// Pre-tokenizers (see pretokenizer.h). Split semantics follow tokenizers'
// SplitDelimiterBehavior: the subject is cut into matches and gaps, then the
// behavior decides which spans become pieces.
#include "text/pretokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;
using Span = std::pair<uint32_t, uint32_t>;

// GPT-2's pattern, which ByteLevel uses when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status Apply(PieceList* pieces) const override {
    for (const auto& s : steps_) STRATA_RETURN_IF_ERROR(s->Apply(pieces));
    return OkStatus();
  }
  bool UsesByteLevel() const override {
    for (const auto& s : steps_) {
      if (s->UsesByteLevel()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  Status Apply(PieceList* pieces) const override {
    if (add_prefix_space_) {
      for (auto& span : pieces->spans) {
        if (span.second > span.first && pieces->buf[span.first] == ' ') continue;
        std::string piece = pieces->buf.substr(span.first, span.second - span.first);
        const auto begin = static_cast<uint32_t>(pieces->buf.size());
        pieces->buf += ' ';
        pieces->buf += piece;
        span = {begin, static_cast<uint32_t>(pieces->buf.size())};
      }
    }
    if (regex_) {
      std::vector<Span> out;
      std::vector<std::pair<size_t, size_t>> m;
      int32_t start_piece = -1;
      for (size_t k = 0; k < pieces->spans.size(); ++k) {
        const Span span = pieces->spans[k];
        if (static_cast<int32_t>(k) == pieces->start_piece) {
          start_piece = static_cast<int32_t>(out.size());
        }
        m.clear();
        std::string_view sub =
            std::string_view(pieces->buf).substr(span.first, span.second - span.first);
        STRATA_RETURN_IF_ERROR(regex_->FindAll(sub, &m));
        size_t prev = 0;
        for (const auto& [b, e] : m) {
          if (b > prev) out.emplace_back(span.first + prev, span.first + b);
          out.emplace_back(span.first + b, span.first + e);
          prev = e;
        }
        if (prev < sub.size()) out.emplace_back(span.first + prev, span.second);
      }
      pieces->spans.swap(out);
      pieces->start_piece = start_piece;
    }
    return OkStatus();
  }
  bool UsesByteLevel() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// tokenizers' Metaspace: ' ' becomes the replacement character, which is
// prepended (always, or only to the piece at the start of the input text)
// unless the piece already starts with it; with `split`, every replacement
// character then starts a new piece (MergedWithNext).
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
  Status Apply(PieceList* pieces) const override {
    std::vector<Span> out;
    out.reserve(pieces->spans.size() * 2);
    int32_t start_piece = -1;
    std::string text;
    for (size_t k = 0; k < pieces->spans.size(); ++k) {
      const Span span = pieces->spans[k];
      const bool at_start = static_cast<int32_t>(k) == pieces->start_piece;
      text.clear();
      const std::string_view piece =
          std::string_view(pieces->buf).substr(span.first, span.second - span.first);
      for (char ch : piece) {
        if (ch == ' ') {
          text += rep_;
        } else {
          text += ch;
        }
      }
      const bool starts = text.compare(0, rep_.size(), rep_) == 0;
      if (!text.empty() && !starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start))) {
        text.insert(0, rep_);
      }
      const auto base = static_cast<uint32_t>(pieces->buf.size());
      pieces->buf += text;
      if (at_start && !text.empty()) start_piece = static_cast<int32_t>(out.size());
      if (!split_) {
        if (!text.empty()) out.emplace_back(base, base + static_cast<uint32_t>(text.size()));
        continue;
      }
      size_t b = 0;
      for (size_t p = text.find(rep_, 1); p != std::string::npos;
           p = text.find(rep_, p + rep_.size())) {
        out.emplace_back(base + b, base + p);
        b = p;
      }
      if (b < text.size()) out.emplace_back(base + b, base + static_cast<uint32_t>(text.size()));
    }
    pieces->spans.swap(out);
    pieces->start_piece = start_piece;
    return OkStatus();
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

StatusOr<SplitBehavior> ParseBehavior(const Json& j, const std::string& where) {
  if (!j.is_string()) return absl::InvalidArgumentError(absl::StrCat(where, ".behavior: missing"));
  const std::string b = j.get<std::string>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(where, ".behavior: unknown value \"", b, "\""));
}

bool GetBool(const Json& j, const char* key, bool def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : def;
}

}  // namespace

// "prepend_scheme" (default "always"), or the older "add_prefix_space" (false:
// "never"), as the reference reads them.
StatusOr<PrependScheme> ParsePrependScheme(const Json& j, const std::string& where) {
  PrependScheme scheme = PrependScheme::kAlways;
  if (auto it = j.find("prepend_scheme"); it != j.end()) {
    const std::string v = it->is_string() ? it->get<std::string>() : "";
    if (v == "always") {
      scheme = PrependScheme::kAlways;
    } else if (v == "first") {
      scheme = PrependScheme::kFirst;
    } else if (v == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".prepend_scheme: expected \"always\", \"first\" or \"never\", got ", it->dump()));
    }
  }
  if (auto it = j.find("add_prefix_space"); it != j.end() && it->is_boolean() && !it->get<bool>()) {
    if (scheme != PrependScheme::kNever) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ".add_prefix_space: false does not match prepend_scheme (\"always\" unless given)"));
    }
  }
  return scheme;
}

Status SplitPreTokenizer::Apply(PieceList* pieces) const {
  std::vector<Span> out;
  out.reserve(pieces->spans.size() * 2);
  std::vector<std::pair<size_t, size_t>> m;
  struct Part {
    uint32_t b, e;
    bool is_match;
  };
  std::vector<Part> parts;
  std::vector<Span> merged;
  // The start piece stays the start piece if its first part is kept.
  const uint32_t start_pos =
      pieces->start_piece >= 0 ? pieces->spans[pieces->start_piece].first : UINT32_MAX;
  for (const auto& span : pieces->spans) {
    const std::string_view sub =
        std::string_view(pieces->buf).substr(span.first, span.second - span.first);
    m.clear();
    STRATA_RETURN_IF_ERROR(regex_->FindAll(sub, &m));
    const uint32_t base = span.first;
    if (behavior_ == SplitBehavior::kIsolated) {
      // The common case: every match and every gap is a piece (invert does
      // not change the result).
      size_t prev = 0;
      for (const auto& [b, e] : m) {
        if (b > prev) out.emplace_back(base + prev, base + b);
        out.emplace_back(base + b, base + e);
        prev = e;
      }
      if (prev < sub.size()) out.emplace_back(base + prev, span.second);
      continue;
    }
    parts.clear();
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      if (b > prev) parts.push_back({base + uint32_t(prev), base + uint32_t(b), invert_});
      parts.push_back({base + uint32_t(b), base + uint32_t(e), !invert_});
      prev = e;
    }
    if (prev < sub.size()) parts.push_back({base + uint32_t(prev), span.second, invert_});
    merged.clear();
    bool previous_match = false;
    switch (behavior_) {
      case SplitBehavior::kRemoved:
        for (const Part& p : parts) {
          if (!p.is_match) merged.emplace_back(p.b, p.e);
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const Part& p : parts) {
          if (p.is_match && !previous_match && !merged.empty()) {
            merged.back().second = p.e;
          } else {
            merged.emplace_back(p.b, p.e);
          }
          previous_match = p.is_match;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        for (size_t k = parts.size(); k-- > 0;) {
          const Part& p = parts[k];
          if (p.is_match && !previous_match && !merged.empty()) {
            merged.back().first = p.b;
          } else {
            merged.emplace_back(p.b, p.e);
          }
          previous_match = p.is_match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      case SplitBehavior::kContiguous:
        for (size_t k = 0; k < parts.size(); ++k) {
          const Part& p = parts[k];
          if (k > 0 && p.is_match == previous_match) {
            merged.back().second = p.e;
          } else {
            merged.emplace_back(p.b, p.e);
          }
          previous_match = p.is_match;
        }
        break;
      case SplitBehavior::kIsolated:
        break;
    }
    for (const Span& s : merged) {
      if (s.second > s.first) out.push_back(s);
    }
  }
  pieces->spans.swap(out);
  pieces->start_piece = -1;
  if (start_pos != UINT32_MAX) {
    for (size_t k = 0; k < pieces->spans.size(); ++k) {
      if (pieces->spans[k].first == start_pos) {
        pieces->start_piece = static_cast<int32_t>(k);
        break;
      }
    }
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& j,
                                                               const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with \"type\""));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".pretokenizers: expected an array"));
    }
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(auto step,
                              FromJson((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]")));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> regex;
    if (GetBool(j, "use_regex", true)) {
      STRATA_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(GetBool(j, "add_prefix_space", true), std::move(regex)));
  }
  if (type == "Split") {
    auto pit = j.find("pattern");
    if (pit == j.end() || !pit->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}"));
    }
    std::unique_ptr<Regex> regex;
    if (pit->contains("Regex") && (*pit)["Regex"].is_string()) {
      auto r = Regex::Compile((*pit)["Regex"].get<std::string>());
      if (!r.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".pattern.Regex: ", r.status().message()));
      }
      regex = std::move(r).value();
    } else if (pit->contains("String") && (*pit)["String"].is_string()) {
      STRATA_ASSIGN_OR_RETURN(regex, Regex::Literal((*pit)["String"].get<std::string>()));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}"));
    }
    STRATA_ASSIGN_OR_RETURN(SplitBehavior behavior,
                            ParseBehavior(j.value("behavior", Json()), where));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(regex), behavior, GetBool(j, "invert", false)));
  }
  if (type == "Metaspace") {
    auto rit = j.find("replacement");
    char32_t c;
    if (rit == j.end() || !rit->is_string() || rit->get_ref<const std::string&>().empty() ||
        DecodeUtf8(rit->get_ref<const std::string&>(), 0, &c) !=
            rit->get_ref<const std::string&>().size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".replacement: expected a string of one character"));
    }
    STRATA_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(rit->get<std::string>(), scheme, GetBool(j, "split", true)));
  }
  if (type == "Digits") {
    const bool individual = GetBool(j, "individual_digits", false);
    STRATA_ASSIGN_OR_RETURN(auto regex, Regex::Compile(individual ? "\\p{N}" : "\\p{N}+"));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(regex), SplitBehavior::kIsolated, false));
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ".type: pre-tokenizer \"", type, "\" is not supported"));
}

}  // namespace strata::text
