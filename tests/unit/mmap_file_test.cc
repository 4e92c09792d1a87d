// MappedFile: contents, empty files, the read fallback, and error messages.
#include "base/mmap_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loader_test_util.h"

namespace strata {
namespace {

using ::strata::testing_util::ScopedTestDir;
using ::strata::testing_util::WriteBytes;
using ::testing::HasSubstr;

TEST(MappedFile, MapsAndReadsTheSameBytes) {
  ScopedTestDir dir;
  std::vector<uint8_t> bytes(10000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  WriteBytes(dir.File("f"), bytes);
  for (MappedFile::Mode mode : {MappedFile::Mode::kMapOrRead, MappedFile::Mode::kRead}) {
    StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(dir.File("f"), mode);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->size(), bytes.size());
    EXPECT_EQ(std::memcmp((*f)->data(), bytes.data(), bytes.size()), 0);
    EXPECT_EQ((*f)->path(), dir.File("f"));
    EXPECT_EQ((*f)->is_mapped(), mode == MappedFile::Mode::kMapOrRead);
  }
}

TEST(MappedFile, EmptyFileHasNonNullData) {
  ScopedTestDir dir;
  WriteBytes(dir.File("empty"), {});
  for (MappedFile::Mode mode : {MappedFile::Mode::kMapOrRead, MappedFile::Mode::kRead}) {
    StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(dir.File("empty"), mode);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->size(), 0u);
    EXPECT_NE((*f)->data(), nullptr);
  }
}

TEST(MappedFile, MissingFileIsNotFoundNamingThePath) {
  ScopedTestDir dir;
  StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(dir.File("absent.bin"));
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(absl::IsNotFound(f.status()));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(dir.File("absent.bin")));
}

TEST(MappedFile, DirectoryIsRejected) {
  ScopedTestDir dir;
  StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(dir.path());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a regular file"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(dir.path()));
}

}  // namespace
}  // namespace strata
