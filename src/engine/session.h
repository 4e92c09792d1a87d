// Session: one conversation on a model: the token history, the model's
// SequenceState that follows it, the logits after the last evaluated token,
// and (when the model directory has a tokenizer) the chat Conversation whose
// rendering the history follows.
#ifndef STRATA_ENGINE_SESSION_H_
#define STRATA_ENGINE_SESSION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/conversation.h"
#include "memory/memory_ledger.h"
#include "memory/prefix_cache.h"
#include "model/model.h"
#include "text/text_model.h"

namespace strata {

class Engine;
class Request;

struct SessionOptions {
  int64_t max_context_tokens = 0;  // 0: min(model max context, kDefaultContextTokens)
  std::shared_ptr<const TextModel> text;  // null: token ids only (no chat)
};

// How AlignTo brought the history in line with a new rendering.
enum class AlignKind {
  kAppend,      // the history is a prefix of the rendering: only the suffix is new
  kCheckpoint,  // it diverged after the checkpoint: restored it, re-evaluate from there
  kScratch,     // it diverged before the checkpoint (or none): re-evaluate everything
};

struct Alignment {
  AlignKind kind = AlignKind::kAppend;
  size_t kept = 0;               // history tokens kept (the suffix starts here)
  std::vector<int32_t> suffix;   // rendering tokens to evaluate
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
  // Empties history, state, checkpoint, marks and conversation messages
  // (tools stay registered) and clears the failed flag.
  Status Reset();

  // A new session continuing from this one's history: same model, context,
  // state, logits, checkpoint, marks, conversation messages and tools. Both
  // then evolve independently. On the CPU the state is copied (Clone); a
  // paged GPU executor can share attention blocks copy-on-write instead.
  StatusOr<std::unique_ptr<Session>> Fork() const;
  // Marks the current point (end of a system prompt, a turn, a tool
  // result): evaluates a pending token, snapshots the state and returns the
  // mark's id (> 0). The snapshot also enters the engine's prefix cache
  // pinned, so other sessions whose prompts start with this history restore
  // it instead of evaluating it, until ReleaseMark / Reset / destruction.
  StatusOr<uint64_t> Mark();
  // Returns to mark `id`: history, state, logits and (chat) the messages
  // present when it was made. Later marks stay valid. NotFound for an
  // unknown id.
  Status Rollback(uint64_t id);
  // Forgets mark `id` (unpins its prefix-cache entry). NotFound when unknown.
  Status ReleaseMark(uint64_t id);

  // Saved sessions (engine/session_file.h): the history, logits, state,
  // marks, turn checkpoint, and the conversation's messages and tools (not
  // their handlers: attach them again with Conversation::AddTool). Save needs
  // an idle session; a pending sampled token stays pending. FailedPrecondition
  // when busy, failed or swapped out; Unimplemented when the model's states
  // cannot be saved.
  StatusOr<std::vector<uint8_t>> Save() const;
  // A session holding what `bytes` (Save's output) holds, for `model`, which
  // must have the fingerprint it was saved with. options.max_context_tokens
  // 0 keeps the saved context; another value must hold the saved history
  // and marks. Marks enter the engine's prefix cache pinned, as Mark puts
  // them. `source` names the bytes in errors (a path, "session buffer").
  static StatusOr<std::unique_ptr<Session>> Load(Engine* engine, std::shared_ptr<const Model> model,
                                                 std::span<const uint8_t> bytes,
                                                 const SessionOptions& options,
                                                 const std::string& source);

  // Save into the file `path`, published whole (base/write_file.h).
  Status SaveToFile(const std::string& path) const;
  // Load from the file `path`, named in errors.
  static StatusOr<std::unique_ptr<Session>> LoadFromFile(Engine* engine,
                                                         std::shared_ptr<const Model> model,
                                                         const std::string& path,
                                                         const SessionOptions& options);

  // The chat conversation; null when the session was made without a
  // TextModel. Mutate it only while the session is idle.
  Conversation* conversation() { return conversation_.get(); }
  const Conversation* conversation() const { return conversation_.get(); }

  // OutOfRange naming `what`, the index and the id of the first token outside [0, vocab).
  Status CheckTokens(std::span<const int32_t> tokens, const char* what) const;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t max_context_tokens() const { return max_context_; }
  int32_t vocab_size() const { return model_->info().vocab_size; }
  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  Engine& engine() const { return *engine_; }
  bool busy() const { return busy_.load(std::memory_order_acquire); }
  bool failed() const { return failed_; }
  // Tokens the state has consumed (the history minus a pending sampled token).
  int64_t num_evaluated() const { return static_cast<int64_t>(evaluated_); }
  // Preempted by the scheduler: its state is outside the memory budget.
  bool swapped() const { return swapped_; }

  // Engine side -------------------------------------------------------------
  // Called by the engine: Submit* on the submitting thread, the rest on the
  // scheduler thread while a request runs on the session (busy()).

  // Claims the session for a request; false when one already runs. Two
  // threads racing to submit cannot both win.
  bool TryMarkBusy() { return !busy_.exchange(true, std::memory_order_acq_rel); }
  // `request` runs on the claimed session: its state now counts against the
  // engine's memory budget.
  void BeginRequest(Request* request);
  // The request ended: a preempted state comes back into the accounting and
  // the session leaves the budget (idle sessions are the host's).
  void LeaveBudget();
  // The session is idle again (under the engine's mutex, after LeaveBudget).
  void EndRequest();
  // The running request; guarded by the engine's mutex.
  Request* active_request() const { return active_; }

  // History tokens the state has not consumed (0 or the pending sampled token).
  int64_t num_pending() const { return static_cast<int64_t>(tokens_.size() - evaluated_); }
  // Logits after the last evaluated token; empty after a step whose token
  // was selected on the device.
  const std::vector<float>& kept_logits() const { return logits_; }
  const SequenceState* state() const { return state_.get(); }
  SequenceState* mutable_state() { return state_.get(); }
  // Whether the state has consumed the whole history (after a decode step
  // ran this session's row).
  bool state_caught_up() const { return state_->num_tokens() == static_cast<int64_t>(tokens_.size()); }
  // A batched decode step consumed the pending token: `logits` is its row
  // (empty: selected on the device, no logits kept).
  void CommitDecodeStep(std::span<const float> logits);
  // A model error left the state unknown: the session needs a Reset.
  void MarkFailed() { failed_ = true; }

  // FailedPrecondition when busy or failed.
  Status CheckIdle() const;
  // How Evaluate and EvaluateAndSample call the model on their feed:
  // Forward, or ForwardSample with `sampling` (the default), or what the
  // engine puts in their place (a DecodeAndPrefill step carrying them).
  using Forwarder =
      std::function<Status(std::span<const int32_t> feed, SequenceState& state,
                           const DecodeSampling* sampling, int32_t* token, float* logits)>;
  // Runs the model over the unevaluated tail plus `more`, and appends `more` to
  // the history. Argument errors leave everything unchanged; other model errors
  // mark the session failed.
  Status Evaluate(std::span<const int32_t> more, const Forwarder* forward = nullptr);
  // Evaluate, then the next token selected by `sampling` where the logits
  // are (Model::ForwardSample) into *token; the logits are kept only with
  // `keep_logits`. *token is -1 when there was nothing to evaluate (the kept
  // logits are the ones to sample from).
  Status EvaluateAndSample(std::span<const int32_t> more, const DecodeSampling& sampling,
                           bool keep_logits, int32_t* token, const Forwarder* forward = nullptr);
  // Appends a sampled token without evaluating it.
  void PushPending(int32_t token) { tokens_.push_back(token); }
  // A snapshot of the fully evaluated history (a Model::Checkpoint + the
  // logits); null when there is no room for the checkpoint's copy.
  std::shared_ptr<const StateSnapshot> Snapshot() const;
  // Continues from `snap`, whose tokens must extend the evaluated history.
  // False (nothing changed) when the executor has no room for the copy;
  // false with failed() set when the copy failed on the device.
  bool Restore(const StateSnapshot& snap);
  // The scheduler moves a preempted session's state out of the memory budget
  // and back. On the CPU both tiers are host memory, so only the accounting
  // moves; a GPU executor copies the state's device memory (cache blocks,
  // recurrent slot) to pinned host memory and gives it back to its pools
  // (SequenceState::MoveToHost / MoveToDevice). Both return whether the
  // session is now in the asked tier: SwapIn answers false when the pools
  // have no room (the state stays on the host, swapped() stays true, and the
  // request must keep waiting: running it would fail with
  // FailedPrecondition); SwapOut false when host memory could not be had
  // (nothing moved).
  bool SwapOut();
  bool SwapIn();

  // Prepares the history to continue as `target` (the whole conversation
  // rendered and tokenized), using the longest common token prefix:
  //   history is a prefix of target   -> keep all; evaluate target's suffix
  //                                      (plus the unevaluated last sampled token)
  //   common prefix >= checkpoint     -> restore the checkpoint's state (a Clone)
  //                                      and evaluate target from there
  //   otherwise                       -> reset the state; evaluate all of target
  // A recurrent state cannot be rewound token by token, so a divergence is
  // resolved at the checkpoint, not at the exact common prefix. OutOfRange
  // (nothing changed) when target leaves no room for a generated token.
  StatusOr<Alignment> AlignTo(std::span<const int32_t> target);
  // Clones the state at the current, fully evaluated history: where a chat
  // turn's generation starts (templates such as Qwen3 re-render earlier
  // assistant turns without their reasoning, so later turns diverge here).
  void TakeCheckpoint();

 private:
  Session(Engine* engine, std::shared_ptr<const Model> model, std::unique_ptr<SequenceState> state,
          int64_t max_context, std::shared_ptr<const TextModel> text);

  // Keeps the session's share of the engine's ledger equal to its state.
  void UpdateAccounting();

  Engine* const engine_;
  LedgerAccount account_;  // this session's bytes in the engine's ledger
  const std::shared_ptr<const Model> model_;
  std::unique_ptr<SequenceState> state_;
  const int64_t max_context_;
  std::vector<int32_t> tokens_;  // the history
  size_t evaluated_ = 0;         // prefix of tokens_ the state has consumed
  // Evaluate's and EvaluateAndSample's work (`sampling` null: Forward).
  Status Run(std::span<const int32_t> more, const DecodeSampling* sampling, bool keep_logits,
             int32_t* token, const Forwarder* forward);

  std::vector<float> logits_;    // [vocab] after tokens_[evaluated_ - 1]
  bool failed_ = false;          // a model error left the state unknown; needs Reset
  std::unique_ptr<Conversation> conversation_;  // null without a TextModel
  // The state after checkpoint_tokens_ history tokens (immutable: forks share it).
  std::shared_ptr<const StateCheckpoint> checkpoint_;
  size_t checkpoint_tokens_ = 0;
  std::vector<float> checkpoint_logits_;        // logits_ at the checkpoint
  struct MarkPoint {
    std::shared_ptr<const StateSnapshot> snap;
    size_t messages = 0;  // conversation messages when marked
  };
  std::map<uint64_t, MarkPoint> marks_;
  uint64_t next_mark_ = 1;
  bool swapped_ = false;
  // Whether the state counts against the engine's memory budget: set by the
  // engine while a request runs on the session (idle sessions' states are
  // the host's to reset or destroy, and reported apart).
  bool counted_active_ = false;
  std::atomic<bool> busy_{false};  // a request is running; set and cleared by the engine
  Request* active_ = nullptr;      // that request; guarded by the engine's mutex
};

}  // namespace strata

#endif  // STRATA_ENGINE_SESSION_H_
