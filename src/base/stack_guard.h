// StackGuard: tells recursive code when the calling thread's stack is nearly
// used up, so that it can fail with an error instead of overflowing. Depth
// counters alone cannot promise that: the host may call in on a thread with
// a small stack that it has already half used, and frame sizes differ
// between builds (sanitizers make them several times larger).
#ifndef STRATA_BASE_STACK_GUARD_H_
#define STRATA_BASE_STACK_GUARD_H_

#include <cstddef>
#include <cstdint>

#include "base/input_limits.h"

namespace strata {

class StackGuard {
 public:
  // Reads the calling thread's stack bounds; the guard is only meaningful on
  // that thread. On a stack it cannot identify (a coroutine's or fiber's,
  // which the thread's attributes do not describe) the guard never trips, and
  // the callers' depth counters are the only bound.
  explicit StackGuard(size_t reserve = limits::kStackReserveBytes);

  // False once fewer than `reserve` bytes remain below the caller's frame.
  bool HasRoom() const { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) > floor_; }

 private:
  uintptr_t floor_ = 0;
};

}  // namespace strata

#endif  // STRATA_BASE_STACK_GUARD_H_
