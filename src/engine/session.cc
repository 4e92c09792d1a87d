// Session: history bookkeeping around Model::Forward.
#include "engine/session.h"

#include <algorithm>
#include <utility>

#include "engine/engine.h"

namespace strata {

StatusOr<std::unique_ptr<Session>> Session::Create(Engine* engine, std::shared_ptr<const Model> model,
                                                   const SessionOptions& options) {
  if (engine == nullptr || model == nullptr) {
    return absl::InvalidArgumentError("session needs an engine and a model");
  }
  const ModelInfo& info = model->info();
  if (info.vocab_size <= 0) {
    return absl::InternalError(absl::StrCat("model reports vocab_size ", info.vocab_size));
  }
  if (options.max_context_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context_tokens must be >= 0, got ", options.max_context_tokens));
  }
  int64_t max_context = options.max_context_tokens;
  if (max_context == 0) {
    max_context = info.max_context > 0 ? std::min(info.max_context, kDefaultContextTokens) : kDefaultContextTokens;
  } else if (info.max_context > 0 && max_context > info.max_context) {
    return absl::OutOfRangeError(absl::StrCat("max_context_tokens ", max_context,
                                              " exceeds the model's max context ", info.max_context));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SequenceState> state, model->NewState(max_context));
  return std::unique_ptr<Session>(
      new Session(engine, std::move(model), std::move(state), max_context, options.text));
}

Session::Session(Engine* engine, std::shared_ptr<const Model> model,
                 std::unique_ptr<SequenceState> state, int64_t max_context,
                 std::shared_ptr<const TextModel> text)
    : engine_(engine),
      account_(&engine->ledger()),
      model_(std::move(model)),
      state_(std::move(state)),
      max_context_(max_context) {
  if (text != nullptr) conversation_ = std::make_unique<Conversation>(std::move(text));
  UpdateAccounting();
}

Session::~Session() {
  engine_->CancelAndWait(*this);
  marks_.clear();
  checkpoint_.reset();
  state_.reset();
  tokens_.clear();
  evaluated_ = 0;
  swapped_ = false;
  UpdateAccounting();
}

void Session::UpdateAccounting() {
  const StateUse use =
      state_ == nullptr ? StateUse{} : StateUseOf(model_->info(), static_cast<int64_t>(evaluated_));
  account_.Set(use, swapped_ ? Residence::kSwapped : Residence::kResident, counted_active_);
}

void Session::BeginRequest(Request* request) {
  active_ = request;
  counted_active_ = true;
  UpdateAccounting();
}

void Session::LeaveBudget() {
  swapped_ = false;
  counted_active_ = false;
  UpdateAccounting();
}

void Session::EndRequest() {
  active_ = nullptr;
  busy_.store(false, std::memory_order_release);
}

void Session::CommitDecodeStep(std::span<const float> logits) {
  logits_.assign(logits.begin(), logits.end());
  evaluated_ = tokens_.size();
  UpdateAccounting();
}

bool Session::SwapOut() {
  if (swapped_) return true;
  // On a GPU executor the state's cache blocks and recurrent slot go to host
  // memory and back to the pools; on the CPU this is a no-op. A failure
  // (no pinned host memory) leaves the state where it was, still counted.
  if (state_ != nullptr && !state_->MoveToHost().ok()) return false;
  swapped_ = true;
  UpdateAccounting();
  return true;
}

bool Session::SwapIn() {
  if (!swapped_) return true;
  // ResourceExhausted (no free slot or blocks): the state stays on the host
  // unchanged and the session stays swapped; the request waits.
  if (state_ != nullptr && !state_->MoveToDevice().ok()) return false;
  swapped_ = false;
  UpdateAccounting();
  return true;
}

std::shared_ptr<const StateSnapshot> Session::Snapshot() const {
  // After a decode step sampled on the device there are no logits to keep
  // (a pending token follows at once, so this is not expected). An empty
  // history has none either, and is a valid snapshot (a mark at the start).
  if (evaluated_ > 0 && logits_.size() != static_cast<size_t>(vocab_size())) return nullptr;
  // No room for the copy (host memory): no snapshot.
  StatusOr<std::unique_ptr<StateCheckpoint>> cp = model_->Checkpoint(*state_);
  if (!cp.ok()) return nullptr;
  return MakeSnapshot(
      *model_, max_context_,
      std::vector<int32_t>(tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(evaluated_)),
      *std::move(cp), logits_);
}

bool Session::Restore(const StateSnapshot& snap) {
  // Into the session's own state (a GPU reuses its slot). No room for the
  // copy, or a checkpoint the state cannot take: nothing changes. Any other
  // failure (the device's, during the copy) left the state unknown.
  if (const Status st = model_->Restore(*snap.checkpoint, state_); !st.ok()) {
    if (!absl::IsResourceExhausted(st) && !absl::IsInvalidArgument(st) &&
        !absl::IsFailedPrecondition(st)) {
      failed_ = true;
    }
    return false;
  }
  tokens_ = snap.tokens;
  evaluated_ = tokens_.size();
  logits_ = snap.logits;
  failed_ = false;
  if (checkpoint_ != nullptr && checkpoint_tokens_ > evaluated_) {
    checkpoint_.reset();
    checkpoint_tokens_ = 0;
    checkpoint_logits_.clear();
  }
  UpdateAccounting();
  return true;
}

StatusOr<std::unique_ptr<Session>> Session::Fork() const {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  std::unique_ptr<SequenceState> state = state_->Clone();
  if (state == nullptr) return absl::ResourceExhaustedError("no room for another sequence state (fork)");
  auto s = std::unique_ptr<Session>(new Session(engine_, model_, std::move(state), max_context_, nullptr));
  s->tokens_ = tokens_;
  s->evaluated_ = evaluated_;
  s->logits_ = logits_;
  s->checkpoint_ = checkpoint_;  // immutable: shared, not copied
  s->checkpoint_tokens_ = checkpoint_tokens_;
  s->checkpoint_logits_ = checkpoint_logits_;
  s->marks_ = marks_;  // snapshots are immutable and shared
  s->next_mark_ = next_mark_;
  if (conversation_ != nullptr) s->conversation_ = conversation_->Copy();
  s->UpdateAccounting();
  return s;
}

StatusOr<uint64_t> Session::Mark() {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  STRATA_RETURN_IF_ERROR(Evaluate({}));
  MarkPoint m;
  m.snap = Snapshot();
  if (m.snap == nullptr) return absl::ResourceExhaustedError("no room for another sequence state (mark)");
  m.messages = conversation_ != nullptr ? conversation_->messages().size() : 0;
  if (evaluated_ > 0) engine_->KeepSnapshot(model_, m.snap, /*mark=*/true);
  const uint64_t id = next_mark_++;
  marks_.emplace(id, std::move(m));
  return id;
}

Status Session::Rollback(uint64_t id) {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  auto it = marks_.find(id);
  if (it == marks_.end()) return absl::NotFoundError(absl::StrCat("no mark ", id, " on this session"));
  if (!Restore(*it->second.snap)) {
    return absl::ResourceExhaustedError("no room for another sequence state (rollback)");
  }
  if (conversation_ != nullptr) conversation_->TruncateMessages(it->second.messages);
  return OkStatus();
}

Status Session::ReleaseMark(uint64_t id) {
  if (busy()) return absl::FailedPreconditionError("the session is running a request");
  if (marks_.erase(id) == 0) return absl::NotFoundError(absl::StrCat("no mark ", id, " on this session"));
  return OkStatus();
}

Status Session::CheckIdle() const {
  if (busy()) return absl::FailedPreconditionError("the session is running a request");
  if (failed_) {
    return absl::FailedPreconditionError("the session failed earlier and must be reset");
  }
  return OkStatus();
}

Status Session::CheckTokens(std::span<const int32_t> tokens, const char* what) const {
  const int32_t vocab = vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::OutOfRangeError(absl::StrCat(what, "[", i, "] = ", tokens[i],
                                                " is not a token id of this model (vocabulary [0, ", vocab, "))"));
    }
  }
  return OkStatus();
}

Status Session::Evaluate(std::span<const int32_t> more, const Forwarder* forward) {
  return Run(more, nullptr, /*keep_logits=*/true, nullptr, forward);
}

Status Session::EvaluateAndSample(std::span<const int32_t> more, const DecodeSampling& sampling,
                                  bool keep_logits, int32_t* token, const Forwarder* forward) {
  *token = -1;
  return Run(more, &sampling, keep_logits, token, forward);
}

Status Session::Run(std::span<const int32_t> more, const DecodeSampling* sampling, bool keep_logits,
                    int32_t* token, const Forwarder* forward) {
  const size_t tail = tokens_.size() - evaluated_;
  if (tail == 0 && more.empty()) return OkStatus();
  if (static_cast<int64_t>(tokens_.size() + more.size()) > max_context_) {
    return absl::OutOfRangeError(absl::StrCat("history of ", tokens_.size(), " tokens plus ", more.size(),
                                              " new exceeds the context of ", max_context_, " tokens"));
  }
  std::vector<int32_t> feed;
  feed.reserve(tail + more.size());
  feed.insert(feed.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(evaluated_), tokens_.end());
  feed.insert(feed.end(), more.begin(), more.end());
  // Room for the last logits only where they are kept.
  if (keep_logits) {
    logits_.resize(static_cast<size_t>(vocab_size()));
  } else {
    logits_.clear();
  }
  float* kept = keep_logits ? logits_.data() : nullptr;
  Status s = forward != nullptr    ? (*forward)(feed, *state_, sampling, token, kept)
             : sampling == nullptr ? model_->Forward(feed, *state_, kept, /*all_logits=*/false)
                                   : model_->ForwardSample(feed, *state_, *sampling, token, kept);
  if (s.ok() && token != nullptr && (*token < 0 || *token >= vocab_size())) {
    s = absl::InternalError(absl::StrCat("ForwardSample returned token ", *token));
  }
  if (!s.ok()) {
    // Model::Forward promises an unchanged state only for argument errors.
    if (!absl::IsInvalidArgument(s) && !absl::IsOutOfRange(s)) failed_ = true;
    return s;
  }
  tokens_.insert(tokens_.end(), more.begin(), more.end());
  evaluated_ = tokens_.size();
  UpdateAccounting();
  return OkStatus();
}

Status Session::Append(std::span<const int32_t> tokens) {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  STRATA_RETURN_IF_ERROR(CheckTokens(tokens, "tokens"));
  return Evaluate(tokens);
}

StatusOr<std::span<const float>> Session::Logits() {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  if (tokens_.empty()) return absl::FailedPreconditionError("the session is empty: no logits yet");
  STRATA_RETURN_IF_ERROR(Evaluate({}));
  if (logits_.size() != static_cast<size_t>(vocab_size())) {
    return absl::FailedPreconditionError("the last token's logits were not kept (it was sampled on the device)");
  }
  return std::span<const float>(logits_);
}

Status Session::Reset() {
  if (busy()) return absl::FailedPreconditionError("the session is running a request");
  state_->Reset();
  tokens_.clear();
  evaluated_ = 0;
  logits_.clear();
  failed_ = false;
  checkpoint_.reset();
  checkpoint_tokens_ = 0;
  checkpoint_logits_.clear();
  marks_.clear();
  if (conversation_ != nullptr) conversation_->ClearMessages();
  UpdateAccounting();
  return OkStatus();
}

StatusOr<Alignment> Session::AlignTo(std::span<const int32_t> target) {
  STRATA_RETURN_IF_ERROR(CheckTokens(target, "rendered conversation"));
  if (target.empty()) return absl::InvalidArgumentError("the conversation renders to no tokens");
  if (static_cast<int64_t>(target.size()) >= max_context_) {
    return absl::OutOfRangeError(absl::StrCat("the conversation is ", target.size(),
                                              " tokens: no room left in the context of ", max_context_));
  }
  size_t common = 0;
  while (common < tokens_.size() && common < target.size() && tokens_[common] == target[common]) ++common;
  Alignment a;
  // Back to the checkpoint in the session's own state; no room for the
  // copy: from scratch instead.
  const bool restored = common != tokens_.size() && checkpoint_ != nullptr &&
                        checkpoint_tokens_ <= common && model_->Restore(*checkpoint_, state_).ok();
  if (common == tokens_.size()) {
    a.kind = AlignKind::kAppend;
  } else if (restored) {
    a.kind = AlignKind::kCheckpoint;
    tokens_.resize(checkpoint_tokens_);
    evaluated_ = checkpoint_tokens_;
    logits_ = checkpoint_logits_;
  } else {
    a.kind = AlignKind::kScratch;
    state_->Reset();
    tokens_.clear();
    evaluated_ = 0;
    logits_.clear();
    checkpoint_.reset();
    checkpoint_tokens_ = 0;
  }
  UpdateAccounting();
  a.kept = tokens_.size();
  a.suffix.assign(target.begin() + static_cast<std::ptrdiff_t>(a.kept), target.end());
  return a;
}

void Session::TakeCheckpoint() {
  // None when there is no room for the copy.
  StatusOr<std::unique_ptr<StateCheckpoint>> cp = model_->Checkpoint(*state_);
  checkpoint_ = cp.ok() ? std::shared_ptr<const StateCheckpoint>(*std::move(cp)) : nullptr;
  checkpoint_tokens_ = evaluated_;
  checkpoint_logits_ = logits_;
}

}  // namespace strata
