// Event and string translations shared by the capi files (see convert.h).
#include "convert.h"

#include <cstring>
#include <string>

#include "text/unicode.h"

namespace strata::capi {
namespace {

const char* OrNull(const std::string& s, bool present) { return present ? s.c_str() : nullptr; }

}  // namespace

strata_event ToCEvent(const Event& core) {
  strata_event ev{};
  ev.struct_size = sizeof(strata_event);
  ev.type = static_cast<strata_event_type>(core.type);
  ev.request = static_cast<strata_request*>(core.request != nullptr ? core.request->tag() : nullptr);
  ev.token = core.token;
  ev.status = ToCode(core.status);
  ev.finish_reason = static_cast<strata_finish_reason>(core.finish_reason);
  ev.num_generated_tokens = static_cast<uint32_t>(core.num_generated);
  const bool text = core.type == EventType::kText || core.type == EventType::kToolError;
  const bool call = core.type == EventType::kToolCall || core.type == EventType::kToolError;
  ev.text = OrNull(core.text, text);
  ev.text_len = text ? core.text.size() : 0;
  ev.tool_call_id = OrNull(core.call_id, call && !core.call_id.empty());
  ev.tool_name = OrNull(core.tool_name, call && !core.tool_name.empty());
  ev.tool_arguments = OrNull(core.arguments, call);
  ev.tool_arguments_len = call ? core.arguments.size() : 0;
  return ev;
}

strata_status ReadString(const Call& call, const char* text, size_t len, const char* name, std::string* out) {
  if (text == nullptr) {
    if (len != 0 && len != STRATA_NUL_TERMINATED) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " is NULL but its length is ", len));
    }
    out->clear();
    return STRATA_OK;
  }
  if (len != STRATA_NUL_TERMINATED && len >= kMaxInputLength) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " length ", len, " is too large (at most ",
                                                               kMaxInputLength - 1, " bytes)"));
  }
  const std::string_view view(text, len == STRATA_NUL_TERMINATED ? std::strlen(text) : len);
  if (const size_t bad = text::FirstInvalidUtf8(view); bad != view.size()) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " is not valid UTF-8 at byte ", bad));
  }
  out->assign(view);
  return STRATA_OK;
}

strata_status CheckUtf8(const Call& call, const char* text, const char* name) {
  const std::string_view view(text);
  if (const size_t bad = text::FirstInvalidUtf8(view); bad != view.size()) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " is not valid UTF-8 at byte ", bad));
  }
  return STRATA_OK;
}

strata_status CopyTextOut(const Call& call, std::string_view value, char* buffer, size_t capacity, size_t* out_len) {
  *out_len = value.size();
  if (buffer == nullptr) return STRATA_OK;
  if (capacity < value.size() + 1) {
    return call.Fail(STRATA_ERR_OUT_OF_RANGE, absl::StrCat("capacity ", capacity, " cannot hold the ", value.size(),
                                                           " bytes of text and a NUL"));
  }
  std::memcpy(buffer, value.data(), value.size());
  buffer[value.size()] = '\0';
  return STRATA_OK;
}

}  // namespace strata::capi
