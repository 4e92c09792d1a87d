#include "base/write_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_error.h"

namespace strata {
namespace {

// Closes a descriptor and removes the temporary file unless published.
struct TempFile {
  int fd = -1;
  std::string path;
  bool published = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!published && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes, bool durable) {
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  TempFile tmp;
  tmp.path = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (tmp.fd < 0) {
    tmp.path.clear();
    return FileErrorFromErrno(absl::StrCat("creating a temporary file beside ", path));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(tmp.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FileErrorFromErrno(absl::StrCat("writing ", path));
    done += static_cast<size_t>(n);
  }
  if (durable && ::fsync(tmp.fd) != 0) return FileErrorFromErrno(absl::StrCat("flushing ", path));
  if (::close(tmp.fd) != 0) {
    tmp.fd = -1;
    return FileErrorFromErrno(absl::StrCat("closing ", path));
  }
  tmp.fd = -1;
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    return FileErrorFromErrno(absl::StrCat("publishing ", path));
  }
  tmp.published = true;
  // The rename is durable once the directory's entry is on disk; a
  // directory that cannot be opened or flushed (some file systems) still
  // holds the complete file.
  if (!durable) return OkStatus();
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return OkStatus();
}

}  // namespace strata
