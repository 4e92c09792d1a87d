// Normalizers (see normalizer.h).
#include "text/normalizer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "text/pretokenizer_regex.h"
#include "text/unicode.h"
#include "text/unicode_nfc.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

class NfcNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* s) const override {
    if (!IsNfcStable(*s)) *s = ToNfc(*s);
    return OkStatus();
  }
};

class NfdNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* s) const override {
    *s = ToNfd(*s);
    return OkStatus();
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Normalize(std::string* s) const override {
    for (const auto& n : steps_) STRATA_RETURN_IF_ERROR(n->Normalize(s));
    return OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  Status Normalize(std::string* s) const override {
    std::vector<std::pair<size_t, size_t>> m;
    STRATA_RETURN_IF_ERROR(regex_->FindAll(*s, &m));
    if (m.empty()) return OkStatus();
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
  Status Normalize(std::string* s) const override {
    if (!s->empty()) s->insert(0, prefix_);
    return OkStatus();
  }

 private:
  std::string prefix_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* s) const override {
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
    *s = s->substr(b, e - b);
    return OkStatus();
  }

 private:
  bool left_, right_;
};

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
      STRATA_ASSIGN_OR_RETURN(regex, Regex::Compile((*pit)["Regex"].get<std::string>()));
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
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ".type: normalizer \"", type, "\" is not supported"));
}

}  // namespace strata::text
