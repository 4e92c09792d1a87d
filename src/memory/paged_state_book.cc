#include "memory/paged_state_book.h"

#include <cassert>

namespace strata {

PagedStateBook::PagedStateBook(int64_t slots, int64_t blocks, int64_t checkpoint_slots)
    : total_slots_(slots > 0 ? slots : 0),
      total_blocks_(blocks > 0 ? blocks : 0),
      total_checkpoint_slots_(checkpoint_slots > 0 ? checkpoint_slots : 0) {
  for (int64_t i = total_slots_ - 1; i >= 0; --i) free_slots_.push_back(static_cast<int32_t>(i));
  for (int64_t i = total_slots_ + total_checkpoint_slots_ - 1; i >= total_slots_; --i) {
    free_checkpoint_slots_.push_back(static_cast<int32_t>(i));
  }
  for (int64_t i = total_blocks_ - 1; i >= 0; --i) free_blocks_.push_back(static_cast<int32_t>(i));
  refs_.assign(static_cast<size_t>(total_blocks_), 0);
}

uint64_t PagedStateBook::NextId() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_++;
}

int32_t PagedStateBook::Take(std::vector<int32_t>& stack) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stack.empty()) return -1;
  const int32_t s = stack.back();
  stack.pop_back();
  return s;
}

void PagedStateBook::Give(std::vector<int32_t>& stack, int32_t slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  stack.push_back(slot);
}

int32_t PagedStateBook::TakeSlot() { return Take(free_slots_); }
void PagedStateBook::GiveSlot(int32_t slot) { Give(free_slots_, slot); }
int32_t PagedStateBook::TakeCheckpointSlot() { return Take(free_checkpoint_slots_); }
void PagedStateBook::GiveCheckpointSlot(int32_t slot) { Give(free_checkpoint_slots_, slot); }

bool PagedStateBook::TakeBlocks(int64_t n, std::vector<int32_t>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n <= 0) return true;
  if (static_cast<int64_t>(free_blocks_.size()) < n) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_blocks_.back();
    free_blocks_.pop_back();
    refs_[static_cast<size_t>(b)] = 1;
    out.push_back(b);
  }
  return true;
}

void PagedStateBook::Share(std::span<const int32_t> blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t b : blocks) {
    assert(refs_[static_cast<size_t>(b)] > 0 && "sharing a free block");
    ++refs_[static_cast<size_t>(b)];
  }
}

void PagedStateBook::Release(std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  // Reversed so the sequence's first block is on top again: the next taker
  // gets runs of consecutive blocks where it can (one copy per run).
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    int32_t& r = refs_[static_cast<size_t>(*it)];
    assert(r > 0 && "releasing a free block");
    if (--r == 0) free_blocks_.push_back(*it);
  }
  blocks.clear();
}

int32_t PagedStateBook::RefCount(int32_t block) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (block < 0 || block >= total_blocks_) return 0;
  return refs_[static_cast<size_t>(block)];
}

int64_t PagedStateBook::FreeSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_slots_.size());
}

int64_t PagedStateBook::FreeCheckpointSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_checkpoint_slots_.size());
}

int64_t PagedStateBook::FreeBlocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_blocks_.size());
}

}  // namespace strata
