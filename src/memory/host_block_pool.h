// HostBlockPool: the host-memory blocks that CPU sequence states keep their
// per-token regions in, with a reference count per block so that a state's
// clones and checkpoints share its full blocks instead of copying them. A
// block's storage is allocated when it is taken and freed with its last
// holder, so host memory follows what the states hold.
//
// Shared by the executor and its states (a state may be destroyed after the
// model). Thread-safe: states of one model live on any thread.
#ifndef STRATA_MEMORY_HOST_BLOCK_POOL_H_
#define STRATA_MEMORY_HOST_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace strata {

class HostBlockPool {
 public:
  // Blocks of `block_floats` floats (> 0).
  explicit HostBlockPool(int64_t block_floats) : block_floats_(block_floats) {}

  int64_t block_floats() const { return block_floats_; }
  uint64_t block_bytes() const { return static_cast<uint64_t>(block_floats_) * sizeof(float); }

  // Appends `n` fresh blocks (one holder each, contents undefined) to `ids`
  // and their storage to `data`, all or none. Without host memory for them
  // it throws std::bad_alloc like any allocation, which the C ABI reports as
  // STRATA_OUT_OF_MEMORY.
  void Take(int64_t n, std::vector<int32_t>& ids, std::vector<float*>& data);
  // One more holder for each of `ids` (all held already).
  void Share(std::span<const int32_t> ids);
  // One holder less for each of `ids`; a block left without one is freed.
  void Release(std::span<const int32_t> ids);

  int32_t RefCount(int32_t id) const;
  // Blocks with at least one holder.
  int64_t held_blocks() const;

 private:
  struct Block {
    std::unique_ptr<float[]> data;
    int32_t refs = 0;
  };

  const int64_t block_floats_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;   // by id; guarded by mu_
  std::vector<int32_t> free_;   // ids without storage; guarded by mu_
  int64_t held_ = 0;            // guarded by mu_
};

}  // namespace strata

#endif  // STRATA_MEMORY_HOST_BLOCK_POOL_H_
