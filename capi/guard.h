// The boundary helper every exported function goes through: argument and
// handle checks, the thread-local last error message, Status -> strata_status
// translation, struct_size handling, and a catch-all so no exception leaves
// the library.
#ifndef STRATA_CAPI_GUARD_H_
#define STRATA_CAPI_GUARD_H_

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "abi_baseline.h"
#include "base/status.h"
#include "handles.h"
#include "strata/strata.h"

namespace strata::capi {

// The public code of a core status (Abseil canonical codes map one to one).
strata_status ToCode(const Status& status);

// Sets this thread's last error message.
void SetLastError(std::string message);

// One exported call: knows its name, so every message starts with it, and
// what it is doing, so an allocation failure says what it was building.
class Call {
 public:
  // `doing` completes "out of memory while ...", e.g. "loading the model".
  Call(const char* function, const char* doing) : function_(function), doing_(doing) {}
  const char* function() const { return function_; }

  // A later phase of the call, for the allocation-failure message.
  void Doing(const char* doing) const { doing_ = doing; }

  // Records the failure and returns `code`.
  strata_status Fail(strata_status code, absl::string_view message) const {
    SetLastError(absl::StrCat(function_, ": ", message));
    return code;
  }
  // OK for an OK status; otherwise records it and returns its code.
  strata_status From(const Status& status) const {
    if (status.ok()) return STRATA_OK;
    return Fail(ToCode(status), status.message());
  }
  strata_status NullArgument(const char* name) const {
    return Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " is NULL"));
  }
  // What Guarded returns when an exception reached it; never throws (a
  // message that cannot be allocated falls back to a static one).
  strata_status OutOfMemory(absl::string_view detail) const noexcept;
  strata_status Internal(absl::string_view what) const noexcept;

 private:
  const char* function_;
  mutable const char* doing_;
};

// Checks a handle argument: NULL -> INVALID_ARGUMENT, dead or foreign -> MISUSE.
template <class H>
strata_status CheckHandle(const Call& call, const H* h, uint32_t live_magic, const char* type_name) {
  if (h == nullptr) return call.NullArgument(type_name);
  const uint32_t magic = h->magic.load(std::memory_order_acquire);
  if (magic == live_magic) return STRATA_OK;
  if (magic == kDeadMagic) {
    return call.Fail(STRATA_ERR_MISUSE, absl::StrCat(type_name, " was already destroyed"));
  }
  return call.Fail(STRATA_ERR_MISUSE, absl::StrCat(type_name, " is not a live ", type_name, " handle"));
}

// Runs `body` (returning strata_status) with the catch-all. OK and AGAIN clear
// the thread's message; errors carry the one the body recorded. An allocation
// that failed (bad_alloc, or a size no container can hold) is OUT_OF_MEMORY
// naming what the call was doing; any other exception is a bug: INTERNAL.
template <class F>
strata_status Guarded(const Call& call, F&& body) noexcept {
  try {
    const strata_status s = body();
    if (s == STRATA_OK || s == STRATA_AGAIN) SetLastError(std::string());
    return s;
  } catch (const std::bad_alloc&) {
    return call.OutOfMemory("");
  } catch (const std::length_error& e) {
    return call.OutOfMemory(e.what());
  } catch (const std::exception& e) {
    return call.Internal(e.what());
  } catch (...) {
    return call.Internal("unknown exception");
  }
}

// Copies a caller's input params struct into `*out` (already holding the
// defaults). NULL keeps the defaults. Reads at most in->struct_size bytes:
// smaller than the released layout is rejected, and so is a larger struct
// whose bytes beyond what this library knows are not all zero.
template <class T>
strata_status ReadParams(const Call& call, const T* in, T* out) {
  if (in == nullptr) return STRATA_OK;
  const char* type_name = Released<T>::kName;
  const size_t size = in->struct_size;
  if (size < Released<T>::kSize) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                     absl::StrCat(type_name, ".struct_size is ", size, ", expected ", sizeof(T),
                                  " (fill the struct with its _init macro)"));
  }
  // The tail check reads the caller's bytes: a size no struct can reach is
  // refused before reading past what the caller can have.
  if (size > kMaxStructSize) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                     absl::StrCat(type_name, ".struct_size is ", size, ", more than any struct of this API (",
                                  kMaxStructSize, " bytes); expected ", sizeof(T)));
  }
  if (size > sizeof(T)) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(in);
    for (size_t i = sizeof(T); i < size; ++i) {
      if (bytes[i] != 0) {
        return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                         absl::StrCat(type_name, ".struct_size is ", size, " but this library knows only ",
                                      sizeof(T), " bytes and the rest is not zero (newer header than library?)"));
      }
    }
  }
  std::memcpy(static_cast<void*>(out), in, size < sizeof(T) ? size : sizeof(T));
  out->struct_size = static_cast<uint32_t>(sizeof(T));
  return STRATA_OK;
}

// Writes `value` to the caller's output struct, at most out->struct_size bytes;
// out->struct_size itself is left as the caller set it.
template <class T>
strata_status WriteOut(const Call& call, T* out, T value) {
  const char* type_name = Released<T>::kName;
  const size_t size = out->struct_size;
  if (size < Released<T>::kSize) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                     absl::StrCat(type_name, ".struct_size is ", size, ", expected ", sizeof(T),
                                  " (set it to sizeof(", type_name, "))"));
  }
  value.struct_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, size < sizeof(T) ? size : sizeof(T));
  return STRATA_OK;
}

// The body of every `_init_sized` function: writes the first `size` bytes of
// `defaults` (at most the library's struct) into the caller's struct, so an
// older, shorter struct is never written past its end.
template <class T>
strata_status InitSized(const char* function, T* out, size_t size, T defaults) {
  const Call call(function, "filling the defaults");
  return Guarded(call, [&]() -> strata_status {
    if (out == nullptr) return call.NullArgument(Released<T>::kName);
    if (size < Released<T>::kSize) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("struct_size ", size, " is smaller than the first released layout of ",
                                    Released<T>::kName, " (", Released<T>::kSize, " bytes)"));
    }
    const size_t n = size < sizeof(T) ? size : sizeof(T);
    defaults.struct_size = static_cast<uint32_t>(n);
    std::memcpy(static_cast<void*>(out), &defaults, n);
    return STRATA_OK;
  });
}

}  // namespace strata::capi

#endif  // STRATA_CAPI_GUARD_H_
