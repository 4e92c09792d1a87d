// Loading sizes buffers from files that come from outside; when one cannot
// be allocated, the host must get an error value naming what was being
// built, never an exception (strata.h, convention 2).
#ifndef STRATA_BASE_CATCH_ALLOCATION_H_
#define STRATA_BASE_CATCH_ALLOCATION_H_

#include <new>
#include <stdexcept>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status.h"

namespace strata {

// The payload that marks a ResourceExhausted status as a failed allocation
// (the C ABI's STRATA_ERR_OUT_OF_MEMORY) rather than a limit the input went
// past (STRATA_ERR_RESOURCE_EXHAUSTED).
inline constexpr char kOutOfMemoryPayload[] = "strata.out_of_memory";

inline Status OutOfMemoryError(absl::string_view message) {
  Status s = absl::ResourceExhaustedError(message);
  s.SetPayload(kOutOfMemoryPayload, absl::Cord());
  return s;
}

inline bool IsOutOfMemory(const Status& s) {
  return absl::IsResourceExhausted(s) && s.GetPayload(kOutOfMemoryPayload).has_value();
}

// Runs `stage` (returning a Status or StatusOr) and turns std::bad_alloc and
// std::length_error into OutOfMemoryError "out of memory while <doing>",
// e.g. doing = "building the kimi_linear model of DIR on the CPU".
template <class F>
auto CatchAllocation(const std::string& doing, F&& stage) -> decltype(stage()) {
  try {
    return stage();
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError(absl::StrCat("out of memory while ", doing));
  } catch (const std::length_error& e) {
    return OutOfMemoryError(
        absl::StrCat("out of memory while ", doing, " (a size too large to allocate: ", e.what(), ")"));
  }
}

}  // namespace strata

#endif  // STRATA_BASE_CATCH_ALLOCATION_H_
