// Request: one generation on a session (prompt, sampling, stop rules), its
// cancel flag and its outcome. Shared by the engine's scheduler thread (while
// it runs) and the owner (the C handle).
#ifndef STRATA_ENGINE_REQUEST_H_
#define STRATA_ENGINE_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "engine/request_runner.h"
#include "engine/sampler.h"

namespace strata {

class ChatTurn;
class Session;

// Why a request ended. Values equal the public STRATA_FINISH_* codes.
enum class FinishReason : int32_t {
  kNone = 0,
  kEos = 1,          // the model's EOS token (when stop_at_eos)
  kStopToken = 2,    // one of GenerationParams::stop_tokens
  kMaxTokens = 3,    // max_tokens delivered
  kCancelled = 4,    // Request::Cancel()
  kError = 5,        // a step failed; status() says how
  kContextFull = 6,  // the session's history reached max_context_tokens
  kCallback = 7,     // the blocking loop's token callback asked to stop
  kStopString = 8,   // chat: the text reached one of ChatOptions::stop_strings
  kToolCalls = 9,    // chat: the model called tools that were declined or over max_tool_rounds
  kDeadline = 10,    // GenerationParams::deadline_ms passed first (status DeadlineExceeded)
};
const char* FinishReasonName(FinishReason reason);

struct GenerationParams {
  int32_t max_tokens = 128;          // delivered tokens; 0: until the context is full
  std::vector<int32_t> stop_tokens;  // end the request when generated (not delivered)
  bool stop_at_eos = true;
  SamplingParams sampling;
  // Scheduling: higher runs first (admission, batch slots, prefill budget)
  // and is preempted last. Any int32.
  int32_t priority = 0;
  // Milliseconds after submission by which the request must finish; when it
  // passes first, the request ends with kDeadline. 0: none.
  int64_t deadline_ms = 0;
  // The request ends with kContextFull when the session's history reaches
  // this many tokens. 0: the session's max_context_tokens (also the cap).
  int64_t max_context_tokens = 0;
};

// Thread-safety: Cancel() and the outcome getters are safe from any thread.
// The runner belongs to the engine's scheduler thread, the delivery record
// to the engine's mutex.
class Request {
 public:
  // `chat` is null for token-level requests; for chat requests `prompt` is
  // the first round's rendering.
  Request(uint64_t id, Session* session, std::vector<int32_t> prompt, GenerationParams params,
          void* tag, bool private_events, std::unique_ptr<ChatTurn> chat = nullptr);
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  uint64_t id() const { return id_; }
  // Opaque value chosen by the submitter (the C layer stores its handle here).
  void* tag() const { return tag_; }
  // Private requests' events are only returned by Engine::PollEventFor.
  bool private_events() const { return private_events_; }
  const GenerationParams& params() const { return params_; }
  // The chat side (null for token-level requests). Its call table is
  // thread-safe; the rest belongs to the scheduler thread.
  ChatTurn* chat() const { return chat_.get(); }

  // Asks the scheduler to end the request before its next token. The first
  // reason wins; cancelling a finished request does nothing.
  void Cancel(FinishReason reason = FinishReason::kCancelled);
  FinishReason cancel_reason() const { return cancel_reason_.load(std::memory_order_acquire); }

  bool finished() const;
  FinishReason finish_reason() const;
  Status status() const;
  int64_t num_generated() const;
  std::vector<int32_t> generated_tokens() const;

  // The submitter's prompt (chat: the first round's rendering).
  const std::vector<int32_t>& prompt() const { return prompt_; }
  // The session it runs on; valid while the request is unfinished.
  Session& session() const { return *session_; }
  using Clock = RequestRunner::Clock;
  Clock::time_point submitted_at() const { return submitted_; }
  bool deadline_missed() const {
    return params_.deadline_ms > 0 && Clock::now() - submitted_ >= std::chrono::milliseconds(params_.deadline_ms);
  }

  // Engine side ----------------------------------------------------------------
  // The scheduler thread's state machine of this request.
  RequestRunner& runner() { return runner_; }
  const RequestRunner& runner() const { return runner_; }
  // Event delivery bookkeeping; guarded by the engine's mutex.
  struct Delivery {
    bool detached = false;      // the owner let go: its events are dropped
    size_t pending_events = 0;  // non-final events queued and not yet polled
  };
  Delivery& delivery() { return delivery_; }
  const Delivery& delivery() const { return delivery_; }
  // A lookup in the engine's disk tier runs for this request (guarded by
  // the engine's mutex): it waits for it before it is scheduled.
  bool& fetching() { return fetching_; }
  bool fetching() const { return fetching_; }
  // Chat: the next round's rendering, made off the scheduler thread, once
  // it is in; guarded by the engine's mutex.
  std::optional<StatusOr<std::vector<int32_t>>>& rendered_round() { return rendered_round_; }
  const std::optional<StatusOr<std::vector<int32_t>>>& rendered_round() const { return rendered_round_; }
  // Adds a generated token; returns how many there are now.
  int64_t AppendGenerated(int32_t token);
  // Records the outcome (once, on the scheduler thread).
  void SetOutcome(FinishReason reason, Status status);

 private:
  const uint64_t id_;
  Session* const session_;
  const std::vector<int32_t> prompt_;
  const GenerationParams params_;
  void* const tag_;
  const bool private_events_;
  const std::unique_ptr<ChatTurn> chat_;
  std::atomic<FinishReason> cancel_reason_{FinishReason::kNone};
  const Clock::time_point submitted_ = Clock::now();
  RequestRunner runner_;
  Delivery delivery_;
  std::optional<StatusOr<std::vector<int32_t>>> rendered_round_;
  bool fetching_ = false;

  mutable std::mutex mu_;
  bool finished_ = false;                     // guarded by mu_
  FinishReason finish_reason_ = FinishReason::kNone;  // guarded by mu_
  Status status_;                             // guarded by mu_
  std::vector<int32_t> generated_;            // generated tokens, guarded by mu_
};

}  // namespace strata

#endif  // STRATA_ENGINE_REQUEST_H_
