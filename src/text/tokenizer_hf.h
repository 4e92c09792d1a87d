// Tokenizer for Hugging Face tokenizer.json files (BPE model): added tokens ->
// normalizer -> pre-tokenizer -> BPE -> post-processor, plus BOS/EOS from
// tokenizer_config.json; decoding through the file's decoder.
#ifndef STRATA_TEXT_TOKENIZER_HF_H_
#define STRATA_TEXT_TOKENIZER_HF_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_added_tokens.h"
#include "text/tokenizer_config.h"

namespace strata::text {

class HfTokenizer : public Tokenizer {
 public:
  // `config` comes from tokenizer_config.json next to the file (defaults when absent).
  static StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path,
                                                     const TokenizerConfig& config);
  // The same from the file's text; `label` stands for the path in errors.
  static StatusOr<std::unique_ptr<HfTokenizer>> FromText(std::string_view text,
                                                         const std::string& label,
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
  HfTokenizer() = default;
  static StatusOr<std::unique_ptr<HfTokenizer>> FromJson(const nlohmann::json& j,
                                                         const std::string& path,
                                                         const TokenizerConfig& config);

  TokenizerConfig config_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  AddedTokens added_;
  // Post-processor template around a single sequence.
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::optional<int32_t> bos_id_, eos_id_;
  std::unique_ptr<Decoder> decoder_;  // null: tokens are joined with spaces
  // Per id: the string the decoder receives (an added token's content,
  // normalized if the token is matched in normalized text, else the vocab's
  // spelling), whether the id has a token at all, the bytes the decoder turns
  // the token into on its own (Decoder::StreamBytes), and whether
  // skip_special_tokens drops it (its string is a special token's content).
  std::vector<std::string> token_text_;
  std::vector<bool> present_;
  std::vector<std::string> token_bytes_;
  std::vector<bool> special_;
  int32_t vocab_size_ = 0;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_TOKENIZER_HF_H_
