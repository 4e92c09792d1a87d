// tokenizer.json BPE model (see bpe.h).
#include "text/bpe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/input_limits.h"
#include "text/bpe_merge.h"
#include "text/token_id_check.h"
#include "text/unicode.h"

namespace strata::text {
namespace {
using Json = nlohmann::json;
}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& m, const std::string& where,
                                                       bool byte_level) {
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->byte_level_ = byte_level;
  const std::string w = absl::StrCat(where, ": model");
  if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(w, ": expected an object"));
  // Not `m["type"] != "BPE"`: nlohmann's comparison with a literal builds a
  // json from it inside a noexcept operator, where a failed allocation
  // terminates the process.
  if (m.contains("type") &&
      !(m["type"].is_string() && m["type"].get_ref<const std::string&>() == "BPE")) {
    return absl::UnimplementedError(
        absl::StrCat(w, ".type: only BPE models are supported, got ", m["type"].dump()));
  }
  if (m.contains("dropout") && !m["dropout"].is_null()) {
    if (!m["dropout"].is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".dropout: expected a number or null"));
    }
    if (m["dropout"].get<double>() != 0.0) {
      return absl::UnimplementedError(absl::StrCat(w, ".dropout: BPE dropout is not supported"));
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return absl::UnimplementedError(absl::StrCat(w, ".", key, ": not supported"));
    }
  }
  auto bool_field = [&](const char* key) {
    return m.contains(key) && m[key].is_boolean() && m[key].get<bool>();
  };
  bpe->ignore_merges_ = bool_field("ignore_merges");
  bpe->byte_fallback_ = bool_field("byte_fallback");
  bpe->fuse_unk_ = bool_field("fuse_unk");

  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(w, ".vocab: expected an object"));
  }
  bpe->vocab_.reserve(vit->size());
  int32_t max_id = -1;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(w, ".vocab[\"", it.key(), "\"]: expected a non-negative integer id"));
    }
    // Unsigned values past int64 read as negative here, so they are refused too.
    const int64_t id64 = it.value().get<int64_t>();
    STRATA_RETURN_IF_ERROR(CheckTokenId(id64, absl::StrCat(w, ".vocab"), it.key()));
    const auto id = static_cast<int32_t>(id64);
    // The key is built before the insertion: a hash table must not
    // allocate inside it (abseil-cpp issue 1524: a failed allocation there
    // leaves a slot marked full that holds nothing).
    std::string key = it.key();
    bpe->vocab_.insert_or_assign(std::move(key), id);
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.resize(max_id + 1);
  for (const auto& [tok, id] : bpe->vocab_) bpe->id_to_token_[id] = tok;

  auto mit = m.find("merges");
  if (mit == m.end() || !mit->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(w, ".merges: expected an array"));
  }
  bpe->merges_.reserve(mit->size());
  std::string a, b;
  for (size_t i = 0; i < mit->size(); ++i) {
    const Json& e = (*mit)[i];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            w, ".merges[", i, "]: expected \"left right\" (one space), got \"", s, "\""));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          w, ".merges[", i, "]: expected a \"left right\" string or a [left, right] pair"));
    }
    auto ia = bpe->vocab_.find(a), ib = bpe->vocab_.find(b), iab = bpe->vocab_.find(a + b);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end() || iab == bpe->vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".merges[", i, "]: token \"",
                                                     ia == bpe->vocab_.end()   ? a
                                                     : ib == bpe->vocab_.end() ? b
                                                                               : a + b,
                                                     "\" is not in the vocab"));
    }
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    // The first (lowest-rank) occurrence of a pair wins, as in the reference.
    bpe->merges_.try_emplace(key, static_cast<int32_t>(i), iab->second);
  }

  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = bpe->vocab_.find(m["unk_token"].get<std::string>());
    if (it == bpe->vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          w, ".unk_token: \"", m["unk_token"].get<std::string>(), "\" is not in the vocab"));
    }
    bpe->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bpe->vocab_.find(absl::StrFormat("<0x%02X>", b));
    bpe->byte_fallback_ids_[b] = it != bpe->vocab_.end() ? it->second : -1;
    bpe->byte_ids_[b] = -1;
    if (byte_level) {
      std::string ch;
      AppendUtf8(ByteToByteLevelChar(static_cast<uint8_t>(b)), &ch);
      auto it = bpe->vocab_.find(ch);
      if (it != bpe->vocab_.end()) bpe->byte_ids_[b] = it->second;
    }
  }
  if (byte_level && bpe->ignore_merges_) {
    std::string raw;
    bpe->raw_vocab_.reserve(bpe->vocab_.size());
    for (const auto& [tok, id] : bpe->vocab_) {
      if (!ByteLevelToBytes(tok, &raw)) continue;
      std::string key = raw;  // built outside the table, as the vocab's keys
      bpe->raw_vocab_.insert_or_assign(std::move(key), id);
    }
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() > BpeCache::kMaxKeyBytes) {
    EncodeUncached(piece, out);
    return;
  }
  if (cache_.Lookup(piece, out)) return;
  const size_t before = out->size();
  EncodeUncached(piece, out);
  cache_.Insert(piece, out->data() + before, out->size() - before);
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (byte_level_) {
      auto it = raw_vocab_.find(AsAbsl(piece));
      if (it != raw_vocab_.end()) {
        out->push_back(it->second);
        return;
      }
    } else if (auto it = vocab_.find(AsAbsl(piece)); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<BpeSymbol> syms;
  syms.reserve(piece.size());
  // The reference's merge_word: each character is its vocab token, else (with
  // byte_fallback) the <0xNN> tokens of its bytes, else unk. A pending unk is
  // added only before the next vocab token or at the end (so byte tokens can
  // come before it), and fuse_unk extends it over consecutive unknowns.
  std::optional<BpeSymbol> unk;
  auto add_char = [&](std::string_view ch, int32_t id, uint32_t begin, uint32_t end) {
    if (id >= 0) {
      if (unk) {
        syms.push_back(*unk);
        unk.reset();
      }
      syms.push_back({id, begin, end});
      return;
    }
    if (byte_fallback_) {
      const size_t before = syms.size();
      bool all = true;
      for (size_t k = 0; k < ch.size(); ++k) {
        const int32_t b = byte_fallback_ids_[static_cast<uint8_t>(ch[k])];
        if (b < 0) {
          all = false;
          break;
        }
        syms.push_back({b, begin, end});
      }
      if (all) return;
      syms.resize(before);
    }
    if (!unk_id_) return;  // dropped, as the reference does without unk
    if (unk && fuse_unk_) {
      unk->end = end;
      return;
    }
    if (unk) syms.push_back(*unk);
    unk = BpeSymbol{*unk_id_, begin, end};
  };
  if (byte_level_) {
    std::string ch;
    for (size_t i = 0; i < piece.size(); ++i) {
      const auto byte = static_cast<uint8_t>(piece[i]);
      const int32_t id = byte_ids_[byte];
      if (id < 0 && byte_fallback_) {
        ch.clear();
        AppendUtf8(ByteToByteLevelChar(byte), &ch);
      }
      add_char(ch, id, static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1));
    }
  } else {
    size_t i = 0;
    char32_t cp;
    while (i < piece.size()) {
      size_t len = DecodeUtf8(piece, i, &cp);
      if (len == 0) len = 1;
      const std::string_view ch = piece.substr(i, len);
      auto it = vocab_.find(AsAbsl(ch));
      add_char(ch, it != vocab_.end() ? it->second : -1, static_cast<uint32_t>(i),
               static_cast<uint32_t>(i + len));
      i += len;
    }
  }
  if (unk) syms.push_back(*unk);
  MergeSymbols(&syms, [this](const BpeSymbol& l, const BpeSymbol& r) -> PairMerge {
    auto it = merges_.find((static_cast<uint64_t>(l.id) << 32) | static_cast<uint32_t>(r.id));
    if (it == merges_.end()) return {};
    return {it->second.first, it->second.second};
  });
  for (const BpeSymbol& s : syms) out->push_back(s.id);
}

}  // namespace strata::text
