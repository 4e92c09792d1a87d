// Model::Forward argument checks.
#include "model/forward_checks.h"

#include "absl/strings/str_cat.h"

namespace strata {

Status CheckForwardTokens(std::span<const int32_t> tokens, int64_t vocab, int64_t past,
                          int64_t capacity) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("Forward: no tokens");
  for (int64_t i = 0; i < T; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: token id ", id, " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab,
                                                     ")"));
    }
  }
  if (past + T > capacity) {
    return absl::OutOfRangeError(absl::StrCat("Forward: ", T, " tokens on top of ", past,
                                              " exceed the state's capacity of ", capacity));
  }
  return OkStatus();
}

}  // namespace strata
