// model.safetensors.index.json parsing (see safetensors_index.h).
#include "model/safetensors_index.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/strict_json.h"

namespace strata {

bool IsSafeShardName(const std::string& name) {
  // Shard names are joined to the model directory, so one like
  // "../../etc/passwd" must not escape it.
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
  for (const auto& part : std::filesystem::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

StatusOr<SafetensorsIndex> ParseSafetensorsIndex(const std::string& label, std::string_view text) {
  STRATA_ASSIGN_OR_RETURN(const nlohmann::json index, ParseStrictJson(label, text));
  const auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || wm == index.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": expected an object with a 'weight_map' object"));
  }
  if (wm->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": 'weight_map' names no tensors"));
  }
  SafetensorsIndex out;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": weight_map entry '", name,
                                                     "' must be a shard file name (a string)"));
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (!IsSafeShardName(shard_name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": weight_map entry '", name, "' names shard '", shard_name,
                       "', which is not a file inside the model directory"));
    }
    out.shards[shard_name].push_back(name);
  }
  return out;
}

}  // namespace strata
