#include "memory/fingerprint.h"

#include "absl/strings/str_cat.h"

namespace strata {

void WriteFingerprint(ByteWriter& w, const ModelFingerprint& f) {
  w.Str(f.architecture);
  w.Str(f.weights_digest);
  w.Str(f.state_layout);
  w.U64(static_cast<uint64_t>(f.vocab_size));
}

Status ReadFingerprint(ByteReader& r, ModelFingerprint* f) {
  uint64_t vocab = 0;
  STRATA_RETURN_IF_ERROR(r.Str("model.architecture", &f->architecture));
  STRATA_RETURN_IF_ERROR(r.Str("model.weights_digest", &f->weights_digest));
  STRATA_RETURN_IF_ERROR(r.Str("model.state_layout", &f->state_layout));
  STRATA_RETURN_IF_ERROR(r.U64("model.vocab_size", &vocab));
  f->vocab_size = static_cast<int64_t>(vocab);
  return OkStatus();
}

std::string FingerprintDifference(const ModelFingerprint& got, const ModelFingerprint& want) {
  if (got.architecture != want.architecture) {
    return absl::StrCat("architecture: saved from '", got.architecture, "', this model is '",
                        want.architecture, "'");
  }
  if (got.vocab_size != want.vocab_size) {
    return absl::StrCat("vocab_size: saved with ", got.vocab_size, ", this model has ",
                        want.vocab_size);
  }
  if (got.weights_digest != want.weights_digest) {
    return absl::StrCat("weights_digest: saved from weights ", got.weights_digest.substr(0, 16),
                        "..., this model's are ", want.weights_digest.substr(0, 16),
                        "... (another checkpoint, config or dummy seed)");
  }
  if (got.state_layout != want.state_layout) {
    return absl::StrCat("state_layout: saved as '", got.state_layout, "', this model's is '",
                        want.state_layout, "' (another executor or device)");
  }
  return "";
}
}  // namespace strata
