// Binds checkpoint tensors for the CPU layer modules. Matrices stay in the
// mapped file (bf16 / fp16 / fp32 views) except FP8 block-scaled ones, which
// are dequantised to fp32 into storage the executor keeps; vectors (norms,
// conv taps, biases) are copied to fp32. Errors name the tensor. A binder
// without a store lists what the modules ask for instead (ListTensors).
#ifndef STRATA_EXEC_CPU_WEIGHT_BINDER_H_
#define STRATA_EXEC_CPU_WEIGHT_BINDER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "base/status.h"
#include "model/fp8_weights.h"

namespace strata {
class WeightStore;
}

namespace strata::exec {

// A tensor a layer list binds: its checkpoint name, canonical shape and use.
struct BoundTensor {
  enum class Kind { kMatrix, kVector, kNorm };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = Kind::kMatrix;
  int64_t NumElements() const;
};

class WeightBinder {
 public:
  // `fp8`: the scale block FP8 matrices are dequantised with; unset rejects
  // them. `zero_centred_norms`: NormWeight returns 1 + w. `owned` receives
  // dequantised matrices and must outlive every matrix bound from it.
  WeightBinder(const WeightStore& store, std::optional<Fp8BlockSize> fp8, bool zero_centred_norms,
               std::deque<std::vector<float>>* owned)
      : store_(&store), fp8_(fp8), zero_centred_(zero_centred_norms), owned_(owned) {}
  // Binds nothing: appends each tensor asked for to `listed` and returns
  // matrices without data and vectors of zeros (norms of ones).
  explicit WeightBinder(std::vector<BoundTensor>* listed) : listed_(listed) {}

  // A [rows, cols] Linear weight.
  StatusOr<cpu::WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);
  // A tensor of exactly `shape`, as fp32.
  StatusOr<std::vector<float>> Vector(const std::string& name,
                                      const std::vector<int64_t>& shape) const;
  // A small tensor that exports store with different unit dims (e.g. A_log as
  // [1,1,H,1], [H] or [H,1]); errors name the first (canonical) shape.
  StatusOr<std::vector<float>> VectorOfShapes(
      const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const;
  // An RMSNorm weight [dim], folded to 1 + w for zero-centred checkpoints (in
  // fp32, as the reference forms it), so every norm runs as a plain RMSNorm.
  StatusOr<std::vector<float>> NormWeight(const std::string& name, int64_t dim) const;

  // A SwiGLU block of width D and intermediate I: `<prefix><gate>.weight`
  // [I, D], `<prefix><up>.weight` [I, D], `<prefix><down>.weight` [D, I].
  StatusOr<cpu::SwiGluWeights> SwiGlu(const std::string& prefix, const std::string& gate,
                                      const std::string& up, const std::string& down, int64_t D,
                                      int64_t I);

  // The distinct input widths of the matrices bound so far: the executor
  // sizes the shared matmul scratch from them.
  const std::set<int64_t>& matrix_cols() const { return cols_; }

 private:
  // Listing mode: records the tensor and returns a placeholder of its size.
  std::vector<float> List(const std::string& name, std::vector<int64_t> shape,
                          BoundTensor::Kind kind) const;

  const WeightStore* store_ = nullptr;
  std::optional<Fp8BlockSize> fp8_;
  bool zero_centred_ = false;
  std::deque<std::vector<float>>* owned_ = nullptr;
  std::vector<BoundTensor>* listed_ = nullptr;
  std::set<int64_t> cols_;
};

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_WEIGHT_BINDER_H_
