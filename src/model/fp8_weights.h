// FP8 block-scaled checkpoints (DeepSeek-V3 style, model-spec §3.2): a matrix
// stored as F8_E4M3 `<name>` plus fp32 `<prefix>.weight_scale_inv` with one
// multiplier per block of block_rows × block_cols elements. Partial blocks at
// the right and bottom edges have scales of their own: the scale grid is
// [ceil(rows / block_rows), ceil(cols / block_cols)] and element (i, j) uses
// scale (i / block_rows, j / block_cols), as DeepSeek's weight_dequant does
// (the published kv_a_proj_with_mqa [576, 7168] has a [5, 56] grid).
// The CPU dequantises at load time to fp32 (what the reference computes with).
#ifndef STRATA_MODEL_FP8_WEIGHTS_H_
#define STRATA_MODEL_FP8_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

class WeightStore;

struct Fp8BlockSize {
  int64_t rows = 128;
  int64_t cols = 128;
};

// "a.b.weight" -> "a.b.weight_scale_inv" (the checkpoint convention).
std::string Fp8ScaleName(std::string_view weight_name);

// out[i, j] = fp8[i, j] · scale_inv[i / block.rows, j / block.cols] (one fp32
// multiply, so the result equals the reference's fp32 dequantisation exactly).
void DequantizeFp8Blocks(const uint8_t* fp8, int64_t rows, int64_t cols, const float* scale_inv,
                         Fp8BlockSize block, float* out);

// Reads an F8_E4M3 matrix `name` of shape [rows, cols] and its scale tensor
// and returns the dequantised fp32 values. Errors name the tensor: wrong
// dtype or shape, missing scale tensor, scale grid of the wrong shape.
// Scales may be stored as F32, BF16 or F16.
StatusOr<std::vector<float>> LoadFp8BlockScaled(const WeightStore& store, std::string_view name,
                                                int64_t rows, int64_t cols, Fp8BlockSize block);

}  // namespace strata

#endif  // STRATA_MODEL_FP8_WEIGHTS_H_
