// tokenizer_config.json reading (see tokenizer_config.h).
#include "text/tokenizer_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/input_limits.h"
#include "text/token_id_check.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

// A token field is a string, an {"content": ...} AddedToken object, or null.
StatusOr<std::optional<std::string>> TokenField(const Json& j, const char* key,
                                                const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, ": expected a string, an object with \"content\", or null"));
}

StatusOr<bool> BoolField(const Json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected true or false"));
  }
  return it->get<bool>();
}

StatusOr<TokenizerConfig> FromJson(const Json& j, const std::string& path) {
  TokenizerConfig cfg;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected an object"));
  STRATA_ASSIGN_OR_RETURN(cfg.add_bos_token, BoolField(j, "add_bos_token", path));
  STRATA_ASSIGN_OR_RETURN(cfg.add_eos_token, BoolField(j, "add_eos_token", path));
  STRATA_ASSIGN_OR_RETURN(cfg.bos_token, TokenField(j, "bos_token", path));
  STRATA_ASSIGN_OR_RETURN(cfg.eos_token, TokenField(j, "eos_token", path));
  if (auto it = j.find("added_tokens_decoder"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": added_tokens_decoder: expected an object of id -> token"));
    }
    for (auto e = it->begin(); e != it->end(); ++e) {
      AddedToken t;
      if (!absl::SimpleAtoi(e.key(), &t.id) || t.id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": added_tokens_decoder: key \"", e.key(), "\" is not a token id"));
      }
      const Json& v = e.value();
      const std::string where = absl::StrCat(path, ": added_tokens_decoder[\"", e.key(), "\"]");
      if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".content: expected a string"));
      }
      t.content = v["content"].get<std::string>();
      STRATA_RETURN_IF_ERROR(
          CheckTokenId(t.id, absl::StrCat(path, ": added_tokens_decoder"), t.content));
      STRATA_RETURN_IF_ERROR(ReadAddedTokenFlags(v, where, &t));
      cfg.added_tokens_decoder.push_back(std::move(t));
    }
  }
  return cfg;
}

}  // namespace

StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return TokenizerConfig();
  STRATA_ASSIGN_OR_RETURN(const Json j, ReadBoundedJsonFile<Json>(path));
  return FromJson(j, path);
}

StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text, const std::string& label) {
  STRATA_ASSIGN_OR_RETURN(const Json j, ParseBoundedJson<Json>(text, label));
  return FromJson(j, label);
}

}  // namespace strata::text
