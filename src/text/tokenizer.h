// Tokenizers loaded from a model directory: Hugging Face tokenizer.json (BPE,
// byte-level) and tiktoken rank files (Kimi's tiktoken.model format). Exact:
// ids equal those of the Hugging Face `tokenizers` library.
#ifndef STRATA_TEXT_TOKENIZER_H_
#define STRATA_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

struct EncodeOptions {
  // Add BOS/EOS (and the post-processor's template) as tokenizer_config.json /
  // tokenizer.json ask. `strata tokenize` without --no-special sets this.
  bool add_special_tokens = true;
  // Recognise added/special token literals in the text (always true in HF).
  bool parse_special = true;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

// Thread-safety: immutable after load; Encode/Decode are thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads <dir>/tokenizer.json (+ tokenizer_config.json when present), or a
  // tiktoken file (<dir>/tiktoken.model or *.tiktoken) with its config. Errors
  // name the file and the field or line at fault.
  static StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  static StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJson(const std::string& path);
  // A tiktoken rank file with an explicit pre-tokenisation regex and specials.
  static StatusOr<std::unique_ptr<Tokenizer>> FromTiktoken(
      const std::string& path, const std::string& pattern,
      const std::vector<std::pair<std::string, int32_t>>& special_tokens);

  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                const EncodeOptions& options = {}) const = 0;
  // Bytes of the decoded text (UTF-8 where the ids form valid sequences; the
  // same replacement rules as the reference for invalid bytes).
  virtual StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                       const DecodeOptions& options = {}) const = 0;
  // Raw bytes of one token (no decoder post-processing), for streaming.
  virtual StatusOr<std::string> TokenBytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;  // including added tokens
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  virtual std::optional<std::string> bos_token() const = 0;  // as tokenizer_config.json says
  virtual std::optional<std::string> eos_token() const = 0;
};

}  // namespace strata

#endif  // STRATA_TEXT_TOKENIZER_H_
