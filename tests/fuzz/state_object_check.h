// The oracle shared by the state-object fuzzer and its corpus replay. The
// input is an object's body (the envelope's checksum would stop every
// mutation), parsed by DecodeStateObjectBody; an accepted body must survive
// the round trip: encoded again under the fingerprint it carries (the key
// recomputed from its tokens), DecodeStateObject must accept the object
// under that key and give the same prefix back. The input is also tried as
// a whole object. Rejection is always fine; a crash, UB, or a broken round
// trip is not.
#ifndef STRATA_TESTS_FUZZ_STATE_OBJECT_CHECK_H_
#define STRATA_TESTS_FUZZ_STATE_OBJECT_CHECK_H_

#include <cstdint>
#include <span>
#include <string>

#include "memory/prefix_key.h"
#include "memory/state_object.h"

namespace strata::fuzz {

struct StateObjectResult {
  bool accepted = false;
  std::string violation;
};

inline StateObjectResult CheckStateObject(const uint8_t* data, size_t size) {
  StateObjectResult r;
  const std::span<const uint8_t> bytes(data, size);
  const ModelFingerprint other{"kimi_linear", std::string(64, '0'), "cpu.v1", 16};
  (void)DecodeStateObject(bytes, other, PrefixKey(other, {}), "fuzz object");
  ModelFingerprint fp;
  Sha256Digest key{};
  StatusOr<StoredPrefix> p = DecodeStateObjectBody(bytes, &fp, &key, "fuzz body");
  if (!p.ok()) {
    if (p.status().message().find("fuzz body") == std::string::npos) {
      r.violation = "a refusal that does not name its source: " + std::string(p.status().message());
    }
    return r;
  }
  r.accepted = true;
  // Logits the fingerprint's vocabulary cannot hold are refused at decode.
  if (!p->logits.empty() && p->logits.size() != static_cast<size_t>(fp.vocab_size)) return r;
  const std::vector<uint8_t> object = EncodeStateObject(fp, *p);
  StatusOr<StoredPrefix> again = DecodeStateObject(object, fp, PrefixKey(fp, p->tokens), "fuzz object");
  if (!again.ok()) {
    r.violation = "the re-encoded object is refused: " + std::string(again.status().message());
  } else if (again->tokens != p->tokens || again->checkpoint != p->checkpoint ||
             again->max_context != p->max_context || EncodeStateObject(fp, *again) != object) {
    r.violation = "the round trip changed the object";
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_STATE_OBJECT_CHECK_H_
