// Status codes, their text, the thread-local last error message, and the
// graveyard of destroyed handles.
#include <cstdio>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "base/catch_allocation.h"
#include "guard.h"
#include "handles.h"

namespace strata::capi {
namespace {

thread_local std::string t_last_error;
// Used instead of t_last_error when even the message could not be allocated.
thread_local char t_static_error[160];
thread_local bool t_use_static_error = false;

// "<function>: <what>" without allocating.
void SetStaticLastError(const char* function, const char* what) noexcept {
  t_last_error.clear();
  std::snprintf(t_static_error, sizeof(t_static_error), "%s: %s", function, what);
  t_use_static_error = true;
}

struct Graveyard {
  std::mutex mu;
  std::deque<std::pair<void*, void (*)(void*)>> shells;
};

Graveyard& GetGraveyard() {
  // Leaked on purpose: handles may be destroyed from static destructors.
  static Graveyard* g = new Graveyard;
  return *g;
}

}  // namespace

void SetLastError(std::string message) {
  t_last_error = std::move(message);
  t_use_static_error = false;
}

strata_status Call::OutOfMemory(absl::string_view detail) const noexcept {
  try {
    SetLastError(absl::StrCat(function_, ": out of memory while ", doing_,
                              detail.empty() ? "" : " (", detail, detail.empty() ? "" : ")"));
  } catch (...) {
    SetStaticLastError(function_, "out of memory (no memory left to say more)");
  }
  return STRATA_ERR_OUT_OF_MEMORY;
}

strata_status Call::Internal(absl::string_view what) const noexcept {
  try {
    SetLastError(absl::StrCat(function_, ": internal error while ", doing_, ": ", what));
  } catch (...) {
    SetStaticLastError(function_, "internal error (no memory left to say more)");
  }
  return STRATA_ERR_INTERNAL;
}

void Bury(void* p, void (*deleter)(void*)) noexcept {
  std::pair<void*, void (*)(void*)> evicted{nullptr, nullptr};
  {
    Graveyard& g = GetGraveyard();
    std::lock_guard<std::mutex> lock(g.mu);
    try {
      g.shells.emplace_back(p, deleter);
    } catch (const std::bad_alloc&) {
      // The destroy has happened; a shell left out of the graveyard is leaked
      // rather than freed, so a later use still reads its dead magic.
      return;
    }
    if (g.shells.size() > kGraveyardSize) {
      evicted = g.shells.front();
      g.shells.pop_front();
    }
  }
  if (evicted.first != nullptr) evicted.second(evicted.first);
}

strata_status ToCode(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return STRATA_OK;
    case absl::StatusCode::kCancelled: return STRATA_ERR_CANCELLED;
    case absl::StatusCode::kInvalidArgument: return STRATA_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded: return STRATA_ERR_DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound: return STRATA_ERR_NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return STRATA_ERR_ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied: return STRATA_ERR_PERMISSION_DENIED;
    case absl::StatusCode::kUnauthenticated: return STRATA_ERR_PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted:
      return IsOutOfMemory(status) ? STRATA_ERR_OUT_OF_MEMORY : STRATA_ERR_RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return STRATA_ERR_FAILED_PRECONDITION;
    case absl::StatusCode::kAborted: return STRATA_ERR_FAILED_PRECONDITION;
    case absl::StatusCode::kOutOfRange: return STRATA_ERR_OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return STRATA_ERR_UNSUPPORTED;
    case absl::StatusCode::kUnavailable: return STRATA_ERR_UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return STRATA_ERR_DATA_LOSS;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    default: return STRATA_ERR_INTERNAL;
  }
}

}  // namespace strata::capi

extern "C" {

STRATA_API const char* strata_status_string(strata_status status) {
  switch (status) {
    case STRATA_OK: return "ok";
    case STRATA_ERR_INVALID_ARGUMENT: return "invalid argument";
    case STRATA_ERR_NOT_FOUND: return "not found";
    case STRATA_ERR_ALREADY_EXISTS: return "already exists";
    case STRATA_ERR_OUT_OF_RANGE: return "out of range";
    case STRATA_ERR_FAILED_PRECONDITION: return "failed precondition";
    case STRATA_ERR_RESOURCE_EXHAUSTED: return "resource exhausted";
    case STRATA_ERR_UNAVAILABLE: return "unavailable";
    case STRATA_ERR_CANCELLED: return "cancelled";
    case STRATA_ERR_DEADLINE_EXCEEDED: return "deadline exceeded";
    case STRATA_ERR_UNSUPPORTED: return "unsupported";
    case STRATA_ERR_DATA_LOSS: return "data loss (corrupt data)";
    case STRATA_ERR_OUT_OF_MEMORY: return "out of memory";
    case STRATA_ERR_MISUSE: return "API misuse";
    case STRATA_ERR_INTERNAL: return "internal error";
    case STRATA_ERR_PERMISSION_DENIED: return "permission denied";
    case STRATA_AGAIN: return "again (nothing ready yet)";
    default: return "unknown status code";
  }
}

STRATA_API const char* strata_last_error_message(void) {
  namespace c = strata::capi;
  return c::t_use_static_error ? c::t_static_error : c::t_last_error.c_str();
}

}  // extern "C"
