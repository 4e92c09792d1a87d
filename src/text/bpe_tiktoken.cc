// tiktoken rank BPE (see bpe_tiktoken.h).
#include "text/bpe_tiktoken.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/read_file.h"
#include "text/bpe_merge.h"
#include "text/token_id_check.h"
#include "text/unicode.h"

namespace strata::text {

StatusOr<std::unique_ptr<RankBpeModel>> RankBpeModel::FromFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string data, ReadFileToString(path));
  return FromText(data, path);
}

StatusOr<std::unique_ptr<RankBpeModel>> RankBpeModel::FromText(std::string_view data,
                                                               const std::string& path) {
  std::unique_ptr<RankBpeModel> m(new RankBpeModel());
  m->ranks_.reserve(data.size() / 12);
  // A rank is a token id: two tokens with one rank would decode as one of
  // them (tiktoken refuses such a file too).
  absl::flat_hash_set<int32_t> used_ranks;
  used_ranks.reserve(data.size() / 12);
  size_t pos = 0;
  int line_no = 0;
  int32_t max_rank = -1;
  std::string bytes;
  while (pos < data.size()) {
    size_t eol = data.find('\n', pos);
    if (eol == std::string::npos) eol = data.size();
    std::string_view line(data.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    int32_t rank;
    if (sp == std::string_view::npos || !absl::SimpleAtoi(AsAbsl(line.substr(sp + 1)), &rank) ||
        rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": expected \"<base64 token> <rank>\""));
    }
    // The rank is the token id, and ids index a table as long as the largest.
    STRATA_RETURN_IF_ERROR(
        CheckTokenId(rank, absl::StrCat(path, ":", line_no), line.substr(0, sp)));
    if (!absl::Base64Unescape(AsAbsl(line.substr(0, sp)), &bytes) || bytes.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": bad base64 token \"",
                                                     AsAbsl(line.substr(0, sp)), "\""));
    }
    if (!m->ranks_.try_emplace(bytes, rank).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": duplicate token"));
    }
    if (!used_ranks.insert(rank).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": rank ", rank, " is already another token's"));
    }
    max_rank = std::max(max_rank, rank);
  }
  if (m->ranks_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no tokens in the rank file"));
  }
  m->id_to_bytes_.resize(max_rank + 1);
  for (const auto& [b, r] : m->ranks_) m->id_to_bytes_[r] = b;
  for (int b = 0; b < 256; ++b) {
    auto it = m->ranks_.find(std::string(1, static_cast<char>(b)));
    if (it == m->ranks_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the single byte 0x", absl::Hex(b), " has no rank"));
    }
    m->byte_ids_[b] = it->second;
  }
  return m;
}

std::optional<int32_t> RankBpeModel::BytesToId(std::string_view bytes) const {
  auto it = ranks_.find(AsAbsl(bytes));
  if (it == ranks_.end()) return std::nullopt;
  return it->second;
}

void RankBpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  // A piece that is itself a token is that token (tiktoken's shortcut).
  if (auto it = ranks_.find(AsAbsl(piece)); it != ranks_.end()) {
    out->push_back(it->second);
    return;
  }
  if (piece.size() > BpeCache::kMaxKeyBytes) {
    EncodeUncached(piece, out);
    return;
  }
  if (cache_.Lookup(piece, out)) return;
  const size_t before = out->size();
  EncodeUncached(piece, out);
  cache_.Insert(piece, out->data() + before, out->size() - before);
}

void RankBpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  std::vector<BpeSymbol> syms(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    syms[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], static_cast<uint32_t>(i),
               static_cast<uint32_t>(i + 1)};
  }
  MergeSymbols(&syms, [&](const BpeSymbol& l, const BpeSymbol& r) -> PairMerge {
    auto it = ranks_.find(AsAbsl(piece.substr(l.begin, r.end - l.begin)));
    if (it == ranks_.end()) return {};
    return {it->second, it->second};
  });
  for (const BpeSymbol& s : syms) out->push_back(s.id);
}

}  // namespace strata::text
