// Streaming detokenization: token ids in one at a time, text out only in
// complete UTF-8 characters, with stop strings that may span tokens.
//
// The concatenation of everything emitted equals Tokenizer::Decode of all
// ids (cut at the first stop string): bytes of an unfinished UTF-8 sequence
// are held back until it completes or proves invalid, and Finish() flushes
// the rest with the decoder's replacement rule (U+FFFD per maximal invalid
// subpart). Text that could be the start of a stop string is held back until
// it is known not to be one.
#ifndef STRATA_TEXT_DETOKENIZER_H_
#define STRATA_TEXT_DETOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/tokenizer.h"

namespace strata {

struct DetokenizerOptions {
  bool skip_special_tokens = false;
  // Generation stops at the first occurrence of any of these (not emitted).
  std::vector<std::string> stop_strings;
};

struct DetokenizerOutput {
  std::string text;                  // new text, complete UTF-8
  bool stopped = false;              // a stop string was found
  std::optional<size_t> stop_index;  // which one (index into stop_strings)
};

// Not thread-safe; one per generation stream. The tokenizer must outlive it.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options);

  // Adds one token. After a stop, further calls fail (FailedPrecondition).
  StatusOr<DetokenizerOutput> Push(int32_t id);
  // End of stream: emits everything held back.
  DetokenizerOutput Finish();

  bool stopped() const { return stopped_; }

 private:
  // Moves complete text from bytes_ to text_, then emits what stop strings allow.
  DetokenizerOutput Drain(bool final);

  const Tokenizer& tokenizer_;
  DetokenizerOptions options_;
  std::string bytes_;  // token bytes not yet decoded (an unfinished sequence)
  std::string text_;   // decoded text not yet emitted (a possible stop prefix)
  bool stopped_ = false;
  size_t max_stop_len_ = 0;
};

}  // namespace strata

#endif  // STRATA_TEXT_DETOKENIZER_H_
