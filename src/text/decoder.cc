// Decoders (see decoder.h). Each mirrors the reference's decode_chain.
#include "text/decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "text/pretokenizer.h"
#include "text/pretokenizer_regex.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

// Bytes of a token spelled in the byte-level alphabet; any other token is
// its UTF-8 as is.
void ByteLevelBytes(const std::string& token, std::string* out) {
  std::string raw;
  if (ByteLevelToBytes(token, &raw)) {
    *out += raw;
  } else {
    *out += token;
  }
}

class ByteLevelDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) ByteLevelBytes(t, &bytes);
    tokens->assign(1, Utf8Lossy(bytes));
    return OkStatus();
  }
  void StreamBytes(std::string* token) const override {
    std::string out;
    ByteLevelBytes(*token, &out);
    *token = std::move(out);
  }
  bool IsByteLevelOnly() const override { return true; }
};

// Each match of the pattern in each token becomes `content`.
class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) STRATA_RETURN_IF_ERROR(Replace(&t));
    return OkStatus();
  }
  void StreamBytes(std::string* token) const override {
    if (FirstInvalidUtf8(*token) == token->size()) Replace(token).IgnoreError();
  }

 private:
  Status Replace(std::string* t) const {
    std::vector<std::pair<size_t, size_t>> m;
    STRATA_RETURN_IF_ERROR(regex_->FindAll(*t, &m));
    if (m.empty()) return OkStatus();
    std::string out;
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      out.append(*t, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(*t, prev, std::string::npos);
    *t = std::move(out);
    return OkStatus();
  }

  std::unique_ptr<Regex> regex_;
  std::string content_;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" token, or -1. As the reference parses it (Rust's
// u8::from_str_radix on the two characters): either case, and a leading '+'.
int ByteToken(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = HexDigit(t[3]), lo = HexDigit(t[4]);
  if (t[3] == '+') return lo;
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

// Runs of <0xNN> tokens become their bytes when those form valid UTF-8, else
// one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (FirstInvalidUtf8(run) == run.size()) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
    };
    for (std::string& t : *tokens) {
      const int b = ByteToken(t);
      if (b >= 0) {
        run += static_cast<char>(b);
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
    return OkStatus();
  }
  void StreamBytes(std::string* token) const override {
    const int b = ByteToken(*token);
    if (b >= 0) token->assign(1, static_cast<char>(b));
  }
};

class FuseDecoder : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
    return OkStatus();
  }
  void StreamBytes(std::string*) const override {}
};

// Removes up to `start` leading and `stop` trailing `content` characters
// from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
    for (std::string& t : *tokens) {
      chars.clear();
      size_t i = 0;
      char32_t c;
      while (i < t.size()) {
        size_t len = DecodeUtf8(t, i, &c);
        if (len == 0) {
          c = 0xFFFD;
          len = 1;
        }
        chars.emplace_back(i, c);
        i += len;
      }
      const size_t n = chars.size();
      size_t start_cut = 0;
      for (size_t k = 0; k < n && k < start_; ++k) {
        if (chars[k].second != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = n;
      for (size_t k = 0; k < std::min(stop_, n - start_cut); ++k) {
        const size_t index = n - k - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      const size_t b = start_cut < n ? chars[start_cut].first : t.size();
      const size_t e = stop_cut < n ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
    return OkStatus();
  }
  void StreamBytes(std::string*) const override {}

 private:
  char32_t content_;
  size_t start_, stop_;
};

// The replacement character becomes ' '; in the first token it is dropped
// unless the prepend scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : rep_(std::move(replacement)), scheme_(scheme) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      Map(&(*tokens)[i], i == 0 && scheme_ != PrependScheme::kNever ? "" : " ");
    }
    return OkStatus();
  }
  void StreamBytes(std::string* token) const override { Map(token, " "); }

 private:
  void Map(std::string* t, const char* with) const {
    if (t->find(rep_) == std::string::npos) return;
    std::string out;
    size_t prev = 0;
    for (size_t p = t->find(rep_); p != std::string::npos; p = t->find(rep_, prev)) {
      out.append(*t, prev, p - prev);
      out += with;
      prev = p + rep_.size();
    }
    out.append(*t, prev, std::string::npos);
    *t = std::move(out);
  }

  std::string rep_;
  PrependScheme scheme_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& d : steps_) STRATA_RETURN_IF_ERROR(d->DecodeChain(tokens));
    return OkStatus();
  }
  void StreamBytes(std::string* token) const override {
    for (const auto& d : steps_) d->StreamBytes(token);
  }
  bool IsByteLevelOnly() const override {
    for (const auto& d : steps_) {
      if (!d->IsByteLevelOnly()) return false;
    }
    return !steps_.empty();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// A JSON string of exactly one character.
bool OneChar(const Json& j, std::string* s, char32_t* c) {
  if (!j.is_string()) return false;
  *s = j.get<std::string>();
  return !s->empty() && DecodeUtf8(*s, 0, c) == s->size();
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(const Json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with \"type\""));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".decoders: expected an array"));
    }
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = absl::StrCat(where, ".decoders[", i, "]");
      if ((*it)[i].is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(w, ": expected an object with \"type\""));
      }
      STRATA_ASSIGN_OR_RETURN(auto d, FromJson((*it)[i], w));
      steps.push_back(std::move(d));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
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
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}"));
    }
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(regex), cit->get<std::string>()));
  }
  if (type == "Strip") {
    std::string s;
    char32_t c;
    if (!OneChar(j.value("content", Json()), &s, &c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".content: expected a string of one character"));
    }
    size_t n[2];
    const char* keys[2] = {"start", "stop"};
    for (int k = 0; k < 2; ++k) {
      auto it = j.find(keys[k]);
      if (it == j.end() || !it->is_number_unsigned()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", keys[k], ": expected a non-negative integer"));
      }
      n[k] = it->get<size_t>();
    }
    return std::unique_ptr<Decoder>(new StripDecoder(c, n[0], n[1]));
  }
  if (type == "Metaspace") {
    std::string s;
    char32_t c;
    if (!OneChar(j.value("replacement", Json()), &s, &c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".replacement: expected a string of one character"));
    }
    STRATA_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(s, scheme));
  }
  return absl::UnimplementedError(absl::StrCat(
      where, ".type: decoder \"", type,
      "\" is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, "
      "Sequence)"));
}

}  // namespace strata::text
