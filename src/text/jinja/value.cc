// Value semantics mirroring Python: truthiness, ==, <, str() and repr().
#include "text/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace strata::jinja {

const Value* DictData::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

Value* DictData::Find(const Value& key) {
  for (auto& [k, v] : items) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  v.list_->is_tuple = is_tuple;
  return v;
}

Value Value::Dict(DictData dict) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<DictData>(std::move(dict));
  return v;
}

Value Value::Namespace(DictData attrs) {
  Value v(Kind::kNamespace);
  v.ns_ = std::make_shared<NamespaceData>();
  v.ns_->attrs = std::move(attrs);
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v(Kind::kFunction);
  v.fn_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.items.emplace_back(String(it.key()), FromJson(it.value()));
      }
      return Dict(std::move(d));
    }
    default:
      return None();
  }
}

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
      return !str_.empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty();
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
      return str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return PythonStringRepr(str_);
    case Kind::kList: {
      if (!list_->view_name.empty()) {
        Value plain = List(list_->items);
        return list_->view_name + "(" + plain.Repr() + ")";
      }
      std::string out = list_->is_tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i) out += ", ";
        out += list_->items[i].Repr();
      }
      if (list_->is_tuple && list_->items.size() == 1) out += ",";
      out += list_->is_tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += dict_->items[i].first.Repr() + ": " + dict_->items[i].second.Repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      for (size_t i = 0; i < ns_->attrs.items.size(); ++i) {
        if (i) out += ", ";
        out += ns_->attrs.items[i].first.Repr() + ": " + ns_->attrs.items[i].second.Repr();
      }
      return out + "}>";
    }
    case Kind::kFunction:
      return "<function " + fn_->name + ">";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind_ != Kind::kFloat && other.kind_ != Kind::kFloat) return int_ == other.int_;
    return as_double() == other.as_double();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return str_ == other.str_;
    case Kind::kList: {
      if (list_->is_tuple != other.list_->is_tuple) return false;
      const auto& a = list_->items;
      const auto& b = other.list_->items;
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_->items.size() != other.dict_->items.size()) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* o = other.dict_->Find(k);
        if (!o || !o->Equals(v)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return ns_ == other.ns_;
    case Kind::kFunction:
      return fn_ == other.fn_;
    default:
      return false;
  }
}

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
      if (!list_->view_name.empty()) return list_->view_name;
      return list_->is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order.
    return a.as_string() < b.as_string();
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace strata::jinja
