// Status and StatusOr for the core: Abseil's types under our names, plus the
// propagation macros. The core never throws; errors are values.
#ifndef STRATA_BASE_STATUS_H_
#define STRATA_BASE_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace strata {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

inline Status OkStatus() { return absl::OkStatus(); }

}  // namespace strata

#define STRATA_STATUS_CONCAT_INNER_(a, b) a##b
#define STRATA_STATUS_CONCAT_(a, b) STRATA_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                   \
  do {                                                 \
    ::absl::Status strata_status_tmp_ = (expr);        \
    if (!strata_status_tmp_.ok()) return strata_status_tmp_; \
  } while (0)

// `lhs = value of expr` or return its status. `lhs` may declare a variable.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_STATUS_CONCAT_(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // STRATA_BASE_STATUS_H_
