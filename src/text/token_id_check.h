// Token ids read from tokenizer files (tokenizer.json's vocab and
// added_tokens, its post-processor, tokenizer_config.json's
// added_tokens_decoder, tiktoken ranks). The tokenizers keep dense tables
// indexed by id and sized from the largest one, so an id is also an
// allocation: ids must lie in [0, limits::kMaxVocabSize), which also keeps
// `id + 1` within int32.
#ifndef STRATA_TEXT_TOKEN_ID_CHECK_H_
#define STRATA_TEXT_TOKEN_ID_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status.h"

namespace strata::text {

// InvalidArgument "<where>: token "<token>": id <id> is outside [0, 16777216)
// (the largest supported vocabulary)" unless the id is in range.
inline Status CheckTokenId(int64_t id, std::string_view where, std::string_view token) {
  if (id >= 0 && id < limits::kMaxVocabSize) return OkStatus();
  // absl::string_view need not be std::string_view here, hence the copies.
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(where), ": token \"", std::string(token), "\": id ", id, " is outside [0, ",
      limits::kMaxVocabSize, ") (the largest supported vocabulary)"));
}

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKEN_ID_CHECK_H_
