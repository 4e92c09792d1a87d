// The whole contents of a regular file as a string, for the text files the
// core parses (tokenizer, template and JSON files). Built on MappedFile, so
// errors name the path, a directory or FIFO is refused (never waited on), and
// a failed allocation throws bad_alloc rather than leaving the text cut short
// the way copying a stream buffer (`ss << in.rdbuf()`) does.
#ifndef STRATA_BASE_READ_FILE_H_
#define STRATA_BASE_READ_FILE_H_

#include <string>

#include "base/status.h"

namespace strata {

// NotFound when `path` does not exist, InvalidArgument when it is not a
// regular file, otherwise MappedFile::Open's errors.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace strata

#endif  // STRATA_BASE_READ_FILE_H_
