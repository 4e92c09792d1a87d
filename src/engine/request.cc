// Request: cancel flag and outcome bookkeeping.
#include "engine/request.h"

#include <utility>

#include "engine/chat_turn.h"

namespace strata {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "eos";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kMaxTokens: return "max_tokens";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCallback: return "callback";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kDeadline: return "deadline";
  }
  return "unknown";
}

Request::Request(uint64_t id, Session* session, std::vector<int32_t> prompt, GenerationParams params,
                 void* tag, bool private_events, std::unique_ptr<ChatTurn> chat)
    : id_(id),
      session_(session),
      prompt_(std::move(prompt)),
      params_(std::move(params)),
      tag_(tag),
      private_events_(private_events),
      chat_(std::move(chat)),
      runner_(params_.sampling) {}

Request::~Request() = default;

void Request::Cancel(FinishReason reason) {
  FinishReason expected = FinishReason::kNone;
  cancel_reason_.compare_exchange_strong(expected, reason, std::memory_order_acq_rel);
}

bool Request::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

FinishReason Request::finish_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finish_reason_;
}

Status Request::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

int64_t Request::num_generated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(generated_.size());
}

std::vector<int32_t> Request::generated_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generated_;
}

int64_t Request::AppendGenerated(int32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_.push_back(token);
  return static_cast<int64_t>(generated_.size());
}

void Request::SetOutcome(FinishReason reason, Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  finish_reason_ = reason;
  status_ = std::move(status);
}

}  // namespace strata
