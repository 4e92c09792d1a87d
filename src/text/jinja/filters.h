// Filters (`x | name(args)`) and tests (`x is name args`): jinja2's built-in
// ones that chat templates use, plus transformers' own `tojson`.
#ifndef STRATA_TEXT_JINJA_FILTERS_H_
#define STRATA_TEXT_JINJA_FILTERS_H_

#include <optional>
#include <string>

#include "base/status.h"
#include "text/jinja/value.h"

namespace strata::jinja {

StatusOr<Value> ApplyFilter(const std::string& name, const Value& operand, CallArgs& args);
StatusOr<bool> ApplyTest(const std::string& name, const Value& operand, CallArgs& args);
bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Python json.dumps(value, ...) as transformers' tojson filter calls it.
StatusOr<std::string> DumpJson(const Value& value, const JsonOptions& options);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_FILTERS_H_
