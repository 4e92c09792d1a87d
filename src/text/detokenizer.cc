// Streaming detokenizer (see detokenizer.h).
#include "text/detokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "text/unicode.h"

namespace strata {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  // Empty stop strings would match everywhere; they are ignored.
  for (const std::string& s : options_.stop_strings)
    max_stop_len_ = std::max(max_stop_len_, s.size());
}

StatusOr<DetokenizerOutput> StreamingDetokenizer::Push(int32_t id) {
  if (stopped_) {
    return absl::FailedPreconditionError("StreamingDetokenizer: already stopped at a stop string");
  }
  if (!(options_.skip_special_tokens && tokenizer_.IsSpecial(id))) {
    STRATA_ASSIGN_OR_RETURN(std::string b, tokenizer_.TokenBytes(id));
    bytes_ += b;
  }
  return Drain(/*final=*/false);
}

DetokenizerOutput StreamingDetokenizer::Finish() {
  if (stopped_) return {};
  return Drain(/*final=*/true);
}

DetokenizerOutput StreamingDetokenizer::Drain(bool final) {
  DetokenizerOutput out;
  // A lead byte at the cut can never extend an invalid subpart before it, so
  // decoding the complete prefix alone gives the same text as decoding all.
  const size_t complete = final ? bytes_.size() : text::CompleteUtf8PrefixLength(bytes_);
  if (complete > 0) {
    text_ += text::Utf8Lossy(std::string_view(bytes_).substr(0, complete));
    bytes_.erase(0, complete);
  }
  // The earliest stop string occurrence (ties: the first listed).
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < options_.stop_strings.size(); ++i) {
    const std::string& s = options_.stop_strings[i];
    if (s.empty()) continue;
    const size_t p = text_.find(s);
    if (p != std::string::npos && (best_pos == std::string::npos || p < best_pos)) {
      best_pos = p;
      out.stop_index = i;
    }
  }
  if (best_pos != std::string::npos) {
    out.text = text_.substr(0, best_pos);
    out.stopped = stopped_ = true;
    text_.clear();
    bytes_.clear();
    return out;
  }
  size_t keep = 0;
  if (!final) {
    // Hold back the longest suffix that is a proper prefix of a stop string.
    const size_t max_keep = std::min(text_.size(), max_stop_len_ ? max_stop_len_ - 1 : 0);
    for (size_t k = max_keep; k > 0 && keep == 0; --k) {
      const std::string_view tail = std::string_view(text_).substr(text_.size() - k);
      for (const std::string& s : options_.stop_strings) {
        if (s.size() > k && std::string_view(s).substr(0, k) == tail) {
          keep = k;
          break;
        }
      }
    }
  }
  out.text = text_.substr(0, text_.size() - keep);
  text_.erase(0, text_.size() - keep);
  return out;
}

}  // namespace strata
