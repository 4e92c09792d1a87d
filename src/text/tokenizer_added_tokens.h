// Added tokens (tokenizer.json "added_tokens", tiktoken specials): found in the
// text before normalization/pre-tokenization, leftmost-longest, with the
// special/lstrip/rstrip/normalized/single_word flags of the reference.
#ifndef STRATA_TEXT_TOKENIZER_ADDED_TOKENS_H_
#define STRATA_TEXT_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "base/status.h"

namespace strata::text {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// Reads the flags of an added token as tokenizer.json's added_tokens and
// tokenizer_config.json's added_tokens_decoder spell them (special, lstrip,
// rstrip, normalized, single_word) from its JSON object into `t`. An absent
// or null flag keeps the value `t` has; one that is not a boolean is an
// InvalidArgument naming `where`.
Status ReadAddedTokenFlags(const nlohmann::json& j, const std::string& where, AddedToken* t);

class AddedTokens {
 public:
  struct Segment {
    int32_t id;  // -1: plain text
    size_t begin, end;
  };

  // `normalizer` (may be null) normalizes the content of tokens flagged
  // `normalized`, which are matched in normalized text. Ids must be in
  // [0, limits::kMaxTokenId].
  static StatusOr<AddedTokens> Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts `text` into tokens and plain text. `normalized_pass` selects the
  // tokens flagged normalized (matched after normalization) or the others.
  // Without `parse_special`, special tokens are not recognised.
  void Split(std::string_view text, bool normalized_pass, bool parse_special,
             std::vector<Segment>* out) const;

  bool empty() const { return tokens_.empty(); }
  const AddedToken* ById(int32_t id) const;
  std::optional<int32_t> IdOf(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Trie {
    // Edges keyed by (node << 8 | byte); terminal[node] = token index or -1.
    absl::flat_hash_map<uint64_t, int32_t> edges;
    std::vector<int32_t> terminal{-1};
    bool first_byte[256] = {};
    void Add(std::string_view key, int32_t token_index);
    // Longest key starting at text[pos]: (token index, length) or (-1, 0).
    std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_trie_, normalized_trie_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, int32_t> by_content_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_ADDED_TOKENS_H_
