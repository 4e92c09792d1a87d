// ParallelFor for kernels that must not allocate: ThreadPool takes a
// std::function, which heap-allocates for any lambda larger than its small
// buffer (a [&] lambda capturing several locals is). Wrapping the body in a
// lambda that captures one reference keeps the std::function allocation-free.
#ifndef STRATA_BACKEND_CPU_PARALLEL_H_
#define STRATA_BACKEND_CPU_PARALLEL_H_

#include <cstdint>

#include "base/thread_pool.h"

namespace strata {
namespace cpu {

template <typename Fn>
void ParallelRange(ThreadPool* pool, int64_t n, int64_t grain, const Fn& fn) {
  ParallelFor(pool, n, grain, [&fn](int64_t begin, int64_t end) { fn(begin, end); });
}

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_PARALLEL_H_
