// Helpers shared by the model-loading tests: a per-test scratch directory and
// hand-built safetensors files (for layouts the writer would never produce).
#ifndef STRATA_TESTS_UNIT_LOADER_TEST_UTIL_H_
#define STRATA_TESTS_UNIT_LOADER_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace strata::testing_util {

// A fresh directory named after the running test, removed afterwards, so
// tests can run in parallel (ctest -j) without sharing files.
class ScopedTestDir {
 public:
  ScopedTestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            (std::string("strata_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScopedTestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTestDir(const ScopedTestDir&) = delete;
  ScopedTestDir& operator=(const ScopedTestDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(f.good()) << path;
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline void WriteText(const std::string& path, const std::string& text) {
  WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// [u64 little-endian length][header text][data]: a safetensors file with an
// arbitrary (possibly invalid) header.
inline std::vector<uint8_t> RawSafetensors(const std::string& header,
                                           const std::vector<uint8_t>& data = {},
                                           std::optional<uint64_t> declared_length = {}) {
  const uint64_t n = declared_length.value_or(header.size());
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace strata::testing_util

#endif  // STRATA_TESTS_UNIT_LOADER_TEST_UTIL_H_
