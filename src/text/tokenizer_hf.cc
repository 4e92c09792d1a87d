// tokenizer.json tokenizer (see tokenizer_hf.h).
#include "text/tokenizer_hf.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/input_limits.h"
#include "text/token_id_check.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

using Json = nlohmann::json;

// A token id in the file: an integer in [0, limits::kMaxTokenId].
bool TokenId(const Json& j, int32_t* id) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(limits::kMaxTokenId)) return false;
  } else if (!j.is_number_integer() || j.get<int64_t>() < 0 ||
             j.get<int64_t>() > limits::kMaxTokenId) {
    return false;
  }
  *id = static_cast<int32_t>(j.get<int64_t>());
  return true;
}

Status PostProcessorIds(const Json& j, const std::string& where,
                        const std::function<std::optional<int32_t>(const std::string&)>& id_of,
                        std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (j.is_null()) return OkStatus();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with \"type\""));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return OkStatus();  // only adjusts offsets
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".processors: expected an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      STRATA_RETURN_IF_ERROR(PostProcessorIds((*it)[i], absl::StrCat(where, ".processors[", i, "]"),
                                              id_of, prefix, suffix));
    }
    return OkStatus();
  }
  if (type == "TemplateProcessing") {
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".single: expected an array"));
    }
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& item = (*single)[i];
      const std::string w = absl::StrCat(where, ".single[", i, "]");
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(w, ": expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}"));
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      if (specials == j.end() || !specials->contains(name) || !(*specials)[name].contains("ids") ||
          !(*specials)[name]["ids"].is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".special_tokens: \"", name, "\" (used by ", w, ") is missing or has no ids"));
      }
      for (const Json& id : (*specials)[name]["ids"]) {
        if (!id.is_number_integer()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".special_tokens[\"", name, "\"].ids: expected integers"));
        }
        STRATA_RETURN_IF_ERROR(CheckTokenId(id.get<int64_t>(), where, name));
        (seen_sequence ? suffix : prefix)->push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
    return OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    int32_t ids[2];
    const char* keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; ++k) {
      const char* key = keys[k];
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 ||
          !TokenId(j[key][1], &ids[k])) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": expected [token, id]"));
      }
    }
    prefix->push_back(ids[0]);
    suffix->push_back(ids[1]);
    return OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ".type: post-processor \"", type, "\" is not supported"));
}

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path,
                                                         const TokenizerConfig& config) {
  STRATA_ASSIGN_OR_RETURN(const Json j, ReadBoundedJsonFile<Json>(path));
  return FromJson(j, path, config);
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromText(std::string_view text,
                                                             const std::string& label,
                                                             const TokenizerConfig& config) {
  STRATA_ASSIGN_OR_RETURN(const Json j, ParseBoundedJson<Json>(text, label));
  return FromJson(j, label, config);
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(const Json& j, const std::string& path,
                                                             const TokenizerConfig& config) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected an object"));
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->config_ = config;

  STRATA_ASSIGN_OR_RETURN(t->normalizer_, Normalizer::FromJson(j.value("normalizer", Json()),
                                                               absl::StrCat(path, ": normalizer")));
  const Json pre = j.value("pre_tokenizer", Json());
  if (!pre.is_null()) {
    STRATA_ASSIGN_OR_RETURN(t->pre_tokenizer_,
                            PreTokenizer::FromJson(pre, absl::StrCat(path, ": pre_tokenizer")));
  }
  const bool byte_level = t->pre_tokenizer_ && t->pre_tokenizer_->UsesByteLevel();
  if (!j.contains("model"))
    return absl::InvalidArgumentError(absl::StrCat(path, ": model: missing"));
  STRATA_ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(j["model"], path, byte_level));

  std::vector<AddedToken> added;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": added_tokens: expected an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& a = (*it)[i];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": added_tokens[", i,
                         "]: needs an integer \"id\" >= 0 and a string \"content\""));
      }
      AddedToken tok;
      tok.content = a["content"].get<std::string>();
      STRATA_RETURN_IF_ERROR(CheckTokenId(
          a["id"].get<int64_t>(), absl::StrCat(path, ": added_tokens[", i, "]"), tok.content));
      tok.id = static_cast<int32_t>(a["id"].get<int64_t>());
      STRATA_RETURN_IF_ERROR(
          ReadAddedTokenFlags(a, absl::StrCat(path, ": added_tokens[", i, "]"), &tok));
      // The reference matches non-special tokens in normalized text unless told.
      if (!a.contains("normalized") || a["normalized"].is_null()) tok.normalized = !tok.special;
      added.push_back(std::move(tok));
    }
  }
  STRATA_ASSIGN_OR_RETURN(t->added_, AddedTokens::Build(std::move(added), t->normalizer_.get()));

  int32_t size = t->model_->size();
  for (const AddedToken& a : t->added_.tokens()) size = std::max(size, a.id + 1);
  t->vocab_size_ = size;

  auto id_of = [&](const std::string& s) { return t->TokenToId(s); };
  STRATA_RETURN_IF_ERROR(PostProcessorIds(j.value("post_processor", Json()),
                                          absl::StrCat(path, ": post_processor"), id_of,
                                          &t->prefix_ids_, &t->suffix_ids_));
  // Encode emits these ids as they are, so each must name a token.
  for (const std::vector<int32_t>* ids : {&t->prefix_ids_, &t->suffix_ids_}) {
    for (int32_t id : *ids) {
      if (id >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": post_processor: token id ", id, " is out of the vocabulary"));
      }
    }
  }

  STRATA_ASSIGN_OR_RETURN(
      t->decoder_, Decoder::FromJson(j.value("decoder", Json()), absl::StrCat(path, ": decoder")));

  // The decoder sees what the reference's id_to_token gives: an added
  // token's content first, else the model's vocab spelling.
  t->token_text_.resize(size);
  t->present_.assign(size, false);
  t->special_.assign(size, false);
  for (int32_t id = 0; id < t->model_->size(); ++id) {
    t->token_text_[id] = t->model_->IdToToken(id);
    t->present_[id] = t->model_->TokenToId(t->token_text_[id]) == id;
  }
  absl::flat_hash_set<std::string> special_contents;
  for (const AddedToken& a : t->added_.tokens()) {
    // A token matched in normalized text is decoded in its normalized form
    // (the reference's normalized_cache).
    t->token_text_[a.id] = a.content;
    if (a.normalized && t->normalizer_) {
      STRATA_RETURN_IF_ERROR(t->normalizer_->Normalize(&t->token_text_[a.id]));
    }
    t->present_[a.id] = true;
    if (a.special) special_contents.insert(a.content);
  }
  // skip_special_tokens drops the tokens whose decoded string is a special
  // token's content, as the reference tests it (by string, not by id).
  for (int32_t id = 0; id < size; ++id) {
    t->special_[id] = t->present_[id] && special_contents.contains(t->token_text_[id]);
  }
  t->token_bytes_ = t->token_text_;
  if (t->decoder_) {
    for (std::string& b : t->token_bytes_) t->decoder_->StreamBytes(&b);
    // ByteLevel alone decodes from token_bytes_ directly.
    if (t->decoder_->IsByteLevelOnly()) std::vector<std::string>().swap(t->token_text_);
  }
  if (config.bos_token) {
    t->bos_id_ = t->TokenToId(*config.bos_token);
    if (config.add_bos_token && !t->bos_id_) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bos_token \"", *config.bos_token,
                                                     "\" of tokenizer_config.json is not a token"));
    }
  }
  if (config.eos_token) {
    t->eos_id_ = t->TokenToId(*config.eos_token);
    if (config.add_eos_token && !t->eos_id_) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": eos_token \"", *config.eos_token,
                                                     "\" of tokenizer_config.json is not a token"));
    }
  }
  return t;
}

StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text,
                                                   const EncodeOptions& options) const {
  if (const size_t bad = FirstInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Encode: text is not valid UTF-8 at byte ", bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) {
    if (config_.add_bos_token && bos_id_ &&
        std::find(prefix_ids_.begin(), prefix_ids_.end(), *bos_id_) == prefix_ids_.end()) {
      ids.push_back(*bos_id_);
    }
    ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  }
  std::vector<AddedTokens::Segment> raw_segs, norm_segs;
  added_.Split(text, /*normalized_pass=*/false, options.parse_special, &raw_segs);
  PieceList pieces;
  std::string normalized;
  for (const auto& seg : raw_segs) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    normalized.assign(text.substr(seg.begin, seg.end - seg.begin));
    // Whether the normalized text still begins at offset 0 of the input.
    bool start_kept = seg.begin == 0;
    if (normalizer_) STRATA_RETURN_IF_ERROR(normalizer_->Normalize(&normalized, &start_kept));
    norm_segs.clear();
    added_.Split(normalized, /*normalized_pass=*/true, options.parse_special, &norm_segs);
    for (const auto& ns : norm_segs) {
      if (ns.id >= 0) {
        ids.push_back(ns.id);
        continue;
      }
      pieces.buf.assign(normalized, ns.begin, ns.end - ns.begin);
      pieces.spans.assign(1, {0u, static_cast<uint32_t>(pieces.buf.size())});
      pieces.start_piece = start_kept && ns.begin == 0 ? 0 : -1;
      if (pre_tokenizer_) STRATA_RETURN_IF_ERROR(pre_tokenizer_->Apply(&pieces));
      for (size_t i = 0; i < pieces.spans.size(); ++i) model_->Encode(pieces.Piece(i), &ids);
    }
  }
  if (options.add_special_tokens) {
    ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    if (config_.add_eos_token && eos_id_ &&
        std::find(suffix_ids_.begin(), suffix_ids_.end(), *eos_id_) == suffix_ids_.end()) {
      ids.push_back(*eos_id_);
    }
  }
  return ids;
}

StatusOr<std::string> HfTokenizer::Decode(const std::vector<int32_t>& ids,
                                          const DecodeOptions& options) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Decode: token id ", id, " is outside the vocabulary (size ", vocab_size_, ")"));
    }
  }
  auto kept = [&](int32_t id) {
    return present_[id] && !(options.skip_special_tokens && special_[id]);
  };
  if (decoder_ && decoder_->IsByteLevelOnly()) {
    std::string bytes;
    for (int32_t id : ids) {
      if (kept(id)) bytes += token_bytes_[id];
    }
    return Utf8Lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (kept(id)) tokens.push_back(token_text_[id]);
  }
  std::string out;
  if (!decoder_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  STRATA_RETURN_IF_ERROR(decoder_->DecodeChain(&tokens));
  for (const std::string& t : tokens) out += t;
  return out;
}

StatusOr<std::string> HfTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenBytes: token id ", id, " is outside the vocabulary"));
  }
  return token_bytes_[id];
}

std::optional<int32_t> HfTokenizer::TokenToId(std::string_view token) const {
  if (auto id = added_.IdOf(token)) return id;
  return model_->TokenToId(token);
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_[id];
}

}  // namespace strata::text
