// How the GPU layer modules carve their weights: each matrix the plain GEMMs
// read is a Mat, bf16 or, for FP8 block-scaled checkpoints (DeepSeek), FP8
// e4m3 codes as stored with their scales expanded to one row of the grid per
// kFp8ScaleRows weight rows, so that a fused matrix whose segments start at
// multiples of 8 rows keeps each segment's own scales. The carver decides
// which, from the checkpoint's dtypes, and counts what stays FP8.
#ifndef STRATA_EXEC_CUDA_WEIGHT_CARVER_H_
#define STRATA_EXEC_CUDA_WEIGHT_CARVER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/carver.h"
#include "exec/cuda/cuda_ops.h"
#include "model/fp8_weights.h"

namespace strata {
namespace cuda_exec {

// Whether the checkpoint stores tensor `name` as F8_E4M3.
using Fp8Query = std::function<bool(const std::string& name)>;

// The matrices kept FP8 on the device.
struct Fp8Footprint {
  uint64_t bytes = 0;         // codes and expanded scales
  int64_t matrices = 0;       // a layer's stacked routed experts count as two (w13, w2)
  int64_t max_elems = 0;      // the largest one the prefill products dequantise (rows · cols)
  int64_t expert_layers = 0;  // MoE layers whose routed experts stay FP8
};

// Cap on the prefill products' FP8 dequantisation tile (bf16 elements, 64 MiB).
constexpr int64_t kFp8TileMaxElems = int64_t{1} << 25;

class WeightCarver {
 public:
  // Without `is_fp8` or `block` every matrix is bf16.
  WeightCarver(Carver& c, Fp8Query is_fp8, std::optional<Fp8BlockSize> block)
      : c_(c), is_fp8_(std::move(is_fp8)) {
    if (is_fp8_ && block.has_value() && block->cols > 0 && block->rows > 0 &&
        block->rows % kFp8ScaleRows == 0) {
      block_cols_ = block->cols;
    }
  }
  explicit WeightCarver(Carver& c) : c_(c) {}

  template <typename T>
  T* Take(int64_t count) {
    return c_.Take<T>(count);
  }

  // A matrix [rows, cols] holding the checkpoint tensors `names` stacked by
  // rows in order: FP8 when every one of them is stored FP8 and `rows_ok`
  // (each starts on a kFp8ScaleRows group), else bf16. `in_tile`: the
  // prefill products dequantise it through the shared FP8 tile (not the
  // routed experts, which the MoE kernels dequantise themselves).
  Mat Matrix(int64_t rows, int64_t cols, const std::vector<std::string>& names, bool rows_ok = true,
             bool in_tile = true) {
    Mat m;
    bool f8 = block_cols_ > 0 && rows_ok && !names.empty();
    for (size_t i = 0; f8 && i < names.size(); ++i) f8 = is_fp8_(names[i]);
    if (!f8) {
      m.bf = c_.Take<bf16>(rows * cols);
      return m;
    }
    const int64_t scales = CeilDiv(rows, kFp8ScaleRows) * CeilDiv(cols, block_cols_);
    m.fp8 = c_.Take<uint8_t>(rows * cols);
    m.scale = c_.Take<float>(scales);
    m.block_cols = block_cols_;
    fp8_.bytes += static_cast<uint64_t>(rows * cols + 4 * scales);
    ++fp8_.matrices;
    if (in_tile) fp8_.max_elems = std::max(fp8_.max_elems, rows * cols);
    return m;
  }
  void CountFp8ExpertLayer() { ++fp8_.expert_layers; }

  const Fp8Footprint& fp8() const { return fp8_; }

 private:
  Carver& c_;
  Fp8Query is_fp8_;
  int64_t block_cols_ = 0;  // 0: no FP8
  Fp8Footprint fp8_;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_WEIGHT_CARVER_H_
