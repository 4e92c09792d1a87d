// Host bookkeeping of a GPU executor's per-sequence device pools: sequence
// slots (one per live, device-resident sequence: recurrent matrices and conv
// tails), checkpoint slots (the same arrays' units after the sequence slots,
// holding checkpoints' recurrent state apart from the live ones) and 64-token
// blocks of the paged attention caches, with a reference
// count per block so that a cloned state can share its source's full blocks
// (copy-on-write prefix blocks, see cuda_paged_state.h for the rule that makes
// sharing safe). Plain C++ (no CUDA) so that it is unit-tested on the CPU.
//
// Shared by the executor and its states: a state gives its slot and blocks
// back when destroyed, which may be after the model, hence shared ownership.
// Thread-safe: states of one model may be destroyed on any thread.
#ifndef STRATA_MEMORY_PAGED_STATE_BOOK_H_
#define STRATA_MEMORY_PAGED_STATE_BOOK_H_

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace strata {

class PagedStateBook {
 public:
  // All slots [0, slots), checkpoint slots [slots, slots + checkpoint_slots)
  // and blocks [0, blocks) free; the lowest index is taken first.
  PagedStateBook(int64_t slots, int64_t blocks, int64_t checkpoint_slots = 0);

  uint64_t NextId();

  // A free slot, or −1 when none is.
  int32_t TakeSlot();
  // Back to the free list; −1 is ignored.
  void GiveSlot(int32_t slot);
  // A free checkpoint slot (an index >= total_slots()), or −1 when none is.
  int32_t TakeCheckpointSlot();
  void GiveCheckpointSlot(int32_t slot);

  // Appends `n` fresh blocks (reference count 1) to `out`, all or none.
  bool TakeBlocks(int64_t n, std::vector<int32_t>& out);
  // One more holder for each of `blocks` (all must be held already).
  void Share(std::span<const int32_t> blocks);
  // One holder less for each of `blocks`; a block whose count drops to 0 is
  // free again. Clears `blocks`.
  void Release(std::vector<int32_t>& blocks);

  // Holders of `block` (0: free).
  int32_t RefCount(int32_t block) const;

  int64_t FreeSlots() const;
  int64_t FreeCheckpointSlots() const;
  int64_t FreeBlocks() const;
  int64_t total_slots() const { return total_slots_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t total_checkpoint_slots() const { return total_checkpoint_slots_; }

 private:
  // Pop from / push onto one of the free-slot stacks, under mu_ (−1: empty;
  // −1 is not pushed).
  int32_t Take(std::vector<int32_t>& stack);
  void Give(std::vector<int32_t>& stack, int32_t slot);

  mutable std::mutex mu_;
  const int64_t total_slots_, total_blocks_, total_checkpoint_slots_;
  std::vector<int32_t> free_slots_;   // stack
  std::vector<int32_t> free_checkpoint_slots_;  // stack
  std::vector<int32_t> free_blocks_;  // stack, lowest index on top at start
  std::vector<int32_t> refs_;         // [total_blocks]
  uint64_t next_id_ = 1;
};

}  // namespace strata

#endif  // STRATA_MEMORY_PAGED_STATE_BOOK_H_
