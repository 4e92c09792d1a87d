// Publishing a file whole: readers of `path` see the old file or the new
// one, never a part (saved sessions; the disk tier's objects).
#ifndef STRATA_BASE_WRITE_FILE_H_
#define STRATA_BASE_WRITE_FILE_H_

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace strata {

// Writes `bytes` to a temporary file beside `path` and renames it over
// `path`. `durable` also fsyncs the file before the rename and the directory
// after it, so the file survives a crash or power loss once this returns;
// without it a crash may leave the old file, the new one, or (on some file
// systems) an empty or partial one, which is for caches whose readers check
// what they read. Errors name the path and the errno's meaning (a
// missing directory, permissions, a full disk); the temporary file is removed
// and `path` left as it was.
Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes,
                           bool durable = true);

}  // namespace strata

#endif  // STRATA_BASE_WRITE_FILE_H_
