// The parts of tokenizer_config.json a tokenizer needs: BOS/EOS and whether to
// add them, and added_tokens_decoder (the specials of tiktoken models).
#ifndef STRATA_TEXT_TOKENIZER_CONFIG_H_
#define STRATA_TEXT_TOKENIZER_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/tokenizer_added_tokens.h"

namespace strata::text {

struct TokenizerConfig {
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::vector<AddedToken> added_tokens_decoder;
};

// A missing file gives the defaults; a malformed one an error naming the file
// and field.
StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path);
// The same from the file's text; `label` stands for the path in errors.
StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text, const std::string& label);

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_CONFIG_H_
