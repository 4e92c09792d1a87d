// RequestRunner: the scheduler thread's side of one request, as an explicit
// state machine. It owns what the request has still to feed (a prompt, or a
// chat round's suffix), where that feed snapshots the state for the prefix
// cache, the chat round bookkeeping, and the token-selection state (sampler,
// penalty window, device sampling step). The engine drives it; the session
// and the chat turn keep their own state.
//
//   kQueued --StartPrompt/StartRound--> kPrefilling --(prompt in)--> kGenerating
//                                            ^                         |
//                                       StartRound                AwaitTools
//                                            |                         v
//                                        kRendering <--BeginRender-- kAwaitingTools
//   any state --Finish--> kFinished
//
// A token request's prefill ends as soon as its prompt is fed; a chat
// round's ends at EndRound, after the engine has marked the turn boundary.
#ifndef STRATA_ENGINE_REQUEST_RUNNER_H_
#define STRATA_ENGINE_REQUEST_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace strata {

// Thread-safety: the engine's scheduler thread only.
class RequestRunner {
 public:
  enum class State {
    kQueued,         // submitted, not admitted yet
    kPrefilling,     // feeding a prompt, or a chat round's rendering
    kGenerating,     // selecting tokens
    kAwaitingTools,  // chat: the message ended with tool calls; waits for results
    kRendering,      // chat: results appended; the next round renders off this thread
    kFinished,
  };
  using Clock = std::chrono::steady_clock;

  explicit RequestRunner(const SamplingParams& sampling) : sampler_(sampling) {}
  RequestRunner(const RequestRunner&) = delete;
  RequestRunner& operator=(const RequestRunner&) = delete;

  State state() const { return state_; }
  // Admitted once: it holds (or held) a state of its model.
  bool started() const { return state_ != State::kQueued; }

  // Transitions ------------------------------------------------------------
  // kQueued -> kPrefilling (kGenerating at once when `prompt` is empty): a
  // token request feeds its prompt, which also opens its penalty window.
  void StartPrompt(std::vector<int32_t> prompt);
  // kQueued or kRendering -> kPrefilling: a chat round feeds `suffix`, the
  // part of `rendering` (the whole conversation) the history lacks.
  void StartRound(std::vector<int32_t> rendering, std::vector<int32_t> suffix);
  // kPrefilling -> kGenerating for a chat round whose suffix is in: the
  // rendering becomes the penalty window. Returns whether this was the
  // request's first round (its start is the session's checkpoint).
  bool EndRound();
  // kGenerating -> kAwaitingTools.
  void AwaitTools();
  // kAwaitingTools -> kRendering.
  void BeginRender();
  // Any -> kFinished; drops what was left to feed.
  void Finish();

  // The feed (kPrefilling) ---------------------------------------------------
  const std::vector<int32_t>& prefill() const { return prefill_; }
  size_t prefill_left() const { return prefill_.size() - prefill_pos_; }
  // The next `n` tokens to feed (n <= prefill_left()).
  std::span<const int32_t> NextTokens(size_t n) const {
    return std::span<const int32_t>(prefill_).subspan(prefill_pos_, n);
  }
  // `n` tokens were fed (evaluated, or restored from the prefix cache).
  void Fed(size_t n);
  bool chat_round() const { return chat_round_; }
  // History lengths at which the feed snapshots its state (ascending).
  void SetSnapshotPoints(std::vector<int64_t> points);
  // The next snapshot point beyond `evaluated` history tokens; -1: none.
  int64_t NextSnapshotAfter(int64_t evaluated);

  // Token selection -----------------------------------------------------------
  Sampler& sampler() { return sampler_; }
  // Prompt (or rendering) plus selected tokens: the penalties' window.
  const std::vector<int32_t>& history() const { return history_; }
  // Tokens selected so far: the Philox step of device sampling, so a
  // request's draws do not depend on what it is batched with.
  uint64_t sample_step() const { return sample_step_; }
  void Selected(int32_t token);

  // Metrics -----------------------------------------------------------------
  // True the first time it is called: the request left the queue.
  bool FirstScheduled();
  // A token was delivered at `now`: milliseconds since the previous one, or
  // since `submitted` for the first (then *first is set).
  double TokenInterval(Clock::time_point now, Clock::time_point submitted, bool* first);

 private:
  void BeginFeed(std::vector<int32_t> tokens, bool chat_round);
  void EndPromptIfFed();

  State state_ = State::kQueued;
  std::vector<int32_t> prefill_;
  size_t prefill_pos_ = 0;
  bool chat_round_ = false;               // the feed is a chat round's
  bool first_round_ = true;               // chat: the next round is the request's first
  std::vector<int32_t> round_rendering_;  // chat: that round's whole rendering
  std::vector<int64_t> snapshots_;
  size_t next_snapshot_ = 0;
  Sampler sampler_;
  std::vector<int32_t> history_;
  uint64_t sample_step_ = 0;
  bool scheduled_ = false;
  bool has_token_time_ = false;
  Clock::time_point last_token_at_{};
};

}  // namespace strata

#endif  // STRATA_ENGINE_REQUEST_RUNNER_H_
