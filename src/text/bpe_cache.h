// A bounded, thread-safe cache from a piece's bytes to its token ids: real
// text repeats the same words, and a lookup is far cheaper than the merges.
#ifndef STRATA_TEXT_BPE_CACHE_H_
#define STRATA_TEXT_BPE_CACHE_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace strata::text {

class BpeCache {
 public:
  // Only short pieces are cached (long ones rarely repeat).
  static constexpr size_t kMaxKeyBytes = 64;

  bool Lookup(std::string_view key, std::vector<int32_t>* out) const {
    Shard& sh = shards_[ShardOf(key)];
    std::lock_guard<std::mutex> lock(sh.mu);
    auto it = sh.map.find(absl::string_view(key.data(), key.size()));
    if (it == sh.map.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }
  void Insert(std::string_view key, const int32_t* ids, size_t n) const {
    Shard& sh = shards_[ShardOf(key)];
    std::lock_guard<std::mutex> lock(sh.mu);
    // When a shard is full it starts over: simple, and keeps memory bounded.
    if (sh.map.size() >= kShardCapacity) sh.map.clear();
    sh.map.try_emplace(std::string(key), ids, ids + n);
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 8192;
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  static size_t ShardOf(std::string_view key) {
    return absl::HashOf(absl::string_view(key.data(), key.size())) % kShards;
  }
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_BPE_CACHE_H_
