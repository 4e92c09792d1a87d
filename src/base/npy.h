// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0).
// Used by the `strata` tool (token and logit files) and the parity tests
// (transformers reference outputs). Only what those need is supported:
// little-endian float32 / int32 / int64 arrays in C order.
#ifndef STRATA_BASE_NPY_H_
#define STRATA_BASE_NPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace strata {

// One array as stored: `dtype` is kF32, kI32 or kI64; `data` holds
// prod(shape) elements in C order, host (little-endian) byte order.
struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a 0-d array (one element)
  std::vector<uint8_t> data;

  int64_t NumElements() const;
};

// Parses a complete .npy file image. `label` (usually the path) starts every
// error message. Errors (InvalidArgument): bad magic, unsupported version,
// truncated header or data, malformed header dict, unsupported or big-endian
// dtype, Fortran order, negative or overflowing shape, trailing bytes.
StatusOr<NpyArray> ParseNpy(std::string_view label, const uint8_t* bytes, size_t size);

// Reads and parses `path` (NotFound when it cannot be opened).
StatusOr<NpyArray> ReadNpy(const std::string& path);

// Typed readers: the values as int32 (from <i4, or <i8 when every value fits)
// or float32 (from <f4 only). `shape` may be null.
StatusOr<std::vector<int32_t>> ReadNpyInt32(const std::string& path,
                                            std::vector<int64_t>* shape = nullptr);
StatusOr<std::vector<float>> ReadNpyFloat32(const std::string& path,
                                            std::vector<int64_t>* shape = nullptr);

// Serialises an array (version 1.0 header unless it does not fit, then 2.0;
// header padded so the data starts on a 64-byte boundary, as NumPy does).
// `values` must hold prod(shape) elements.
StatusOr<std::vector<uint8_t>> SerializeNpy(DType dtype, std::span<const int64_t> shape,
                                            const void* values, size_t num_values);

Status WriteNpyFloat32(const std::string& path, std::span<const int64_t> shape,
                       std::span<const float> values);
Status WriteNpyInt32(const std::string& path, std::span<const int64_t> shape,
                     std::span<const int32_t> values);

}  // namespace strata

#endif  // STRATA_BASE_NPY_H_
