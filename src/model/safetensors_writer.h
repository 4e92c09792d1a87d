// Writes safetensors files. Used by the demo-model generator, tests that build
// small (and deliberately broken) checkpoints, and the fuzz corpus builder.
#ifndef STRATA_MODEL_SAFETENSORS_WRITER_H_
#define STRATA_MODEL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace strata {

class SafetensorsWriter {
 public:
  // Adds a tensor; `bytes` must hold DTypeSize(dtype) * prod(shape) bytes.
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // Convenience: fp32 values stored as `dtype` (F32, F16 or BF16; rounded to nearest even).
  void AddF32(std::string name, DType dtype, std::vector<int64_t> shape, const std::vector<float>& values);
  void SetMetadata(std::string key, std::string value);

  // Serialises header + data (tensors in insertion order, 8-byte aligned header).
  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace strata

#endif  // STRATA_MODEL_SAFETENSORS_WRITER_H_
