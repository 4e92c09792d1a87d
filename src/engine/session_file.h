// The saved-session format: what strata_session_save writes and
// strata_session_load reads, to a file or a memory buffer.
//
// The envelope of base/sealed_bytes.h (magic "STRATASN", version
// kSessionFormatVersion), then a body of base/byte_codec.h's encoding: the
// model fingerprint (memory/fingerprint.h), then the session. The checksum is
// verified before the body is parsed, and the fingerprint before the session
// is used, so a truncated, corrupted, foreign or stale file is refused
// with a message naming the offset or the field that differs, and nothing
// in it is used.
#ifndef STRATA_ENGINE_SESSION_FILE_H_
#define STRATA_ENGINE_SESSION_FILE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "memory/fingerprint.h"

namespace strata {

inline constexpr uint32_t kSessionFormatVersion = 1;

// A state frozen at `tokens` (a mark, the turn checkpoint).
struct SavedPoint {
  uint64_t id = 0;                 // marks: the mark's id
  std::vector<int32_t> tokens;     // marks: the tokens it consumed; turn checkpoint: empty
  uint64_t num_tokens = 0;         // turn checkpoint: history tokens it covers
  uint64_t messages = 0;           // marks: conversation messages when made
  std::vector<float> logits;       // after its last token ([vocab] or empty)
  std::vector<uint8_t> state;      // Model::SaveCheckpoint
};

// Everything a session is, but its model and engine.
struct SessionImage {
  int64_t max_context = 0;
  std::vector<int32_t> tokens;   // the history
  uint64_t evaluated = 0;        // prefix of tokens the state consumed
  std::vector<float> logits;     // after tokens[evaluated - 1] ([vocab] or empty)
  std::vector<uint8_t> state;    // Model::SaveCheckpoint of the state
  bool has_conversation = false;
  std::string messages;          // JSON array (chat-template messages)
  std::string tools;             // JSON array of {name, description, parameters}
  bool has_turn_checkpoint = false;
  SavedPoint turn_checkpoint;
  std::vector<SavedPoint> marks;
  uint64_t next_mark = 1;
};

std::vector<uint8_t> EncodeSession(const ModelFingerprint& model, const SessionImage& image);

// Checks the header, the checksum and the fingerprint against `expected`,
// then parses. Errors (DataLoss for a damaged or truncated file,
// FailedPrecondition for another model's or format version's) start with
// `source` (a path, or "session buffer").
StatusOr<SessionImage> DecodeSession(std::span<const uint8_t> bytes,
                                     const ModelFingerprint& expected, const std::string& source);

// The body alone, without the header's checks (for the fuzz target):
// `fingerprint` receives the body's.
StatusOr<SessionImage> DecodeSessionBody(std::span<const uint8_t> body,
                                         ModelFingerprint* fingerprint, const std::string& source);

}  // namespace strata

#endif  // STRATA_ENGINE_SESSION_FILE_H_
