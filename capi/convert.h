// Translations shared by several capi files: token arrays, request params,
// and core events into strata_event (with storage for its strings).
#ifndef STRATA_CAPI_CONVERT_H_
#define STRATA_CAPI_CONVERT_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "engine/engine.h"
#include "guard.h"
#include "strata/strata.h"

namespace strata::capi {

// INVALID_ARGUMENT for a NULL array with a nonzero count or an absurd count.
strata_status CheckTokenArray(const Call& call, const int32_t* tokens, size_t count, const char* name);
std::span<const int32_t> TokenSpan(const int32_t* tokens, size_t count);
// Translates the C request params (NULL: defaults) into the core's; `c_params`
// receives the defaulted copy of the caller's struct.
strata_status ToGenerationParams(const Call& call, const strata_request_params* in, GenerationParams* out,
                                 strata_request_params* c_params);

// A core event as the C struct. Its string pointers point into `core`, which
// must outlive the returned value.
strata_event ToCEvent(const Event& core);

// A caller's (pointer, length) string: NULL means empty when the length is 0
// or STRATA_NUL_TERMINATED; INVALID_ARGUMENT for NULL with another length.
strata_status ReadString(const Call& call, const char* text, size_t len, const char* name, std::string* out);

// Text out to a caller's buffer, the convention of every text output: *out_len
// always receives the length; a NULL `buffer` is a length query; a buffer
// without room for the text and a NUL is OUT_OF_RANGE with nothing written.
strata_status CopyTextOut(const Call& call, std::string_view value, char* buffer, size_t capacity, size_t* out_len);

}  // namespace strata::capi

#endif  // STRATA_CAPI_CONVERT_H_
