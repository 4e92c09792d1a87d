// Normalizers (see normalizer.h), as the reference tokenizers library applies
// them: the Unicode forms and Lowercase come from the generated tables in
// unicode_tables.cc (Lowercase is Rust's char::to_lowercase, one character at
// a time).
#include "text/normalizer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "text/pretokenizer_regex.h"
#include "text/unicode.h"
#include "text/unicode_nfc.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

// Keeps the characters `keep` accepts; *start_kept is cleared when the first
// character goes.
template <typename Keep>
void Filter(std::string* s, bool* start_kept, Keep&& keep) {
  std::string out;
  out.reserve(s->size());
  size_t i = 0;
  char32_t c;
  bool first = true;
  while (i < s->size()) {
    size_t len = DecodeUtf8(*s, i, &c);
    if (len == 0) {  // callers pass valid UTF-8; keep the byte
      out += (*s)[i++];
      first = false;
      continue;
    }
    if (keep(c)) {
      out.append(*s, i, len);
    } else if (first) {
      *start_kept = false;
    }
    first = false;
    i += len;
  }
  *s = std::move(out);
}

class NfcNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    if (!IsNfcStable(*s)) *s = ToNfc(*s);
    return OkStatus();
  }
};

class NfdNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    *s = ToNfd(*s);
    return OkStatus();
  }
};

class NfkcNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    if (!IsNfkcStable(*s)) *s = ToNfkc(*s);
    return OkStatus();
  }
};

class NfkdNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    *s = ToNfkd(*s);
    return OkStatus();
  }
};

class LowercaseNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    *s = ToLowercase(*s);
    return OkStatus();
  }
};

// Removes combining marks (meant to follow NFD/NFKD).
class StripAccentsNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool* start_kept) const override {
    Filter(s, start_kept, [](char32_t c) { return !IsCombiningMark(c); });
    return OkStatus();
  }
};

// tokenizers' Nmt: drops some control characters, maps some spaces to ' '.
class NmtNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool* start_kept) const override {
    Filter(s, start_kept, [](char32_t c) {
      return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F ||
               c == 0x8F || c == 0x9F);
    });
    std::string out;
    out.reserve(s->size());
    size_t i = 0;
    char32_t c;
    while (i < s->size()) {
      size_t len = DecodeUtf8(*s, i, &c);
      if (len == 0) {
        out += (*s)[i++];
        continue;
      }
      const bool space = c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 ||
                         (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 ||
                         c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
      if (space) {
        out += ' ';
      } else {
        out.append(*s, i, len);
      }
      i += len;
    }
    *s = std::move(out);
    return OkStatus();
  }
};

// Every byte becomes its character of the GPT-2 byte-level alphabet.
class ByteLevelNormalizer : public Normalizer {
 protected:
  Status Apply(std::string* s, bool*) const override {
    *s = BytesToByteLevel(*s);
    return OkStatus();
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}

 protected:
  Status Apply(std::string* s, bool* start_kept) const override {
    for (const auto& n : steps_) STRATA_RETURN_IF_ERROR(n->Normalize(s, start_kept));
    return OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}

 protected:
  Status Apply(std::string* s, bool* start_kept) const override {
    std::vector<std::pair<size_t, size_t>> m;
    STRATA_RETURN_IF_ERROR(regex_->FindAll(*s, &m));
    if (m.empty()) return OkStatus();
    if (m[0].first == 0 && m[0].second > 0) {
      // The replacement takes the alignment of the match's last character:
      // still offset 0 only for a one-character match.
      char32_t c;
      const size_t first_len = DecodeUtf8(*s, 0, &c);
      if (content_.empty() || m[0].second != first_len) *start_kept = false;
    }
    std::string out;
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      out.append(*s, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(*s, prev, std::string::npos);
    *s = std::move(out);
    return OkStatus();
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}

 protected:
  Status Apply(std::string* s, bool*) const override {
    if (!s->empty()) s->insert(0, prefix_);
    return OkStatus();
  }

 private:
  std::string prefix_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}

 protected:
  Status Apply(std::string* s, bool* start_kept) const override {
    size_t b = 0, e = s->size();
    char32_t c;
    if (left_) {
      while (b < e) {
        const size_t len = DecodeUtf8(*s, b, &c);
        if (len == 0 || !IsUnicodeWhitespace(c)) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t p = e - 1;
        while (p > b && (static_cast<unsigned char>((*s)[p]) & 0xC0) == 0x80) --p;
        const size_t len = DecodeUtf8(*s, p, &c);
        if (len == 0 || !IsUnicodeWhitespace(c)) break;
        e = p;
      }
    }
    if (b > 0) *start_kept = false;
    *s = s->substr(b, e - b);
    return OkStatus();
  }

 private:
  bool left_, right_;
};

bool GetBool(const Json& j, const char* key, bool def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : def;
}

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& j,
                                                           const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with \"type\""));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new NfcNormalizer());
  if (type == "NFD") return std::unique_ptr<Normalizer>(new NfdNormalizer());
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new NfkcNormalizer());
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new NfkdNormalizer());
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new NmtNormalizer());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".normalizers: expected an array"));
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(auto n,
                              FromJson((*it)[i], absl::StrCat(where, ".normalizers[", i, "]")));
      if (n) steps.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  if (type == "Replace") {
    auto pit = j.find("pattern");
    auto cit = j.find("content");
    if (pit == j.end() || !pit->is_object() || cit == j.end() || !cit->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": Replace needs \"pattern\" and a string \"content\""));
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
      return absl::InvalidArgumentError(absl::StrCat(where, ".pattern: expected Regex or String"));
    }
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(regex), cit->get<std::string>()));
  }
  if (type == "Prepend") {
    auto it = j.find("prepend");
    if (it == j.end() || !it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".prepend: expected a string"));
    }
    return std::unique_ptr<Normalizer>(new PrependNormalizer(it->get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(GetBool(j, "strip_left", true), GetBool(j, "strip_right", true)));
  }
  return absl::UnimplementedError(absl::StrCat(
      where, ".type: normalizer \"", type,
      "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Nmt, "
      "ByteLevel, Sequence, Replace, Prepend, Strip)"));
}

}  // namespace strata::text
