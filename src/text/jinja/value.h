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
#include "text/jinja/render_state.h"
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
  ListData() = default;
  ListData(const ListData&) = default;
  ListData(ListData&&) = default;
  ListData& operator=(const ListData&) = default;
  ListData& operator=(ListData&&) = default;
  ~ListData();  // frees nested containers without recursing (see value.cc)
  std::vector<Value> items;
  RenderCharge charge;  // the memory the render that made it counted
  bool is_tuple = false;
  std::string view_name;  // "dict_items", "dict_keys", "dict_values" or empty
};

// Python dict: insertion ordered. Lookups are linear; template dicts are small.
struct DictData {
  DictData() = default;
  DictData(const DictData&) = default;
  DictData(DictData&&) = default;
  DictData& operator=(const DictData&) = default;
  DictData& operator=(DictData&&) = default;
  ~DictData();  // as ~ListData
  std::vector<std::pair<Value, Value>> items;
  RenderCharge charge;
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

  Value() : int_(0) {}  // Undefined.
  static Value Undefined(std::string hint = "");
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
  // Strings, lists and dicts made during a render count against its budget
  // (render_state.h): past a limit the render fails.
  static Value String(std::string s);
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(DictData dict = {});
  static Value Namespace(DictData attrs = {});
  static Value Function(std::string name, NativeFunction fn);
  // Converts JSON (objects keep their key order) to a Value. InvalidArgument
  // when it nests deeper than limits::kMaxTemplateValueDepth.
  static StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

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

  bool as_bool() const { return kind_ != Kind::kFloat && int_ != 0; }
  int64_t as_int() const { return kind_ == Kind::kFloat ? 0 : int_; }
  // Numeric value of bool/int/float.
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return Text(); }
  // For Undefined: the name or description used in "... is undefined" errors.
  const std::string& undefined_hint() const { return Text(); }
  ListData& list() const { return *static_cast<ListData*>(obj_.get()); }
  DictData& dict() const { return *static_cast<DictData*>(obj_.get()); }
  DictData& namespace_attrs() const { return static_cast<NamespaceData*>(obj_.get())->attrs; }
  FunctionData& function() const { return *static_cast<FunctionData*>(obj_.get()); }

  // Python truthiness.
  bool Truthy() const;
  // Python str(x), as jinja2 prints {{ x }} (Undefined prints empty).
  std::string Str() const;
  // Python repr(x).
  // Repr, Str and Equals walk nested values: during a render they spend its
  // budget, and past the value depth limit (or the stack) they stop early,
  // returning "..." / false, with the failure recorded in the render.
  std::string Repr() const;
  // Python ==.
  bool Equals(const Value& other) const;
  // Python type name, for error messages ("dict object", "str", ...).
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind), int_(0) {}
  const std::string& Text() const;

  // 32 bytes: values are copied everywhere (every lookup returns one) and the
  // evaluator's stack frames hold several per level of nesting, so the
  // payload is one shared, immutable object whose type the kind gives:
  // StringData (string, Undefined's hint), ListData, DictData,
  // NamespaceData or FunctionData.
  Kind kind_ = Kind::kUndefined;
  union {
    int64_t int_;  // bool, int
    double float_;
  };
  std::shared_ptr<void> obj_;
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
