// Sane ranges for the integers of config.json, by field name. ConfigReader
// applies them to every integer it returns, so a hostile or corrupt value
// (num_hidden_layers = 2^40 in a 1 KB file) is refused where it is read,
// naming the file and the field, before any vector, loop or tensor is sized
// from it. Each bound is far beyond every published model; what is impossible
// rather than merely huge (a head count that does not divide, a top-k above
// its pool) is the parsers' business.
#ifndef STRATA_MODEL_CONFIG_BOUNDS_H_
#define STRATA_MODEL_CONFIG_BOUNDS_H_

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "base/input_limits.h"

namespace strata {

struct ConfigIntBound {
  std::string_view field;  // the bare key, wherever it is nested
  int64_t max;
};

// Integers of any other field: the int32 range. Every integer the executors
// keep from a config is a count, a dimension, a layer index or a token id, and
// the public ABI carries those as int32.
inline constexpr int64_t kConfigIntMin = std::numeric_limits<int32_t>::min();
inline constexpr int64_t kConfigIntMax = std::numeric_limits<int32_t>::max();

// The upper bound for `field` (a bare key such as "head_dim", also when read
// as "linear_attn_config.head_dim"): its table entry, else kConfigIntMax.
int64_t ConfigIntMax(std::string_view field);

// The table itself, for documentation and tests.
std::span<const ConfigIntBound> ConfigIntBounds();

}  // namespace strata

#endif  // STRATA_MODEL_CONFIG_BOUNDS_H_
