// Publishing a file whole: readers of `path` see the old file or the new
// one, never a part (saved sessions; the disk tier's objects).
#ifndef STRATA_BASE_WRITE_FILE_H_
#define STRATA_BASE_WRITE_FILE_H_

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace strata {

// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it
// over `path` and fsyncs the directory, so the file survives a crash or power
// loss once this returns. Errors name the path and the errno's meaning (a
// missing directory, permissions, a full disk); the temporary file is removed
// and `path` left as it was.
Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace strata

#endif  // STRATA_BASE_WRITE_FILE_H_
