// A read-only view of a whole file's bytes, memory-mapped when the OS allows it.
// Model weights are mapped rather than read so that opening a checkpoint costs
// only its headers; pages are faulted in when a kernel first touches them, and
// several processes loading the same model share the page cache.
#ifndef STRATA_BASE_MMAP_FILE_H_
#define STRATA_BASE_MMAP_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace strata {

// Thread-safety: immutable after Open; the bytes may be read from any thread.
// A mapped file must not be truncated by another process while in use: the
// lost pages would fault (SIGBUS) when touched. Checkpoints are not rewritten
// in place, so we accept that rather than copy every weight.
class MappedFile {
 public:
  enum class Mode {
    kMapOrRead,  // mmap; if mapping fails (e.g. some FUSE or procfs files), read into memory
    kRead,       // always read into memory (tests of the fallback; files on flaky mounts)
  };

  // Opens `path`. Errors name the path: NotFound when it does not exist,
  // PermissionDenied when it cannot be opened, InvalidArgument when it is
  // not a regular file (a directory, a FIFO: never waited on), the errno's
  // code or DataLoss for I/O failures.
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path,
                                                    Mode mode = Mode::kMapOrRead);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Never null, even for an empty file, so callers may form [data, data + size).
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True when the bytes are a mapping of the file, false when they were copied.
  bool is_mapped() const { return mapped_; }

 private:
  MappedFile() = default;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  std::unique_ptr<uint8_t[]> owned_;  // the copy when not mapped
};

}  // namespace strata

#endif  // STRATA_BASE_MMAP_FILE_H_
