// strata_request_*: cancel, status, message and release of one generation; finish reason names.
#include <string>

#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kRequestMagic;

extern "C" {

STRATA_API const char* strata_finish_reason_string(strata_finish_reason reason) {
  // The C values are the core's enumerators (ToCEvent casts them one to one).
  return strata::FinishReasonName(static_cast<strata::FinishReason>(reason));
}

STRATA_API strata_status strata_request_cancel(strata_request* request) {
  const Call call("strata_request_cancel", "cancelling the request");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, request, kRequestMagic, "request"); s != STRATA_OK) return s;
    // Under the handle's lock: generate may be retiring this handle right now.
    std::lock_guard<std::mutex> lock(request->mu);
    if (request->magic.load() != kRequestMagic) return call.Fail(STRATA_ERR_MISUSE, "request was already destroyed");
    request->engine->impl->Cancel(*request->impl);
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_request_get_status(strata_request* request, bool* out_finished,
                                                   strata_finish_reason* out_finish_reason,
                                                   strata_status* out_status) {
  const Call call("strata_request_get_status", "reading the request status");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, request, kRequestMagic, "request"); s != STRATA_OK) return s;
    std::lock_guard<std::mutex> lock(request->mu);
    if (request->magic.load() != kRequestMagic) return call.Fail(STRATA_ERR_MISUSE, "request was already destroyed");
    const strata::Request& r = *request->impl;
    if (out_finished != nullptr) *out_finished = r.finished();
    if (out_finish_reason != nullptr) *out_finish_reason = static_cast<strata_finish_reason>(r.finish_reason());
    if (out_status != nullptr) *out_status = strata::capi::ToCode(r.status());
    return STRATA_OK;
  });
}

STRATA_API const char* strata_request_error_message(strata_request* request) {
  try {
    if (request == nullptr) return "request is NULL";
    if (request->magic.load() != kRequestMagic) return "request is not a live request handle";
    std::lock_guard<std::mutex> lock(request->mu);
    if (request->magic.load() != kRequestMagic) return "request was already destroyed";
    request->errmsg = std::string(request->impl->status().message());
    return request->errmsg.c_str();
  } catch (...) {
    return "out of memory";
  }
}

STRATA_API strata_status strata_request_destroy(strata_request* request) {
  const Call call("strata_request_destroy", "destroying the request");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, request, kRequestMagic, "request"); s != STRATA_OK) return s;
    if (request->library_owned) {
      return call.Fail(STRATA_ERR_MISUSE, "this request belongs to strata_session_generate; it is released there");
    }
    std::shared_ptr<strata::Request> impl;
    {
      std::lock_guard<std::mutex> lock(request->mu);
      uint32_t expected = kRequestMagic;
      if (!request->magic.compare_exchange_strong(expected, strata::capi::kDeadMagic)) {
        return call.Fail(STRATA_ERR_MISUSE, "request was destroyed concurrently");
      }
      impl = std::move(request->impl);
    }
    request->engine->impl->Detach(*impl);  // cancels it and drops its events
    request->engine->num_requests.fetch_sub(1);
    strata::capi::BuryHandle(request);
    return STRATA_OK;
  });
}

}  // extern "C"
