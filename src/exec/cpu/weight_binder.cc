// Checkpoint tensors as CPU weight views.
#include "exec/cpu/weight_binder.h"

#include "absl/strings/str_cat.h"
#include "model/weight_store.h"

namespace strata::exec {

int64_t BoundTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> WeightBinder::List(const std::string& name, std::vector<int64_t> shape,
                                      BoundTensor::Kind kind) const {
  listed_->push_back({name, std::move(shape), kind});
  return std::vector<float>(static_cast<size_t>(listed_->back().NumElements()),
                            kind == BoundTensor::Kind::kNorm ? 1.f : 0.f);
}

StatusOr<cpu::WeightMatrix> WeightBinder::Matrix(const std::string& name, int64_t rows,
                                                 int64_t cols) {
  cols_.insert(cols);
  if (listed_ != nullptr) {
    listed_->push_back({name, {rows, cols}, BoundTensor::Kind::kMatrix});
    return cpu::WeightMatrix{DType::kF32, nullptr, rows, cols};
  }
  STRATA_ASSIGN_OR_RETURN(TensorView v, store_->Get(name));
  if (fp8_ && v.dtype == DType::kF8E4M3) {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> w,
                            LoadFp8BlockScaled(*store_, name, rows, cols, *fp8_));
    owned_->push_back(std::move(w));
    return cpu::WeightMatrix{DType::kF32, owned_->back().data(), rows, cols};
  }
  STRATA_ASSIGN_OR_RETURN(v, store_->GetFloat(name, {rows, cols}));
  return cpu::WeightMatrix{v.dtype, v.data, rows, cols};
}

StatusOr<cpu::SwiGluWeights> WeightBinder::SwiGlu(const std::string& prefix,
                                                  const std::string& gate, const std::string& up,
                                                  const std::string& down, int64_t D, int64_t I) {
  cpu::SwiGluWeights w;
  STRATA_ASSIGN_OR_RETURN(w.gate, Matrix(absl::StrCat(prefix, gate, ".weight"), I, D));
  STRATA_ASSIGN_OR_RETURN(w.up, Matrix(absl::StrCat(prefix, up, ".weight"), I, D));
  STRATA_ASSIGN_OR_RETURN(w.down, Matrix(absl::StrCat(prefix, down, ".weight"), D, I));
  return w;
}

StatusOr<std::vector<float>> WeightBinder::Vector(const std::string& name,
                                                  const std::vector<int64_t>& shape) const {
  if (listed_ != nullptr) return List(name, shape, BoundTensor::Kind::kVector);
  return store_->GetF32Copy(name, shape);
}

StatusOr<std::vector<float>> WeightBinder::VectorOfShapes(
    const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const {
  if (listed_ != nullptr) return List(name, shapes.front(), BoundTensor::Kind::kVector);
  return store_->GetF32CopyOfShapes(name, shapes);
}

StatusOr<std::vector<float>> WeightBinder::NormWeight(const std::string& name, int64_t dim) const {
  if (listed_ != nullptr) return List(name, {dim}, BoundTensor::Kind::kNorm);
  STRATA_ASSIGN_OR_RETURN(std::vector<float> w, store_->GetF32Copy(name, {dim}));
  if (zero_centred_) {
    for (float& x : w) x = 1.f + x;
  }
  return w;
}

}  // namespace strata::exec
