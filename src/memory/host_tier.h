// HostTier: a Tier in host memory, bounded by a byte capacity, evicting the
// least recently used objects (by Put or Get) to make room.
#ifndef STRATA_MEMORY_HOST_TIER_H_
#define STRATA_MEMORY_HOST_TIER_H_

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "memory/tier.h"

namespace strata {

// Thread-safety: every method is thread-safe.
class HostTier final : public Tier {
 public:
  explicit HostTier(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  std::string_view name() const override { return "host"; }
  Status Put(std::string_view key, std::span<const uint8_t> bytes) override;
  Status Get(std::string_view key, std::vector<uint8_t>* out) override;
  bool Contains(std::string_view key) const override;
  void Erase(std::string_view key) override;
  uint64_t bytes() const override;
  uint64_t capacity() const override { return capacity_; }
  int64_t objects() const;

 private:
  struct Object {
    std::string key;
    std::vector<uint8_t> bytes;
  };
  using List = std::list<Object>;  // front: most recently used

  // The object `key` made the most recently used, or lru_.end(); requires mu_.
  List::iterator TouchLocked(std::string_view key);
  void EraseLocked(List::iterator it);  // requires mu_

  const uint64_t capacity_;
  mutable std::mutex mu_;
  List lru_;  // guarded by mu_
  absl::flat_hash_map<std::string_view, List::iterator>
      by_key_;          // keys point into lru_; guarded by mu_
  uint64_t bytes_ = 0;  // guarded by mu_
};

}  // namespace strata

#endif  // STRATA_MEMORY_HOST_TIER_H_
