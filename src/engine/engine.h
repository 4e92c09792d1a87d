// Engine: the compute thread pool, the scheduler thread that runs submitted
// requests round-robin one token at a time, and the event queue that carries
// their tokens, text, tool calls and outcomes back to the host. Chat requests
// run the tool loop here: generate, deliver tool calls, wait for results,
// append them through the template and continue from the held state.
#ifndef STRATA_ENGINE_ENGINE_H_
#define STRATA_ENGINE_ENGINE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <thread>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/chat_turn.h"
#include "engine/event.h"
#include "engine/request.h"
#include "engine/session.h"

namespace strata {

enum class LogLevel : int32_t { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
using LogFn = std::function<void(LogLevel, std::string_view)>;

struct EngineOptions {
  int num_threads = 0;  // compute threads; 0: one per core
  LogFn log;            // may be empty
  LogLevel min_log_level = LogLevel::kInfo;
  // Undelivered TOKEN events per request before the scheduler pauses it, so a
  // host that polls slowly bounds memory and a cancel lands within this many tokens.
  size_t max_pending_token_events = 64;
};

// Thread-safety: every public method is thread-safe. Sessions must be
// destroyed before the engine.
class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // Cancels whatever still runs and joins the scheduler thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  ThreadPool* pool() { return &pool_; }
  void Log(LogLevel level, std::string_view message) const;

  // Validates, then queues a generation on `session` (which must not be busy).
  // On error nothing is queued and the session is unchanged.
  StatusOr<std::shared_ptr<Request>> Submit(Session& session, std::span<const int32_t> prompt,
                                            GenerationParams params, void* tag = nullptr,
                                            bool private_events = false);

  // Validates, renders the session's conversation with the generation prompt
  // and queues a chat request: kText / kToolCall / kToolError events, then
  // kFinished. Generation stops at the model's EOS, the template's end-of-turn
  // tokens and params.stop_tokens. A message with tool calls waits until
  // every call is answered (SubmitToolResult), then the tool messages are
  // appended and generation continues after aligning the history with the
  // new rendering (Session::AlignTo: normally only the new suffix is
  // evaluated). FailedPrecondition when the session has no conversation or
  // the model no chat template; template errors are InvalidArgument.
  StatusOr<std::shared_ptr<Request>> SubmitChat(Session& session, GenerationParams params, ChatOptions chat,
                                                void* tag = nullptr, bool private_events = false);
  // Answers tool call `call_id` of a chat request with `content` (the tool
  // message's content), or declines it (nullopt: the request then ends with
  // kToolCalls once its message is complete). Safe from any thread.
  Status SubmitToolResult(Request& request, const std::string& call_id, std::optional<std::string> content);

  // Takes the oldest event of a non-private request. Waits up to `timeout_ms`
  // (negative: forever). False when none arrived in time.
  bool PollEvent(Event* out, int64_t timeout_ms);
  // Takes the oldest event of `request` only.
  bool PollEventFor(const Request& request, Event* out, int64_t timeout_ms);

  // The blocking loop: polls `request`'s events, hands each token to `on_token`
  // on this thread (returning false cancels the request with kCallback) and
  // returns at its FINISHED event. Returns the request's status (OK for
  // kCallback) and stores the reason in `*reason` when non-null.
  Status RunToCompletion(Request& request, const std::function<bool(int32_t)>& on_token,
                         FinishReason* reason);

  // The blocking chat loop: polls `request`'s events on this thread and hands
  // each non-final one to `on_event` (false cancels with kCallback). For a
  // kToolCall event it then calls the tool's handler on this thread; when the
  // handler returns without answering, the call is answered with "" (handler
  // returned 0) or with {"error": "tool 'NAME' failed with code N"} (nonzero),
  // so the model sees the failure and the loop goes on. A tool without a
  // handler is declined (the request ends with kToolCalls).
  Status RunChatToCompletion(Request& request, const std::function<bool(const Event&)>& on_event,
                             FinishReason* reason);

  // Cancels `request` (see Request::Cancel) and wakes the scheduler, which a
  // request waiting for tool results or for its events to be polled needs.
  void Cancel(Request& request, FinishReason reason = FinishReason::kCancelled);

  // The owner lets go of `request`: it is cancelled and its queued and future
  // events are dropped. Does not wait.
  void Detach(Request& request);

  // Cancels the request running on `session`, if any, and waits until the
  // scheduler has finished it. Called by ~Session.
  void CancelAndWait(Session& session);

 private:
  explicit Engine(const EngineOptions& options);
  void SchedulerLoop();
  // Runs one token of `r` on the scheduler thread (no lock held). Returns true
  // when the request finished (its FINISHED event is queued).
  bool Step(const std::shared_ptr<Request>& r);
  void PushToken(const std::shared_ptr<Request>& r, int32_t token);
  // Chat requests: one step, the start of a round, and event delivery.
  bool StepChat(const std::shared_ptr<Request>& r);
  Status StartRound(Request& r, std::vector<int32_t> prompt);
  void RecordToken(Request& r, int32_t token);
  void PushEvents(const std::shared_ptr<Request>& r, std::vector<Event> events);
  // Ends a chat request: closes an open message, appends answered tool results.
  void FinishChat(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token = -1);
  void Finish(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token = -1);
  bool PollImpl(const Request* only, Event* out, int64_t timeout_ms);
  bool TakeEvent(const Request* only, Event* out);  // requires mu_
  bool Eligible(const Request& r) const;            // requires mu_

  const EngineOptions options_;
  ThreadPool pool_;
  mutable std::mutex log_mu_;  // serialises the log callback

  std::mutex mu_;
  std::condition_variable work_cv_;   // scheduler: a request became runnable, or stop
  std::condition_variable event_cv_;  // pollers: an event was queued
  std::condition_variable idle_cv_;   // CancelAndWait: a request finished
  std::deque<std::shared_ptr<Request>> queue_;  // unfinished requests not being stepped, guarded by mu_
  std::deque<Event> events_;                    // guarded by mu_
  uint64_t next_id_ = 1;                        // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  std::thread scheduler_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_ENGINE_H_
