// DiskTier: a Tier in a local directory, bounded by a byte capacity: one
// file per object, `<key>.kv`, published whole (a temporary file renamed
// into place), evicting the least recently used objects to make room.
//
// Several processes may share a directory: keys are content addresses, so
// two writers of one key write the same bytes and either rename wins; an
// object another process wrote is found by its name. Each process keeps its
// own index of what it has seen (made from the directory at Open) and
// enforces the capacity on it, so a shared directory holds at most about
// the largest capacity among its users plus what the others added since.
//
// Durability: objects are not fsynced (base/write_file.h): a crash may
// leave an empty or partial object, which fails its checks when read and
// is then erased, a miss. Thread-safety: every method is thread-safe.
#ifndef STRATA_MEMORY_DISK_TIER_H_
#define STRATA_MEMORY_DISK_TIER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "memory/tier.h"

namespace strata {

class DiskTier final : public Tier {
 public:
  // Creates `dir` when missing. InvalidArgument for a capacity of 0;
  // the file system's error (naming the directory) when it cannot be made.
  static StatusOr<std::unique_ptr<DiskTier>> Open(const std::string& dir, uint64_t capacity_bytes);

  std::string_view name() const override { return "disk"; }
  Status Put(std::string_view key, std::span<const uint8_t> bytes) override;
  Status Get(std::string_view key, std::vector<uint8_t>* out) override;
  bool Contains(std::string_view key) const override;
  void Erase(std::string_view key) override;
  uint64_t bytes() const override;
  uint64_t capacity() const override { return capacity_; }
  const std::string& dir() const { return dir_; }

 private:
  DiskTier(std::string dir, uint64_t capacity) : dir_(std::move(dir)), capacity_(capacity) {}
  std::string PathOf(std::string_view key) const;
  struct Entry {
    std::string key;
    uint64_t bytes = 0;
  };
  using List = std::list<Entry>;  // front: most recently used
  void TouchLocked(std::string_view key, uint64_t bytes);  // requires mu_
  void EraseLocked(std::string_view key);                  // requires mu_

  const std::string dir_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  List lru_;                                              // guarded by mu_
  absl::flat_hash_map<std::string, List::iterator> by_key_;  // guarded by mu_
  uint64_t bytes_ = 0;                                    // guarded by mu_
};

}  // namespace strata

#endif  // STRATA_MEMORY_DISK_TIER_H_
