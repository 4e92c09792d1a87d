// Carves 64-byte aligned pieces out of one scratch buffer. Built without a
// buffer it only counts, so a layer plans its scratch with the very code that
// later carves it (plan, then apply: the two cannot disagree).
#ifndef STRATA_EXEC_CPU_SCRATCH_ARENA_H_
#define STRATA_EXEC_CPU_SCRATCH_ARENA_H_

#include <cstddef>
#include <cstdint>

namespace strata::exec {

class ScratchArena {
 public:
  ScratchArena() = default;  // counting only: every Take returns null
  ScratchArena(void* base, size_t bytes) : base_(static_cast<uint8_t*>(base)), size_(bytes) {}

  // `n` elements of T, 64-byte aligned. The caller planned the arena's size
  // with a counting arena, so running out is a bug (null is returned).
  template <typename T>
  T* Take(size_t n) {
    return static_cast<T*>(TakeBytes(n * sizeof(T)));
  }
  void* TakeBytes(size_t bytes) {
    const size_t at = used_;
    used_ += (bytes + kAlign - 1) / kAlign * kAlign;
    if (base_ == nullptr || used_ > size_) return nullptr;
    return base_ + at;
  }
  size_t used() const { return used_; }

  static constexpr size_t kAlign = 64;

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_SCRATCH_ARENA_H_
