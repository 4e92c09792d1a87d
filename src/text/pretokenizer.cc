// Pre-tokenizers (see pretokenizer.h). Split semantics follow tokenizers'
// SplitDelimiterBehavior: the subject is cut into matches and gaps, then the
// behavior decides which spans become pieces.
#include "text/pretokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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
      for (const auto& span : pieces->spans) {
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
    }
    return OkStatus();
  }
  bool UsesByteLevel() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
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
