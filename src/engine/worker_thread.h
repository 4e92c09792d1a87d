// WorkerThread: one background thread that runs posted jobs in order. The
// engine renders chat rounds on it, so a template render after tool results
// never holds up the scheduler thread's decode steps.
#ifndef STRATA_ENGINE_WORKER_THREAD_H_
#define STRATA_ENGINE_WORKER_THREAD_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace strata {

// Thread-safety: Post is safe from any thread. Jobs must not throw.
class WorkerThread {
 public:
  // Starts the thread (std::system_error when it cannot).
  WorkerThread();
  // Runs the jobs still queued, then joins.
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  void Post(std::function<void()> job);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stop_ = false;                       // guarded by mu_
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_WORKER_THREAD_H_
