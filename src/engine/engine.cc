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

bool Engine::Eligible(const Request& r) const {
  return stop_ || r.detached_ || r.cancel_reason() != FinishReason::kNone ||
         r.pending_events_ < options_.max_pending_token_events;
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
    if (out->type == EventType::kToken && r->pending_events_ > 0) {
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
        request.Cancel(FinishReason::kCallback);
      }
      continue;
    }
    if (reason != nullptr) *reason = ev.finish_reason;
    return ev.status;
  }
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
