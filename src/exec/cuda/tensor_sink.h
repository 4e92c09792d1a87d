// How a GPU loader puts checkpoint tensors into its weight arena: a layer
// module names what it needs and where it goes; the loader's sink does the
// reading, the dtype conversion (FP8 kept or dequantised, fp32/fp16 rounded
// to bf16) and the copy.
#ifndef STRATA_EXEC_CUDA_TENSOR_SINK_H_
#define STRATA_EXEC_CUDA_TENSOR_SINK_H_

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "exec/cuda/cuda_ops.h"

namespace strata {
namespace cuda_exec {

struct TensorSink {
  // The checkpoint matrix `name`, [rows, cols], into rows [row0, row0 + rows)
  // of `dst` (cols wide).
  std::function<Status(const std::string& name, int64_t rows, int64_t cols, const Mat& dst,
                       int64_t row0)>
      matrix;
  // The checkpoint vector `name`, [n], as fp32 into `dst`.
  std::function<Status(const std::string& name, int64_t n, float* dst)> vector;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_TENSOR_SINK_H_
