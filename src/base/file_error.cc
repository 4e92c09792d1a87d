// FileError: errno to the canonical code, with the path in the message.
#include "base/file_error.h"

#include <cerrno>
#include <cstring>

namespace strata {

Status FileError(const std::string& what, const std::error_code& ec) {
  const bool has_errno = ec.value() != 0 && (ec.category() == std::generic_category() ||
                                             ec.category() == std::system_category());
  const absl::StatusCode code = has_errno ? absl::ErrnoToStatusCode(ec.value()) : absl::StatusCode::kDataLoss;
  return Status(code, absl::StrCat(what, ": ", ec.message()));
}

Status FileErrorFromErrno(const std::string& what) {
  const int err = errno;
  if (err == 0) return absl::DataLossError(what);
  return FileError(what, std::error_code(err, std::generic_category()));
}

}  // namespace strata
