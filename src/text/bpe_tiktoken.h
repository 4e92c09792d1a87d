// tiktoken rank BPE: a rank file (one "base64-token rank" per line) whose rank
// is also the token id; pieces are merged by the rank of the merged bytes.
#ifndef STRATA_TEXT_BPE_TIKTOKEN_H_
#define STRATA_TEXT_BPE_TIKTOKEN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "base/status.h"
#include "text/bpe_cache.h"

namespace strata::text {

class RankBpeModel {
 public:
  // Errors name the file and line.
  static StatusOr<std::unique_ptr<RankBpeModel>> FromFile(const std::string& path);
  // The same from the file's bytes; `label` stands for the path in errors.
  static StatusOr<std::unique_ptr<RankBpeModel>> FromText(std::string_view data,
                                                          const std::string& label);

  void Encode(std::string_view piece, std::vector<int32_t>* out) const;
  // One past the largest rank.
  int32_t size() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  const std::string& TokenBytes(int32_t id) const { return id_to_bytes_[id]; }
  std::optional<int32_t> BytesToId(std::string_view bytes) const;

 private:
  RankBpeModel() = default;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> ranks_;
  std::vector<std::string> id_to_bytes_;
  int32_t byte_ids_[256];
  BpeCache cache_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_BPE_TIKTOKEN_H_
