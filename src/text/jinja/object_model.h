// Object model: how jinja2 (in transformers' immutable sandbox) looks up
// attributes and items on Python values, iterates them, slices them, and the
// str/dict/list methods that templates call (`content.split('</think>')`,
// `message.get('x')`, `tools.items()`, ...).
#ifndef STRATA_TEXT_JINJA_OBJECT_MODEL_H_
#define STRATA_TEXT_JINJA_OBJECT_MODEL_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/jinja/value.h"

namespace strata::jinja {

// "'name' is undefined"-style error for using an Undefined where jinja2's
// Undefined raises (attribute access, arithmetic, calls).
Status UndefinedError(const Value& undefined);

// `obj.name`: Python attribute first (methods), then item; missing -> Undefined.
StatusOr<Value> GetAttribute(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute when key is a string; missing -> Undefined.
StatusOr<Value> GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` for str, list and tuple (null parts are None).
StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                         const Value& step);
// Python iter(): list items, dict keys, str characters; Undefined is empty.
StatusOr<std::vector<Value>> Iterate(const Value& obj);
// Python len().
StatusOr<int64_t> Length(const Value& obj);

// Python str methods used by filters too.
bool IsPythonSpace(char32_t cp);
std::string PyStrip(const std::string& s, const std::optional<std::string>& chars, bool left,
                    bool right);
std::string PyUpper(const std::string& s);
std::string PyLower(const std::string& s);
std::string PyCapitalize(const std::string& s);
std::string PyTitle(const std::string& s);
// Errors when the result would exceed the render's string limit.
StatusOr<std::string> PyReplace(const std::string& s, const std::string& old,
                                const std::string& repl, int64_t count);
// First / last position of `needle` in `haystack` (from byte `from`), npos if
// none; linear time, whatever the inputs, and spends the render's steps.
size_t FindSubstring(std::string_view haystack, std::string_view needle, size_t from = 0);
size_t RFindSubstring(std::string_view haystack, std::string_view needle);

// Binds positional/keyword arguments to parameter names (Python call rules);
// missing ones without a default stay Undefined.
StatusOr<std::vector<Value>> BindArgs(const std::string& fn, const CallArgs& args,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::optional<Value>>& defaults);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_OBJECT_MODEL_H_
