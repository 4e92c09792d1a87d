// JSON parsing for untrusted model files (safetensors headers, config.json,
// shard indexes): errors are values carrying the byte offset, nesting depth is
// bounded (nlohmann's dump and comparisons recurse, so a header of a million
// '[' must be refused before a DOM exists), and duplicate object keys can be
// refused instead of silently keeping the last one.
#ifndef STRATA_MODEL_STRICT_JSON_H_
#define STRATA_MODEL_STRICT_JSON_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"

namespace strata {

struct StrictJsonOptions {
  int max_depth = 64;  // objects/arrays nested deeper are refused
  bool reject_duplicate_keys = true;
  // Added to byte positions in messages, e.g. 8 when the text starts at file
  // offset 8 (safetensors), so offsets can be found with a hex dump.
  uint64_t offset_base = 0;
};

// Parses `text`. On failure returns InvalidArgument whose message starts with
// "<label>: " and gives the file offset of the problem, e.g.
//   "model.safetensors: invalid JSON at byte 17: syntax error ...".
// Duplicate keys are reported as "duplicate key 'a.b' at byte N" (the dotted
// path and the offset of the second occurrence's opening quote).
StatusOr<nlohmann::json> ParseStrictJson(std::string_view label, std::string_view text,
                                         const StrictJsonOptions& options = {});

}  // namespace strata

#endif  // STRATA_MODEL_STRICT_JSON_H_
