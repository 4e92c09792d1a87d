// Tokenizer for tiktoken rank files (OpenAI encodings, Kimi's tiktoken.model):
// special tokens, then the pattern's matches, each encoded by rank BPE.
#ifndef STRATA_TEXT_TOKENIZER_TIKTOKEN_H_
#define STRATA_TEXT_TOKENIZER_TIKTOKEN_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/bpe_tiktoken.h"
#include "text/pretokenizer_regex.h"
#include "text/tokenizer.h"
#include "text/tokenizer_added_tokens.h"
#include "text/tokenizer_config.h"

namespace strata::text {

// Kimi's pre-tokenization pattern (tokenization_kimi.py), with its class
// intersections `[...&&[^\p{Han}]]` spelled as a lookahead for PCRE2.
extern const char kKimiPattern[];

// The special tokens of Kimi's layout: 256 reserved ids after the `num_ranked`
// ranked ones, each named by the config's added_tokens_decoder or else
// <|reserved_token_N|>. Errors name `config_label` for an id that is a ranked
// token of `rank_label`.
StatusOr<std::vector<AddedToken>> KimiSpecialTokens(const TokenizerConfig& config,
                                                    int32_t num_ranked,
                                                    const std::string& config_label,
                                                    const std::string& rank_label);

class TiktokenTokenizer : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<TiktokenTokenizer>> Load(const std::string& path,
                                                           const std::string& pattern,
                                                           std::vector<AddedToken> specials,
                                                           const TokenizerConfig& config);
  // The same with the rank file already loaded (`path` names it in errors).
  static StatusOr<std::unique_ptr<TiktokenTokenizer>> Load(std::unique_ptr<RankBpeModel> model,
                                                           const std::string& path,
                                                           const std::string& pattern,
                                                           std::vector<AddedToken> specials,
                                                           const TokenizerConfig& config);

  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options) const override;
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                               const DecodeOptions& options) const override;
  StatusOr<std::string> TokenBytes(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override;
  std::optional<std::string> bos_token() const override { return config_.bos_token; }
  std::optional<std::string> eos_token() const override { return config_.eos_token; }

 private:
  TiktokenTokenizer() = default;

  TokenizerConfig config_;
  std::unique_ptr<RankBpeModel> model_;
  std::unique_ptr<Regex> regex_;
  AddedTokens specials_;
  std::optional<int32_t> bos_id_, eos_id_;
  int32_t vocab_size_ = 0;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_TIKTOKEN_H_
