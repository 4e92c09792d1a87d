// The digest that identifies what a loaded model computes (ModelInfo::
// weights_digest), so a saved state is never restored into another model.
#ifndef STRATA_MODEL_WEIGHTS_DIGEST_H_
#define STRATA_MODEL_WEIGHTS_DIGEST_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

class WeightStore;

// SHA-256 (hex) over config.json's bytes and, for each tensor in name order,
// its name, dtype, shape and kSamples evenly spaced 64-byte pieces of its
// data. Samples, not every byte: a 48B checkpoint is read once at load on
// the GPU path and not at all on the CPU's mmap, and a fine-tune or another
// export changes every tensor. A dummy load (`weights` null) digests the
// seed instead.
std::string WeightsDigest(std::string_view config_bytes, const WeightStore* weights,
                          uint64_t dummy_seed);

}  // namespace strata

#endif  // STRATA_MODEL_WEIGHTS_DIGEST_H_
