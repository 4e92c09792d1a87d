// Typed access to config.json with errors that name the file and the field.
#ifndef STRATA_MODEL_CONFIG_READER_H_
#define STRATA_MODEL_CONFIG_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/input_limits.h"
#include "base/status.h"

namespace strata {

// Wraps one JSON object (the whole config or a nested one such as
// "linear_attn_config"). Error messages read like
//   "<dir>/config.json: field 'linear_attn_config.num_heads': expected a positive integer, got -3".
// Every integer returned is within its field's sane range (model/config_bounds.h:
// int32 by default, tighter for dimensions and counts) and every double is
// finite, so callers may size things from them; a value outside is an error
// naming the file and the field.
class ConfigReader {
 public:
  // Reads and parses `path`; InvalidArgument with the parser's byte offset on bad JSON
  // or a duplicate key (naming it), NotFound when the file is missing.
  static StatusOr<ConfigReader> FromFile(const std::string& path);
  static StatusOr<ConfigReader> FromString(const std::string& file_label, const std::string& text);

  bool Has(const std::string& key) const;  // present and not null
  StatusOr<std::string> GetString(const std::string& key) const;
  StatusOr<int64_t> GetInt(const std::string& key) const;         // required
  // Required, in [1, at_most]: a size. By default at most
  // limits::kMaxModelDimension, so that products of sizes cannot overflow.
  StatusOr<int64_t> GetPositiveInt(const std::string& key,
                                   int64_t at_most = limits::kMaxModelDimension) const;
  StatusOr<int64_t> GetIntOr(const std::string& key, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& key) const;
  StatusOr<double> GetDoubleOr(const std::string& key, double fallback) const;
  StatusOr<bool> GetBoolOr(const std::string& key, bool fallback) const;
  // Each entry within the bounds of `key`.
  StatusOr<std::vector<int64_t>> GetIntList(const std::string& key) const;
  StatusOr<ConfigReader> GetObject(const std::string& key) const;

  // An error about `key` in the same format, for checks the caller makes
  // (e.g. contradictory fields).
  Status FieldError(const std::string& key, const std::string& what) const;

  const std::string& file_label() const { return file_; }
  const nlohmann::json& json() const { return j_; }

 private:
  ConfigReader(std::string file, std::string prefix, nlohmann::json j)
      : file_(std::move(file)), prefix_(std::move(prefix)), j_(std::move(j)) {}
  // `value` of `key` (as the message names it) against the bounds of `field`.
  Status CheckBounds(const std::string& key, const std::string& field, int64_t value) const;
  std::string file_;
  std::string prefix_;  // "linear_attn_config." for nested objects
  nlohmann::json j_;
};

}  // namespace strata

#endif  // STRATA_MODEL_CONFIG_READER_H_
