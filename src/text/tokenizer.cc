// Tokenizer factories: pick the file format found in a model directory.
#include "text/tokenizer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "text/tokenizer_config.h"
#include "text/tokenizer_hf.h"
#include "text/tokenizer_tiktoken.h"

namespace strata {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTokenizerJson(const std::string& path) {
  const std::string config_path = (fs::path(path).parent_path() / "tokenizer_config.json").string();
  STRATA_ASSIGN_OR_RETURN(text::TokenizerConfig config, text::ReadTokenizerConfig(config_path));
  STRATA_ASSIGN_OR_RETURN(auto t, text::HfTokenizer::Load(path, config));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTiktoken(
    const std::string& path, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& special_tokens) {
  std::vector<text::AddedToken> specials;
  for (const auto& [content, id] : special_tokens) {
    text::AddedToken t;
    t.content = content;
    t.id = id;
    t.special = true;
    specials.push_back(std::move(t));
  }
  STRATA_ASSIGN_OR_RETURN(auto t, text::TiktokenTokenizer::Load(path, pattern, std::move(specials),
                                                                text::TokenizerConfig()));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json", ec))
    return FromTokenizerJson((d / "tokenizer.json").string());
  fs::path rank_file;
  if (fs::exists(d / "tiktoken.model", ec)) {
    rank_file = d / "tiktoken.model";
  } else {
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".tiktoken") {
        rank_file = e.path();
        break;
      }
    }
  }
  if (rank_file.empty()) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no tokenizer.json, tiktoken.model or *.tiktoken file in the directory"));
  }
  const std::string config_path = (d / "tokenizer_config.json").string();
  STRATA_ASSIGN_OR_RETURN(text::TokenizerConfig config, text::ReadTokenizerConfig(config_path));
  STRATA_ASSIGN_OR_RETURN(auto ranks, text::RankBpeModel::FromFile(rank_file.string()));
  STRATA_ASSIGN_OR_RETURN(
      std::vector<text::AddedToken> specials,
      text::KimiSpecialTokens(config, ranks->size(), config_path, rank_file.string()));
  STRATA_ASSIGN_OR_RETURN(
      auto t, text::TiktokenTokenizer::Load(std::move(ranks), rank_file.string(),
                                            text::kKimiPattern, std::move(specials), config));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace strata
