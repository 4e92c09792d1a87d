// tiktoken tokenizer (see tokenizer_tiktoken.h).
#include "text/tokenizer_tiktoken.h"

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "text/token_id_check.h"
#include "text/unicode.h"

namespace strata::text {

const char kKimiPattern[] =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

StatusOr<std::vector<AddedToken>> KimiSpecialTokens(const TokenizerConfig& config,
                                                    int32_t num_ranked,
                                                    const std::string& config_label,
                                                    const std::string& rank_label) {
  std::vector<AddedToken> specials;
  std::vector<bool> named(256, false);
  for (const AddedToken& a : config.added_tokens_decoder) {
    if (a.id < num_ranked) {
      return absl::InvalidArgumentError(absl::StrCat(config_label, ": added_tokens_decoder[\"",
                                                     a.id, "\"]: id is a ranked token of ",
                                                     rank_label));
    }
    specials.push_back(a);
    specials.back().special = true;
    if (a.id - num_ranked < 256) named[a.id - num_ranked] = true;
  }
  for (int32_t i = 0; i < 256; ++i) {
    if (named[i]) continue;
    AddedToken t;
    t.id = num_ranked + i;
    t.content = absl::StrCat("<|reserved_token_", num_ranked + i, "|>");
    t.special = true;
    specials.push_back(std::move(t));
  }
  return specials;
}

StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Load(
    const std::string& path, const std::string& pattern, std::vector<AddedToken> specials,
    const TokenizerConfig& config) {
  STRATA_ASSIGN_OR_RETURN(auto model, RankBpeModel::FromFile(path));
  return Load(std::move(model), path, pattern, std::move(specials), config);
}

StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Load(
    std::unique_ptr<RankBpeModel> model, const std::string& path, const std::string& pattern,
    std::vector<AddedToken> specials, const TokenizerConfig& config) {
  std::unique_ptr<TiktokenTokenizer> t(new TiktokenTokenizer());
  t->config_ = config;
  t->model_ = std::move(model);
  auto re = Regex::Compile(pattern);
  if (!re.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": pre-tokenization pattern: ", re.status().message()));
  }
  t->regex_ = std::move(re).value();
  int32_t size = t->model_->size();
  for (AddedToken& s : specials) {
    STRATA_RETURN_IF_ERROR(CheckTokenId(s.id, path, s.content));
    if (s.id < t->model_->size() && !t->model_->TokenBytes(s.id).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": special token \"", s.content,
                                                     "\" has id ", s.id,
                                                     ", which a ranked token already uses"));
    }
    s.normalized = false;
    size = std::max(size, s.id + 1);
  }
  STRATA_ASSIGN_OR_RETURN(t->specials_, AddedTokens::Build(std::move(specials), nullptr));
  t->vocab_size_ = size;
  if (config.bos_token) t->bos_id_ = t->TokenToId(*config.bos_token);
  if (config.eos_token) t->eos_id_ = t->TokenToId(*config.eos_token);
  if (config.add_bos_token && !t->bos_id_) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": add_bos_token is set but bos_token is not a token"));
  }
  if (config.add_eos_token && !t->eos_id_) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": add_eos_token is set but eos_token is not a token"));
  }
  return t;
}

StatusOr<std::vector<int32_t>> TiktokenTokenizer::Encode(std::string_view text,
                                                         const EncodeOptions& options) const {
  if (const size_t bad = FirstInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Encode: text is not valid UTF-8 at byte ", bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_special_tokens && config_.add_bos_token && bos_id_) ids.push_back(*bos_id_);
  std::vector<AddedTokens::Segment> segs;
  specials_.Split(text, /*normalized_pass=*/false, options.parse_special, &segs);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const auto& seg : segs) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view sub = text.substr(seg.begin, seg.end - seg.begin);
    matches.clear();
    STRATA_RETURN_IF_ERROR(regex_->FindAll(sub, &matches));
    // Text the pattern does not match is dropped, as tiktoken does.
    for (const auto& [b, e] : matches) model_->Encode(sub.substr(b, e - b), &ids);
  }
  if (options.add_special_tokens && config_.add_eos_token && eos_id_) ids.push_back(*eos_id_);
  return ids;
}

StatusOr<std::string> TiktokenTokenizer::Decode(const std::vector<int32_t>& ids,
                                                const DecodeOptions& options) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Decode: token id ", id, " is outside the vocabulary (size ", vocab_size_, ")"));
    }
    if (const AddedToken* s = specials_.ById(id)) {
      if (!options.skip_special_tokens) bytes += s->content;
      continue;
    }
    if (id < model_->size()) bytes += model_->TokenBytes(id);
  }
  return Utf8Lossy(bytes);
}

StatusOr<std::string> TiktokenTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenBytes: token id ", id, " is outside the vocabulary"));
  }
  if (const AddedToken* s = specials_.ById(id)) return s->content;
  return id < model_->size() ? model_->TokenBytes(id) : std::string();
}

std::optional<int32_t> TiktokenTokenizer::TokenToId(std::string_view token) const {
  if (auto id = specials_.IdOf(token)) return id;
  return model_->BytesToId(token);
}

bool TiktokenTokenizer::IsSpecial(int32_t id) const {
  const AddedToken* s = specials_.ById(id);
  return s != nullptr && s->special;
}

}  // namespace strata::text
