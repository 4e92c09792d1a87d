// ReadFileToString: a MappedFile's bytes, copied.
#include "base/read_file.h"

#include <memory>

#include "base/mmap_file.h"

namespace strata {

StatusOr<std::string> ReadFileToString(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return std::string(reinterpret_cast<const char*>(file->data()), static_cast<size_t>(file->size()));
}

}  // namespace strata
