// Attribute/item lookup, iteration, slicing and built-in methods of str, dict
// and list, following CPython and jinja2's Environment.getattr/getitem.
#include "text/jinja/object_model.h"

#include <string.h>  // memmem

#include <algorithm>
#include <charconv>
#include <limits>

#include "absl/strings/str_cat.h"
#include "text/jinja/case_tables.h"
#include "text/jinja/render_state.h"

namespace strata::jinja {
namespace {

Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string ObjectDescription(const Value& v) {
  // jinja2's Undefined messages use object_type_repr: "dict object", "None".
  if (v.is_none()) return "None";
  return v.TypeName() + " object";
}

Value MissingAttribute(const Value& obj, const std::string& name) {
  return Value::Undefined(
      absl::StrCat("'", ObjectDescription(obj), "' has no attribute '", name, "'"));
}

// Normalizes a Python index; returns false when out of range.
bool NormalizeIndex(int64_t* index, int64_t size) {
  if (*index < 0) *index += size;
  return *index >= 0 && *index < size;
}

const std::vector<std::string> kStrMethods = {
    "startswith", "endswith",   "split",   "rsplit",       "strip",        "lstrip",   "rstrip",
    "replace",    "upper",      "lower",   "title",        "capitalize",   "find",     "rfind",
    "index",      "count",      "join",    "splitlines",   "isdigit",      "isalpha",  "isspace",
    "isalnum",    "islower",    "isupper", "removeprefix", "removesuffix", "format",   "zfill",
    "partition",  "rpartition", "ljust",   "rjust",        "center",       "casefold", "swapcase",
    "isnumeric",  "isdecimal",  "istitle", "expandtabs"};
const std::vector<std::string> kDictMethods = {"get", "items", "keys", "values"};
const std::vector<std::string> kListMethods = {"index", "count"};

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

StatusOr<std::string> StringArg(const Value& v, const char* what) {
  if (!v.is_string()) {
    return TypeError(absl::StrCat(what, " arg must be str, not ", v.TypeName()));
  }
  return v.as_string();
}

// The render's item limit, checked while a list of pieces grows so that it
// stops one past the limit (the list's construction then fails) instead of
// materializing millions of pieces first.
size_t PieceLimit() {
  RenderState* state = RenderState::Current();
  return state != nullptr ? static_cast<size_t>(state->limits().max_items)
                          : std::numeric_limits<size_t>::max();
}

// Python str.split / rsplit.
std::vector<std::string> PySplit(const std::string& s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  const size_t limit = PieceLimit();
  if (!sep) {
    // Whitespace split: runs of whitespace, no empty strings.
    std::vector<char32_t> cps = DecodeUtf8(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t start = i;
      while (i < cps.size() && !IsPythonSpace(cps[i])) ++i;
      words.emplace_back(start, i);
      if (words.size() > limit) break;
    }
    auto slice = [&](size_t a, size_t b) {
      return EncodeUtf8(std::vector<char32_t>(cps.begin() + a, cps.begin() + b));
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [a, b] : words) out.push_back(slice(a, b));
      return out;
    }
    if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) out.push_back(slice(words[k].first, words[k].second));
      // The remainder is kept as is from its first character to the end.
      out.push_back(slice(words[maxsplit].first, cps.size()));
    } else {
      size_t n = words.size();
      // The remainder runs from the start to the end of its last word.
      out.push_back(slice(0, words[n - maxsplit - 1].second));
      for (size_t k = n - maxsplit; k < n; ++k)
        out.push_back(slice(words[k].first, words[k].second));
    }
    return out;
  }
  // rsplit is split of the reversed bytes with the reversed separator: the
  // same non-overlapping matches, taken from the right.
  const std::string text = from_right ? std::string(s.rbegin(), s.rend()) : s;
  const std::string d = from_right ? std::string(sep->rbegin(), sep->rend()) : *sep;
  size_t start = 0;
  int64_t splits = 0;
  while ((maxsplit < 0 || splits < maxsplit) && out.size() <= limit) {
    size_t p = FindSubstring(text, d, start);
    if (p == std::string::npos) break;
    out.push_back(text.substr(start, p - start));
    start = p + d.size();
    ++splits;
  }
  out.push_back(text.substr(start));
  if (from_right) {
    std::reverse(out.begin(), out.end());
    for (std::string& piece : out) std::reverse(piece.begin(), piece.end());
  }
  return out;
}

Value StringList(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

bool AllCodePoints(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t cp : DecodeUtf8(s)) {
    if (!pred(cp)) return false;
  }
  return true;
}

// Code point index of a byte offset.
int64_t CodePointIndex(const std::string& s, size_t byte_offset) {
  return CodePointLength(s.substr(0, byte_offset));
}

StatusOr<Value> StrFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out.push_back('{');
        ++i;
        continue;
      }
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) return TypeError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= args.positional.size())
          return TypeError("Replacement index out of range");
        v = &args.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t k = 0;
        const char* end = field.data() + field.size();
        if (std::from_chars(field.data(), end, k).ptr != end || k >= args.positional.size()) {
          return TypeError("Replacement index out of range");
        }
        v = &args.positional[k];
      } else {
        for (const auto& [name, value] : args.keyword) {
          if (name == field) v = &value;
        }
        if (!v) return TypeError("KeyError: '" + field + "'");
      }
      // A field may repeat ("{0}{0}{0}"): the result can outgrow its inputs.
      const std::string text = v->Str();
      STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(out.size() + text.size())));
      out += text;
      i = close;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
    } else {
      out.push_back(c);
    }
  }
  return Value::String(out);
}

StatusOr<Value> CallStrMethod(const std::string& s, const std::string& name, CallArgs& args) {
  auto opt_string = [&](size_t i, const char* param) -> StatusOr<std::optional<std::string>> {
    if (i < args.positional.size()) {
      const Value& v = args.positional[i];
      if (v.is_none()) return std::optional<std::string>();
      STRATA_ASSIGN_OR_RETURN(std::string str, StringArg(v, param));
      return std::optional<std::string>(str);
    }
    for (const auto& [k, v] : args.keyword) {
      if (k == param) {
        if (v.is_none()) return std::optional<std::string>();
        STRATA_ASSIGN_OR_RETURN(std::string str, StringArg(v, param));
        return std::optional<std::string>(str);
      }
    }
    return std::optional<std::string>();
  };
  auto opt_int = [&](size_t i, const char* param, int64_t fallback) -> StatusOr<int64_t> {
    const Value* v = i < args.positional.size() ? &args.positional[i] : nullptr;
    for (const auto& [k, kv] : args.keyword) {
      if (k == param) v = &kv;
    }
    if (!v) return fallback;
    if (!v->is_int() && !v->is_bool())
      return TypeError(
          absl::StrCat("'", v->TypeName(), "' object cannot be interpreted as an integer"));
    return v->as_int();
  };
  if (name == "startswith" || name == "endswith") {
    if (args.positional.empty()) return TypeError(name + "() takes at least 1 argument (0 given)");
    std::vector<std::string> options;
    const Value& arg = args.positional[0];
    if (arg.is_list() && arg.list().is_tuple) {
      for (const auto& v : arg.list().items) {
        STRATA_ASSIGN_OR_RETURN(std::string o, StringArg(v, name.c_str()));
        options.push_back(o);
      }
    } else if (arg.is_string()) {
      options.push_back(arg.as_string());
    } else {
      return TypeError(
          absl::StrCat(name, " first arg must be str or a tuple of str, not ", arg.TypeName()));
    }
    for (const auto& o : options) {
      bool hit = name == "startswith"
                     ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                     : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    STRATA_ASSIGN_OR_RETURN(auto sep, opt_string(0, "sep"));
    STRATA_ASSIGN_OR_RETURN(int64_t maxsplit, opt_int(1, "maxsplit", -1));
    if (sep && sep->empty()) return TypeError("ValueError: empty separator");
    return StringList(PySplit(s, sep, maxsplit, name == "rsplit"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    STRATA_ASSIGN_OR_RETURN(auto chars, opt_string(0, "chars"));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    if (args.positional.size() < 2) return TypeError("replace expected at least 2 arguments");
    STRATA_ASSIGN_OR_RETURN(std::string old, StringArg(args.positional[0], "replace"));
    STRATA_ASSIGN_OR_RETURN(std::string repl, StringArg(args.positional[1], "replace"));
    STRATA_ASSIGN_OR_RETURN(int64_t count, opt_int(2, "count", -1));
    STRATA_ASSIGN_OR_RETURN(std::string replaced, PyReplace(s, old, repl, count));
    return Value::String(std::move(replaced));
  }
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower" || name == "casefold") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    if (args.positional.empty()) return TypeError(name + "() takes at least 1 argument (0 given)");
    STRATA_ASSIGN_OR_RETURN(std::string sub, StringArg(args.positional[0], name.c_str()));
    if (name == "count") {
      if (sub.empty()) return Value::Int(CodePointLength(s) + 1);
      int64_t n = 0;
      for (size_t p = FindSubstring(s, sub); p != std::string::npos;
           p = FindSubstring(s, sub, p + sub.size())) {
        ++n;
      }
      return Value::Int(n);
    }
    size_t p = name == "rfind" ? RFindSubstring(s, sub) : FindSubstring(s, sub);
    if (p == std::string::npos) {
      if (name == "index") return TypeError("ValueError: substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointIndex(s, p));
  }
  if (name == "join") {
    if (args.positional.size() != 1) return TypeError("join() takes exactly one argument");
    STRATA_ASSIGN_OR_RETURN(auto items, Iterate(args.positional[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      items[i].TypeName(), " found"));
      }
      STRATA_RETURN_IF_ERROR(CheckStringSize(
          static_cast<int64_t>(out.size() + s.size() + items[i].as_string().size())));
      if (i) out += s;
      out += items[i].as_string();
    }
    return Value::String(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    const size_t limit = PieceLimit();
    size_t start = 0;
    for (size_t i = 0; i < s.size() && lines.size() <= limit; ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    return StringList(lines);
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
    return Value::Bool(AllCodePoints(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  }
  if (name == "isalpha") {
    return Value::Bool(AllCodePoints(s, [](char32_t c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0xC0;
    }));
  }
  if (name == "isalnum") {
    return Value::Bool(AllCodePoints(s, [](char32_t c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c >= 0xC0;
    }));
  }
  if (name == "isspace") return Value::Bool(AllCodePoints(s, IsPythonSpace));
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (char32_t c : DecodeUtf8(s)) {
      bool lower = c >= 'a' && c <= 'z';
      bool upper = c >= 'A' && c <= 'Z';
      if (name == "islower" ? upper : lower) return Value::Bool(false);
      cased = cased || lower || upper;
    }
    return Value::Bool(cased);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    if (args.positional.size() != 1) return TypeError(name + "() takes exactly one argument");
    STRATA_ASSIGN_OR_RETURN(std::string a, StringArg(args.positional[0], name.c_str()));
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0 && s.size() >= a.size()) {
      return Value::String(s.substr(a.size()));
    }
    if (name == "removesuffix" && !a.empty() && s.size() >= a.size() &&
        s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::String(s.substr(0, s.size() - a.size()));
    }
    return Value::String(s);
  }
  if (name == "format") return StrFormat(s, args);
  if (name == "partition" || name == "rpartition") {
    if (args.positional.size() != 1) return TypeError(name + "() takes exactly one argument");
    STRATA_ASSIGN_OR_RETURN(std::string sep, StringArg(args.positional[0], name.c_str()));
    size_t p = name == "partition" ? FindSubstring(s, sep) : RFindSubstring(s, sep);
    std::vector<Value> parts;
    if (p == std::string::npos) {
      if (name == "partition") {
        parts = {Value::String(s), Value::String(""), Value::String("")};
      } else {
        parts = {Value::String(""), Value::String(""), Value::String(s)};
      }
    } else {
      parts = {Value::String(s.substr(0, p)), Value::String(sep),
               Value::String(s.substr(p + sep.size()))};
    }
    return Value::List(std::move(parts), /*is_tuple=*/true);
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    STRATA_ASSIGN_OR_RETURN(int64_t width, opt_int(0, "width", 0));
    STRATA_ASSIGN_OR_RETURN(auto fill, opt_string(1, "fillchar"));
    std::string f = fill ? *fill : (name == "zfill" ? "0" : " ");
    if (CodePointLength(f) != 1) {
      return TypeError("The fill character must be exactly one character long");
    }
    int64_t len = CodePointLength(s);
    if (width <= len) return Value::String(s);
    int64_t pad = width - len;
    // Checked before padding: the width is the template's to choose.
    int64_t pad_bytes = 0;
    if (__builtin_mul_overflow(pad, static_cast<int64_t>(f.size()), &pad_bytes)) {
      pad_bytes = std::numeric_limits<int64_t>::max() - static_cast<int64_t>(s.size());
    }
    STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(s.size()) + pad_bytes));
    auto rep = [&](int64_t n) {
      std::string r;
      for (int64_t i = 0; i < n; ++i) r += f;
      return r;
    };
    if (name == "ljust") return Value::String(s + rep(pad));
    if (name == "rjust") return Value::String(rep(pad) + s);
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '-' || s[0] == '+'))
        return Value::String(s.substr(0, 1) + rep(pad) + s.substr(1));
      return Value::String(rep(pad) + s);
    }
    int64_t left = pad / 2 + (pad & width & 1);
    return Value::String(rep(left) + s + rep(pad - left));
  }
  return TypeError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

StatusOr<Value> CallDictMethod(const Value& dict, const std::string& name, CallArgs& args) {
  DictData& d = dict.dict();
  if (name == "get") {
    if (args.positional.empty() || args.positional.size() > 2) {
      return TypeError("get expected 1 or 2 arguments");
    }
    const Value* v = d.Find(args.positional[0]);
    if (v) return *v;
    return args.positional.size() > 1 ? args.positional[1] : Value::None();
  }
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (name == "items") {
      out.push_back(Value::List({k, v}, /*is_tuple=*/true));
    } else if (name == "keys") {
      out.push_back(k);
    } else {
      out.push_back(v);
    }
  }
  Value view = Value::List(std::move(out));
  view.list().view_name = "dict_" + name;
  return view;
}

StatusOr<Value> CallListMethod(const Value& list, const std::string& name, CallArgs& args) {
  if (args.positional.size() != 1) return TypeError(name + "() takes exactly one argument");
  const auto& items = list.list().items;
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].Equals(args.positional[0])) {
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
  }
  if (name == "index")
    return TypeError("ValueError: " + args.positional[0].Repr() + " is not in list");
  return Value::Int(count);
}

Value BoundMethod(const Value& receiver, const std::string& name) {
  return Value::Function(name, [receiver, name](CallArgs& args) -> StatusOr<Value> {
    if (receiver.is_string()) return CallStrMethod(receiver.as_string(), name, args);
    if (receiver.is_dict()) return CallDictMethod(receiver, name, args);
    return CallListMethod(receiver, name, args);
  });
}

}  // namespace

Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(undefined.undefined_hint().empty()
                                        ? std::string("'Undefined' is undefined")
                                        : undefined.undefined_hint());
}

StatusOr<Value> GetAttribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kString:
      if (Contains(kStrMethods, name)) return BoundMethod(obj, name);
      return MissingAttribute(obj, name);
    case Value::Kind::kDict: {
      if (Contains(kDictMethods, name)) return BoundMethod(obj, name);
      const Value* v = obj.dict().Find(Value::String(name));
      if (v) return *v;
      return MissingAttribute(obj, name);
    }
    case Value::Kind::kList:
      if (Contains(kListMethods, name)) return BoundMethod(obj, name);
      return MissingAttribute(obj, name);
    case Value::Kind::kNamespace: {
      const Value* v = obj.namespace_attrs().Find(Value::String(name));
      if (v) return *v;
      return Value::Undefined(
          absl::StrCat("'jinja2.utils.Namespace object' has no attribute '", name, "'"));
    }
    default:
      return MissingAttribute(obj, name);
  }
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kDict: {
      const Value* v = obj.dict().Find(key);
      if (v) return *v;
      break;
    }
    case Value::Kind::kList:
      if (!obj.list().view_name.empty()) break;  // views are not subscriptable
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (NormalizeIndex(&i, static_cast<int64_t>(obj.list().items.size()))) {
          return obj.list().items[i];
        }
        return Value::Undefined(
            absl::StrCat("'", ObjectDescription(obj), "' has no element ", key.Repr()));
      }
      break;
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = obj.as_string();
        int64_t i = key.as_int();
        if (NormalizeIndex(&i, CodePointLength(s))) {
          // Walks to the code point instead of decoding the whole string.
          size_t at = 0;
          for (int64_t seen = 0; at < s.size(); ++at) {
            if ((static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) continue;
            if (seen++ == i) break;
          }
          size_t end = at + 1;
          while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
          return Value::String(s.substr(at, end - at));
        }
        return Value::Undefined(
            absl::StrCat("'", ObjectDescription(obj), "' has no element ", key.Repr()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return GetAttribute(obj, key.as_string());
  return Value::Undefined(
      absl::StrCat("'", ObjectDescription(obj), "' has no element ", key.Repr()));
}

StatusOr<Value> GetSlice(const Value& obj, const Value& start_v, const Value& stop_v,
                         const Value& step_v) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto as_index = [](const Value& v, const char* what) -> StatusOr<std::optional<int64_t>> {
    if (v.is_none() || v.is_undefined()) return std::optional<int64_t>();
    if (!v.is_int() && !v.is_bool()) {
      return TypeError("slice indices must be integers or None or have an __index__ method");
    }
    return std::optional<int64_t>(v.as_int());
  };
  STRATA_ASSIGN_OR_RETURN(auto start_o, as_index(start_v, "start"));
  STRATA_ASSIGN_OR_RETURN(auto stop_o, as_index(stop_v, "stop"));
  STRATA_ASSIGN_OR_RETURN(auto step_o, as_index(step_v, "step"));
  int64_t step = step_o.value_or(1);
  if (step == 0) return TypeError("ValueError: slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = DecodeUtf8(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().items.size());
  } else {
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  // CPython PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) {
      if (step > 0) return is_start ? 0 : n;
      return is_start ? n - 1 : -1;
    }
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(start_o, true);
  int64_t stop = adjust(stop_o, false);
  std::vector<int64_t> indices;
  // The indices stay within [-1, n], so only the step can overflow them.
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    indices.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : indices) AppendUtf8(cps[i], &out);
    return Value::String(out);
  }
  std::vector<Value> out;
  for (int64_t i : indices) out.push_back(obj.list().items[i]);
  return Value::List(std::move(out), obj.list().is_tuple);
}

StatusOr<std::vector<Value>> Iterate(const Value& obj) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      if (!SpendSteps(1 + static_cast<int64_t>(obj.list().items.size()))) {
        return RenderState::Current()->error();
      }
      return obj.list().items;
    case Value::Kind::kDict: {
      if (!SpendSteps(1 + static_cast<int64_t>(obj.dict().items.size()))) {
        return RenderState::Current()->error();
      }
      std::vector<Value> keys;
      for (const auto& [k, v] : obj.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      STRATA_RETURN_IF_ERROR(CheckItemCount(CodePointLength(obj.as_string())));
      std::vector<Value> chars;
      for (char32_t cp : DecodeUtf8(obj.as_string())) {
        std::string c;
        AppendUtf8(cp, &c);
        chars.push_back(Value::String(c));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not iterable"));
  }
}

StatusOr<int64_t> Length(const Value& obj) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      SpendSteps(1 + static_cast<int64_t>(obj.as_string().size()) / limits::kRenderBytesPerStep);
      return CodePointLength(obj.as_string());
    case Value::Kind::kList:
      return static_cast<int64_t>(obj.list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(obj.dict().items.size());
    default:
      return TypeError(absl::StrCat("object of type '", obj.TypeName(), "' has no len()"));
  }
}

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PyStrip(const std::string& s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip_it = [&](char32_t c) {
    if (!chars) return IsPythonSpace(c);
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t a = 0, b = cps.size();
  if (left) {
    while (a < b && strip_it(cps[a])) ++a;
  }
  if (right) {
    while (b > a && strip_it(cps[b - 1])) --b;
  }
  return EncodeUtf8(std::vector<char32_t>(cps.begin() + a, cps.begin() + b));
}

namespace {

// Mapping of `cp` in a sorted table, or null when it maps to itself.
const char* FindMapping(const CaseMapping* table, size_t size, char32_t cp) {
  const CaseMapping* end = table + size;
  const CaseMapping* it = std::lower_bound(
      table, end, cp, [](const CaseMapping& m, char32_t c) { return m.code_point < c; });
  return (it != end && it->code_point == cp) ? it->utf8 : nullptr;
}

void AppendMapped(const CaseMapping* table, size_t size, char32_t cp, std::string* out) {
  if (const char* mapped = FindMapping(table, size, cp)) {
    *out += mapped;
  } else {
    AppendUtf8(cp, out);
  }
}

bool IsCased(char32_t cp) {
  const CaseRange* end = kCased + kCasedSize;
  const CaseRange* it =
      std::lower_bound(kCased, end, cp, [](const CaseRange& r, char32_t c) { return r.last < c; });
  return it != end && it->first <= cp;
}

}  // namespace

std::string PyUpper(const std::string& s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendMapped(kUpper, kUpperSize, c, &out);
  return out;
}

std::string PyLower(const std::string& s) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    // CPython's final-sigma rule: capital sigma after a cased letter and not
    // before one lowers to final sigma.
    if (cps[i] == 0x3A3 && i > 0 && IsCased(cps[i - 1]) &&
        (i + 1 == cps.size() || !IsCased(cps[i + 1]))) {
      AppendUtf8(0x3C2, &out);
      continue;
    }
    AppendMapped(kLower, kLowerSize, cps[i], &out);
  }
  return out;
}

std::string PyCapitalize(const std::string& s) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      AppendMapped(kTitle, kTitleSize, cps[i], &out);
    } else {
      AppendMapped(kLower, kLowerSize, cps[i], &out);
    }
  }
  return out;
}

std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (prev_cased) {
      AppendMapped(kLower, kLowerSize, c, &out);
    } else {
      AppendMapped(kTitle, kTitleSize, c, &out);
    }
    prev_cased = IsCased(c);
  }
  return out;
}

StatusOr<std::string> PyReplace(const std::string& s, const std::string& old,
                                const std::string& repl, int64_t count) {
  // The result grows by |repl| per match: checked as it grows.
  auto fits = [](const std::string& out, size_t more) {
    return CheckStringSize(static_cast<int64_t>(out.size() + more));
  };
  if (old.empty()) {
    // Python inserts `repl` between every character and at both ends.
    std::vector<char32_t> cps = DecodeUtf8(s);
    std::string out;
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        STRATA_RETURN_IF_ERROR(fits(out, repl.size()));
        out += repl;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = FindSubstring(s, old, start);
    if (p == std::string::npos) break;
    STRATA_RETURN_IF_ERROR(fits(out, p - start + repl.size()));
    out.append(s, start, p - start).append(repl);
    start = p + old.size();
    ++done;
  }
  STRATA_RETURN_IF_ERROR(fits(out, s.size() - start));
  return out.append(s, start, std::string::npos);
}

size_t FindSubstring(std::string_view haystack, std::string_view needle, size_t from) {
  if (from > haystack.size()) return std::string::npos;
  if (needle.empty()) return from;
  // memmem is linear in glibc and musl (two-way); std::string::find is
  // O(n * m) on inputs like "aaaa...ab" in "aaaa...a".
  const void* p =
      memmem(haystack.data() + from, haystack.size() - from, needle.data(), needle.size());
  const size_t at = p == nullptr
                        ? std::string::npos
                        : static_cast<size_t>(static_cast<const char*>(p) - haystack.data());
  // The render pays for the bytes scanned (repeated searches for the next
  // match scan each byte about once).
  const size_t scanned = (at == std::string::npos ? haystack.size() : at + needle.size()) - from;
  SpendSteps(1 + static_cast<int64_t>(scanned) / limits::kRenderBytesPerStep);
  return at;
}

size_t RFindSubstring(std::string_view haystack, std::string_view needle) {
  if (needle.size() > haystack.size()) return std::string::npos;
  // The last match is the first one in the reversed bytes.
  const std::string rh(haystack.rbegin(), haystack.rend());
  const std::string rn(needle.rbegin(), needle.rend());
  const size_t p = FindSubstring(rh, rn);
  return p == std::string::npos ? p : haystack.size() - p - needle.size();
}

StatusOr<std::vector<Value>> BindArgs(const std::string& fn, const CallArgs& args,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::optional<Value>>& defaults) {
  std::vector<Value> out(names.size());
  std::vector<bool> set(names.size(), false);
  if (args.positional.size() > names.size()) {
    return TypeError(absl::StrCat(fn, "() takes at most ", names.size(), " arguments (",
                                  args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    set[i] = true;
  }
  for (const auto& [k, v] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) {
      return TypeError(absl::StrCat(fn, "() got an unexpected keyword argument '", k, "'"));
    }
    size_t i = static_cast<size_t>(it - names.begin());
    if (set[i]) return TypeError(absl::StrCat(fn, "() got multiple values for argument '", k, "'"));
    out[i] = v;
    set[i] = true;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!set[i] && i < defaults.size() && defaults[i]) out[i] = *defaults[i];
  }
  return out;
}

}  // namespace strata::jinja
