// Value semantics mirroring Python: truthiness, ==, <, str() and repr().
#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>

#include "base/input_limits.h"
#include "base/stack_guard.h"
#include "text/jinja/render_state.h"

namespace strata::jinja {
namespace {

// ---- Destruction without recursion ----
// A list nested 100,000 deep (a template builds one in a loop through a
// namespace) would overflow the stack in its chain of destructors. A
// container being destroyed hands its nested containers to the outermost
// one being destroyed on this thread, which frees them one at a time.
thread_local std::vector<Value>* t_graveyard = nullptr;

bool HasChildren(const Value& v) {
  return v.is_list() || v.is_dict() || v.is_namespace() || v.is_function();
}

template <typename MoveChildren>
void Bury(MoveChildren move_children) {
  if (t_graveyard != nullptr) {
    move_children(t_graveyard);
    return;
  }
  std::vector<Value> graveyard;
  move_children(&graveyard);
  if (graveyard.empty()) return;
  t_graveyard = &graveyard;
  while (!graveyard.empty()) {
    Value last = std::move(graveyard.back());
    graveyard.pop_back();
  }
  t_graveyard = nullptr;
}

void BuryOne(Value& v, std::vector<Value>* graveyard) {
  if (!HasChildren(v)) return;
  try {
    graveyard->push_back(std::move(v));
  } catch (const std::bad_alloc&) {
    // This runs in destructors: with no memory to grow the graveyard the
    // value is freed here instead (its own children then try the graveyard
    // again), recursing only while allocations keep failing.
    Value doomed = std::move(v);
  }
}

// ---- Guards of the recursive operations ----
// repr, == and < walk nested values. Each element visited is a step of the
// render; past the depth limit or near the end of the stack the walk stops
// and the render fails (outside a render only the depth limit applies).
bool EnterNested(int depth) {
  RenderState* state = RenderState::Current();
  const int max_depth =
      state != nullptr ? state->limits().max_value_depth : limits::kMaxTemplateValueDepth;
  if (depth > max_depth) {
    if (state != nullptr) {
      state->Fail(absl::InvalidArgumentError(
          absl::StrCat("value nested deeper than ", max_depth, " levels")));
    }
    return false;
  }
  if (state == nullptr) return true;
  if (!state->HasStack()) {
    state->Fail(absl::InvalidArgumentError("value nested too deeply for this thread's stack"));
    return false;
  }
  return state->Spend(1);
}

// A repr being built stays within the string limit (a small shared value
// can print exponentially long).
bool ReprFits(const std::string& out) {
  RenderState* state = RenderState::Current();
  if (state == nullptr || static_cast<int64_t>(out.size()) <= state->limits().max_string_bytes) {
    return true;
  }
  state->Fail(absl::InvalidArgumentError(absl::StrCat("string of ", out.size(),
                                                      " bytes exceeds the limit of ",
                                                      state->limits().max_string_bytes, " bytes")));
  return false;
}

// Why a walk stopped: the render's failure, or outside a render the depth.
Status StoppedError() {
  RenderState* state = RenderState::Current();
  if (state != nullptr && state->failed()) return state->error();
  return absl::InvalidArgumentError(
      absl::StrCat("value nested deeper than ", limits::kMaxTemplateValueDepth, " levels"));
}

// Comparing strings costs their length.
bool SpendCompare(size_t bytes) {
  return SpendSteps(1 + static_cast<int64_t>(bytes) / limits::kRenderBytesPerStep);
}

bool EqualsAt(const Value& a, const Value& b, int depth);
StatusOr<bool> LessThanAt(const Value& a, const Value& b, int depth);
void AppendRepr(const Value& v, int depth, std::string* out);

Status FromJsonInto(const nlohmann::ordered_json& j, int depth, const StackGuard& stack,
                    Value* out);

}  // namespace

ListData::~ListData() {
  Bury([this](std::vector<Value>* g) {
    for (Value& v : items) BuryOne(v, g);
  });
}

DictData::~DictData() {
  Bury([this](std::vector<Value>* g) {
    for (auto& [k, v] : items) {
      BuryOne(k, g);
      BuryOne(v, g);
    }
  });
}

const Value* DictData::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
    if (!SpendSteps(1)) return nullptr;
  }
  return nullptr;
}

Value* DictData::Find(const Value& key) {
  return const_cast<Value*>(static_cast<const DictData*>(this)->Find(key));
}

void DictData::Set(Value key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

namespace {

// The payload of strings and of Undefined's hint.
struct StringData {
  std::string text;
  RenderCharge charge;
};

}  // namespace

const std::string& Value::Text() const {
  static const std::string* const kEmpty = new std::string();
  return obj_ != nullptr && (kind_ == Kind::kString || kind_ == Kind::kUndefined)
             ? static_cast<const StringData*>(obj_.get())->text
             : *kEmpty;
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.obj_ = std::make_shared<StringData>(StringData{std::move(hint), {}});
  return v;
}

Value Value::String(std::string s) {
  Value v(Kind::kString);
  auto data = std::make_shared<StringData>(StringData{std::move(s), {}});
  if (RenderState* state = RenderState::Current()) {
    state->AdmitString(static_cast<int64_t>(data->text.size()), &data->charge);
  }
  v.obj_ = std::move(data);
  return v;
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v(Kind::kList);
  auto list = std::make_shared<ListData>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  if (RenderState* state = RenderState::Current()) {
    state->AdmitItems(static_cast<int64_t>(list->items.size()), sizeof(Value), &list->charge);
  }
  v.obj_ = std::move(list);
  return v;
}

Value Value::Dict(DictData dict) {
  Value v(Kind::kDict);
  auto data = std::make_shared<DictData>(std::move(dict));
  if (RenderState* state = RenderState::Current()) {
    state->AdmitItems(static_cast<int64_t>(data->items.size()), 2 * sizeof(Value), &data->charge);
  }
  v.obj_ = std::move(data);
  return v;
}

Value Value::Namespace(DictData attrs) {
  Value v(Kind::kNamespace);
  auto ns = std::make_shared<NamespaceData>();
  ns->attrs = std::move(attrs);
  // A namespace is the one value a template can change after sharing it
  // (`{% set ns.self = ns %}`): emptied when the render ends, so that no
  // cycle through it outlives the render.
  if (RenderState* state = RenderState::Current()) {
    state->AtEnd([ns]() { ns->attrs.items.clear(); });
  }
  v.obj_ = std::move(ns);
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v(Kind::kFunction);
  v.obj_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j) {
  const StackGuard stack;
  Value v;
  STRATA_RETURN_IF_ERROR(FromJsonInto(j, 0, stack, &v));
  return v;
}

namespace {

// Scalars out of line: the recursion through containers carries only the
// container's own frame (contexts nest up to kMaxTemplateValueDepth).
__attribute__((noinline)) Value ScalarFromJson(const nlohmann::ordered_json& j) {
  using Json = nlohmann::ordered_json;
  switch (j.type()) {
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      // Past int64 the nearest value is a float, not a wrapped negative.
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Float(static_cast<double>(u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.get<double>());
    case Json::value_t::string:
      return Value::String(j.get<std::string>());
    default:
      return Value::None();
  }
}

Status FromJsonInto(const nlohmann::ordered_json& j, int depth, const StackGuard& stack,
                    Value* out) {
  if (!j.is_structured()) {
    *out = ScalarFromJson(j);
    return OkStatus();
  }
  if (depth >= limits::kMaxTemplateValueDepth || !stack.HasRoom()) {
    return absl::InvalidArgumentError(absl::StrCat("template variables nest deeper than ",
                                                   limits::kMaxTemplateValueDepth, " levels"));
  }
  size_t i = 0;
  if (j.is_array()) {
    std::vector<Value> items(j.size());
    for (const auto& e : j) STRATA_RETURN_IF_ERROR(FromJsonInto(e, depth + 1, stack, &items[i++]));
    *out = Value::List(std::move(items));
    return OkStatus();
  }
  DictData d;
  d.items.resize(j.size());
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    d.items[i].first = Value::String(it.key());
    STRATA_RETURN_IF_ERROR(FromJsonInto(it.value(), depth + 1, stack, &d.items[i].second));
  }
  *out = Value::Dict(std::move(d));
  return OkStatus();
}

}  // namespace

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !list().items.empty();
    case Kind::kDict:
      return !dict().items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out as Python's
  // float_repr_style 'short' does: fixed when -4 <= exponent < 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(-exponent - 1, '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, exponent + 1);
      out.push_back('.');
      out.append(digits, exponent + 1, std::string::npos);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_buf;
  }
  return out;
}

std::vector<char32_t> DecodeUtf8(const std::string& s) {
  // Every string method decodes: the render pays per byte.
  SpendSteps(1 + static_cast<int64_t>(s.size()) / limits::kRenderBytesPerStep);
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    char32_t cp;
    int extra;
    if (c < 0x80) {
      cp = c;
      extra = 0;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      extra = 1;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      extra = 2;
    } else {
      cp = c & 0x07;
      extra = 3;
    }
    ++i;
    for (int k = 0; k < extra && i < s.size(); ++k, ++i) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    }
    out.push_back(cp);
  }
  return out;
}


std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

int64_t CodePointLength(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string PythonStringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : DecodeUtf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      AppendUtf8(cp, &out);
    }
  }
  out.push_back(quote);
  return out;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(*this, 0, &out);
  return out;
}

bool Value::Equals(const Value& other) const { return EqualsAt(*this, other, 0); }

namespace {

void AppendRepr(const Value& v, int depth, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      *out += "Undefined";
      return;
    case Value::Kind::kNone:
      *out += "None";
      return;
    case Value::Kind::kBool:
      *out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      *out += FormatPythonFloat(v.as_double());
      return;
    case Value::Kind::kString:
      *out += PythonStringRepr(v.as_string());
      return;
    case Value::Kind::kFunction:
      *out += "<function " + v.function().name + ">";
      return;
    default:
      break;
  }
  if (!EnterNested(depth + 1)) {
    *out += "...";
    return;
  }
  // Elements, separated by ", ", each printed by `item(i)`.
  auto elements = [&](size_t n, const auto& item) {
    for (size_t i = 0; i < n; ++i) {
      if (i) *out += ", ";
      item(i);
      if (!ReprFits(*out) || !SpendSteps(1)) return;
    }
  };
  auto pairs = [&](const DictData& d) {
    elements(d.items.size(), [&](size_t i) {
      AppendRepr(d.items[i].first, depth + 1, out);
      *out += ": ";
      AppendRepr(d.items[i].second, depth + 1, out);
    });
  };
  if (v.is_list()) {
    const ListData& l = v.list();
    if (!l.view_name.empty()) *out += l.view_name + "(";
    const bool tuple = l.is_tuple && l.view_name.empty();
    *out += tuple ? "(" : "[";
    elements(l.items.size(), [&](size_t i) { AppendRepr(l.items[i], depth + 1, out); });
    if (tuple && l.items.size() == 1) *out += ",";
    *out += tuple ? ")" : "]";
    if (!l.view_name.empty()) *out += ")";
  } else if (v.is_dict()) {
    *out += "{";
    pairs(v.dict());
    *out += "}";
  } else {
    *out += "<Namespace {";
    pairs(v.namespace_attrs());
    *out += "}>";
  }
}

bool EqualsAt(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      if (a.as_string().size() != b.as_string().size()) return false;
      return SpendCompare(a.as_string().size()) && a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.list().is_tuple != b.list().is_tuple) return false;
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      if (x.size() != y.size()) return false;
      if (&x == &y) return true;
      if (!EnterNested(depth + 1)) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!EqualsAt(x[i], y[i], depth + 1) || !SpendSteps(1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict().items;
      if (x.size() != b.dict().items.size()) return false;
      if (&a.dict() == &b.dict()) return true;
      if (!EnterNested(depth + 1)) return false;
      for (const auto& [k, v] : x) {
        const Value* o = b.dict().Find(k);
        if (!o || !EqualsAt(*o, v, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespace_attrs() == &b.namespace_attrs();
    case Value::Kind::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

StatusOr<bool> LessThanAt(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order.
    SpendCompare(std::min(a.as_string().size(), b.as_string().size()));
    return a.as_string() < b.as_string();
  }
  if (a.is_list() && b.is_list()) {
    if (!EnterNested(depth + 1)) return StoppedError();
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (EqualsAt(x[i], y[i], depth + 1)) continue;
      if (RenderState* state = RenderState::Current(); state != nullptr && state->failed()) {
        return StoppedError();
      }
      return LessThanAt(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      if (!list().view_name.empty()) return list().view_name;
      return list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

StatusOr<bool> LessThan(const Value& a, const Value& b) { return LessThanAt(a, b, 0); }

}  // namespace strata::jinja
