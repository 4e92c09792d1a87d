// A directory of the fuzzing process's own under the system temp dir, for
// oracles whose code under test reads files (a model directory): created on
// first use, removed when the process exits normally (a crash leaves it),
// named by pid so that the workers of `-jobs=N` and parallel ctest runs never
// share one.
#ifndef STRATA_TESTS_FUZZ_FUZZ_SCRATCH_DIR_H_
#define STRATA_TESTS_FUZZ_FUZZ_SCRATCH_DIR_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace strata::fuzz {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view name) {
    path_ = std::filesystem::temp_directory_path() /
            (std::string("strata_fuzz_") + std::string(name) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  // Replaces the file's contents; false when it cannot be written.
  bool Write(const std::string& name, std::string_view bytes) const {
    std::ofstream f(path_ / name, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return static_cast<bool>(f.flush());
  }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_FUZZ_SCRATCH_DIR_H_
