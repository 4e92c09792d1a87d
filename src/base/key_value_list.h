// Parses the `key=value,key=value` option strings the C ABI accepts
// (strata_engine_params::options, strata_model_params::options), so every
// option string in the library has one grammar and one set of errors.
#ifndef STRATA_BASE_KEY_VALUE_LIST_H_
#define STRATA_BASE_KEY_VALUE_LIST_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata {

struct KeyValue {
  std::string key;
  std::string value;
};

// Splits `text` at commas into `key=value` items. Spaces around keys and
// values are dropped and empty items (",,", a trailing comma) are skipped.
// An item without '=', an empty key or a key given twice is InvalidArgument
// naming `what` (e.g. "strata_engine_params.options") and the item's byte
// offset in `text`.
StatusOr<std::vector<KeyValue>> ParseKeyValueList(absl::string_view text, absl::string_view what);

// Reads `item.value` as a base-10 integer in [min, max]; InvalidArgument
// naming `what`, the key and the value otherwise.
StatusOr<int64_t> KeyValueInt(const KeyValue& item, absl::string_view what, int64_t min, int64_t max);

}  // namespace strata

#endif  // STRATA_BASE_KEY_VALUE_LIST_H_
