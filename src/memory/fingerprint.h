// ModelFingerprint: what a stored state must match to be used (a saved
// session, an object of a storage tier): the model computes the same
// function (architecture, vocabulary, weights digest) and lays its state
// out the same. Encoded first in every such body, compared before anything
// else in it is used.
#ifndef STRATA_MEMORY_FINGERPRINT_H_
#define STRATA_MEMORY_FINGERPRINT_H_

#include <cstdint>
#include <string>

#include "base/byte_codec.h"
#include "model/model.h"

namespace strata {

struct ModelFingerprint {
  std::string architecture;
  std::string weights_digest;
  std::string state_layout;
  int64_t vocab_size = 0;
};

inline ModelFingerprint FingerprintOf(const Model& model) {
  const ModelInfo& info = model.info();
  return {info.architecture, info.weights_digest, model.SavedStateLayout(), info.vocab_size};
}

void WriteFingerprint(ByteWriter& w, const ModelFingerprint& f);
Status ReadFingerprint(ByteReader& r, ModelFingerprint* f);

// The first field in which `got` differs from `want`, saying both; empty
// when they are the same.
std::string FingerprintDifference(const ModelFingerprint& got, const ModelFingerprint& want);

}  // namespace strata

#endif  // STRATA_MEMORY_FINGERPRINT_H_
