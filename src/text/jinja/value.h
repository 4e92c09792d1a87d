// Value: the dynamic value type of the Jinja interpreter, modelled on the
// Python objects jinja2 works with (None, bool, int, float, str, list/tuple,
// insertion-ordered dict, namespace, callables, and jinja2's Undefined), so
// that truthiness, equality, str() and repr() match what transformers renders.
#ifndef STRATA_TEXT_JINJA_VALUE_H_
#define STRATA_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "text/unicode.h"

namespace strata::jinja {

class Value;

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<StatusOr<Value>(CallArgs&)>;

// Python list (or tuple when is_tuple: only repr differs).
// A dict view (dict.items()/keys()/values()) is a list with view_name set:
// it iterates like one but prints and type-checks as Python's view does.
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  std::string view_name;  // "dict_items", "dict_keys", "dict_values" or empty
};

// Python dict: insertion ordered. Lookups are linear; template dicts are small.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  Value* Find(const Value& key);
  void Set(Value key, Value value);
};

// jinja2's Namespace: a mutable attribute bag shared by reference.
struct NamespaceData {
  DictData attrs;
};

struct FunctionData {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() = default;  // Undefined.
  static Value Undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(DictData dict = {});
  static Value Namespace(DictData attrs = {});
  static Value Function(std::string name, NativeFunction fn);
  // Converts JSON (objects keep their key order) to a Value.
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  // Numeric value of bool/int/float.
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  // For Undefined: the name or description used in "... is undefined" errors.
  const std::string& undefined_hint() const { return str_; }
  ListData& list() const { return *list_; }
  DictData& dict() const { return *dict_; }
  DictData& namespace_attrs() const { return ns_->attrs; }
  FunctionData& function() const { return *fn_; }

  // Python truthiness.
  bool Truthy() const;
  // Python str(x), as jinja2 prints {{ x }} (Undefined prints empty).
  std::string Str() const;
  // Python repr(x).
  std::string Repr() const;
  // Python ==.
  bool Equals(const Value& other) const;
  // Python type name, for error messages ("dict object", "str", ...).
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<NamespaceData> ns_;
  std::shared_ptr<FunctionData> fn_;
};

// Python float repr: shortest round-trip digits, "1.0", "1e+16", "1.5e-05".
std::string FormatPythonFloat(double d);
// Python repr of a str.
std::string PythonStringRepr(const std::string& s);

// Python-style ordering (<) for numbers, strings and lists; error otherwise.
StatusOr<bool> LessThan(const Value& a, const Value& b);

// Unicode helpers: strings are UTF-8, Python indexes by code point.
std::vector<char32_t> DecodeUtf8(const std::string& s);
std::string EncodeUtf8(const std::vector<char32_t>& cps);
using text::AppendUtf8;  // one UTF-8 encoder for the whole text layer
int64_t CodePointLength(const std::string& s);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_VALUE_H_
