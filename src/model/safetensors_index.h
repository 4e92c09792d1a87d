// model.safetensors.index.json: the table of a sharded checkpoint, mapping
// each tensor name to the shard file that holds it. Parsed on its own (no
// file system) so that WeightStore and the fuzzer see the same rules.
#ifndef STRATA_MODEL_SAFETENSORS_INDEX_H_
#define STRATA_MODEL_SAFETENSORS_INDEX_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

struct SafetensorsIndex {
  // Shard file name -> the tensors the index places in it, in index order.
  // A std::map keeps the load order deterministic (shard names sort as
  // 00001-of-N, 00002-of-N, ...). Every tensor appears exactly once.
  std::map<std::string, std::vector<std::string>> shards;
};

// Whether `name` (from the index) stays inside the model directory when
// joined to it: relative, no "..", no NUL.
bool IsSafeShardName(const std::string& name);

// Parses the index text. InvalidArgument starting with "<label>: " for bad
// JSON, a missing or empty weight_map, a non-string entry or a shard name
// that would leave the directory.
StatusOr<SafetensorsIndex> ParseSafetensorsIndex(const std::string& label, std::string_view text);

}  // namespace strata

#endif  // STRATA_MODEL_SAFETENSORS_INDEX_H_
