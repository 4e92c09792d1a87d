// Built-in filters and tests, each following jinja2/filters.py and
// jinja2/tests.py (3.1), and transformers' tojson (json.dumps with
// ensure_ascii=False and the caller's indent/separators/sort_keys).
#include "text/jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "text/jinja/object_model.h"
#include "text/jinja/render_state.h"

namespace strata::jinja {
namespace {

Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

Status Overflow() { return TypeError("integer overflow: result does not fit in 64 bits"); }

// Python int(x) of a float: NaN is a ValueError (filters fall back to their
// default), values outside int64 an overflow (Python's ints are unbounded).
StatusOr<int64_t> FloatToInt(double d) {
  if (std::isnan(d)) return TypeError("cannot convert float NaN to integer");
  // 2^63 is exact as a double; the cast is defined below it.
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0)) return Overflow();
  return static_cast<int64_t>(d);
}

// ---- JSON ----

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      *out += buf;
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FormatPythonFloat(d);
}

StatusOr<std::string> JsonKey(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kBool:
      return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return JsonFloat(k.as_double());
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return TypeError(
          absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
  }
}

// Each container level is checked (depth, stack) before recursing, and
// the output against the string limit as it grows: a small value whose
// lists share their items can dump exponentially long.
Status EnterJsonLevel(int depth, const std::string& out) {
  RenderState* state = RenderState::Current();
  const int max_depth =
      state != nullptr ? state->limits().max_value_depth : limits::kMaxTemplateValueDepth;
  if (depth >= max_depth) {
    return TypeError(absl::StrCat("value nested deeper than ", max_depth, " levels"));
  }
  if (state == nullptr) return OkStatus();
  if (!state->HasStack()) return TypeError("value nested too deeply for this thread's stack");
  STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(out.size())));
  if (!state->Spend(1)) return state->error();
  return OkStatus();
}

// A dict's entries as JSON keys, sorted when asked. Out of line, like the
// scalars below: DumpJsonTo recurses once per level and carries only what
// the container loops need.
__attribute__((noinline)) Status JsonEntries(
    const DictData& dict, bool sort_keys,
    std::vector<std::pair<std::string, const Value*>>* entries) {
  const auto& items = dict.items;
  for (const auto& [k, val] : items) {
    if (sort_keys && !k.is_string()) {
      // Python sorts the original keys: mixed types raise TypeError.
      for (const auto& [k2, unused] : items) {
        if (k2.kind() != k.kind() && !(k.is_number() && k2.is_number())) {
          return TypeError(absl::StrCat("'<' not supported between instances of '", k.TypeName(),
                                        "' and '", k2.TypeName(), "'"));
        }
      }
    }
    STRATA_ASSIGN_OR_RETURN(std::string key, JsonKey(k));
    entries->emplace_back(std::move(key), &val);
  }
  if (sort_keys) {
    std::stable_sort(entries->begin(), entries->end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  return OkStatus();
}

__attribute__((noinline)) Status DumpJsonScalar(const Value& v, const JsonOptions& o,
                                                std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return OkStatus();
    case Value::Kind::kFloat:
      *out += JsonFloat(v.as_double());
      return OkStatus();
    case Value::Kind::kString:
      AppendJsonString(v.as_string(), o.ensure_ascii, out);
      return OkStatus();
    default:
      return TypeError(absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

Status DumpJsonTo(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  const bool list = v.is_list() && v.list().view_name.empty();
  if (!list && !v.is_dict()) return DumpJsonScalar(v, o, out);
  STRATA_RETURN_IF_ERROR(EnterJsonLevel(depth, *out));
  const size_t n = list ? v.list().items.size() : v.dict().items.size();
  if (n == 0) {
    *out += list ? "[]" : "{}";
    return OkStatus();
  }
  std::vector<std::pair<std::string, const Value*>> entries;
  if (!list) STRATA_RETURN_IF_ERROR(JsonEntries(v.dict(), o.sort_keys, &entries));
  auto newline = [&](int d) {
    out->push_back('\n');
    for (int i = 0; i < d; ++i) *out += *o.indent;
  };
  out->push_back(list ? '[' : '{');
  for (size_t i = 0; i < n; ++i) {
    if (i) *out += o.item_separator;
    if (o.indent) newline(depth + 1);
    if (!list) {
      AppendJsonString(entries[i].first, o.ensure_ascii, out);
      *out += o.key_separator;
    }
    STRATA_RETURN_IF_ERROR(
        DumpJsonTo(list ? v.list().items[i] : *entries[i].second, o, depth + 1, out));
    STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(out->size())));
  }
  if (o.indent) newline(depth);
  out->push_back(list ? ']' : '}');
  return OkStatus();
}

// ---- helpers ----

// Keyword-or-positional argument i (after the operand) named `name`.
const Value* Arg(const CallArgs& args, size_t i, const char* name) {
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  if (i < args.positional.size()) return &args.positional[i];
  return nullptr;
}

Status CheckArgs(const std::string& filter, const CallArgs& args,
                 std::initializer_list<const char*> names) {
  if (args.positional.size() > names.size()) {
    return TypeError(
        absl::StrCat(filter, "() takes at most ", names.size() + 1, " positional arguments"));
  }
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const char* n : names) known = known || k == n;
    if (!known)
      return TypeError(absl::StrCat(filter, "() got an unexpected keyword argument '", k, "'"));
  }
  return OkStatus();
}

bool ArgTruthy(const CallArgs& args, size_t i, const char* name) {
  const Value* v = Arg(args, i, name);
  return v && v->Truthy();
}

// jinja2's make_attrgetter: "a.b.0" walks items/attributes.
StatusOr<Value> GetAttributePath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = std::numeric_limits<int64_t>::max();  // past int64: no such item either
    if (digits) std::from_chars(part.data(), part.data() + part.size(), index);
    STRATA_ASSIGN_OR_RETURN(cur, GetItem(cur, digits ? Value::Int(index) : Value::String(part)));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key transform: lower-cases strings unless case sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.as_string()));
  return v;
}

StatusOr<std::vector<Value>> SortedValues(std::vector<Value> items, bool reverse,
                                          bool case_sensitive, const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) {
    Value key = v;
    if (attribute && !attribute->is_none()) {
      STRATA_ASSIGN_OR_RETURN(key, GetAttributePath(v, attribute->Str()));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(v));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto lt = reverse ? LessThan(b.first, a.first) : LessThan(a.first, b.first);
    if (!lt.ok()) {
      if (error.ok()) error = lt.status();
      return false;
    }
    return *lt;
  });
  STRATA_RETURN_IF_ERROR(error);
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

// select/reject/selectattr/rejectattr share this (jinja2 _select_or_reject).
StatusOr<Value> SelectOrReject(const Value& operand, CallArgs& args, bool select, bool by_attr) {
  STRATA_ASSIGN_OR_RETURN(auto items, Iterate(operand));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) return TypeError("Missing parameter for attribute name");
    attr = args.positional[0].Str();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  bool has_test = next < args.positional.size();
  if (has_test) {
    test = args.positional[next].Str();
    test_args.positional.assign(args.positional.begin() + next + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const auto& item : items) {
    Value v = item;
    if (by_attr) {
      STRATA_ASSIGN_OR_RETURN(v, GetAttributePath(item, attr));
    }
    bool ok;
    if (has_test) {
      CallArgs a = test_args;
      STRATA_ASSIGN_OR_RETURN(ok, ApplyTest(test, v, a));
    } else {
      ok = v.Truthy();
    }
    if (ok == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

StatusOr<std::string> HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    // Up to 5 bytes per byte: checked as it grows.
    if (out.size() % 4096 == 0) {
      STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(out.size() + 5)));
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

StatusOr<Value> PercentFormat(const std::string& fmt, const Value& args_value) {
  std::vector<Value> args;
  if (args_value.is_list() && args_value.list().is_tuple) {
    args = args_value.list().items;
  } else {
    args.push_back(args_value);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (i + 1 >= fmt.size()) return TypeError("incomplete format");
    char spec = fmt[++i];
    if (spec == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) return TypeError("not enough arguments for format string");
    const Value& a = args[next++];
    if (spec == 's') {
      out += a.Str();
    } else if (spec == 'r') {
      out += a.Repr();
    } else if (spec == 'd' || spec == 'i') {
      if (!a.is_number()) return TypeError("%d format: a real number is required");
      int64_t n = a.as_int();
      if (a.is_float()) {
        STRATA_ASSIGN_OR_RETURN(n, FloatToInt(a.as_double()));
      }
      out += std::to_string(n);
    } else {
      return TypeError(absl::StrCat("unsupported format character '", std::string(1, spec), "'"));
    }
  }
  if (next < args.size()) return TypeError("not all arguments converted during string formatting");
  return Value::String(out);
}

// jinja2's do_title (not str.title): words start after whitespace or one of
// "-({[<"; each word is word[0].upper() + word[1:].lower().
std::string JinjaTitle(const std::string& s) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  auto is_break = [](char32_t c) {
    return IsPythonSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  bool word_start = true;
  for (char32_t c : cps) {
    if (is_break(c)) {
      AppendUtf8(c, &out);
      word_start = true;
      continue;
    }
    std::string one;
    AppendUtf8(c, &one);
    out += word_start ? PyUpper(one) : PyLower(one);
    word_start = false;
  }
  return out;
}

using FilterFn = std::function<StatusOr<Value>(const Value&, CallArgs&)>;

const std::map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::map<std::string, FilterFn>{
      {"tojson",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_RETURN_IF_ERROR(
             CheckArgs("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}));
         JsonOptions o;
         o.ensure_ascii = ArgTruthy(a, 0, "ensure_ascii");
         const Value* indent = Arg(a, 1, "indent");
         if (indent && !indent->is_none()) {
           if (indent->is_string()) {
             o.indent = indent->as_string();
           } else if (indent->is_int()) {
             STRATA_RETURN_IF_ERROR(CheckStringSize(indent->as_int()));
             o.indent = std::string(std::max<int64_t>(0, indent->as_int()), ' ');
           } else {
             return TypeError("indent must be int or str");
           }
           o.item_separator.assign(1, ',');  // json.dumps' default with indent
         }
         const Value* sep = Arg(a, 2, "separators");
         if (sep && !sep->is_none()) {
           if (!sep->is_list() || sep->list().items.size() != 2) {
             return TypeError("separators must be a (item_separator, key_separator) pair");
           }
           o.item_separator = sep->list().items[0].Str();
           o.key_separator = sep->list().items[1].Str();
         }
         o.sort_keys = ArgTruthy(a, 3, "sort_keys");
         STRATA_ASSIGN_OR_RETURN(std::string s, DumpJson(v, o));
         return Value::String(s);
       }},
      {"trim",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* chars = Arg(a, 0, "chars");
         std::optional<std::string> c;
         if (chars && !chars->is_none()) c = chars->Str();
         return Value::String(PyStrip(v.Str(), c, true, true));
       }},
      {"length",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(int64_t n, Length(v));
         return Value::Int(n);
       }},
      {"first",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
         return items.front();
       }},
      {"last",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
         return items.back();
       }},
      {"join",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         const Value* d = Arg(a, 0, "d");
         const Value* attribute = Arg(a, 1, "attribute");
         std::string sep = d ? d->Str() : "";
         std::string out;
         for (size_t i = 0; i < items.size(); ++i) {
           Value item = items[i];
           if (attribute && !attribute->is_none()) {
             STRATA_ASSIGN_OR_RETURN(item, GetAttributePath(item, attribute->Str()));
           }
           const std::string text = item.Str();
           STRATA_RETURN_IF_ERROR(
               CheckStringSize(static_cast<int64_t>(out.size() + sep.size() + text.size())));
           if (i) out += sep;
           out += text;
         }
         return Value::String(std::move(out));
       }},
      {"upper",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         return Value::String(PyUpper(v.Str()));
       }},
      {"lower",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         return Value::String(PyLower(v.Str()));
       }},
      {"capitalize",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         return Value::String(PyCapitalize(v.Str()));
       }},
      {"title",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         return Value::String(JinjaTitle(v.Str()));
       }},
      {"default",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* d = Arg(a, 0, "default_value");
         bool boolean = ArgTruthy(a, 1, "boolean");
         if (v.is_undefined() || (boolean && !v.Truthy())) return d ? *d : Value::String("");
         return v;
       }},
      {"string",
       [](const Value& v, CallArgs&) -> StatusOr<Value> { return Value::String(v.Str()); }},
      {"safe",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         return v.is_string() ? v : Value::String(v.Str());
       }},
      {"escape",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(std::string escaped, HtmlEscape(v.Str()));
         return Value::String(std::move(escaped));
       }},
      {"int",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* d = Arg(a, 0, "default");
         Value fallback = d ? *d : Value::Int(0);
         const Value* base_v = Arg(a, 1, "base");
         const int64_t base = base_v ? base_v->as_int() : 10;
         if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
         auto from_float = [&](double d) -> StatusOr<Value> {
           auto n = FloatToInt(d);
           if (!n.ok() && std::isnan(d)) return fallback;  // ValueError: the default
           STRATA_RETURN_IF_ERROR(n.status());
           return Value::Int(*n);
         };
         if (v.is_float()) return from_float(v.as_double());
         if (v.is_string()) {
           const std::string s = PyStrip(v.as_string(), std::nullopt, true, true);
           // strtoll/strtod report range errors in errno rather than throwing.
           if (!s.empty() && (base == 0 || (base >= 2 && base <= 36))) {
             char* end = nullptr;
             errno = 0;
             const long long r = std::strtoll(s.c_str(), &end, static_cast<int>(base));
             if (end == s.c_str() + s.size() && errno == 0) return Value::Int(r);
           }
           if (!s.empty()) {
             char* end = nullptr;
             const double d = std::strtod(s.c_str(), &end);
             if (end == s.c_str() + s.size()) return from_float(d);
           }
         }
         return fallback;
       }},
      {"float",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* d = Arg(a, 0, "default");
         Value fallback = d ? *d : Value::Float(0.0);
         if (v.is_number()) return Value::Float(v.as_double());
         if (v.is_string()) {
           const std::string s = PyStrip(v.as_string(), std::nullopt, true, true);
           // strtod, as Python: out-of-range values are inf or 0, not errors.
           char* end = nullptr;
           const double d = std::strtod(s.c_str(), &end);
           if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(d);
         }
         return fallback;
       }},
      {"abs",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
         if (v.is_number()) {
           if (v.as_int() == std::numeric_limits<int64_t>::min()) return Overflow();
           return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
         }
         return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
       }},
      {"round",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* p = Arg(a, 0, "precision");
         const Value* m = Arg(a, 1, "method");
         int64_t precision = p ? p->as_int() : 0;
         std::string method = m ? m->Str() : "common";
         if (!v.is_number()) return TypeError("round() requires a number");
         double scale = std::pow(10.0, static_cast<double>(precision));
         double x = v.as_double() * scale;
         double r;
         if (method == "common") {
           r = std::nearbyint(x);  // Python round(): half to even
         } else if (method == "ceil") {
           r = std::ceil(x);
         } else if (method == "floor") {
           r = std::floor(x);
         } else {
           return TypeError("method must be common, ceil or floor");
         }
         return Value::Float(r / scale);
       }},
      {"list",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         return Value::List(std::move(items));
       }},
      {"items",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, val] : v.dict().items) out.push_back(Value::List({k, val}, true));
         return Value::List(std::move(out));
       }},
      {"dictsort",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         if (!v.is_dict()) return TypeError("dictsort expects a mapping");
         bool case_sensitive = ArgTruthy(a, 0, "case_sensitive");
         const Value* by = Arg(a, 1, "by");
         bool by_value = by && by->Str() == "value";
         bool reverse = ArgTruthy(a, 2, "reverse");
         std::vector<Value> pairs;
         for (const auto& [k, val] : v.dict().items) pairs.push_back(Value::List({k, val}, true));
         Value index = Value::Int(by_value ? 1 : 0);
         std::vector<std::pair<Value, Value>> keyed;
         for (auto& p : pairs)
           keyed.emplace_back(SortKey(p.list().items[by_value ? 1 : 0], case_sensitive), p);
         Status error;
         std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
           auto lt = reverse ? LessThan(y.first, x.first) : LessThan(x.first, y.first);
           if (!lt.ok()) {
             error = lt.status();
             return false;
           }
           return *lt;
         });
         STRATA_RETURN_IF_ERROR(error);
         std::vector<Value> out;
         for (auto& [k, p] : keyed) out.push_back(p);
         return Value::List(std::move(out));
       }},
      {"unique",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         bool case_sensitive = ArgTruthy(a, 0, "case_sensitive");
         const Value* attribute = Arg(a, 1, "attribute");
         std::vector<Value> out, seen;
         for (const auto& item : items) {
           Value key = item;
           if (attribute && !attribute->is_none()) {
             STRATA_ASSIGN_OR_RETURN(key, GetAttributePath(item, attribute->Str()));
           }
           key = SortKey(key, case_sensitive);
           bool dup = false;
           for (const auto& s : seen) {
             if (s.Equals(key)) {
               dup = true;
               break;
             }
             if (!SpendSteps(1)) return RenderState::Current()->error();
           }
           if (!dup) {
             seen.push_back(key);
             out.push_back(item);
           }
         }
         return Value::List(std::move(out));
       }},
      {"reverse",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         if (v.is_string()) {
           auto cps = DecodeUtf8(v.as_string());
           std::reverse(cps.begin(), cps.end());
           return Value::String(EncodeUtf8(cps));
         }
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         std::reverse(items.begin(), items.end());
         return Value::List(std::move(items));
       }},
      {"sort",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         STRATA_ASSIGN_OR_RETURN(
             auto sorted, SortedValues(std::move(items), ArgTruthy(a, 0, "reverse"),
                                       ArgTruthy(a, 1, "case_sensitive"), Arg(a, 2, "attribute")));
         return Value::List(std::move(sorted));
       }},
      {"max",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
         STRATA_ASSIGN_OR_RETURN(
             auto sorted, SortedValues(std::move(items), false, ArgTruthy(a, 0, "case_sensitive"),
                                       Arg(a, 1, "attribute")));
         // max() returns the first maximal element.
         size_t i = sorted.size() - 1;
         return sorted[i];
       }},
      {"min",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
         STRATA_ASSIGN_OR_RETURN(
             auto sorted, SortedValues(std::move(items), false, ArgTruthy(a, 0, "case_sensitive"),
                                       Arg(a, 1, "attribute")));
         return sorted.front();
       }},
      {"sum",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         const Value* attribute = Arg(a, 0, "attribute");
         const Value* start = Arg(a, 1, "start");
         Value total = start ? *start : Value::Int(0);
         for (auto& item : items) {
           Value x = item;
           if (attribute && !attribute->is_none()) {
             STRATA_ASSIGN_OR_RETURN(x, GetAttributePath(item, attribute->Str()));
           }
           if (!x.is_number() || !total.is_number())
             return TypeError("unsupported operand type(s) for +");
           if (x.is_float() || total.is_float()) {
             total = Value::Float(total.as_double() + x.as_double());
           } else {
             int64_t r;
             if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) return Overflow();
             total = Value::Int(r);
           }
         }
         return total;
       }},
      {"replace",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* old = Arg(a, 0, "old");
         const Value* repl = Arg(a, 1, "new");
         const Value* count = Arg(a, 2, "count");
         if (!old || !repl) return TypeError("replace() missing required arguments");
         STRATA_ASSIGN_OR_RETURN(std::string replaced,
                                 PyReplace(v.Str(), old->Str(), repl->Str(),
                                           count && !count->is_none() ? count->as_int() : -1));
         return Value::String(std::move(replaced));
       }},
      {"map",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
         std::vector<Value> out;
         const Value* attribute = nullptr;
         const Value* def = nullptr;
         for (const auto& [k, val] : a.keyword) {
           if (k == "attribute") attribute = &val;
           if (k == "default") def = &val;
         }
         if (attribute) {
           for (const auto& item : items) {
             STRATA_ASSIGN_OR_RETURN(Value x, GetAttributePath(item, attribute->Str()));
             if (x.is_undefined() && def) x = *def;
             out.push_back(x);
           }
           return Value::List(std::move(out));
         }
         if (a.positional.empty()) return TypeError("map requires a filter argument");
         std::string filter = a.positional[0].Str();
         for (const auto& item : items) {
           CallArgs fa;
           fa.positional.assign(a.positional.begin() + 1, a.positional.end());
           fa.keyword = a.keyword;
           STRATA_ASSIGN_OR_RETURN(Value x, ApplyFilter(filter, item, fa));
           out.push_back(x);
         }
         return Value::List(std::move(out));
       }},
      {"select", [](const Value& v, CallArgs& a) { return SelectOrReject(v, a, true, false); }},
      {"reject", [](const Value& v, CallArgs& a) { return SelectOrReject(v, a, false, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return SelectOrReject(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return SelectOrReject(v, a, false, true); }},
      {"attr",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         if (a.positional.empty()) return TypeError("attr() missing name");
         // Python getattr only: a dict's keys are not attributes here.
         const std::string name = a.positional[0].Str();
         if (v.is_dict() && name != "get" && name != "items" && name != "keys" &&
             name != "values") {
           return Value::Undefined(absl::StrCat("'dict object' has no attribute '", name, "'"));
         }
         return GetAttribute(v, name);
       }},
      {"indent",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* w = Arg(a, 0, "width");
         if (w && !w->is_string()) STRATA_RETURN_IF_ERROR(CheckStringSize(w->as_int()));
         std::string indention = !w ? "    "
                                 : w->is_string()
                                     ? w->as_string()
                                     : std::string(std::max<int64_t>(0, w->as_int()), ' ');
         bool first = ArgTruthy(a, 1, "first");
         bool blank = ArgTruthy(a, 2, "blank");
         std::string s = v.Str() + "\n";
         CallArgs none;
         STRATA_ASSIGN_OR_RETURN(Value lines_v, GetAttribute(Value::String(s), "splitlines"));
         STRATA_ASSIGN_OR_RETURN(Value lines_list, lines_v.function().fn(none));
         auto& lines = lines_list.list().items;
         // Every line gains the indent: checked before building.
         int64_t grown = 0;
         if (__builtin_mul_overflow(static_cast<int64_t>(lines.size() + 1),
                                    static_cast<int64_t>(indention.size()), &grown)) {
           grown = std::numeric_limits<int64_t>::max() / 2;
         }
         STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(s.size()) + grown));
         std::string rv;
         if (blank) {
           for (size_t i = 0; i < lines.size(); ++i) {
             if (i) rv += "\n" + indention;
             rv += lines[i].as_string();
           }
         } else {
           rv = lines.empty() ? "" : lines[0].as_string();
           for (size_t i = 1; i < lines.size(); ++i) {
             const std::string& line = lines[i].as_string();
             rv += "\n" + (line.empty() ? line : indention + line);
           }
         }
         if (first) rv = indention + rv;
         return Value::String(rv);
       }},
      {"center",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         const Value* w = Arg(a, 0, "width");
         CallArgs ca;
         ca.positional.push_back(w ? *w : Value::Int(80));
         STRATA_ASSIGN_OR_RETURN(Value m, GetAttribute(Value::String(v.Str()), "center"));
         return m.function().fn(ca);
       }},
      {"wordcount",
       [](const Value& v, CallArgs&) -> StatusOr<Value> {
         CallArgs none;
         STRATA_ASSIGN_OR_RETURN(Value m, GetAttribute(Value::String(v.Str()), "split"));
         STRATA_ASSIGN_OR_RETURN(Value words, m.function().fn(none));
         return Value::Int(static_cast<int64_t>(words.list().items.size()));
       }},
      {"format",
       [](const Value& v, CallArgs& a) -> StatusOr<Value> {
         if (a.positional.size() == 1) return PercentFormat(v.Str(), a.positional[0]);
         return PercentFormat(v.Str(), Value::List(a.positional, true));
       }},
  };
  return *filters;
}

const std::map<std::string, std::string>& FilterAliases() {
  static const auto* aliases = new std::map<std::string, std::string>{
      {"count", "length"}, {"d", "default"}, {"e", "escape"}};
  return *aliases;
}

using TestFn = std::function<StatusOr<bool>(const Value&, CallArgs&)>;

StatusOr<Value> NeedArg(const CallArgs& a, const char* test) {
  if (a.positional.empty())
    return TypeError(absl::StrCat(test, "() missing 1 required positional argument"));
  return a.positional[0];
}

const std::map<std::string, TestFn>& Tests() {
  static const auto* tests = new std::map<std::string, TestFn>{
      {"defined", [](const Value& v, CallArgs&) -> StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_none(); }},
      {"boolean", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_bool(); }},
      {"true",
       [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_bool() && v.as_bool(); }},
      {"false",
       [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_int(); }},
      {"float", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_float(); }},
      {"number", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_number(); }},
      {"string", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_string(); }},
      {"mapping", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_dict(); }},
      {"iterable",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"sequence",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"callable", [](const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_function(); }},
      {"odd",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         if (!v.is_int() && !v.is_bool()) return TypeError("odd test needs an integer");
         return (v.as_int() % 2) != 0;
       }},
      {"even",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         if (!v.is_int() && !v.is_bool()) return TypeError("even test needs an integer");
         return (v.as_int() % 2) == 0;
       }},
      {"divisibleby",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value n, NeedArg(a, "divisibleby"));
         if (!n.is_int() || n.as_int() == 0 || !v.is_int())
           return TypeError("divisibleby needs non-zero integers");
         // INT64_MIN % -1 traps on x86.
         if (n.as_int() == -1) return true;
         return (v.as_int() % n.as_int()) == 0;
       }},
      {"lower",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         std::string s = v.Str();
         return PyLower(s) == s;
       }},
      {"upper",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         std::string s = v.Str();
         return PyUpper(s) == s;
       }},
      {"equalto",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "eq"));
         return v.Equals(o);
       }},
      {"ne",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "ne"));
         return !v.Equals(o);
       }},
      {"lt",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "lt"));
         return LessThan(v, o);
       }},
      {"gt",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "gt"));
         return LessThan(o, v);
       }},
      {"le",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "le"));
         STRATA_ASSIGN_OR_RETURN(bool gt, LessThan(o, v));
         return !gt;
       }},
      {"ge",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "ge"));
         STRATA_ASSIGN_OR_RETURN(bool lt, LessThan(v, o));
         return !lt;
       }},
      {"in",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value seq, NeedArg(a, "in"));
         if (seq.is_string()) {
           if (!v.is_string()) return TypeError("'in <string>' requires string as left operand");
           return seq.as_string().find(v.as_string()) != std::string::npos;
         }
         if (seq.is_dict()) return seq.dict().Find(v) != nullptr;
         STRATA_ASSIGN_OR_RETURN(auto items, Iterate(seq));
         for (const auto& x : items) {
           if (x.Equals(v)) return true;
         }
         return false;
       }},
      {"sameas",
       [](const Value& v, CallArgs& a) -> StatusOr<bool> {
         STRATA_ASSIGN_OR_RETURN(Value o, NeedArg(a, "sameas"));
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.is_bool()) return v.as_bool() == o.as_bool();
         return v.Equals(o) && !v.is_list() && !v.is_dict();
       }},
      {"filter",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         return v.is_string() && HasFilter(v.as_string());
       }},
      {"test",
       [](const Value& v, CallArgs&) -> StatusOr<bool> {
         return v.is_string() && HasTest(v.as_string());
       }},
      {"escaped", [](const Value&, CallArgs&) -> StatusOr<bool> { return false; }},
  };
  return *tests;
}

const std::map<std::string, std::string>& TestAliases() {
  static const auto* aliases = new std::map<std::string, std::string>{
      {"==", "equalto"}, {"eq", "equalto"}, {"!=", "ne"},          {"<", "lt"}, {"lessthan", "lt"},
      {"<=", "le"},      {">", "gt"},       {"greaterthan", "gt"}, {">=", "ge"}};
  return *aliases;
}

std::string Resolve(const std::map<std::string, std::string>& aliases, const std::string& name) {
  auto it = aliases.find(name);
  return it == aliases.end() ? name : it->second;
}

}  // namespace

bool HasFilter(const std::string& name) {
  return Filters().count(Resolve(FilterAliases(), name)) > 0;
}

bool HasTest(const std::string& name) { return Tests().count(Resolve(TestAliases(), name)) > 0; }

StatusOr<Value> ApplyFilter(const std::string& name, const Value& operand, CallArgs& args) {
  auto it = Filters().find(Resolve(FilterAliases(), name));
  if (it == Filters().end()) return TypeError(absl::StrCat("No filter named '", name, "'."));
  return it->second(operand, args);
}

StatusOr<bool> ApplyTest(const std::string& name, const Value& operand, CallArgs& args) {
  auto it = Tests().find(Resolve(TestAliases(), name));
  if (it == Tests().end()) return TypeError(absl::StrCat("No test named '", name, "'."));
  return it->second(operand, args);
}

StatusOr<std::string> DumpJson(const Value& value, const JsonOptions& options) {
  std::string out;
  STRATA_RETURN_IF_ERROR(DumpJsonTo(value, options, 0, &out));
  return out;
}

}  // namespace strata::jinja
