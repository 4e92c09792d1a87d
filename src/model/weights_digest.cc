#include "model/weights_digest.h"

#include <algorithm>

#include "base/sha256.h"
#include "model/weight_store.h"

namespace strata {
namespace {
constexpr uint64_t kSamples = 16;
constexpr uint64_t kSampleBytes = 64;
}  // namespace

std::string WeightsDigest(std::string_view config_bytes, const WeightStore* weights,
                          uint64_t dummy_seed) {
  Sha256 h;
  h.Update("strata.weights.v1").UpdateU64(config_bytes.size()).Update(config_bytes);
  if (weights == nullptr) {
    h.Update("dummy").UpdateU64(dummy_seed);
    return ToHex(h.Finish());
  }
  for (const std::string& name : weights->Names()) {
    StatusOr<TensorView> t = weights->Get(name);
    if (!t.ok()) continue;  // Names() lists what Get finds
    h.UpdateU64(name.size()).Update(name).UpdateU64(static_cast<uint64_t>(t->dtype));
    h.UpdateU64(t->shape.size());
    for (int64_t d : t->shape) h.UpdateU64(static_cast<uint64_t>(d));
    h.UpdateU64(t->bytes);
    const auto* data = static_cast<const uint8_t*>(t->data);
    const uint64_t piece = std::min(kSampleBytes, t->bytes);
    if (piece == 0) continue;
    const uint64_t span = t->bytes - piece;
    for (uint64_t i = 0; i < kSamples; ++i) {
      const uint64_t at = kSamples == 1 ? 0 : span * i / (kSamples - 1);
      h.Update(std::span<const uint8_t>(data + at, piece));
    }
  }
  return ToHex(h.Finish());
}

}  // namespace strata
