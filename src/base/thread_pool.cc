// ThreadPool: workers wait for a generation counter to move, then grab chunks
// from a shared atomic cursor until the range is exhausted.
#include "base/thread_pool.h"

#include <algorithm>

namespace strata {
namespace {
thread_local bool tls_in_parallel_region = false;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  num_threads_ = num_threads;
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool* ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool(0);  // never destroyed: outlives static users
  return pool;
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::WorkerLoop(int /*index*/) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    tls_in_parallel_region = true;
    RunChunks();
    tls_in_parallel_region = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // Nested loops and tiny loops run inline: no deadlock, no wake-up cost.
  if (workers_.empty() || tls_in_parallel_region || n <= grain) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> loop_lock(loop_mu_);
  // About 4 chunks per thread balances uneven work without much contention.
  const int64_t target_chunks = static_cast<int64_t>(num_threads_) * 4;
  int64_t chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  tls_in_parallel_region = true;
  RunChunks();
  tls_in_parallel_region = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

}  // namespace strata
