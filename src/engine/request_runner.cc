// RequestRunner: transitions, the prefill feed and token-selection state.
#include "engine/request_runner.h"

#include <utility>

namespace strata {

void RequestRunner::StartPrompt(std::vector<int32_t> prompt) {
  history_ = prompt;
  BeginFeed(std::move(prompt), /*chat_round=*/false);
  EndPromptIfFed();
}

void RequestRunner::StartRound(std::vector<int32_t> rendering, std::vector<int32_t> suffix) {
  round_rendering_ = std::move(rendering);
  // A round ends at EndRound even with nothing new to feed.
  BeginFeed(std::move(suffix), /*chat_round=*/true);
}

void RequestRunner::BeginFeed(std::vector<int32_t> tokens, bool chat_round) {
  prefill_ = std::move(tokens);
  prefill_pos_ = 0;
  chat_round_ = chat_round;
  snapshots_.clear();
  next_snapshot_ = 0;
  state_ = State::kPrefilling;
}

bool RequestRunner::EndRound() {
  const bool first = first_round_;
  first_round_ = false;
  chat_round_ = false;
  history_ = std::move(round_rendering_);
  round_rendering_.clear();
  state_ = State::kGenerating;
  return first;
}

void RequestRunner::AwaitTools() { state_ = State::kAwaitingTools; }

void RequestRunner::BeginRender() { state_ = State::kRendering; }

void RequestRunner::Finish() {
  prefill_.clear();
  prefill_pos_ = 0;
  chat_round_ = false;
  state_ = State::kFinished;
}

void RequestRunner::Fed(size_t n) {
  prefill_pos_ += n;
  EndPromptIfFed();
}

void RequestRunner::EndPromptIfFed() {
  if (state_ == State::kPrefilling && !chat_round_ && prefill_left() == 0)
    state_ = State::kGenerating;
}

void RequestRunner::SetSnapshotPoints(std::vector<int64_t> points) {
  snapshots_ = std::move(points);
  next_snapshot_ = 0;
}

int64_t RequestRunner::NextSnapshotAfter(int64_t evaluated) {
  while (next_snapshot_ < snapshots_.size() && snapshots_[next_snapshot_] <= evaluated)
    ++next_snapshot_;
  return next_snapshot_ < snapshots_.size() ? snapshots_[next_snapshot_] : -1;
}

void RequestRunner::Selected(int32_t token) {
  ++sample_step_;
  history_.push_back(token);
}

bool RequestRunner::FirstScheduled() {
  if (scheduled_) return false;
  scheduled_ = true;
  return true;
}

double RequestRunner::TokenInterval(Clock::time_point now, Clock::time_point submitted,
                                    bool* first) {
  *first = !has_token_time_;
  const Clock::time_point from = has_token_time_ ? last_token_at_ : submitted;
  has_token_time_ = true;
  last_token_at_ = now;
  return std::chrono::duration<double, std::milli>(now - from).count();
}

}  // namespace strata
