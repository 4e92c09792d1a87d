// Engine: submission checks, the round-robin scheduler loop and the event queue.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <utility>

namespace strata {

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.num_threads < 0 || options.num_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads must be in [0, 1024], got ", options.num_threads));
  }
  if (options.max_pending_token_events == 0) {
    return absl::InvalidArgumentError("max_pending_token_events must be > 0");
  }
  // std::thread reports failure to start by throwing; the core answers with a value.
  try {
    std::unique_ptr<Engine> engine(new Engine(options));
    engine->scheduler_ = std::thread([e = engine.get()] { e->SchedulerLoop(); });
    engine->Log(LogLevel::kDebug, absl::StrCat("engine started with ", engine->pool_.num_threads(),
                                               " compute threads"));
    return engine;
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("cannot start engine threads: ", e.what()));
  }
}

Engine::Engine(const EngineOptions& options) : options_(options), pool_(options.num_threads) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
}

void Engine::Log(LogLevel level, std::string_view message) const {
  if (!options_.log || level < options_.min_log_level) return;
  std::lock_guard<std::mutex> lock(log_mu_);
  try {
    options_.log(level, message);
  } catch (...) {
    // Logging must never take a request or the scheduler thread down.
  }
}

StatusOr<std::shared_ptr<Request>> Engine::Submit(Session& session, std::span<const int32_t> prompt,
                                                  GenerationParams params, void* tag, bool private_events) {
  if (&session.engine() != this) return absl::InvalidArgumentError("the session belongs to another engine");
  STRATA_RETURN_IF_ERROR(session.CheckIdle());
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 0, got ", params.max_tokens));
  }
  STRATA_RETURN_IF_ERROR(ValidateSamplingParams(params.sampling));
  STRATA_RETURN_IF_ERROR(session.CheckTokens(prompt, "prompt_tokens"));
  STRATA_RETURN_IF_ERROR(session.CheckTokens(params.stop_tokens, "stop_tokens"));
  if (prompt.empty() && session.num_tokens() == 0) {
    return absl::InvalidArgumentError("empty prompt on an empty session: nothing to generate from");
  }
  // Room for at least one generated token.
  if (session.num_tokens() + static_cast<int64_t>(prompt.size()) >= session.max_context_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("history of ", session.num_tokens(), " tokens plus a prompt of ",
                                              prompt.size(), " leaves no room in the context of ",
                                              session.max_context_tokens(), " tokens"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::FailedPreconditionError("the engine is shutting down");
  // exchange: two threads racing to submit on one session cannot both win.
  if (session.busy_.exchange(true, std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError("the session is running a request");
  }
  auto request = std::make_shared<Request>(next_id_++, &session, std::vector<int32_t>(prompt.begin(), prompt.end()),
                                           std::move(params), tag, private_events);
  session.active_ = request.get();
  queue_.push_back(request);
  work_cv_.notify_one();
  return request;
}

StatusOr<std::shared_ptr<Request>> Engine::SubmitChat(Session& session, GenerationParams params,
                                                      ChatOptions chat, void* tag, bool private_events) {
  if (&session.engine() != this) return absl::InvalidArgumentError("the session belongs to another engine");
  STRATA_RETURN_IF_ERROR(session.CheckIdle());
  if (session.conversation() == nullptr) {
    return absl::FailedPreconditionError("the model directory has no tokenizer: chat needs one");
  }
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 0, got ", params.max_tokens));
  }
  if (chat.max_tool_rounds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tool_rounds must be >= 0, got ", chat.max_tool_rounds));
  }
  if (!chat.variables.is_object()) return absl::InvalidArgumentError("template variables must be a JSON object");
  STRATA_RETURN_IF_ERROR(ValidateSamplingParams(params.sampling));
  STRATA_RETURN_IF_ERROR(session.CheckTokens(params.stop_tokens, "stop_tokens"));
  // The template's end-of-turn markers end a chat message like EOS does.
  for (int32_t id : session.conversation()->text().end_of_turn_tokens()) {
    if (id < session.vocab_size()) params.stop_tokens.push_back(id);
  }
  auto turn = std::make_unique<ChatTurn>(session.conversation(), std::move(chat));
  // Rendered now so template errors and an overlong conversation are the
  // caller's errors, not a failed request.
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, turn->Prompt());
  STRATA_RETURN_IF_ERROR(session.CheckTokens(prompt, "rendered conversation"));
  if (prompt.empty()) return absl::InvalidArgumentError("the conversation renders to no tokens");
  if (static_cast<int64_t>(prompt.size()) >= session.max_context_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("the conversation is ", prompt.size(),
                                              " tokens: no room left in the context of ",
                                              session.max_context_tokens(), " tokens"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::FailedPreconditionError("the engine is shutting down");
  if (session.busy_.exchange(true, std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError("the session is running a request");
  }
  auto request = std::make_shared<Request>(next_id_++, &session, std::move(prompt), std::move(params), tag,
                                           private_events, std::move(turn));
  session.active_ = request.get();
  queue_.push_back(request);
  work_cv_.notify_one();
  return request;
}

Status Engine::SubmitToolResult(Request& request, const std::string& call_id,
                                std::optional<std::string> content) {
  if (request.chat() == nullptr) return absl::FailedPreconditionError("the request is not a chat request");
  if (request.finished()) return absl::FailedPreconditionError("the request has finished");
  STRATA_RETURN_IF_ERROR(request.chat()->SubmitResult(call_id, std::move(content)));
  // Under the engine's mutex, so the scheduler cannot miss the wake-up
  // between checking Eligible and waiting.
  std::lock_guard<std::mutex> lock(mu_);
  work_cv_.notify_one();
  return OkStatus();
}

bool Engine::Eligible(const Request& r) const {
  if (stop_ || r.detached_ || r.cancel_reason() != FinishReason::kNone) return true;
  if (r.chat_ != nullptr && r.chat_->wait_state() == ChatTurn::Wait::kBlocked) return false;
  return r.pending_events_ < options_.max_pending_token_events;
}

void Engine::SchedulerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& r) { return Eligible(*r); });
    if (it == queue_.end()) {
      if (stop_ && queue_.empty()) return;
      work_cv_.wait(lock);
      continue;
    }
    std::shared_ptr<Request> r = std::move(*it);
    queue_.erase(it);
    if (stop_) r->Cancel();
    lock.unlock();
    bool done = true;
    // The scheduler thread has no caller to hand an exception to (the standard
    // library may throw bad_alloc): it becomes the request's error instead.
    try {
      done = Step(r);
    } catch (const std::bad_alloc&) {
      if (!r->finished()) Finish(r, FinishReason::kError, absl::ResourceExhaustedError("out of memory"));
    } catch (const std::exception& e) {
      if (!r->finished()) Finish(r, FinishReason::kError, absl::InternalError(e.what()));
    }
    lock.lock();
    // Back of the queue: every runnable request gets a token before this one gets another.
    if (!done) queue_.push_back(std::move(r));
  }
}

bool Engine::Step(const std::shared_ptr<Request>& rp) {
  if (rp->chat_ != nullptr) return StepChat(rp);
  Request& r = *rp;
  const FinishReason cancel = r.cancel_reason();
  if (cancel != FinishReason::kNone) {
    Finish(rp, cancel,
           cancel == FinishReason::kCallback
               ? OkStatus()
               : absl::CancelledError(absl::StrCat("request ", r.id(), " was cancelled")));
    return true;
  }
  Session& s = *r.session_;
  Status st = r.started_ ? s.Evaluate({}) : s.Evaluate(r.prompt_);
  if (!st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("request ", r.id(), " failed: ", st.message()));
    Finish(rp, FinishReason::kError, std::move(st));
    return true;
  }
  if (!r.started_) {
    r.started_ = true;
    r.history_ = r.prompt_;
  }
  const int32_t token = r.sampler_.Sample(s.logits_, r.history_);
  // The token joins the history now and is evaluated by the next step (or lazily
  // by the session), so a request that ends here costs no extra forward.
  s.PushPending(token);
  r.history_.push_back(token);

  const GenerationParams& p = r.params_;
  const int32_t eos = s.model().info().eos_token_id;
  if (p.stop_at_eos && eos >= 0 && token == eos) {
    Finish(rp, FinishReason::kEos, OkStatus(), token);
    return true;
  }
  if (std::find(p.stop_tokens.begin(), p.stop_tokens.end(), token) != p.stop_tokens.end()) {
    Finish(rp, FinishReason::kStopToken, OkStatus(), token);
    return true;
  }
  PushToken(rp, token);
  if (p.max_tokens > 0 && r.num_generated() >= p.max_tokens) {
    Finish(rp, FinishReason::kMaxTokens, OkStatus());
    return true;
  }
  if (s.num_tokens() >= s.max_context_tokens()) {
    Finish(rp, FinishReason::kContextFull, OkStatus());
    return true;
  }
  return false;
}

Status Engine::StartRound(Request& r, std::vector<int32_t> prompt) {
  Session& s = *r.session_;
  STRATA_ASSIGN_OR_RETURN(Alignment a, s.AlignTo(prompt));
  Log(LogLevel::kDebug, absl::StrCat("request ", r.id(), ": conversation of ", prompt.size(), " tokens, ",
                                     a.kind == AlignKind::kAppend       ? "appending "
                                     : a.kind == AlignKind::kCheckpoint ? "diverged; from the checkpoint, evaluating "
                                                                        : "diverged; from scratch, evaluating ",
                                     a.suffix.size(), " new tokens"));
  STRATA_RETURN_IF_ERROR(s.Evaluate(a.suffix));
  // The first round of a request starts a turn: later turns that re-render
  // this one differently (dropped reasoning) restart from here.
  if (!r.started_) s.TakeCheckpoint();
  r.started_ = true;
  r.history_ = std::move(prompt);
  r.chat_->BeginMessage();
  return OkStatus();
}

void Engine::RecordToken(Request& r, int32_t token) {
  std::lock_guard<std::mutex> lock(r.mu_);
  r.generated_.push_back(token);
}

void Engine::PushEvents(const std::shared_ptr<Request>& r, std::vector<Event> events) {
  if (events.empty()) return;
  const int64_t n = r->num_generated();
  std::lock_guard<std::mutex> lock(mu_);
  if (r->detached_) return;
  for (Event& ev : events) {
    ev.request = r;
    ev.num_generated = n;
    ++r->pending_events_;
    events_.push_back(std::move(ev));
  }
  event_cv_.notify_all();
}

void Engine::FinishChat(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token) {
  ChatTurn& c = *r->chat_;
  if (c.in_message()) PushEvents(r, c.EndMessage());
  // Results that did arrive join the conversation; unanswered calls stay open
  // in it for the host to answer with tool messages.
  if (c.wait_state() != ChatTurn::Wait::kNone) c.AppendResults();
  Finish(r, reason, std::move(status), token);
}

bool Engine::StepChat(const std::shared_ptr<Request>& rp) {
  Request& r = *rp;
  ChatTurn& c = *r.chat_;
  Session& s = *r.session_;
  const FinishReason cancel = r.cancel_reason();
  if (cancel != FinishReason::kNone) {
    FinishChat(rp, cancel,
               cancel == FinishReason::kCallback
                   ? OkStatus()
                   : absl::CancelledError(absl::StrCat("request ", r.id(), " was cancelled")));
    return true;
  }
  Status st;
  if (!r.started_) {
    st = StartRound(r, r.prompt_);
  } else {
    switch (c.wait_state()) {
      case ChatTurn::Wait::kNone:
        st = s.Evaluate({});  // the token sampled last step
        break;
      case ChatTurn::Wait::kBlocked: return false;  // not eligible; woken by SubmitToolResult
      case ChatTurn::Wait::kDeclined:
        FinishChat(rp, FinishReason::kToolCalls, OkStatus());
        return true;
      case ChatTurn::Wait::kReady: {
        c.AppendResults();
        auto prompt = c.Prompt();
        st = prompt.ok() ? StartRound(r, *std::move(prompt)) : prompt.status();
        break;
      }
    }
  }
  if (!st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("request ", r.id(), " failed: ", st.message()));
    FinishChat(rp, FinishReason::kError, std::move(st));
    return true;
  }

  const int32_t token = r.sampler_.Sample(s.logits_, r.history_);
  s.PushPending(token);
  r.history_.push_back(token);
  RecordToken(r, token);
  const GenerationParams& p = r.params_;
  const int32_t eos = s.model().info().eos_token_id;
  const bool is_eos = p.stop_at_eos && eos >= 0 && token == eos;
  if (is_eos || std::find(p.stop_tokens.begin(), p.stop_tokens.end(), token) != p.stop_tokens.end()) {
    PushEvents(rp, c.EndMessage());
    if (c.wait_state() == ChatTurn::Wait::kNone) {
      FinishChat(rp, is_eos ? FinishReason::kEos : FinishReason::kStopToken, OkStatus(), token);
      return true;
    }
    if (c.rounds() >= c.options().max_tool_rounds) {
      FinishChat(rp, FinishReason::kToolCalls, OkStatus(), token);
      return true;
    }
    return false;  // waits for the results (Eligible), then starts the next round
  }
  bool stopped = false;
  auto events = c.Push(token, &stopped);
  if (!events.ok()) {
    FinishChat(rp, FinishReason::kError, events.status());
    return true;
  }
  PushEvents(rp, *std::move(events));
  if (stopped) {
    FinishChat(rp, FinishReason::kStopString, OkStatus());
    return true;
  }
  if (p.max_tokens > 0 && r.num_generated() >= p.max_tokens) {
    FinishChat(rp, FinishReason::kMaxTokens, OkStatus());
    return true;
  }
  if (s.num_tokens() >= s.max_context_tokens()) {
    FinishChat(rp, FinishReason::kContextFull, OkStatus());
    return true;
  }
  return false;
}

void Engine::PushToken(const std::shared_ptr<Request>& r, int32_t token) {
  int64_t n;
  {
    std::lock_guard<std::mutex> lock(r->mu_);
    r->generated_.push_back(token);
    n = static_cast<int64_t>(r->generated_.size());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (r->detached_) return;
  ++r->pending_events_;
  Event ev;
  ev.type = EventType::kToken;
  ev.request = r;
  ev.token = token;
  ev.num_generated = n;
  events_.push_back(std::move(ev));
  event_cv_.notify_all();
}

void Engine::Finish(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token) {
  r->SetOutcome(reason, status);
  const int64_t n = r->num_generated();
  std::lock_guard<std::mutex> lock(mu_);
  // The scheduler does not touch the session after this point, so its owner may
  // use it as soon as it sees the session idle or the FINISHED event.
  Session& s = *r->session_;
  s.active_ = nullptr;
  s.busy_.store(false, std::memory_order_release);
  if (!r->detached_) {
    Event ev;
    ev.type = EventType::kFinished;
    ev.request = r;
    ev.token = token;
    ev.status = std::move(status);
    ev.finish_reason = reason;
    ev.num_generated = n;
    events_.push_back(std::move(ev));
    event_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

bool Engine::TakeEvent(const Request* only, Event* out) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    Request* r = it->request.get();
    if (only != nullptr ? r != only : r->private_events_) continue;
    *out = std::move(*it);
    events_.erase(it);
    if (out->type != EventType::kFinished && r->pending_events_ > 0) {
      --r->pending_events_;
      work_cv_.notify_one();
    }
    return true;
  }
  return false;
}

bool Engine::PollImpl(const Request* only, Event* out, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto take = [&] { return TakeEvent(only, out); };
  if (timeout_ms < 0) {
    event_cv_.wait(lock, take);
    return true;
  }
  return event_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), take);
}

bool Engine::PollEvent(Event* out, int64_t timeout_ms) { return PollImpl(nullptr, out, timeout_ms); }

bool Engine::PollEventFor(const Request& request, Event* out, int64_t timeout_ms) {
  return PollImpl(&request, out, timeout_ms);
}

Status Engine::RunToCompletion(Request& request, const std::function<bool(int32_t)>& on_token,
                               FinishReason* reason) {
  bool stopped = false;
  Event ev;
  for (;;) {
    PollEventFor(request, &ev, -1);
    if (ev.type == EventType::kToken) {
      // Tokens the scheduler produced after the callback said stop are not shown to it.
      if (!stopped && on_token && !on_token(ev.token)) {
        stopped = true;
        Cancel(request, FinishReason::kCallback);
      }
      continue;
    }
    if (reason != nullptr) *reason = ev.finish_reason;
    return ev.status;
  }
}

Status Engine::RunChatToCompletion(Request& request, const std::function<bool(const Event&)>& on_event,
                                   FinishReason* reason) {
  bool stopped = false;
  Event ev;
  for (;;) {
    PollEventFor(request, &ev, -1);
    if (ev.type == EventType::kFinished) {
      if (reason != nullptr) *reason = ev.finish_reason;
      return ev.status;
    }
    if (stopped) continue;
    if (on_event && !on_event(ev)) {
      stopped = true;
      Cancel(request, FinishReason::kCallback);
      continue;
    }
    if (ev.type != EventType::kToolCall) continue;
    // Tools are not changed while a request runs, so reading them here, beside
    // the scheduler thread, is safe.
    const ToolSpec* tool = request.session_->conversation()->FindTool(ev.tool_name);
    if (tool == nullptr || !tool->handler) {
      (void)SubmitToolResult(request, ev.call_id, std::nullopt);
      continue;
    }
    const int32_t rc = tool->handler(request, ev);
    if (!request.chat_->HasResult(ev.call_id)) {
      (void)SubmitToolResult(request, ev.call_id,
                             rc == 0 ? std::string()
                                     : nlohmann::json({{"error", absl::StrCat("tool '", ev.tool_name,
                                                                               "' failed with code ", rc)}})
                                           .dump());
    }
  }
}

void Engine::Cancel(Request& request, FinishReason reason) {
  request.Cancel(reason);
  // Under the mutex, so a scheduler between Eligible and wait cannot miss it.
  std::lock_guard<std::mutex> lock(mu_);
  work_cv_.notify_one();
}

void Engine::Detach(Request& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.detached_ = true;
    request.pending_events_ = 0;
    events_.erase(std::remove_if(events_.begin(), events_.end(),
                                 [&](const Event& e) { return e.request.get() == &request; }),
                  events_.end());
  }
  request.Cancel();
  work_cv_.notify_one();
}

void Engine::CancelAndWait(Session& session) {
  std::unique_lock<std::mutex> lock(mu_);
  if (session.active_ != nullptr) session.active_->Cancel();
  work_cv_.notify_one();
  idle_cv_.wait(lock, [&] { return session.active_ == nullptr; });
}

}  // namespace strata
