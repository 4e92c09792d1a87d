// StackGuard on glibc/musl: pthread_getattr_np gives the thread's stack. For
// the main thread glibc reads /proc/self/maps, so the bounds are cached per
// thread and read again only when the frame is outside them (a new stack).
#include "base/stack_guard.h"

#include <pthread.h>

namespace strata {
namespace {

struct StackBounds {
  uintptr_t low = 0;
  uintptr_t high = 0;
};

thread_local StackBounds t_bounds;

StackBounds ReadBounds() {
  StackBounds b;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return b;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
    b.low = reinterpret_cast<uintptr_t>(addr);
    b.high = b.low + size;
  }
  pthread_attr_destroy(&attr);
  return b;
}

}  // namespace

StackGuard::StackGuard(size_t reserve) {
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (frame <= t_bounds.low || frame > t_bounds.high) t_bounds = ReadBounds();
  if (frame <= t_bounds.low || frame > t_bounds.high) return;  // unknown stack: never trips
  floor_ = t_bounds.low + reserve;
}

}  // namespace strata
