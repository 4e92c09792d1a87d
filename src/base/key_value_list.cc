#include "base/key_value_list.h"

#include <charconv>

#include "absl/strings/ascii.h"

namespace strata {

StatusOr<std::vector<KeyValue>> ParseKeyValueList(absl::string_view text, absl::string_view what) {
  std::vector<KeyValue> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view item = absl::StripAsciiWhitespace(text.substr(start, end - start));
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": expected key=value at offset ", start,
                                                       ", got '", item, "'"));
      }
      KeyValue kv{std::string(absl::StripAsciiWhitespace(item.substr(0, eq))),
                  std::string(absl::StripAsciiWhitespace(item.substr(eq + 1)))};
      if (kv.key.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": empty key at offset ", start));
      }
      for (const KeyValue& seen : out) {
        if (seen.key == kv.key) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": '", kv.key, "' is given twice (at offset ", start, ")"));
        }
      }
      out.push_back(std::move(kv));
    }
    start = end + 1;
  }
  return out;
}

StatusOr<int64_t> KeyValueInt(const KeyValue& item, absl::string_view what, int64_t min, int64_t max) {
  int64_t v = 0;
  const char* first = item.value.data();
  const char* last = first + item.value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (item.value.empty() || ec != std::errc() || ptr != last) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", item.key, " takes an integer, got '", item.value, "'"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", item.key, " must be in [", min, ", ", max,
                                                   "], got ", v));
  }
  return v;
}

}  // namespace strata
