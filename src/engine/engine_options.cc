// The engine's option string: scheduler, sampling and tier knobs reachable from the C ABI
// without freezing them into strata_engine_params.
#include <limits>

#include "base/key_value_list.h"
#include "engine/engine.h"

namespace strata {

Status ApplyEngineOptionString(absl::string_view text, absl::string_view what, EngineOptions* options) {
  STRATA_ASSIGN_OR_RETURN(std::vector<KeyValue> items, ParseKeyValueList(text, what));
  EngineOptions next = *options;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const KeyValue& item : items) {
    if (item.key == "scheduler.prefill_chunk_tokens") {
      STRATA_ASSIGN_OR_RETURN(next.prefill_chunk_tokens, KeyValueInt(item, what, 0, kMax));
    } else if (item.key == "scheduler.prefill_tokens_while_decoding") {
      STRATA_ASSIGN_OR_RETURN(next.prefill_tokens_while_decoding, KeyValueInt(item, what, 0, kMax));
    } else if (item.key == "kv.disk_dir") {
      next.kv_disk_dir = item.value;
    } else if (item.key == "kv.disk_bytes") {
      STRATA_ASSIGN_OR_RETURN(const int64_t bytes,
                              KeyValueInt(item, what, 1, std::numeric_limits<int64_t>::max()));
      next.kv_disk_bytes = static_cast<uint64_t>(bytes);
    } else if (item.key == "kv.disk_policy") {
      if (item.value == "all") {
        next.kv_disk_policy = EngineOptions::DiskPolicy::kAll;
      } else if (item.value == "reused") {
        next.kv_disk_policy = EngineOptions::DiskPolicy::kReused;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": kv.disk_policy is '", item.value, "' (all or reused)"));
      }
    } else if (item.key == "kv.disk_shutdown_ms") {
      STRATA_ASSIGN_OR_RETURN(next.kv_disk_shutdown_ms,
                              KeyValueInt(item, what, 0, std::numeric_limits<int64_t>::max()));
    } else if (item.key == "sampling.on_device") {
      STRATA_ASSIGN_OR_RETURN(const int64_t on, KeyValueInt(item, what, 0, 1));
      next.device_sampling = on != 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": unknown key '", item.key,
          "' (known: scheduler.prefill_chunk_tokens, scheduler.prefill_tokens_while_decoding, sampling.on_device, "
          "kv.disk_dir, kv.disk_bytes, kv.disk_policy, kv.disk_shutdown_ms)"));
    }
  }
  *options = next;
  return OkStatus();
}

}  // namespace strata
