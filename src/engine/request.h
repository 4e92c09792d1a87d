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
#include <vector>

#include "base/status.h"
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
// Everything else belongs to the engine's scheduler thread.
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

 private:
  friend class Engine;

  // Called by the engine once, on the scheduler thread.
  void SetOutcome(FinishReason reason, Status status);

  const uint64_t id_;
  Session* const session_;  // valid while the request is unfinished
  const std::vector<int32_t> prompt_;
  const GenerationParams params_;
  void* const tag_;
  const bool private_events_;
  const std::unique_ptr<ChatTurn> chat_;
  std::atomic<FinishReason> cancel_reason_{FinishReason::kNone};

  using Clock = std::chrono::steady_clock;

  // Scheduler-thread state.
  bool started_ = false;          // admitted: prefill began (chat: the first round's)
  // Tokens still to evaluate before the next sample (the prompt, or a chat
  // round's suffix), fed in chunks under the per-iteration budget.
  std::vector<int32_t> prefill_;
  size_t prefill_pos_ = 0;
  bool in_round_prefill_ = false;   // chat: a round's prefill is running
  bool first_round_ = true;         // chat: the next round is the request's first
  std::vector<int32_t> round_prompt_;  // chat: that round's whole rendering
  // History lengths where the prefill snapshots its state for the prefix
  // cache (ascending), and the next one to reach.
  std::vector<int64_t> snapshots_;
  size_t next_snapshot_ = 0;
  bool scheduled_ = false;          // queue time recorded
  // Tokens sampled so far: the Philox step of device sampling, so a
  // request's draws do not depend on what it is batched with.
  uint64_t sample_step_ = 0;
  const uint64_t seq_;              // arrival order
  const Clock::time_point submitted_ = Clock::now();
  Clock::time_point last_token_at_{};
  bool has_token_time_ = false;
  std::vector<int32_t> history_;  // prompt + sampled tokens: the penalties' window
  Sampler sampler_;
  bool deadline_missed() const {
    return params_.deadline_ms > 0 &&
           Clock::now() - submitted_ >= std::chrono::milliseconds(params_.deadline_ms);
  }

  // Engine-mutex state (Engine::mu_).
  bool detached_ = false;       // owner let go: drop its events
  size_t pending_events_ = 0;   // TOKEN events queued and not yet polled

  mutable std::mutex mu_;
  bool finished_ = false;                     // guarded by mu_
  FinishReason finish_reason_ = FinishReason::kNone;  // guarded by mu_
  Status status_;                             // guarded by mu_
  std::vector<int32_t> generated_;            // generated tokens, guarded by mu_
};

}  // namespace strata

#endif  // STRATA_ENGINE_REQUEST_H_
