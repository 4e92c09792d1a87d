// Tests for the .npy reader/writer: round trips, all three header versions,
// int64 -> int32 conversion, files written by NumPy itself (the fixtures), and
// malformed files, whose errors must name the file.
#include "base/npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("strata_npy_test_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Builds a .npy image by hand with any version and header text.
std::vector<uint8_t> MakeNpy(int major, const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const uint32_t n = static_cast<uint32_t>(header.size());
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(NpyTest, Float32RoundTripKeepsShapeAndValues) {
  const std::string path = TempPath("f32.npy");
  const std::vector<int64_t> shape = {3, 5};
  std::vector<float> values(15);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 1.0f;
  ASSERT_TRUE(WriteNpyFloat32(path, shape, values).ok());
  std::vector<int64_t> got_shape;
  auto got = ReadNpyFloat32(path, &got_shape);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got_shape, shape);
  EXPECT_EQ(*got, values);
  // NumPy aligns the data to 64 bytes; so do we.
  EXPECT_EQ(std::filesystem::file_size(path) % 64, (values.size() * 4) % 64);
  std::remove(path.c_str());
}

TEST(NpyTest, Int32RoundTripOneDimensionalAndScalar) {
  const std::string path = TempPath("i32.npy");
  const std::vector<int32_t> values = {7, -3, 2147483647, 0};
  const std::vector<int64_t> shape = {4};
  ASSERT_TRUE(WriteNpyInt32(path, shape, values).ok());
  std::vector<int64_t> got_shape;
  auto got = ReadNpyInt32(path, &got_shape);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got_shape, shape);
  EXPECT_EQ(*got, values);

  const std::vector<int32_t> scalar = {42};
  ASSERT_TRUE(WriteNpyInt32(path, {}, scalar).ok());
  got = ReadNpyInt32(path, &got_shape);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got_shape.empty());
  EXPECT_EQ(*got, scalar);
  std::remove(path.c_str());
}

TEST(NpyTest, WriterRejectsCountMismatch) {
  const std::vector<float> values(5);
  const std::vector<int64_t> shape = {2, 3};
  Status st = WriteNpyFloat32(TempPath("mismatch.npy"), shape, values);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("6 elements"));
}

TEST(NpyTest, ParsesVersions2And3AndInt64) {
  const std::vector<int64_t> v = {1, -2, 300000};
  for (int major : {1, 2, 3}) {
    auto bytes = MakeNpy(major, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }\n", Bytes(v));
    auto arr = ParseNpy("mem.npy", bytes.data(), bytes.size());
    ASSERT_TRUE(arr.ok()) << "version " << major << ": " << arr.status();
    EXPECT_EQ(arr->dtype, DType::kI64);
    EXPECT_EQ(arr->shape, std::vector<int64_t>({3}));
    EXPECT_EQ(arr->data, Bytes(v));
  }
}

TEST(NpyTest, Int64ConvertsToInt32WhenInRange) {
  const std::string path = TempPath("i64.npy");
  const std::vector<int64_t> v = {5, -6, 7};
  WriteFile(path, MakeNpy(1, "{'descr':'<i8','fortran_order':False,'shape':(1,3)}", Bytes(v)));
  std::vector<int64_t> shape;
  auto got = ReadNpyInt32(path, &shape);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<int32_t>({5, -6, 7}));
  EXPECT_EQ(shape, std::vector<int64_t>({1, 3}));

  const std::vector<int64_t> big = {1, int64_t{1} << 40};
  WriteFile(path, MakeNpy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", Bytes(big)));
  got = ReadNpyInt32(path);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("element 1"));
  std::remove(path.c_str());
}

TEST(NpyTest, TypedReadersRejectTheOtherKind) {
  const std::string path = TempPath("kind.npy");
  const std::vector<float> f = {1.0f};
  const std::vector<int64_t> shape = {1};
  ASSERT_TRUE(WriteNpyFloat32(path, shape, f).ok());
  auto ints = ReadNpyInt32(path);
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(std::string(ints.status().message()), HasSubstr("<f4"));
  const std::vector<int32_t> i = {1};
  ASSERT_TRUE(WriteNpyInt32(path, shape, i).ok());
  auto floats = ReadNpyFloat32(path);
  ASSERT_FALSE(floats.ok());
  EXPECT_THAT(std::string(floats.status().message()), HasSubstr("<i4"));
  std::remove(path.c_str());
}

// Each malformed image must fail with a message that names the file and says what is wrong.
TEST(NpyTest, MalformedFilesGiveClearErrors) {
  const std::vector<uint8_t> four = Bytes(std::vector<float>{1, 2, 3, 4});
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<uint8_t> bad_magic = MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", four);
  bad_magic[1] = 'X';
  std::vector<uint8_t> long_header = MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", {});
  long_header[8] = 0xff;
  long_header[9] = 0x7f;
  const std::vector<Case> cases = {
      {"empty", {}, "magic"},
      {"bad magic", bad_magic, "magic"},
      {"version 4", MakeNpy(4, "{}", {}), "version 4"},
      {"header past end", long_header, "runs past the end"},
      {"not a dict", MakeNpy(1, "['descr']", four), "'{'"},
      {"unterminated", MakeNpy(1, "{'descr': '<f4", four), "unterminated"},
      {"no shape", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False}", four), "'shape'"},
      {"no descr", MakeNpy(1, "{'fortran_order': False, 'shape': (4,)}", four), "'descr'"},
      {"big endian", MakeNpy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (4,)}", four), "big-endian"},
      {"float64", MakeNpy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", four), "'<f8'"},
      {"fortran", MakeNpy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}", four), "Fortran"},
      {"truncated data", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,)}", four), "truncated"},
      {"trailing data", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", four), "trailing"},
      {"negative dim", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", four), "non-negative"},
      {"huge shape", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16)}", four), "truncated"},
      {"duplicate key", MakeNpy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", four), "duplicate"},
      {"junk after", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", four), "after the header"},
  };
  for (const Case& c : cases) {
    auto arr = ParseNpy("broken.npy", c.bytes.data(), c.bytes.size());
    ASSERT_FALSE(arr.ok()) << c.what;
    const std::string msg(arr.status().message());
    EXPECT_THAT(msg, HasSubstr("broken.npy")) << c.what;
    EXPECT_THAT(msg, HasSubstr(c.expect)) << c.what << ": " << msg;
  }
}

TEST(NpyTest, MissingFileIsNotFoundNamingThePath) {
  auto arr = ReadNpy("/nonexistent/dir/x.npy");
  ASSERT_FALSE(arr.ok());
  EXPECT_TRUE(absl::IsNotFound(arr.status()));
  EXPECT_THAT(std::string(arr.status().message()), HasSubstr("/nonexistent/dir/x.npy"));
}

// The fixtures were written by NumPy 2.x on the reference machine.
TEST(NpyTest, ReadsFilesWrittenByNumpy) {
  const std::string dir = std::string(STRATA_TEST_DATA_DIR) + "/kimi_a";
  ASSERT_TRUE(std::filesystem::exists(dir + "/prompt.npy")) << "no fixture at " << dir;
  std::vector<int64_t> shape;
  auto prompt = ReadNpyInt32(dir + "/prompt.npy", &shape);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  ASSERT_EQ(shape.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(prompt->size()), shape[0]);
  auto logits = ReadNpyFloat32(dir + "/logits.npy", &shape);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(shape.size(), 2u);
  EXPECT_EQ(shape[0], static_cast<int64_t>(prompt->size()));
  EXPECT_EQ(static_cast<int64_t>(logits->size()), shape[0] * shape[1]);
  // Our writer reproduces NumPy's bytes exactly for the same array.
  auto raw = ReadNpy(dir + "/prompt.npy");
  ASSERT_TRUE(raw.ok());
  const std::vector<int64_t> pshape = {static_cast<int64_t>(prompt->size())};
  auto ours = SerializeNpy(DType::kI32, pshape, prompt->data(), prompt->size());
  ASSERT_TRUE(ours.ok());
  std::ifstream f(dir + "/prompt.npy", std::ios::binary);
  std::vector<uint8_t> theirs((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(*ours, theirs);
}

}  // namespace
}  // namespace strata
