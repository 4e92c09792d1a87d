// WeightStore: every tensor of a Hugging Face model directory, memory-mapped.
// Opens `model.safetensors` or the shards listed by `model.safetensors.index.json`
// and resolves original checkpoint names to zero-copy views.
#ifndef STRATA_MODEL_WEIGHT_STORE_H_
#define STRATA_MODEL_WEIGHT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace strata {

// A read-only view of one stored tensor. Valid while the WeightStore lives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapped file (no copy)
  uint64_t bytes = 0;
  std::string_view file;  // the shard it lives in (for error messages)

  int64_t NumElements() const;
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape.size()); }
};

// Thread-safety: immutable after Open; all const methods are thread-safe.
class WeightStore {
 public:
  // Opens the directory. Reads and validates every shard header; does not touch
  // tensor data (pages are faulted in on first use). Errors name the file.
  // `progress(fraction)` is called after each shard; returning false cancels
  // (the call then returns a Cancelled status).
  static StatusOr<std::unique_ptr<WeightStore>> Open(
      const std::string& model_dir,
      const std::function<bool(float)>& progress = nullptr);

  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  bool Has(std::string_view name) const;
  // NotFound naming the tensor and the directory when absent.
  StatusOr<TensorView> Get(std::string_view name) const;
  // Like Get, and also checks the shape: InvalidArgument naming the tensor, the
  // expected and the actual shape. Any dtype among F32/F16/BF16 is accepted.
  StatusOr<TensorView> GetFloat(std::string_view name, const std::vector<int64_t>& shape) const;
  // Copies the tensor into fp32 (for small tensors: norms, biases, gates).
  StatusOr<std::vector<float>> GetF32Copy(std::string_view name,
                                          const std::vector<int64_t>& shape) const;

  // GetF32Copy of the first of `shapes` the tensor has (exports differ in
  // the unit dims of small tensors); the error names the first shape.
  StatusOr<std::vector<float>> GetF32CopyOfShapes(
      std::string_view name, const std::vector<std::vector<int64_t>>& shapes) const;

  std::vector<std::string> Names() const;  // sorted
  uint64_t TotalBytes() const;             // sum of tensor bytes
  int64_t TotalElements() const;           // sum of element counts
  const std::string& dir() const { return dir_; }

 private:
  WeightStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_;
};

}  // namespace strata

#endif  // STRATA_MODEL_WEIGHT_STORE_H_
