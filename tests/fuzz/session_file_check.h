// The oracle shared by the saved-session fuzzer and its corpus replay. The
// input is a session file's body (the 56-byte header would stop every
// mutation at its checksum), parsed by DecodeSessionBody; an accepted body
// must survive the round trip: encoded again under the fingerprint it
// carries, DecodeSession must accept the file and re-encoding its image must
// give the same bytes. The input is also tried as a whole file, whose
// header checks must refuse or accept without harm. Rejection is always
// fine; a crash, UB, or a broken round trip is not.
#ifndef STRATA_TESTS_FUZZ_SESSION_FILE_CHECK_H_
#define STRATA_TESTS_FUZZ_SESSION_FILE_CHECK_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/session_file.h"

namespace strata::fuzz {

struct SessionFileResult {
  bool accepted = false;
  std::string violation;
};

inline SessionFileResult CheckSessionFile(const uint8_t* data, size_t size) {
  SessionFileResult r;
  const std::span<const uint8_t> bytes(data, size);
  ModelFingerprint fp;
  StatusOr<SessionImage> image = DecodeSessionBody(bytes, &fp, "fuzz body");
  const ModelFingerprint other{"kimi_linear", std::string(64, '0'), "cpu.v1", 16};
  (void)DecodeSession(bytes, other, "fuzz file");
  if (!image.ok()) {
    if (image.status().message().find("fuzz body") == std::string::npos) {
      r.violation = "a refusal that does not name its source: " + std::string(image.status().message());
    }
    return r;
  }
  r.accepted = true;
  const std::vector<uint8_t> file = EncodeSession(fp, *image);
  if (file.size() != size + 56 || !std::equal(bytes.begin(), bytes.end(), file.begin() + 56)) {
    r.violation = "an accepted body encodes to other bytes";
    return r;
  }
  StatusOr<SessionImage> again = DecodeSession(file, fp, "fuzz file");
  if (!again.ok()) {
    r.violation = "the re-encoded file is refused: " + std::string(again.status().message());
  } else if (EncodeSession(fp, *again) != file) {
    r.violation = "the round trip changed the session";
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_SESSION_FILE_CHECK_H_
