// ConfigReader: config.json access where every error says which file and
// which field, so a user with a hand-edited config can fix it without a
// debugger.
#include "model/config_reader.h"

#include <cmath>
#include <limits>

#include "base/mmap_file.h"
#include "model/config_bounds.h"
#include "model/strict_json.h"

namespace strata {
namespace {

using nlohmann::json;

// Hugging Face configs nest a few levels (rope_scaling, quantization_config);
// anything far deeper is not a config.
constexpr int kMaxConfigDepth = 64;

std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Integers may be written as 4 or 4.0 (some exporters emit floats); 4.5,
// booleans and strings are not integers.
bool AsInt(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; everything below it converts safely.
    if (!std::isfinite(d) || d != std::trunc(d) || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0) {
      return false;
    }
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

StatusOr<ConfigReader> ConfigReader::FromFile(const std::string& path) {
  StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();  // already names the path
  const std::string text(reinterpret_cast<const char*>((*file)->data()),
                         static_cast<size_t>((*file)->size()));
  return FromString(path, text);
}

StatusOr<ConfigReader> ConfigReader::FromString(const std::string& file_label,
                                                const std::string& text) {
  StrictJsonOptions opts;
  opts.max_depth = kMaxConfigDepth;
  // Python's json keeps the last of two equal keys, but save_pretrained never
  // writes them: a duplicate is a hand edit whose intent is unknown, so it is
  // refused (naming the key and its byte offset) rather than guessed.
  opts.reject_duplicate_keys = true;
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseStrictJson(file_label, text, opts));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": expected a JSON object at the top level, got ", Brief(j)));
  }
  return ConfigReader(file_label, "", std::move(j));
}

Status ConfigReader::FieldError(const std::string& key, const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(file_, ": field '", prefix_, key, "': ", what));
}

bool ConfigReader::Has(const std::string& key) const {
  const auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

StatusOr<std::string> ConfigReader::GetString(const std::string& key) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_string()) return FieldError(key, absl::StrCat("expected a string, got ", Brief(v)));
  return v.get<std::string>();
}

Status ConfigReader::CheckBounds(const std::string& key, const std::string& field,
                                 int64_t value) const {
  if (value < kConfigIntMin || value > kConfigIntMax) {
    return FieldError(key, absl::StrCat(value, " is outside the supported range [", kConfigIntMin,
                                        ", ", kConfigIntMax, "]"));
  }
  const int64_t max = ConfigIntMax(field);
  if (value > max) {
    return FieldError(key, absl::StrCat(value, " exceeds the largest supported value, ", max));
  }
  return OkStatus();
}

StatusOr<int64_t> ConfigReader::GetInt(const std::string& key) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  int64_t out;
  if (!AsInt(v, &out)) return FieldError(key, absl::StrCat("expected an integer, got ", Brief(v)));
  STRATA_RETURN_IF_ERROR(CheckBounds(key, key, out));
  return out;
}

StatusOr<int64_t> ConfigReader::GetPositiveInt(const std::string& key, int64_t at_most) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  int64_t out;
  if (!AsInt(v, &out) || out <= 0) {
    return FieldError(key, absl::StrCat("expected a positive integer, got ", Brief(v)));
  }
  STRATA_RETURN_IF_ERROR(CheckBounds(key, key, out));
  if (out > at_most) {
    return FieldError(key, absl::StrCat("expected at most ", at_most, ", got ", out));
  }
  return out;
}

StatusOr<int64_t> ConfigReader::GetIntOr(const std::string& key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  return GetInt(key);
}

StatusOr<double> ConfigReader::GetDouble(const std::string& key) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  // is_number() is false for booleans in nlohmann, as wanted.
  if (!v.is_number()) return FieldError(key, absl::StrCat("expected a number, got ", Brief(v)));
  // JSON has no NaN or infinity, but 1e999 parses as infinity; no config
  // value means that.
  const double d = v.get<double>();
  if (!std::isfinite(d)) return FieldError(key, absl::StrCat("expected a finite number, got ", d));
  return d;
}

StatusOr<double> ConfigReader::GetDoubleOr(const std::string& key, double fallback) const {
  if (!Has(key)) return fallback;
  return GetDouble(key);
}

StatusOr<bool> ConfigReader::GetBoolOr(const std::string& key, bool fallback) const {
  if (!Has(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_boolean()) {
    return FieldError(key, absl::StrCat("expected true or false, got ", Brief(v)));
  }
  return v.get<bool>();
}

StatusOr<std::vector<int64_t>> ConfigReader::GetIntList(const std::string& key) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_array()) {
    return FieldError(key, absl::StrCat("expected a list of integers, got ", Brief(v)));
  }
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x;
    if (!AsInt(v[i], &x)) {
      return FieldError(absl::StrCat(key, "[", i, "]"),
                        absl::StrCat("expected an integer, got ", Brief(v[i])));
    }
    STRATA_RETURN_IF_ERROR(CheckBounds(absl::StrCat(key, "[", i, "]"), key, x));
    out.push_back(x);
  }
  return out;
}

StatusOr<ConfigReader> ConfigReader::GetObject(const std::string& key) const {
  if (!Has(key)) return FieldError(key, "required but missing");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_object()) return FieldError(key, absl::StrCat("expected an object, got ", Brief(v)));
  return ConfigReader(file_, absl::StrCat(prefix_, key, "."), v);
}

}  // namespace strata
