// ParseStrictJson: a validating SAX pass (depth, duplicate keys, byte offset
// of syntax errors), then nlohmann's DOM parse of text known to be well formed.
// Two passes keep us off nlohmann's internal DOM builder; headers are small.
#include "model/strict_json.h"

#include <set>
#include <string>
#include <vector>

namespace strata {
namespace {

using nlohmann::json;

class Validator : public nlohmann::json_sax<json> {
 public:
  explicit Validator(const StrictJsonOptions& options) : options_(options) {}

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override { return Scalar(); }
  bool number_unsigned(number_unsigned_t) override { return Scalar(); }
  bool number_float(number_float_t, const string_t&) override { return Scalar(); }
  bool string(string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }

  bool start_object(std::size_t) override { return Push(/*is_object=*/true); }
  bool end_object() override { return Pop(); }
  bool start_array(std::size_t) override { return Push(/*is_object=*/false); }
  bool end_array() override { return Pop(); }

  bool key(string_t& k) override {
    Frame& f = stack_.back();
    f.current_key = k;
    if (options_.reject_duplicate_keys && !f.keys.insert(k).second) {
      error_ = absl::StrCat("duplicate key '", PathTo(k), "'");
      duplicate_key_index_ = keys_seen_;
      return false;
    }
    ++keys_seen_;
    return true;
  }

  // The 0-based position, among all object keys in document order, of the
  // duplicate that stopped the parse; -1 for any other error.
  int64_t duplicate_key_index() const { return duplicate_key_index_; }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // nlohmann's message starts with "[json.exception.parse_error.101] parse
    // error at line 1, column 9: "; the byte offset we add says the same more
    // usefully for a binary file, so keep only the diagnosis.
    std::string what = ex.what();
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    const uint64_t at = options_.offset_base + (position > 0 ? position - 1 : 0);
    error_ = absl::StrCat("invalid JSON at byte ", at, ": ", what);
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool is_object = false;
    std::set<std::string> keys;
    std::string current_key;
    std::string path;  // dotted path of this container, "" for the root
  };

  bool Scalar() { return true; }

  bool Push(bool is_object) {
    if (static_cast<int>(stack_.size()) >= options_.max_depth) {
      error_ = absl::StrCat("JSON nested deeper than ", options_.max_depth, " levels");
      return false;
    }
    Frame f;
    f.is_object = is_object;
    if (!stack_.empty()) {
      const Frame& parent = stack_.back();
      f.path = parent.is_object ? PathTo(parent.current_key) : parent.path + "[]";
    }
    stack_.push_back(std::move(f));
    return true;
  }

  bool Pop() {
    stack_.pop_back();
    return true;
  }

  std::string PathTo(const std::string& key) const {
    const std::string& base = stack_.back().path;
    return base.empty() ? key : absl::StrCat(base, ".", key);
  }

  const StrictJsonOptions& options_;
  std::vector<Frame> stack_;
  std::string error_;
  int64_t keys_seen_ = 0;
  int64_t duplicate_key_index_ = -1;
};

// The byte offset of the opening quote of the `index`-th object key of
// `text` (0-based, document order), for a text that is valid JSON up to
// there. nlohmann's SAX interface gives no position with a key, so the keys
// are counted again: outside strings JSON has no quote, and a string is a key
// exactly when a ':' follows it.
uint64_t KeyOffset(std::string_view text, int64_t index) {
  int64_t seen = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '"') {
      ++i;
      continue;
    }
    const size_t open = i++;
    while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
    ++i;  // past the closing quote
    size_t j = i;
    while (j < text.size() &&
           (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) {
      ++j;
    }
    if (j < text.size() && text[j] == ':' && seen++ == index) return open;
  }
  return text.size();
}

}  // namespace

StatusOr<nlohmann::json> ParseStrictJson(std::string_view label, std::string_view text,
                                         const StrictJsonOptions& options) {
  Validator validator(options);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &validator);
  } catch (const json::exception& e) {
    // Defensive: with a SAX handler nlohmann reports through parse_error, but
    // the core must never let an exception escape.
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(label), ": invalid JSON: ", e.what()));
  }
  if (!ok) {
    std::string why = validator.error().empty() ? std::string("invalid JSON") : validator.error();
    if (validator.duplicate_key_index() >= 0) {
      absl::StrAppend(&why, " at byte ",
                      options.offset_base + KeyOffset(text, validator.duplicate_key_index()));
    }
    return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": ", why));
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(label), ": invalid JSON"));
  }
  return j;
}

}  // namespace strata
