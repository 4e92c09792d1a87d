// A fixed pool of worker threads for data-parallel loops in the CPU backend.
// ParallelFor is blocking and re-entrant-safe (a nested call runs inline), so
// kernels can use it freely without deadlocking.
#ifndef STRATA_BASE_THREAD_POOL_H_
#define STRATA_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

// Thread-safety: ParallelFor may be called from any thread; calls from different
// threads are serialised (one loop runs at a time on the pool).
class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware core. The calling thread takes part
  // in every loop, so a pool of N threads starts N-1 workers.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `grain` long (except the last). Returns when all ranges are done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

  // A process-wide default pool sized to the machine.
  static ThreadPool* Default();

 private:
  void WorkerLoop(int index);
  void RunChunks();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex loop_mu_;  // serialises ParallelFor callers

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // guarded by mu_
  bool stop_ = false;        // guarded by mu_
  int active_ = 0;           // workers still in the current loop, guarded by mu_

  // The current loop (valid while a generation runs).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
};

// Runs fn over [0, n) on `pool` when it is non-null, inline otherwise.
inline void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr || n <= grain) {
    if (n > 0) fn(0, n);
    return;
  }
  pool->ParallelFor(n, grain, fn);
}

}  // namespace strata

#endif  // STRATA_BASE_THREAD_POOL_H_
