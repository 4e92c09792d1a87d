// PrefixStore: prefix-cache entries kept in a storage tier below the
// executor's memory (a disk directory; the remote store next), as state
// objects (memory/state_object.h) filed by their content address
// (memory/prefix_key.h), so another engine on the same tier, in this
// process or another, restores them exactly.
//
// Thread-safety: every method is thread-safe; Publish and Fetch do I/O and
// run off the scheduler thread (the engine's I/O worker).
#ifndef STRATA_MEMORY_PREFIX_STORE_H_
#define STRATA_MEMORY_PREFIX_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "memory/prefix_cache.h"
#include "memory/tier.h"
#include "model/model.h"

namespace strata {

// A tier's counters since the store was made.
struct TierStats {
  int64_t hits = 0;               // fetches that found an object
  int64_t hit_tokens = 0;         // tokens those objects covered
  int64_t misses = 0;             // fetches that found none
  int64_t rejected_objects = 0;   // objects that failed their checks (erased)
  int64_t errors = 0;             // I/O or model errors (the object kept)
  int64_t objects_written = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_held = 0;        // the tier's own count
};

class PrefixStore {
 public:
  explicit PrefixStore(std::unique_ptr<Tier> tier) : tier_(std::move(tier)) {}

  // Whether `model`'s states can be stored (Model::SavedStateLayout).
  static bool Stores(const Model& model) { return !model.SavedStateLayout().empty(); }

  // Stores the entry `snap` (of snap.model) unless an object of its key is
  // there already. Errors are counted and returned.
  Status Publish(const StateSnapshot& snap);

  // The longest stored prefix of `target` longer than `min_tokens`, at a
  // multiple of 64 tokens or the whole of `target`, made for sessions of
  // `max_context` tokens, as a snapshot of `model`; null when there is none.
  // An object that fails its checks is erased and counted, and the search
  // goes on with shorter prefixes.
  std::shared_ptr<StateSnapshot> Fetch(const Model& model, int64_t max_context,
                                       std::span<const int32_t> target, int64_t min_tokens);

  TierStats stats() const;
  Tier& tier() { return *tier_; }

 private:
  std::unique_ptr<Tier> tier_;
  std::atomic<int64_t> hits_{0}, hit_tokens_{0}, misses_{0}, rejected_{0}, errors_{0}, written_{0};
  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0};
};

}  // namespace strata

#endif  // STRATA_MEMORY_PREFIX_STORE_H_
