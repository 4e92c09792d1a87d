// FP8 block-scaled weight dequantisation.
#include "model/fp8_weights.h"

#include <cstring>

#include "absl/strings/str_join.h"
#include "base/dtype.h"
#include "model/weight_store.h"

namespace strata {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

std::string Fp8ScaleName(std::string_view weight_name) {
  return std::string(weight_name) + "_scale_inv";
}

void DequantizeFp8Blocks(const uint8_t* fp8, int64_t rows, int64_t cols, const float* scale_inv,
                         Fp8BlockSize block, float* out) {
  // The 256 possible codes decode once; the loop is then a lookup and a multiply.
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
  const int64_t grid_cols = (cols + block.cols - 1) / block.cols;
  for (int64_t i = 0; i < rows; ++i) {
    const float* srow = scale_inv + (i / block.rows) * grid_cols;
    for (int64_t j = 0; j < cols; ++j) {
      out[i * cols + j] = table[fp8[i * cols + j]] * srow[j / block.cols];
    }
  }
}

StatusOr<std::vector<float>> LoadFp8BlockScaled(const WeightStore& store, std::string_view name,
                                                int64_t rows, int64_t cols, Fp8BlockSize block) {
  STRATA_ASSIGN_OR_RETURN(TensorView w, store.Get(name));
  const std::string where =
      absl::StrCat("tensor '", std::string(name), "' in ", std::string(w.file));
  if (w.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", std::string(DTypeName(w.dtype)), ", expected F8_E4M3"));
  }
  if (w.shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected shape ",
                                                   ShapeString({rows, cols}), ", got ",
                                                   ShapeString(w.shape)));
  }
  if (block.rows <= 0 || block.cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": block size must be positive, got [", block.rows, ", ",
                     block.cols, "]"));
  }
  const std::string scale_name = Fp8ScaleName(name);
  if (!store.Has(scale_name)) {
    return absl::NotFoundError(absl::StrCat(where, " is FP8 but its scale tensor '", scale_name,
                                            "' is not in ", store.dir()));
  }
  const std::vector<int64_t> grid = {(rows + block.rows - 1) / block.rows,
                                     (cols + block.cols - 1) / block.cols};
  STRATA_ASSIGN_OR_RETURN(std::vector<float> scales, store.GetF32Copy(scale_name, grid));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  DequantizeFp8Blocks(static_cast<const uint8_t*>(w.data), rows, cols, scales.data(), block,
                      out.data());
  return out;
}

}  // namespace strata
