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

// Lengths passed with strings and counts passed with arrays stay below 2^31
// (strata.h, convention 5): a larger one is a caller's mistake, refused
// before anything is read or allocated.
inline constexpr size_t kMaxInputLength = size_t{1} << 31;

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
// or STRATA_NUL_TERMINATED; INVALID_ARGUMENT for NULL with another length, a
// length of kMaxInputLength or more (nothing is read), or bytes that are not
// UTF-8 (the message gives the offset).
strata_status ReadString(const Call& call, const char* text, size_t len, const char* name, std::string* out);
// INVALID_ARGUMENT naming `name` and the offset when the NUL-terminated `text`
// (not NULL) is not UTF-8.
strata_status CheckUtf8(const Call& call, const char* text, const char* name);

// Text out to a caller's buffer, the convention of every text output: *out_len
// always receives the length; a NULL `buffer` is a length query; a buffer
// without room for the text and a NUL is OUT_OF_RANGE with nothing written.
strata_status CopyTextOut(const Call& call, std::string_view value, char* buffer, size_t capacity, size_t* out_len);

}  // namespace strata::capi

#endif  // STRATA_CAPI_CONVERT_H_
