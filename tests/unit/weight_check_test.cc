// LoadOptions::check_weights (issue 27): the scan finds the first NaN or
// infinity of every floating dtype at its exact element (also past the
// vectorised blocks and the parallel chunks), and LoadModel fails with
// DataLoss naming the first such tensor in name order; without the flag the
// same checkpoint loads.
#include "model/weight_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "loader_test_util.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::ScopedTestDir;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// `n` elements of `dtype`, all 0.5 except `bad` at `at` (none when at < 0).
struct Buffer {
  std::vector<uint8_t> bytes;
  TensorView view;
};

Buffer Make(DType dtype, int64_t n, int64_t at, float bad) {
  Buffer b;
  const size_t w = DTypeSize(dtype);
  b.bytes.resize(static_cast<size_t>(n) * w);
  auto put = [&](int64_t i, float v) {
    uint8_t* p = b.bytes.data() + static_cast<size_t>(i) * w;
    switch (dtype) {
      case DType::kF32:
        std::memcpy(p, &v, 4);
        break;
      case DType::kF16: {
        const uint16_t h = F32ToF16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = F32ToBf16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kF8E4M3:
        *p = F32ToF8E4M3(v);
        break;
      default:
        std::memset(p, 0x7f, w);
        break;
    }
  };
  for (int64_t i = 0; i < n; ++i) put(i, 0.5f);
  if (at >= 0) put(at, bad);
  b.view.dtype = dtype;
  b.view.shape = {n};
  b.view.data = b.bytes.data();
  b.view.bytes = b.bytes.size();
  return b;
}

TEST(WeightCheck, FindsTheFirstNonFiniteElementOfEachFloatDtype) {
  ThreadPool pool(4);
  const int64_t n = (int64_t{1} << 21) + 777;  // three parallel chunks
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t at : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{1} << 20, n - 1}) {
      for (float bad : {kNaN, kInf, -kInf}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " at " << at << " " << bad);
        Buffer b = Make(dtype, n, at, bad);
        EXPECT_EQ(FirstNonFiniteElement(b.view, &pool), at);
        EXPECT_EQ(FirstNonFiniteElement(b.view, nullptr), at);
      }
    }
    EXPECT_EQ(FirstNonFiniteElement(Make(dtype, n, -1, 0).view, &pool), -1);
    // The largest finite values are not flagged.
    const float big = dtype == DType::kF16    ? 65504.f
                      : dtype == DType::kBF16 ? 3.0e38f  // FLT_MAX rounds to bf16's infinity
                                              : std::numeric_limits<float>::max();
    EXPECT_EQ(FirstNonFiniteElement(Make(dtype, 100, 50, -big).view, &pool), -1);
  }
  // Two hits: the earlier one wins, whichever chunk finishes first.
  Buffer two = Make(DType::kBF16, n, n - 5, kNaN);
  const uint16_t nan = F32ToBf16(kNaN);
  std::memcpy(two.bytes.data() + 2 * 100, &nan, 2);
  EXPECT_EQ(FirstNonFiniteElement(two.view, &pool), 100);
}

TEST(WeightCheck, E4m3HasOnlyNaNCodes) {
  ThreadPool pool(2);
  for (uint8_t code : {uint8_t{0x7f}, uint8_t{0xff}}) {
    Buffer b = Make(DType::kF8E4M3, 5000, -1, 0);
    b.bytes[4321] = code;
    EXPECT_EQ(FirstNonFiniteElement(b.view, &pool), 4321);
  }
  Buffer max = Make(DType::kF8E4M3, 64, -1, 0);
  max.bytes[10] = 0x7e;  // 448, the largest finite e4m3
  max.bytes[11] = 0xfe;  // -448
  EXPECT_EQ(FirstNonFiniteElement(max.view, &pool), -1);
}

TEST(WeightCheck, IntegerTensorsHaveNoNonFiniteValues) {
  for (DType dtype : {DType::kI32, DType::kI64, DType::kU8}) {
    EXPECT_EQ(FirstNonFiniteElement(Make(dtype, 4096, 7, 0).view, nullptr), -1);
  }
}

// kimi_c's checkpoint rewritten with `poison` (tensor name -> element index)
// set to NaN, in a fresh model directory.
std::string PoisonedKimi(const ScopedTestDir& dir,
                         const std::vector<std::pair<std::string, int64_t>>& poison) {
  const fs::path src = fs::path(STRATA_TEST_DATA_DIR) / "kimi_c";
  fs::copy_file(src / "config.json", dir.File("config.json"));
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(src.string());
  EXPECT_TRUE(store.ok()) << store.status();
  SafetensorsWriter w;
  for (const std::string& name : (*store)->Names()) {
    const TensorView t = *(*store)->Get(name);
    std::vector<uint8_t> bytes(static_cast<const uint8_t*>(t.data),
                               static_cast<const uint8_t*>(t.data) + t.bytes);
    for (const auto& [target, at] : poison) {
      if (target != name) continue;
      EXPECT_EQ(t.dtype, DType::kF32) << name;
      std::memcpy(bytes.data() + 4 * at, &kNaN, 4);
    }
    w.Add(name, t.dtype, t.shape, std::move(bytes));
  }
  EXPECT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());
  return dir.path();
}

TEST(WeightCheck, LoadModelNamesTheFirstPoisonedTensorInNameOrder) {
  ScopedTestDir dir;
  const std::string path =
      PoisonedKimi(dir, {{"model.norm.weight", 3}, {"model.layers.1.input_layernorm.weight", 9}});
  LoadOptions options;
  StatusOr<std::unique_ptr<Model>> m = LoadModel(path, options);
  EXPECT_TRUE(m.ok()) << m.status();  // off by default: the checkpoint loads

  options.check_weights = true;
  m = LoadModel(path, options);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsDataLoss(m.status())) << m.status();
  EXPECT_EQ(m.status().message(),
            absl::StrCat(dir.File("model.safetensors"),
                         ": tensor 'model.layers.1.input_layernorm.weight' (F32): element 9 is NaN "
                         "(found by check_weights)"));
}

TEST(WeightCheck, AFiniteCheckpointPassesTheCheck) {
  LoadOptions options;
  options.check_weights = true;
  StatusOr<std::unique_ptr<Model>> m =
      LoadModel(std::string(STRATA_TEST_DATA_DIR) + "/kimi_c", options);
  EXPECT_TRUE(m.ok()) << m.status();
  options.load_format = LoadFormat::kDummy;
  m = LoadModel(std::string(STRATA_TEST_DATA_DIR) + "/kimi_c", options);
  EXPECT_TRUE(m.ok()) << m.status();
}

}  // namespace
}  // namespace strata
