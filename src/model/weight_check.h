// The opt-in scan behind LoadOptions::check_weights: a checkpoint whose
// weights hold a NaN or an infinity loads and runs, but every logit it
// produces downstream of that weight is NaN; the scan says which tensor at
// load instead.
#ifndef STRATA_MODEL_WEIGHT_CHECK_H_
#define STRATA_MODEL_WEIGHT_CHECK_H_

#include <cstdint>

#include "base/status.h"

namespace strata {

class ThreadPool;
class WeightStore;
struct TensorView;

// The index of the first element of `t` that is NaN or infinite (for e4m3,
// which has no infinity, its NaN code), or -1 when every element is finite.
// Integer tensors have none. Runs on `pool` when non-null.
int64_t FirstNonFiniteElement(const TensorView& t, ThreadPool* pool);

// Scans every tensor of `store` in name order: DataLoss naming the first one
// with a non-finite element, its file, its dtype and the element's index (row
// major), e.g.
//   "<dir>/model.safetensors: tensor 'model.layers.3.mlp.up_proj.weight' (BF16):
//    element 12345 is NaN".
Status CheckWeightsFinite(const WeightStore& store, ThreadPool* pool);

}  // namespace strata

#endif  // STRATA_MODEL_WEIGHT_CHECK_H_
