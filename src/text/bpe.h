// The BPE model of tokenizer.json: vocab, ranked merges (either encoding),
// ignore_merges, byte_fallback, unk. In byte-level mode a piece's bytes map
// straight to the byte-level alphabet's token ids, skipping the string
// transcoding the reference does.
#ifndef STRATA_TEXT_BPE_H_
#define STRATA_TEXT_BPE_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/status.h"
#include "text/bpe_cache.h"

namespace strata::text {

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; `where` names the file for
  // errors. `byte_level`: the pre-tokenizer maps bytes to the alphabet.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                      const std::string& where, bool byte_level);

  // Appends the ids of one pre-tokenized piece (raw bytes, valid UTF-8).
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The token string as the vocab spells it ("" for an id without a token).
  const std::string& IdToToken(int32_t id) const { return id_to_token_[id]; }
  std::optional<int32_t> TokenToId(std::string_view token) const;

 private:
  BpeModel() = default;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const;

  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  // (left id << 32 | right id) -> rank and merged id.
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t byte_ids_[256];  // byte-level mode: the token of each byte's character (-1: none)
  int32_t byte_fallback_ids_[256];  // the <0xNN> token of each byte (-1: none)
  // ignore_merges in byte-level mode: raw bytes of each vocab token -> id.
  absl::flat_hash_map<std::string, int32_t> raw_vocab_;
  BpeCache cache_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_BPE_H_
