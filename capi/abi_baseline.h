// The first released layout of every public struct (ABI 1, version 0.1): the
// one table of minimum struct_size values, so no call site keeps its own.
// Each size is measured up to the last field of that layout, which stays
// right when fields are appended later. The static_asserts pin the offsets of
// the released fields on LP64 (x86-64, arm64 Linux and macOS): a field moved
// or inserted before another fails the build instead of the host.
#ifndef STRATA_CAPI_ABI_BASELINE_H_
#define STRATA_CAPI_ABI_BASELINE_H_

#include <cstddef>
#include <cstdint>

#include "strata/strata.h"

namespace strata::capi {

template <class T>
struct Released;

// The largest struct_size an input struct may claim: the library checks that
// the bytes beyond its own layout are zero, so a claim must stay within what
// a caller can own. No struct of this API will grow past it (strata.h,
// convention 3).
inline constexpr size_t kMaxStructSize = 4096;

#define STRATA_RELEASED_LAYOUT(T, last_field) \
  template <>                                 \
  struct Released<T> {                        \
    static constexpr size_t kSize = offsetof(T, last_field) + sizeof(T::last_field); \
    static constexpr const char* kName = #T;  \
  }

STRATA_RELEASED_LAYOUT(strata_engine_params, options);
STRATA_RELEASED_LAYOUT(strata_metrics, state_active_bytes);
STRATA_RELEASED_LAYOUT(strata_event, tool_arguments_len);
// strata_model_params and strata_model_info existed before the device fields
// were appended: programs built against that header keep working.
STRATA_RELEASED_LAYOUT(strata_model_params, progress_user_data);
STRATA_RELEASED_LAYOUT(strata_model_info, state_bytes_per_sequence);
STRATA_RELEASED_LAYOUT(strata_session_params, max_context_tokens);
STRATA_RELEASED_LAYOUT(strata_request_params, max_context_tokens);
STRATA_RELEASED_LAYOUT(strata_chat_message, tool_calls_json);
STRATA_RELEASED_LAYOUT(strata_tool, user_data);
STRATA_RELEASED_LAYOUT(strata_chat_params, user_data);

#undef STRATA_RELEASED_LAYOUT

}  // namespace strata::capi

#if UINTPTR_MAX == UINT64_MAX
#include "abi_offsets_lp64.inc"
#endif

#endif  // STRATA_CAPI_ABI_BASELINE_H_
