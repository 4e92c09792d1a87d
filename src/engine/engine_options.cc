// The engine's option string: scheduler and sampling knobs reachable from the C ABI
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
    } else if (item.key == "sampling.on_device") {
      STRATA_ASSIGN_OR_RETURN(const int64_t on, KeyValueInt(item, what, 0, 1));
      next.device_sampling = on != 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": unknown key '", item.key,
          "' (known: scheduler.prefill_chunk_tokens, scheduler.prefill_tokens_while_decoding, sampling.on_device)"));
    }
  }
  *options = next;
  return OkStatus();
}

}  // namespace strata
