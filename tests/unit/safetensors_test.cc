// Safetensors header parsing and writing: round trips through the writer, and
// every kind of malformed header the parser must refuse with a message that
// names the file and the tensor.
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loader_test_util.h"
#include "model/safetensors_writer.h"

namespace strata {
namespace {

using ::strata::testing_util::RawSafetensors;
using ::testing::HasSubstr;

constexpr char kFile[] = "test.safetensors";

StatusOr<SafetensorsHeader> Parse(const std::vector<uint8_t>& bytes) {
  return ParseSafetensorsHeader(kFile, bytes.data(), bytes.size());
}

std::string ErrorOf(const std::vector<uint8_t>& bytes) {
  StatusOr<SafetensorsHeader> h = Parse(bytes);
  EXPECT_FALSE(h.ok()) << "expected the header to be rejected";
  return h.ok() ? std::string() : std::string(h.status().message());
}

const SafetensorsTensor* Find(const SafetensorsHeader& h, const std::string& name) {
  for (const auto& t : h.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(SafetensorsRoundTrip, AllSupportedFloatAndIntDtypes) {
  SafetensorsWriter w;
  // Values exactly representable in F16 and BF16, so the round trip is exact.
  const std::vector<float> values = {1.0f, -2.5f, 0.0f, 0.375f, 1024.0f, -0.5f};
  w.AddF32("f32", DType::kF32, {2, 3}, values);
  w.AddF32("f16", DType::kF16, {3, 2}, values);
  w.AddF32("bf16", DType::kBF16, {6}, values);
  w.Add("i32", DType::kI32, {2, 2}, AsBytes(std::vector<int32_t>{7, -8, 9, 2147483647}));
  const std::vector<uint8_t> file = w.Serialize();

  StatusOr<SafetensorsHeader> h = Parse(file);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 4u);
  EXPECT_EQ(h->data_offset, 8 + h->header_bytes);

  const SafetensorsTensor* f32 = Find(*h, "f32");
  const SafetensorsTensor* f16 = Find(*h, "f16");
  const SafetensorsTensor* bf16 = Find(*h, "bf16");
  const SafetensorsTensor* i32 = Find(*h, "i32");
  ASSERT_TRUE(f32 && f16 && bf16 && i32);
  EXPECT_EQ(f32->dtype, DType::kF32);
  EXPECT_EQ(f16->dtype, DType::kF16);
  EXPECT_EQ(bf16->dtype, DType::kBF16);
  EXPECT_EQ(i32->dtype, DType::kI32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f16->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(bf16->shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(i32->NumElements(), 4);

  const uint8_t* data = file.data() + h->data_offset;
  std::vector<float> got(6);
  ConvertToF32(DType::kF32, data + f32->begin, got.data(), 6);
  EXPECT_EQ(got, values);
  std::vector<uint16_t> halves(6);
  std::memcpy(halves.data(), data + f16->begin, 12);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(F16ToF32(halves[i]), values[i]) << i;
  std::memcpy(halves.data(), data + bf16->begin, 12);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Bf16ToF32(halves[i]), values[i]) << i;
  int32_t ints[4];
  std::memcpy(ints, data + i32->begin, 16);
  EXPECT_EQ(ints[1], -8);
  EXPECT_EQ(ints[3], 2147483647);
}

TEST(SafetensorsRoundTrip, TensorsAreStoredInInsertionOrderAndReturnedByOffset) {
  SafetensorsWriter w;
  w.AddF32("zeta", DType::kF32, {1}, {1.0f});
  w.AddF32("alpha", DType::kF32, {2}, {2.0f, 3.0f});
  StatusOr<SafetensorsHeader> h = Parse(w.Serialize());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[0].name, "zeta");
  EXPECT_EQ(h->tensors[0].begin, 0u);
  EXPECT_EQ(h->tensors[1].name, "alpha");
  EXPECT_EQ(h->tensors[1].begin, 4u);
  EXPECT_EQ(h->tensors[1].end, 12u);
}

TEST(SafetensorsRoundTrip, HeaderIsPaddedSoDataStartsOn8Bytes) {
  for (int len = 1; len <= 9; ++len) {
    SafetensorsWriter w;
    w.AddF32(std::string(static_cast<size_t>(len), 'x'), DType::kF32, {1}, {1.0f});
    const std::vector<uint8_t> file = w.Serialize();
    StatusOr<SafetensorsHeader> h = Parse(file);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->header_bytes % 8, 0u) << len;
    EXPECT_EQ(h->data_offset % 8, 0u) << len;
  }
}

TEST(SafetensorsRoundTrip, MetadataIsKept) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.SetMetadata("note", "quote \" and \\ backslash");
  w.AddF32("w", DType::kBF16, {2}, {1.0f, 2.0f});
  StatusOr<SafetensorsHeader> h = Parse(w.Serialize());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->metadata.at("note"), "quote \" and \\ backslash");
  ASSERT_EQ(h->tensors.size(), 1u);  // __metadata__ is not a tensor
}

TEST(SafetensorsRoundTrip, EmptyCheckpointAndZeroSizedTensors) {
  SafetensorsWriter empty;
  StatusOr<SafetensorsHeader> h = Parse(empty.Serialize());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->tensors.empty());

  SafetensorsWriter w;
  w.AddF32("a", DType::kF32, {1}, {1.0f});
  w.Add("empty", DType::kF32, {0, 5}, {});
  w.AddF32("b", DType::kF32, {1}, {2.0f});
  h = Parse(w.Serialize());
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(Find(*h, "empty")->NumElements(), 0);
}

TEST(SafetensorsRoundTrip, WriteFileReportsUnwritablePath) {
  SafetensorsWriter w;
  Status s = w.WriteFile("/nonexistent-dir-for-strata-test/x.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("/nonexistent-dir-for-strata-test/x.safetensors"));
}

TEST(SafetensorsHeader, RejectsFileShorterThanLengthField) {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
  StatusOr<SafetensorsHeader> h = Parse(bytes);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(absl::IsDataLoss(h.status()));
  EXPECT_THAT(std::string(h.status().message()), HasSubstr(kFile));
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("5 bytes"));
  EXPECT_FALSE(ParseSafetensorsHeader(kFile, nullptr, 0).ok());
}

TEST(SafetensorsHeader, RejectsHeaderLengthPastEndOfFile) {
  std::vector<uint8_t> bytes = RawSafetensors(std::string(92, ' '), {}, 1234567);
  ASSERT_EQ(bytes.size(), 100u);
  StatusOr<SafetensorsHeader> h = Parse(bytes);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(absl::IsDataLoss(h.status()));
  EXPECT_EQ(h.status().message(),
            "test.safetensors: header length 1234567 at offset 0 runs past the end of the file "
            "(size 100)");
}

TEST(SafetensorsHeader, RejectsAbsurdHeaderLengthWithoutOverflow) {
  // 8 + N would wrap around to a small number if computed naively.
  for (uint64_t n : {UINT64_MAX, UINT64_MAX - 7, uint64_t{1} << 63}) {
    EXPECT_THAT(ErrorOf(RawSafetensors("{}", {}, n)), HasSubstr("runs past the end")) << n;
  }
}

TEST(SafetensorsHeader, RejectsHeaderLongerThanTheLimit) {
  // A file really this long, so the length is in range and only the limit trips.
  const uint64_t n = (uint64_t{100} << 20) + 1;
  std::vector<uint8_t> bytes = RawSafetensors("{}", {}, n);
  bytes.resize(8 + n, ' ');
  StatusOr<SafetensorsHeader> h = Parse(bytes);
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("header length 104857601 exceeds"));
}

TEST(SafetensorsHeader, RejectsTruncatedFile) {
  SafetensorsWriter w;
  w.AddF32("model.embed_tokens.weight", DType::kF32, {4, 4}, std::vector<float>(16, 1.0f));
  std::vector<uint8_t> file = w.Serialize();

  // Cut inside the data section: the header is intact but points past the end.
  std::vector<uint8_t> cut(file.begin(), file.end() - 10);
  StatusOr<SafetensorsHeader> h = Parse(cut);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(absl::IsDataLoss(h.status()));
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("model.embed_tokens.weight"));
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("past the end of the data section"));

  // Cut inside the header.
  cut.assign(file.begin(), file.begin() + 20);
  EXPECT_THAT(ErrorOf(cut), HasSubstr("runs past the end of the file (size 20)"));
}

TEST(SafetensorsHeader, RejectsInvalidJsonWithByteOffset) {
  // 'x' is at header byte 6, i.e. file offset 14.
  const std::string msg = ErrorOf(RawSafetensors("{\"a\": x}"));
  EXPECT_THAT(msg, HasSubstr(kFile));
  EXPECT_THAT(msg, HasSubstr("invalid JSON at byte 14"));

  EXPECT_THAT(ErrorOf(RawSafetensors("")), HasSubstr("invalid JSON"));
  EXPECT_THAT(ErrorOf(RawSafetensors("{\"a\": {\"dtype\": \"F32\"")), HasSubstr("invalid JSON"));
  EXPECT_THAT(ErrorOf(RawSafetensors("{} trailing")), HasSubstr("invalid JSON"));
  EXPECT_THAT(ErrorOf(RawSafetensors("{\"\xff\": 1}")), HasSubstr("invalid JSON"));
}

TEST(SafetensorsHeader, RejectsDeeplyNestedJsonWithoutRecursing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorOf(RawSafetensors(deep)), HasSubstr("nested deeper"));
}

TEST(SafetensorsHeader, RejectsNonObjectHeader) {
  EXPECT_THAT(ErrorOf(RawSafetensors("[1, 2]")), HasSubstr("header must be a JSON object"));
  EXPECT_THAT(ErrorOf(RawSafetensors("7")), HasSubstr("header must be a JSON object"));
}

TEST(SafetensorsHeader, RejectsUnknownDtype) {
  const std::string msg = ErrorOf(
      RawSafetensors(R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", {0, 0}));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("unknown or unsupported dtype 'Q4_K'"));
}

TEST(SafetensorsHeader, RejectsMissingOrMistypedFields) {
  const std::vector<uint8_t> data(4);
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", data)),
              HasSubstr("tensor 'w': missing 'dtype'"));
  EXPECT_THAT(
      ErrorOf(RawSafetensors(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", data)),
      HasSubstr("'dtype' must be a string"));
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", data)),
              HasSubstr("missing 'shape'"));
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", data)),
              HasSubstr("'shape' must be an array"));
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"w": {"dtype": "F32", "shape": [1]}})", data)),
              HasSubstr("missing 'data_offsets'"));
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", data)),
              HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, "4"]}})", data)),
              HasSubstr("'data_offsets' must be [begin, end]"));
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"w": [1, 2]})", data)),
              HasSubstr("tensor 'w': expected an object"));
}

TEST(SafetensorsHeader, RejectsBadShapes) {
  const std::vector<uint8_t> data(4);
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", data)),
              HasSubstr("shape[0] must be a non-negative integer, got -1"));
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", data)),
              HasSubstr("shape[0] must be a non-negative integer"));
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [1, true], "data_offsets": [0, 4]}})", data)),
              HasSubstr("shape[1] must be a non-negative integer"));
  EXPECT_THAT(
      ErrorOf(RawSafetensors(
          R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]}})",
          data)),
      HasSubstr("shape[0] must be a non-negative integer"));
  // Each dimension fits; the product does not.
  EXPECT_THAT(
      ErrorOf(RawSafetensors(
          R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
          data)),
      HasSubstr("more elements than fit in 64 bits"));
  // Fits in int64 elements, but not in bytes once multiplied by the dtype size.
  EXPECT_THAT(
      ErrorOf(RawSafetensors(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 4]}})",
          data)),
      HasSubstr("needs"));
}

TEST(SafetensorsHeader, RejectsReversedOffsets) {
  const std::string msg = ErrorOf(RawSafetensors(
      R"({"model.layers.0.q_proj.weight": {"dtype": "U8", "shape": [6], "data_offsets": [10, 4]}})",
      std::vector<uint8_t>(16)));
  EXPECT_EQ(msg,
            "test.safetensors: tensor 'model.layers.0.q_proj.weight': data_offsets [10, 4] are "
            "reversed");
}

TEST(SafetensorsHeader, RejectsOffsetsOutOfRange) {
  StatusOr<SafetensorsHeader> h =
      Parse(RawSafetensors(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                           std::vector<uint8_t>(8)));
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(absl::IsDataLoss(h.status()));
  EXPECT_THAT(
      std::string(h.status().message()),
      HasSubstr("tensor 'w': data_offsets [0, 16] run past the end of the data section (8 bytes)"));
  EXPECT_THAT(
      ErrorOf(RawSafetensors(
          R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [18446744073709551615, 18446744073709551615]}})")),
      HasSubstr("tensor 'w'"));
}

TEST(SafetensorsHeader, RejectsByteCountNotMatchingDtypeAndShape) {
  SafetensorsWriter w;
  w.Add("model.norm.weight", DType::kBF16, {4}, std::vector<uint8_t>(6));  // needs 8
  const std::string msg = ErrorOf(w.Serialize());
  EXPECT_THAT(msg, HasSubstr("tensor 'model.norm.weight'"));
  EXPECT_THAT(msg, HasSubstr("BF16 shape [4] needs 4 x 2 bytes but data_offsets [0, 6] span 6"));
}

TEST(SafetensorsHeader, RejectsOverlappingOffsets) {
  const std::string msg = ErrorOf(RawSafetensors(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      std::vector<uint8_t>(12)));
  EXPECT_THAT(msg, HasSubstr(kFile));
  EXPECT_THAT(msg, HasSubstr("tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"));

  // Identical ranges are the extreme overlap.
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                  std::vector<uint8_t>(8))),
              HasSubstr("overlap"));
}

TEST(SafetensorsHeader, RejectsGapsAndTrailingBytes) {
  EXPECT_THAT(ErrorOf(RawSafetensors(
                  R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                  std::vector<uint8_t>(12))),
              HasSubstr("tensor 'b': data_offsets [8, 12] leave a gap"));
  EXPECT_THAT(
      ErrorOf(RawSafetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                             std::vector<uint8_t>(12))),
      HasSubstr("cover 4 bytes of the data section but it holds 12"));
}

TEST(SafetensorsHeader, RejectsDuplicateTensorNames) {
  SafetensorsWriter w;
  w.AddF32("model.layers.0.mlp.up_proj.weight", DType::kF32, {1}, {1.0f});
  w.AddF32("model.layers.0.mlp.up_proj.weight", DType::kF32, {1}, {2.0f});
  const std::string msg = ErrorOf(w.Serialize());
  EXPECT_THAT(msg, HasSubstr(kFile));
  EXPECT_THAT(msg, HasSubstr("duplicate key 'model.layers.0.mlp.up_proj.weight'"));
}

TEST(SafetensorsHeader, RejectsBadMetadata) {
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"__metadata__": {"format": 1}})")),
              HasSubstr("'__metadata__' entry 'format' must be a string"));
  EXPECT_THAT(ErrorOf(RawSafetensors(R"({"__metadata__": "pt"})")),
              HasSubstr("'__metadata__' must be an object"));
}

}  // namespace
}  // namespace strata
