// Tier: a store that sequence-state regions are copied out to and back from
// (attention blocks and recurrent-state checkpoints, one object per region
// and prefix), below the executor's own memory: host memory (HostTier), and
// the disk and remote object store that the tiered-KV manager adds behind
// the same interface. The prefix cache and saved sessions address objects
// by key and never see which tier holds them.
//
// Objects are immutable and keys are content addresses: a key names one byte
// string for good (the key covers the model, the state layout and the exact
// token prefix), so a Put of a key already held keeps the first object, a
// reader never sees a half-written one, and a tier may drop any object at any
// time (a Get that misses is a cache miss, never an error to the request).
#ifndef STRATA_MEMORY_TIER_H_
#define STRATA_MEMORY_TIER_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

// Thread-safety: implementations are thread-safe; every method may be called
// from any thread.
class Tier {
 public:
  virtual ~Tier() = default;

  // The tier's name in messages ("host", "disk", "s3").
  virtual std::string_view name() const = 0;

  // Stores `bytes` as the object `key` (a key already held: OK, unchanged).
  // May evict other objects to make room. ResourceExhausted (naming the
  // tier, the object's size and the capacity) when it cannot fit at all.
  virtual Status Put(std::string_view key, std::span<const uint8_t> bytes) = 0;

  // Copies the object `key` into `out` (resized). NotFound on a miss;
  // DataLoss when a stored object fails its checks (the tier drops it).
  virtual Status Get(std::string_view key, std::vector<uint8_t>* out) = 0;

  virtual bool Contains(std::string_view key) const = 0;
  // Drops the object `key`, if held.
  virtual void Erase(std::string_view key) = 0;

  // Bytes of the objects held, and the most it holds.
  virtual uint64_t bytes() const = 0;
  virtual uint64_t capacity() const = 0;
};

}  // namespace strata

#endif  // STRATA_MEMORY_TIER_H_
