// How a GPU loader puts checkpoint tensors into its weight arena: a layer
// module names what it needs and where it goes; the loader's sink does the
// reading, the dtype conversion (FP8 kept or dequantised, fp32/fp16 rounded
// to bf16) and the copy.
#ifndef STRATA_EXEC_CUDA_TENSOR_SINK_H_
#define STRATA_EXEC_CUDA_TENSOR_SINK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

  // Optional (a sink without them refuses the calls below with Internal):
  // rows [src_row, src_row + count) of the checkpoint matrix `name`, [rows,
  // cols], into rows [row0, row0 + count) of `dst` (bf16, cols wide), for
  // modules that regroup a fused projection's rows.
  std::function<Status(const std::string& name, int64_t rows, int64_t cols, int64_t src_row,
                       int64_t count, bf16* dst, int64_t row0)>
      part;
  // The checkpoint tensor `name` as fp32, passed through `map` (when set),
  // into `dst`; its shape must be one of `shapes` (exports differ in the unit
  // dims of small tensors).
  std::function<Status(const std::string& name, const std::vector<std::vector<int64_t>>& shapes,
                       const std::function<void(std::vector<float>&)>& map, float* dst)>
      floats;
  // Values computed on the host (rotary frequencies) into `dst`.
  std::function<Status(const std::vector<float>& values, float* dst)> values;
  // The checkpoint stores RMSNorm weights zero-centred (the norm scales by 1 + w).
  bool zero_centred_norms = false;

  Status Part(const std::string& name, int64_t rows, int64_t cols, int64_t src_row, int64_t count,
              bf16* dst, int64_t row0) const {
    if (!part) return Missing("part", name);
    return part(name, rows, cols, src_row, count, dst, row0);
  }
  Status Floats(const std::string& name, const std::vector<std::vector<int64_t>>& shapes,
                float* dst, const std::function<void(std::vector<float>&)>& map = nullptr) const {
    if (!floats) return Missing("floats", name);
    return floats(name, shapes, map, dst);
  }
  Status Values(const std::vector<float>& v, float* dst) const {
    if (!values) return Missing("values", "host values");
    return values(v, dst);
  }
  // An RMSNorm weight [n] as the norm multiplies by it: 1 + w when the
  // checkpoint's norms are zero-centred (formed in fp32, as the reference does).
  Status Norm(const std::string& name, int64_t n, float* dst) const {
    if (!zero_centred_norms) return Floats(name, {{n}}, dst);
    return Floats(name, {{n}}, dst, [](std::vector<float>& v) {
      for (float& x : v) x += 1.f;
    });
  }

 private:
  static Status Missing(const char* what, const std::string& name) {
    return absl::InternalError(name + ": this loader's tensor sink has no '" + what + "'");
  }
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_TENSOR_SINK_H_
