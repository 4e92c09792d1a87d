// Status for a failed file-system operation: the errno's canonical code
// (a path that is a file where a directory belongs, permissions, a full disk)
// rather than Internal, which would call the caller's bad path a bug.
#ifndef STRATA_BASE_FILE_ERROR_H_
#define STRATA_BASE_FILE_ERROR_H_

#include <string>
#include <system_error>

#include "base/status.h"

namespace strata {

// `what` (naming the path) and the error's text; an error that carries no
// errno (0, or another category) is DataLoss: the file was not written.
Status FileError(const std::string& what, const std::error_code& ec);
// The same for a stream operation that failed: reads errno now.
Status FileErrorFromErrno(const std::string& what);

}  // namespace strata

#endif  // STRATA_BASE_FILE_ERROR_H_
