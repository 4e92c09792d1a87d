// Session: one conversation on a model: the token history, the model's
// SequenceState that follows it, and the logits after the last evaluated token.
#ifndef STRATA_ENGINE_SESSION_H_
#define STRATA_ENGINE_SESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace strata {

class Engine;
class Request;

struct SessionOptions {
  int64_t max_context_tokens = 0;  // 0: min(model max context, kDefaultContextTokens)
};

// The history may end with tokens the model has not consumed yet (the last
// sampled token of a generation); they are evaluated lazily, by the next
// Append, Logits or generation, so a finished request costs no extra forward.
//
// Thread-safety: one thread at a time. While a request runs on the session
// (busy()), only the engine's scheduler thread touches it; the public mutators
// then fail with FailedPrecondition.
class Session {
 public:
  static constexpr int64_t kDefaultContextTokens = 4096;

  // `engine` must outlive the session.
  static StatusOr<std::unique_ptr<Session>> Create(Engine* engine, std::shared_ptr<const Model> model,
                                                   const SessionOptions& options);
  // Cancels the session's running request and waits for the scheduler to let go.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends and evaluates `tokens`. OutOfRange (session unchanged) for a bad id
  // or when the history would exceed the context.
  Status Append(std::span<const int32_t> tokens);
  // Logits predicting the token after the whole history ([vocab]); evaluates a
  // pending tail first. Valid until the next call on the session.
  StatusOr<std::span<const float>> Logits();
  // Empties history and state and clears the failed flag.
  Status Reset();

  // OutOfRange naming `what`, the index and the id of the first token outside [0, vocab).
  Status CheckTokens(std::span<const int32_t> tokens, const char* what) const;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t max_context_tokens() const { return max_context_; }
  int32_t vocab_size() const { return model_->info().vocab_size; }
  const Model& model() const { return *model_; }
  Engine& engine() const { return *engine_; }
  bool busy() const { return busy_.load(std::memory_order_acquire); }
  bool failed() const { return failed_; }

 private:
  friend class Engine;
  Session(Engine* engine, std::shared_ptr<const Model> model, std::unique_ptr<SequenceState> state,
          int64_t max_context);

  // FailedPrecondition when busy or failed.
  Status CheckIdle() const;
  // Runs the model over the unevaluated tail plus `more`, and appends `more` to
  // the history. Argument errors leave everything unchanged; other model errors
  // mark the session failed.
  Status Evaluate(std::span<const int32_t> more);
  // Appends a sampled token without evaluating it.
  void PushPending(int32_t token) { tokens_.push_back(token); }

  Engine* const engine_;
  const std::shared_ptr<const Model> model_;
  const std::unique_ptr<SequenceState> state_;
  const int64_t max_context_;
  std::vector<int32_t> tokens_;  // the history
  size_t evaluated_ = 0;         // prefix of tokens_ the state has consumed
  std::vector<float> logits_;    // [vocab] after tokens_[evaluated_ - 1]
  bool failed_ = false;          // a model error left the state unknown; needs Reset
  std::atomic<bool> busy_{false};  // a request is running; set and cleared by the engine
  Request* active_ = nullptr;      // that request; guarded by the engine's mutex
};

}  // namespace strata

#endif  // STRATA_ENGINE_SESSION_H_
