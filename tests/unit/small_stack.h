// Runs a function on a thread with a small stack, as an embedding host may
// call into the library: hostile-input tests check that nothing the library
// does with outside input needs more (issue 27).
#ifndef STRATA_TESTS_UNIT_SMALL_STACK_H_
#define STRATA_TESTS_UNIT_SMALL_STACK_H_

#include <pthread.h>

#include <cstddef>
#include <functional>

namespace strata::testing {

inline constexpr size_t kSmallStackBytes = 256 * 1024;

// Runs `fn` to completion on a new thread of `stack_bytes`; false when the
// thread could not be created.
inline bool RunOnSmallStack(const std::function<void()>& fn,
                            size_t stack_bytes = kSmallStackBytes) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  bool ok = pthread_attr_setstacksize(&attr, stack_bytes) == 0;
  pthread_t thread;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ok = ok &&
       pthread_create(&thread, &attr, trampoline, const_cast<std::function<void()>*>(&fn)) == 0;
  pthread_attr_destroy(&attr);
  if (!ok) return false;
  return pthread_join(thread, nullptr) == 0;
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_UNIT_SMALL_STACK_H_
