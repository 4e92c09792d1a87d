// MappedFile: POSIX mmap with a read() fallback.
#include "base/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

namespace strata {
namespace {

Status ErrnoError(const std::string& path, const char* action, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(path, ": cannot ", action, ": ", std::strerror(err)));
}

// Closes the descriptor on every path out of Open; the mapping (if any) keeps
// the file referenced by itself.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// A non-null address for empty files, so [data, data + 0) is a valid range.
const uint8_t kEmptyBytes[1] = {0};

}  // namespace

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path, Mode mode) {
  int fd;
  do {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
    // below); reads of regular files ignore the flag.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": file not found"));
    return ErrnoError(path, "open", err);
  }
  FdCloser closer(fd);

  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(path, "stat", errno);
  // Directories open fine with O_RDONLY; pipes and devices have no stable
  // size. Either is bad input: a path that names the wrong kind of thing.
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a regular file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > std::numeric_limits<size_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": file of ", size, " bytes cannot be addressed"));
  }

  std::unique_ptr<MappedFile> file(new MappedFile);
  file->path_ = path;
  file->size_ = size;
  if (size == 0) {
    // mmap rejects zero-length mappings; there is nothing to read either.
    file->data_ = kEmptyBytes;
    return file;
  }

  if (mode == Mode::kMapOrRead) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      file->data_ = static_cast<const uint8_t*>(p);
      file->mapped_ = true;
      return file;
    }
    // Fall through: some filesystems cannot be mapped but can be read.
  }

  file->owned_.reset(new (std::nothrow) uint8_t[static_cast<size_t>(size)]);
  if (!file->owned_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate ", size, " bytes to read the file"));
  }
  uint64_t done = 0;
  while (done < size) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(size - done, uint64_t{1} << 30));  // read() caps one call near 2 GiB
    const ssize_t n = ::pread(fd, file->owned_.get() + done, want, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "read", errno);
    }
    if (n == 0) {
      // The file shrank between fstat and read (someone is rewriting it).
      return absl::DataLossError(
          absl::StrCat(path, ": file ended after ", done, " of ", size, " bytes while reading"));
    }
    done += static_cast<uint64_t>(n);
  }
  file->data_ = file->owned_.get();
  return file;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

}  // namespace strata
