// Loading sizes buffers from files that come from outside; when one cannot
// be allocated, the host must get an error value naming what was being
// built, never an exception (strata.h, convention 2).
#ifndef STRATA_BASE_CATCH_ALLOCATION_H_
#define STRATA_BASE_CATCH_ALLOCATION_H_

#include <new>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace strata {

// Runs `stage` (returning a Status or StatusOr) and turns std::bad_alloc and
// std::length_error into ResourceExhausted "out of memory while <doing>",
// e.g. doing = "building the kimi_linear model of DIR on the CPU".
template <class F>
auto CatchAllocation(const std::string& doing, F&& stage) -> decltype(stage()) {
  try {
    return stage();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory while ", doing));
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a size too large to allocate while ", doing, " (", e.what(), ")"));
  }
}

}  // namespace strata

#endif  // STRATA_BASE_CATCH_ALLOCATION_H_
