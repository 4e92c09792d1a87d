// Engine: submission checks, the continuous-batching scheduler and the event queue.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "base/catch_allocation.h"
#include "engine/stop_rules.h"
#include "memory/disk_tier.h"

namespace strata {
namespace {

Status ValidateSchedulingParams(const GenerationParams& p) {
  if (p.deadline_ms < 0) return absl::InvalidArgumentError(absl::StrCat("deadline_ms must be >= 0, got ", p.deadline_ms));
  if (p.max_context_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_context_tokens must be >= 0, got ", p.max_context_tokens));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.num_threads < 0 || options.num_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads must be in [0, 1024], got ", options.num_threads));
  }
  if (options.max_pending_token_events == 0) {
    return absl::InvalidArgumentError("max_pending_token_events must be > 0");
  }
  if (options.prefill_chunk_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk_tokens must be >= 0 (0: automatic), got ", options.prefill_chunk_tokens));
  }
  if (options.prefill_tokens_while_decoding < 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefill_tokens_while_decoding must be >= 0 (0: automatic), got ",
                                                   options.prefill_tokens_while_decoding));
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch must be >= 1, got ", options.max_batch));
  }
  if (options.prefix_block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix_block_tokens must be >= 1, got ", options.prefix_block_tokens));
  }
  if (options.metrics_interval_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_interval_ms must be >= 1, got ", options.metrics_interval_ms));
  }
  std::unique_ptr<PrefixStore> store;
  if (options.kv_disk_shutdown_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_disk_shutdown_ms must be >= 0, got ", options.kv_disk_shutdown_ms));
  }
  if (!options.kv_disk_dir.empty()) {
    // The tier lives under the cache: without one nothing would reach it.
    if (options.prefix_cache_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv.disk_dir ", options.kv_disk_dir,
          " needs the prefix cache on (prefix_cache_bytes > 0): the disk tier lives under it"));
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> disk,
                            DiskTier::Open(options.kv_disk_dir, options.kv_disk_bytes));
    store = std::make_unique<PrefixStore>(std::move(disk));
  }
  // std::thread reports failure to start by throwing; the core answers with a value.
  try {
    std::unique_ptr<Engine> engine(new Engine(options));
    engine->store_ = std::move(store);
    engine->scheduler_ = std::thread([e = engine.get()] { e->SchedulerLoop(); });
    engine->Log(LogLevel::kDebug, absl::StrCat("engine started with ", engine->pool_.num_threads(),
                                               " compute threads"));
    return engine;
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("cannot start engine threads: ", e.what()));
  }
}

Engine::Engine(const EngineOptions& options)
    : options_(options),
      pool_(options.num_threads),
      cache_(options.prefix_cache_bytes, options.prefix_block_tokens) {}

bool Engine::SwapInSession(Session& s) {
  for (;;) {
    if (s.SwapIn()) return true;
    // Checkpoints hold no sequence slot but may hold the only references to
    // cache blocks the swap-in needs.
    if (!cache_.EvictOne(&s.model())) return false;
    cache_slot_evictions_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Engine::CacheSnapshot(Session& s) {
  // Within the model's device checkpoints: the least recently used unpinned
  // entry makes way (marks past them go to host memory).
  const Model* m = &s.model();
  if (const int64_t slots = m->info().checkpoint_slots; slots > 0) {
    while (cache_.EntriesOf(m) >= slots) {
      if (!cache_.EvictOne(m)) break;  // pinned marks hold the rest
    }
  }
  KeepSnapshot(s.shared_model(), s.Snapshot());  // a null snapshot (no room) is not kept
}

void Engine::KeepSnapshot(const std::shared_ptr<const Model>& model,
                          std::shared_ptr<const StateSnapshot> snap, bool mark) {
  if (snap == nullptr) return;
  cache_.Insert(snap);
  if (mark || options_.kv_disk_policy == EngineOptions::DiskPolicy::kAll) Publish(model, std::move(snap));
}

void Engine::Publish(const std::shared_ptr<const Model>& model,
                     std::shared_ptr<const StateSnapshot> snap) {
  if (store_ == nullptr || !PrefixStore::Stores(*model)) return;
  // The job keeps the model and the snapshot alive until it is written.
  io_.Post([this, model, snap] {
    const int64_t deadline = publish_deadline_ns_.load(std::memory_order_acquire);
    if (deadline != 0 && std::chrono::steady_clock::now().time_since_epoch().count() > deadline) {
      Log(LogLevel::kInfo, absl::StrCat("disk tier: shutting down; a prefix of ", snap->tokens.size(),
                                        " tokens not written"));
      return;
    }
    if (Status st = store_->Publish(*snap); !st.ok()) {
      Log(LogLevel::kWarning, absl::StrCat("disk tier: writing a prefix of ", snap->tokens.size(),
                                           " tokens failed: ", st.message()));
    }
  });
}

void Engine::FetchFromDisk(const RequestPtr& r, std::vector<int32_t> target) {
  Session& s = r->session();
  std::shared_ptr<const Model> model = s.shared_model();
  const int64_t context = s.max_context_tokens();
  const int64_t evaluated = s.num_evaluated();
  io_.Post([this, r, model, context, evaluated, target = std::move(target)] {
    // What the memory cache has already need not be read again.
    int64_t have = evaluated;
    if (std::shared_ptr<const StateSnapshot> hit = cache_.Lookup(model.get(), context, target, have)) {
      have = static_cast<int64_t>(hit->tokens.size());
    }
    if (std::shared_ptr<StateSnapshot> snap = store_->Fetch(*model, context, target, have)) {
      Log(LogLevel::kDebug, absl::StrCat("request ", r->id(), ": ", snap->tokens.size(),
                                         " prompt tokens from the disk tier"));
      cache_.Insert(std::move(snap));
    }
    std::lock_guard<std::mutex> lock(mu_);
    r->fetching() = false;
    work_cv_.notify_one();
  });
}

EngineMetrics Engine::Metrics() const {
  EngineMetrics m;
  m.requests_submitted = submitted_.load(std::memory_order_relaxed);
  m.requests_finished = finished_.load(std::memory_order_relaxed);
  m.requests_running = running_.load(std::memory_order_relaxed);
  m.requests_waiting = waiting_.load(std::memory_order_relaxed);
  m.preemptions = preemptions_.load(std::memory_order_relaxed);
  m.deadline_misses = deadline_misses_.load(std::memory_order_relaxed);
  recorder_.FillLatencies(&m);
  m.prefix_lookup_tokens = prefix_lookup_tokens_.load(std::memory_order_relaxed);
  m.prefix_hit_tokens = prefix_hit_tokens_.load(std::memory_order_relaxed);
  m.prefill_tokens = prefill_tokens_.load(std::memory_order_relaxed);
  m.generated_tokens = generated_tokens_.load(std::memory_order_relaxed);
  m.decode_steps = decode_steps_.load(std::memory_order_relaxed);
  m.decode_rows = decode_rows_.load(std::memory_order_relaxed);
  m.memory_budget_bytes = options_.memory_budget_bytes;
  const MemoryTotals totals = ledger_.Totals();
  m.state_attention_bytes = totals.attention;
  m.state_recurrent_bytes = totals.recurrent;
  m.state_resident_bytes = totals.resident();
  m.state_swapped_bytes = totals.swapped;
  m.state_active_bytes = totals.active;
  m.prefix_cache_bytes = cache_.bytes();
  m.prefix_cache_entries = cache_.entries();
  m.prefix_cache_slot_evictions = cache_slot_evictions_.load(std::memory_order_relaxed);
  if (store_ != nullptr) m.kv_disk = store_->stats();
  m.device_sampled_rows = device_sampled_rows_.load(std::memory_order_relaxed);
  m.device_first_tokens = device_first_tokens_.load(std::memory_order_relaxed);
  m.steps_with_prefill = steps_with_prefill_.load(std::memory_order_relaxed);
  m.host_sampled_rows = host_sampled_rows_.load(std::memory_order_relaxed);
  m.iterations = iterations_.load(std::memory_order_relaxed);
  auto ms = [](const std::atomic<int64_t>& ns) { return static_cast<double>(ns.load(std::memory_order_relaxed)) / 1e6; };
  m.schedule_ms = ms(schedule_ns_);
  m.prefill_ms = ms(prefill_ns_);
  m.decode_ms = ms(decode_ns_);
  m.sample_ms = ms(sample_ns_);
  m.emit_ms = ms(emit_ns_);
  m.compute_threads = pool_.num_threads();
  return m;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  // The I/O thread runs what is queued when it is destroyed; the writes
  // among it stop at the deadline.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(0, options_.kv_disk_shutdown_ms));
  publish_deadline_ns_.store(std::max<int64_t>(1, deadline.time_since_epoch().count()),
                             std::memory_order_release);
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
  STRATA_RETURN_IF_ERROR(ValidateSchedulingParams(params));
  STRATA_RETURN_IF_ERROR(session.CheckTokens(prompt, "prompt_tokens"));
  STRATA_RETURN_IF_ERROR(session.CheckTokens(params.stop_tokens, "stop_tokens"));
  if (prompt.empty() && session.num_tokens() == 0) {
    return absl::InvalidArgumentError("empty prompt on an empty session: nothing to generate from");
  }
  // Room for at least one generated token.
  const int64_t cap = params.max_context_tokens > 0 ? std::min(params.max_context_tokens, session.max_context_tokens())
                                                    : session.max_context_tokens();
  if (session.num_tokens() + static_cast<int64_t>(prompt.size()) >= cap) {
    return absl::OutOfRangeError(absl::StrCat("history of ", session.num_tokens(), " tokens plus a prompt of ",
                                              prompt.size(), " leaves no room in the context of ",
                                              cap, " tokens"));
  }
  STRATA_RETURN_IF_ERROR(CheckWorstCaseFits(session, session.num_tokens() + static_cast<int64_t>(prompt.size()),
                                            params.max_tokens, cap));
  return Enqueue(session, std::vector<int32_t>(prompt.begin(), prompt.end()), std::move(params), tag,
                 private_events, nullptr);
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
  STRATA_RETURN_IF_ERROR(ValidateSchedulingParams(params));
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
  STRATA_RETURN_IF_ERROR(CheckWorstCaseFits(session, static_cast<int64_t>(prompt.size()), params.max_tokens,
                                            session.max_context_tokens()));
  return Enqueue(session, std::move(prompt), std::move(params), tag, private_events, std::move(turn));
}

StatusOr<std::shared_ptr<Request>> Engine::Enqueue(Session& session, std::vector<int32_t> prompt,
                                                   GenerationParams params, void* tag, bool private_events,
                                                   std::unique_ptr<ChatTurn> chat) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::FailedPreconditionError("the engine is shutting down");
  // Two threads racing to submit on one session cannot both win.
  if (!session.TryMarkBusy()) return absl::FailedPreconditionError("the session is running a request");
  submitted_.fetch_add(1, std::memory_order_relaxed);
  auto request = std::make_shared<Request>(next_id_++, &session, std::move(prompt), std::move(params), tag,
                                           private_events, std::move(chat));
  session.BeginRequest(request.get());  // its state now counts against the memory budget
  // A prompt the session's own state does not cover may be on disk.
  if (store_ != nullptr && cache_.enabled() && PrefixStore::Stores(session.model())) {
    std::vector<int32_t> target = request->chat() != nullptr ? request->prompt() : session.tokens();
    if (request->chat() == nullptr) target.insert(target.end(), request->prompt().begin(), request->prompt().end());
    if (static_cast<int64_t>(target.size()) > session.num_evaluated() + 1) {
      request->fetching() = true;
      FetchFromDisk(request, std::move(target));
    }
  }
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
  // A round being rendered is the render worker's until its rendering is
  // in, even when cancelled: finishing it meanwhile would touch the
  // conversation the render reads.
  if (r.runner().state() == RequestRunner::State::kRendering) return r.rendered_round().has_value();
  // Its disk lookup may insert into the cache its prefill reads first.
  if (r.fetching()) return false;
  if (stop_ || r.delivery().detached || r.cancel_reason() != FinishReason::kNone) return true;
  if (r.chat() != nullptr && r.chat()->wait_state() == ChatTurn::Wait::kBlocked) return false;
  return r.delivery().pending_events < options_.max_pending_token_events;
}

void Engine::SchedulerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::vector<RequestPtr> runnable, parked;
    for (const auto& r : queue_) {
      if (Eligible(*r)) {
        runnable.push_back(r);
      } else {
        parked.push_back(r);
      }
    }
    if (stop_) {
      for (const auto& r : runnable) r->Cancel();
    }
    if (runnable.empty()) {
      if (stop_ && queue_.empty()) return;
      if (options_.metrics_callback) {
        lock.unlock();
        MaybeReportMetrics();
        lock.lock();
        work_cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, options_.metrics_interval_ms)));
      } else {
        work_cv_.wait(lock);
      }
      continue;
    }
    lock.unlock();
    RunIteration(std::move(runnable), std::move(parked));
    MaybeReportMetrics();
    lock.lock();
  }
}

void Engine::MaybeReportMetrics() {
  if (!options_.metrics_callback) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_report_) return;
  next_report_ = now + std::chrono::milliseconds(std::max<int64_t>(1, options_.metrics_interval_ms));
  try {
    options_.metrics_callback(Metrics());
  } catch (...) {
    // A host callback must not take the scheduler down.
  }
}

void Engine::Fail(const RequestPtr& r, Status status) {
  Log(LogLevel::kWarning, absl::StrCat("request ", r->id(), " failed: ", status.message()));
  if (r->finished()) return;
  Finish(r, FinishReason::kError, std::move(status));
}

// Runs `body` and turns an exception (the standard library may throw
// bad_alloc) into a Status; `doing` says what it interrupted.
template <class F>
static Status Guarded(const char* doing, F&& body) {
  try {
    body();
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError(absl::StrCat("out of memory while ", doing));
  } catch (const std::exception& ex) {
    return absl::InternalError(absl::StrCat("internal error while ", doing, ": ", ex.what()));
  }
  return absl::OkStatus();
}

// Runs `body` for one request; an exception becomes that request's error,
// never the scheduler's.
template <class F>
static void ForRequest(Engine* e, const std::shared_ptr<Request>& r, const char* doing, F&& body,
                       void (Engine::*fail)(const std::shared_ptr<Request>&, Status)) {
  if (Status s = Guarded(doing, body); !s.ok()) (e->*fail)(r, std::move(s));
}

bool Engine::Prepare(const RequestPtr& rp, bool may_start) {
  Request& r = *rp;
  RequestRunner& run = r.runner();
  const bool chat = r.chat() != nullptr;
  auto end = [&](FinishReason reason, Status st) {
    Finish(rp, reason, std::move(st));
    return false;
  };
  auto end_cancelled = [&](FinishReason cancel) {
    return end(cancel, cancel == FinishReason::kCallback
                           ? OkStatus()
                           : absl::CancelledError(absl::StrCat("request ", r.id(), " was cancelled")));
  };
  if (const FinishReason cancel = r.cancel_reason(); cancel != FinishReason::kNone) return end_cancelled(cancel);
  if (r.deadline_missed()) {
    deadline_misses_.fetch_add(1, std::memory_order_relaxed);
    return end(FinishReason::kDeadline,
               absl::DeadlineExceededError(absl::StrCat("request ", r.id(), " missed its deadline of ",
                                                        r.params().deadline_ms, " ms")));
  }
  Session& s = r.session();
  if (!run.started() && !may_start) return true;  // waits for a state slot (NeedOf: kNone)
  if (!chat) {
    if (!run.started()) {
      run.StartPrompt(r.prompt());
      if (Status b = BeginPrefill(r); !b.ok()) return end(FinishReason::kError, std::move(b));
    }
    return true;
  }
  ChatTurn& c = *r.chat();
  auto start_round = [&](std::vector<int32_t> prompt) -> Status {
    STRATA_ASSIGN_OR_RETURN(Alignment a, s.AlignTo(prompt));
    Log(LogLevel::kDebug, absl::StrCat("request ", r.id(), ": conversation of ", prompt.size(), " tokens, ",
                                       a.kind == AlignKind::kAppend ? "appending "
                                       : a.kind == AlignKind::kCheckpoint
                                           ? "diverged; from the checkpoint, evaluating "
                                           : "diverged; from scratch, evaluating ",
                                       a.suffix.size(), " new tokens"));
    run.StartRound(std::move(prompt), std::move(a.suffix));
    return BeginPrefill(r);
  };
  Status st;
  if (!run.started()) {
    st = start_round(r.prompt());
  } else if (run.state() == RequestRunner::State::kAwaitingTools) {
    switch (c.wait_state()) {
      case ChatTurn::Wait::kNone: break;
      case ChatTurn::Wait::kBlocked: break;  // not eligible unless cancelled
      case ChatTurn::Wait::kDeclined: return end(FinishReason::kToolCalls, OkStatus());
      case ChatTurn::Wait::kReady:
        c.AppendResults();
        RenderNextRound(rp);
        break;
    }
  } else if (run.state() == RequestRunner::State::kRendering) {
    // Eligible only once the rendering is in (a cancel that stopped it was
    // answered above).
    StatusOr<std::vector<int32_t>> prompt = TakeRendering(r);
    st = prompt.ok() ? start_round(*std::move(prompt)) : prompt.status();
  }
  if (!st.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("request ", r.id(), " failed: ", st.message()));
    return end(FinishReason::kError, std::move(st));
  }
  return true;
}

void Engine::RenderNextRound(const RequestPtr& r) {
  renderer_.Post([this, r] {
    // A cancel stops the render from inside.
    StatusOr<std::vector<int32_t>> prompt = absl::UnknownError("not rendered");
    if (Status s = Guarded("preparing the request", [&] {
          prompt = r->chat()->Prompt([&r] { return r->cancel_reason() != FinishReason::kNone; });
        });
        !s.ok()) {
      prompt = std::move(s);
    }
    // Under the engine's mutex, so the scheduler cannot miss the wake-up
    // between checking Eligible and waiting.
    std::lock_guard<std::mutex> lock(mu_);
    r->rendered_round() = std::move(prompt);
    work_cv_.notify_one();
  });
  // After Post: a job that could not be queued leaves the request waiting
  // for nothing, and it fails instead (ForRequest).
  r->runner().BeginRender();
}

StatusOr<std::vector<int32_t>> Engine::TakeRendering(Request& r) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<std::vector<int32_t>> prompt = *std::move(r.rendered_round());
  r.rendered_round().reset();
  return prompt;
}

Status Engine::BeginPrefill(Request& r) {
  Session& s = r.session();
  RequestRunner& run = r.runner();
  const std::vector<int32_t>& history = s.tokens();
  const size_t before = history.size();
  const size_t evaluated = static_cast<size_t>(s.num_evaluated());
  const size_t target_len = before + run.prefill().size();
  if (!cache_.enabled() || target_len <= evaluated) return OkStatus();
  std::vector<int32_t> target = history;
  target.insert(target.end(), run.prefill().begin(), run.prefill().end());
  prefix_lookup_tokens_.fetch_add(static_cast<int64_t>(target_len - evaluated), std::memory_order_relaxed);
  // Only a prefix covering the whole history (pending token included) can
  // replace the session's state.
  const int64_t min_len = static_cast<int64_t>(std::max(evaluated, before == 0 ? 0 : before - 1));
  int64_t shared = 0;  // for the snapshot points below
  std::shared_ptr<const StateSnapshot> hit =
      cache_.Lookup(&s.model(), s.max_context_tokens(), target, min_len, &shared);
  if (hit != nullptr && hit->tokens.size() >= before) {
    if (s.Restore(*hit)) {
      prefix_hit_tokens_.fetch_add(static_cast<int64_t>(hit->tokens.size() - evaluated), std::memory_order_relaxed);
      // Reused: the entry goes down now under either policy (a written one is not written again).
      if (options_.kv_disk_policy == EngineOptions::DiskPolicy::kReused) Publish(s.shared_model(), hit);
      run.Fed(hit->tokens.size() - before);
      Log(LogLevel::kDebug, absl::StrCat("request ", r.id(), ": prefix cache hit of ", hit->tokens.size(),
                                         " tokens; evaluating ", target_len - hit->tokens.size()));
    } else if (s.failed()) {
      return absl::InternalError("restoring a prefix-cache entry failed on the device; the session must be reset");
    }
    // Otherwise the executor had no room for the copy: a miss.
  }
  // Snapshots for later requests that share a prefix: at the last block
  // boundary of the prompt, at the boundaries B, 2B, 4B, 8B... below it, so
  // a shared prefix of any length is found with at least half of it
  // restored, and where the prompt parts from one the cache has seen, so
  // the next prompt with that start restores all of it (SnapshotPoints).
  run.SetSnapshotPoints(
      SnapshotPoints(s.model(), s.num_evaluated(), static_cast<int64_t>(target_len), shared));
  return OkStatus();
}

std::vector<int64_t> Engine::SnapshotPoints(const Model& model, int64_t evaluated,
                                            int64_t target_len, int64_t shared) const {
  const int64_t b = cache_.block_tokens();
  const int64_t last = target_len / b * b;
  const int64_t parting = shared / b * b;
  // Every point cuts the prefill into one more forward pass. On a GPU a pass
  // costs a read of all the weights however few its tokens, so only the
  // rungs within 4x of the end: at most three passes, and a shared prefix is
  // still found with at least half of it restored when it covers a quarter
  // of the prompt.
  const int64_t lowest = model.info().device != "cpu" ? last / 4 : 0;
  std::vector<int64_t> points;
  for (int64_t at = b; at < last; at *= 2) {
    if (at > evaluated && at >= lowest) points.push_back(at);
  }
  if (last > evaluated) points.push_back(last);
  // The parting point, whatever the rungs: one more pass for this prompt,
  // whole hits for the ones after it.
  if (parting > evaluated && parting < last &&
      std::find(points.begin(), points.end(), parting) == points.end()) {
    points.insert(std::upper_bound(points.begin(), points.end(), parting), parting);
  }
  return points;
}

StatusOr<int64_t> Engine::PrefillChunk(Request& r, int64_t max_tokens, int32_t* first_token,
                                       const Session::Forwarder* forward) {
  Session& s = r.session();
  RequestRunner& run = r.runner();
  const int64_t tail = s.num_pending();
  size_t n = std::min(run.prefill_left(), static_cast<size_t>(std::max<int64_t>(0, max_tokens)));
  const int64_t snapshot_at = run.NextSnapshotAfter(s.num_evaluated());
  if (snapshot_at > 0 && s.num_tokens() < snapshot_at) {
    n = std::min(n, static_cast<size_t>(snapshot_at - s.num_tokens()));
  }
  *first_token = -1;
  if (n == run.prefill_left() && DeviceSamplable(s.model(), r)) {
    // The last chunk: the first token is selected where the logits are. They
    // are copied out only where this point becomes a snapshot or a chat
    // round's checkpoint, whose restores sample from them.
    const bool keep = run.chat_round() ||
                      (snapshot_at > 0 && s.num_tokens() + static_cast<int64_t>(n) == snapshot_at);
    const SamplingParams& p = r.params().sampling;
    const DecodeSampling sampling{p.temperature, p.top_k, p.top_p, p.seed, run.sample_step()};
    STRATA_RETURN_IF_ERROR(s.EvaluateAndSample(run.NextTokens(n), sampling, keep, first_token, forward));
    if (*first_token >= 0) device_first_tokens_.fetch_add(1, std::memory_order_relaxed);
  } else {
    STRATA_RETURN_IF_ERROR(s.Evaluate(run.NextTokens(n), forward));
  }
  run.Fed(n);
  prefill_tokens_.fetch_add(static_cast<int64_t>(n) + tail, std::memory_order_relaxed);
  if (snapshot_at > 0 && s.num_evaluated() == snapshot_at &&
      !cache_.Contains(&s.model(), s.max_context_tokens(), s.tokens())) {
    CacheSnapshot(s);
  }
  if (run.chat_round() && run.prefill_left() == 0) {
    // A chat round's prompt is in: its start is a turn boundary (the
    // checkpoint AlignTo rewinds to, and a prefix-cache entry).
    if (run.EndRound()) s.TakeCheckpoint();
    if (cache_.enabled() && !cache_.Contains(&s.model(), s.max_context_tokens(), s.tokens())) CacheSnapshot(s);
    r.chat()->BeginMessage();
  }
  return static_cast<int64_t>(n) + tail;
}

Engine::Need Engine::NeedOf(const Request& r) const {
  switch (r.runner().state()) {
    case RequestRunner::State::kQueued:
    case RequestRunner::State::kAwaitingTools:
    case RequestRunner::State::kRendering:
    case RequestRunner::State::kFinished:
      return Need::kNone;
    case RequestRunner::State::kPrefilling:
      // A chat round's prefill also ends there (even with nothing new to feed).
      return Need::kPrefill;
    case RequestRunner::State::kGenerating:
      break;
  }
  const Session& s = r.session();
  const int64_t tail = s.num_pending();
  if (tail == 0) return Need::kSample;
  if (tail == 1 && s.num_evaluated() > 0) return Need::kDecode;
  return Need::kPrefill;
}

double Engine::EffectiveCost(const Request& r) const {
  const Session& s = r.session();
  const int64_t fresh = std::max<int64_t>(1, static_cast<int64_t>(r.runner().prefill_left()) + s.num_pending());
  const ModelInfo& info = s.model().info();
  int64_t attention_layers = 0;
  for (const std::string& kind : info.layer_kinds) {
    // Linear-time mixers (KDA, Gated DeltaNet) cost the same at any context.
    if (kind.rfind("kda", 0) != 0 && kind.rfind("gdn", 0) != 0 && kind.rfind("linear", 0) != 0) ++attention_layers;
  }
  const double layers = std::max<int32_t>(1, info.num_layers);
  const double attended =
      s.state() == nullptr ? 0.0 : static_cast<double>(s.model().EffectiveAttendedTokens(*s.state(), fresh));
  // Per new token: one unit per layer, plus attention layers' reads of
  // `attended` earlier rows (a row costs about 1/1024 of a layer's matmuls).
  return static_cast<double>(fresh) * (layers + static_cast<double>(attention_layers) * attended / 1024.0);
}

void Engine::PrepareRunnable(std::vector<RequestPtr> runnable, const std::vector<RequestPtr>& parked,
                             std::vector<RequestPtr>* wanting, int64_t* held) {
  // Admission under each model's state pool: admitted (started, resident)
  // requests each hold a state; a new one starts only while the pool has
  // one for it (priority order, then arrival).
  PoolAdmission pools;
  for (const std::vector<RequestPtr>* list : {&std::as_const(runnable), &parked}) {
    for (const RequestPtr& r : *list) {
      if (r->runner().started() && !r->finished() && !r->session().swapped()) pools.CountAdmitted(&r->session().model());
    }
  }
  std::stable_sort(runnable.begin(), runnable.end(), [](const RequestPtr& a, const RequestPtr& b) {
    return a->params().priority > b->params().priority;
  });
  for (const RequestPtr& r : runnable) {
    bool keep = false;
    const Model* m = &r->session().model();
    const bool may_start = pools.MayStart(m, m->info().max_live_states);
    const bool was_started = r->runner().started();
    ForRequest(this, r, "preparing the request", [&] { keep = Prepare(r, may_start); }, &Engine::Fail);
    if (!keep || r->finished()) continue;
    if (!was_started && r->runner().started()) pools.Started(m);
    if (!r->runner().started()) ++*held;
    if (NeedOf(*r) != Need::kNone) wanting->push_back(r);
  }
}

ScheduleInput Engine::ScheduleSnapshot(const std::vector<RequestPtr>& wanting,
                                       const std::vector<RequestPtr>& parked) const {
  ScheduleInput in;
  in.memory_budget = options_.memory_budget_bytes;
  in.max_batch = options_.max_batch;
  in.prefill_chunk_tokens = options_.prefill_chunk_tokens;
  in.prefill_tokens_while_decoding = options_.prefill_tokens_while_decoding;
  in.active_bytes = ledger_.active();
  // Without a budget nothing is evicted for room: the entry list is not needed.
  in.cache.bytes = in.memory_budget == 0 ? cache_.bytes() : cache_.BytesAndEvictable(&in.cache.evictable);
  for (const RequestPtr& r : wanting) {
    const Session& s = r->session();
    const ModelInfo& info = s.model().info();
    WantingRequest w;
    w.seq = r->id();
    w.priority = r->params().priority;
    const Need need = NeedOf(*r);
    w.kind = need == Need::kDecode ? StepKind::kDecode : need == Need::kSample ? StepKind::kSample : StepKind::kPrefill;
    w.cost = EffectiveCost(*r);
    w.prefill_left = static_cast<int64_t>(r->runner().prefill_left());
    w.tail = s.num_pending();
    w.state_bytes = StateBytes(info, s.num_evaluated());
    w.bytes_per_token = info.state_bytes_per_token;
    w.swapped = s.swapped();
    w.on_gpu = info.device != "cpu";
    in.wanting.push_back(w);
  }
  for (const RequestPtr& r : parked) {
    const Session& s = r->session();
    in.parked.push_back({r->params().priority, r->runner().started(), s.swapped(),
                         StateBytes(s.model().info(), s.num_evaluated())});
  }
  return in;
}

void Engine::ApplyMemoryActions(const std::vector<RequestPtr>& wanting, const std::vector<RequestPtr>& parked,
                                ScheduleInput* in, SchedulePlan* plan) {
  for (size_t n = 0; n < plan->actions.size(); ++n) {
    const MemoryAction a = plan->actions[n];
    bool done = true;
    switch (a.kind) {
      case MemoryAction::Kind::kEvictCache:
        cache_.EvictTo(a.bytes);
        break;
      case MemoryAction::Kind::kSwapOut: {
        const RequestPtr& v = a.victim_parked ? parked[a.victim] : wanting[a.victim];
        done = v->session().SwapOut();  // false: no host memory for it, it stays resident
        if (!done) break;
        preemptions_.fetch_add(1, std::memory_order_relaxed);
        if (!a.victim_parked) {
          Log(LogLevel::kDebug, absl::StrCat("request ", v->id(), " preempted (", a.bytes,
                                             " bytes moved aside) for request ", wanting[a.beneficiary]->id()));
        }
        break;
      }
      case MemoryAction::Kind::kSwapIn:
        done = SwapInSession(wanting[a.beneficiary]->session());
        break;
    }
    if (done && cache_.bytes() == a.cache_bytes_after) continue;
    // The action did not do what the plan assumed (a swap refused, cache
    // entries given back for executor room): plan again with the fact. The
    // actions up to this one stay the same, so applying goes on from here.
    ActionOutcome& outcome = in->outcomes[n];
    outcome.done = done;
    outcome.cache.bytes = cache_.BytesAndEvictable(&outcome.cache.evictable);
    *plan = PlanIteration(*in);
  }
}

void Engine::ResolveStall(const Stall& stall, const RequestPtr& first, size_t wanting, size_t parked) {
  const uint64_t budget = options_.memory_budget_bytes;
  if (stall.fails) {
    Fail(first, absl::ResourceExhaustedError(absl::StrCat("request ", first->id(), " needs ", stall.alone_bytes,
                                                          " bytes of state, more than the memory budget of ",
                                                          budget, " bytes")));
    return;
  }
  // It waits for memory held by other requests (they finish), idle sessions
  // (the host resets or destroys them) or pinned marks (released).
  Log(LogLevel::kDebug,
      absl::StrCat("request ", first->id(), " waits for memory: ", stall.alone_bytes,
                   " bytes with the pinned cache; active ", ledger_.active(), ", cache ", cache_.bytes(),
                   ", budget ", budget, "; ", wanting, " wanting work, ", parked, " parked"));
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.wait_for(lock, std::chrono::milliseconds(5));
}

void Engine::RunIteration(std::vector<RequestPtr> runnable, std::vector<RequestPtr> parked) {
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  };
  const auto t_begin = Clock::now();
  iterations_.fetch_add(1, std::memory_order_relaxed);
  // 1. Cancellations, deadlines, round transitions, admission.
  std::vector<RequestPtr> wanting;
  int64_t held = 0;  // not admitted for want of a state slot
  PrepareRunnable(std::move(runnable), parked, &wanting, &held);

  // 2. The plan (batch slots, prefill tokens, memory), applied to memory
  // before anything grows.
  ScheduleInput input = ScheduleSnapshot(wanting, parked);
  SchedulePlan plan = PlanIteration(input);
  ApplyMemoryActions(wanting, parked, &input, &plan);
  for (const ScheduledStep& step : plan.steps) {
    Request& r = *wanting[step.request];
    if (!r.runner().FirstScheduled()) continue;
    recorder_.AddQueue(std::chrono::duration<double, std::milli>(Request::Clock::now() - r.submitted_at()).count());
  }
  if (plan.stall) ResolveStall(*plan.stall, wanting[plan.stall->request], wanting.size(), parked.size());

  // 3. One batched decode step per model for the decode rows, then the
  // prefill chunks; rows whose token or logits are ready join `ready`.
  const auto t_decode = Clock::now();
  schedule_ns_.fetch_add(ns(t_begin, t_decode), std::memory_order_relaxed);
  std::vector<DecodeRow> ready;
  std::vector<char> ridden(plan.steps.size(), 0);
  DecodeSteps(wanting, plan.steps, &ridden, &ready);
  const auto t_prefill = Clock::now();
  decode_ns_.fetch_add(ns(t_decode, t_prefill), std::memory_order_relaxed);
  PrefillSteps(wanting, plan.steps, ridden, &ready);

  // 4. Sampling and events for every request whose token or logits are ready.
  const auto t_emit = Clock::now();
  prefill_ns_.fetch_add(ns(t_prefill, t_emit), std::memory_order_relaxed);
  const int64_t sample_before = sample_ns_.load(std::memory_order_relaxed);
  EmitReady(ready);
  // Host sampling was timed on its own (sample_ns_); the rest is delivery.
  emit_ns_.fetch_add(ns(t_emit, Clock::now()) - (sample_ns_.load(std::memory_order_relaxed) - sample_before),
                     std::memory_order_relaxed);
  const int64_t running = static_cast<int64_t>(plan.steps.size());
  running_.store(running, std::memory_order_relaxed);
  waiting_.store(static_cast<int64_t>(wanting.size()) - running + held, std::memory_order_relaxed);
  if (wanting.empty() && held > 0) {
    // Only requests waiting for a state slot, held by parked requests: wait
    // for a poll, a tool result or a finish instead of spinning.
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

void Engine::DecodeSteps(const std::vector<RequestPtr>& wanting, const std::vector<ScheduledStep>& steps,
                         std::vector<char>* ridden, std::vector<DecodeRow>* ready) {
  // One group per model and token-selection path (two when some rows sample
  // on the device and others on the host), in schedule order.
  struct Group {
    const Model* model;
    bool on_device;
    std::vector<RequestPtr> rows;
  };
  std::vector<Group> groups;
  for (const ScheduledStep& step : steps) {
    if (step.kind != StepKind::kDecode) continue;
    const RequestPtr& r = wanting[step.request];
    const Model* m = &r->session().model();
    const bool on_device = DeviceSamplable(*m, *r);
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const Group& x) { return x.model == m && x.on_device == on_device; });
    if (g == groups.end()) {
      groups.push_back({m, on_device, {}});
      g = groups.end() - 1;
    }
    g->rows.push_back(r);
  }
  for (const Group& g : groups) {
    // The first prefill chunk of the group's model rides its step, so the
    // weights the step reads serve both (continuous batching).
    size_t at = steps.size();
    if (g.on_device) {
      for (size_t i = 0; i < steps.size() && at == steps.size(); ++i) {
        const RequestPtr& r = wanting[steps[i].request];
        if (steps[i].kind == StepKind::kPrefill && !(*ridden)[i] && &r->session().model() == g.model) at = i;
      }
    }
    if (at == steps.size()) {
      DecodeGroup(*g.model, g.rows, g.on_device, ready);
      continue;
    }
    Rider rider{.r = wanting[steps[at].request], .chunk = steps[at].chunk};
    DecodeGroup(*g.model, g.rows, g.on_device, ready, &rider);
    if (!rider.ran) continue;
    (*ridden)[at] = 1;
    if (!rider.used.ok()) {
      Fail(rider.r, rider.used.status());
    } else if (NeedOf(*rider.r) == Need::kSample) {
      ready->push_back({rider.r, rider.first_token});
    }
  }
}

void Engine::PrefillSteps(const std::vector<RequestPtr>& wanting, const std::vector<ScheduledStep>& steps,
                          const std::vector<char>& ridden, std::vector<DecodeRow>* ready) {
  for (size_t i = 0; i < steps.size(); ++i) {
    const ScheduledStep& step = steps[i];
    if (ridden[i]) continue;
    const RequestPtr& r = wanting[step.request];
    if (step.kind == StepKind::kSample) {
      ready->push_back({r, -1});
      continue;
    }
    if (step.kind != StepKind::kPrefill) continue;
    ForRequest(this, r, "prefilling the prompt", [&] {
      int32_t first_token = -1;
      StatusOr<int64_t> used = PrefillChunk(*r, step.chunk, &first_token);
      if (!used.ok()) {
        Fail(r, used.status());
        return;
      }
      if (NeedOf(*r) == Need::kSample) ready->push_back({r, first_token});
    }, &Engine::Fail);
  }
}

void Engine::EmitReady(const std::vector<DecodeRow>& ready) {
  for (const DecodeRow& d : ready) {
    const RequestPtr& r = d.r;
    if (r->finished()) continue;
    ForRequest(this, r, "sampling and delivering a token", [&] { SampleAndEmit(r, d.token); }, &Engine::Fail);
  }
}

bool Engine::DeviceSamplable(const Model& model, const Request& r) const {
  if (!options_.device_sampling || !model.info().device_sampling) return false;
  const SamplingParams& p = r.params().sampling;
  return p.min_p == 0.0f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

void Engine::DecodeGroup(const Model& model, const std::vector<RequestPtr>& rows, bool on_device,
                         std::vector<DecodeRow>* ready, Rider* rider) {
  const size_t batch = rows.size();
  const size_t vocab = static_cast<size_t>(model.info().vocab_size);
  std::vector<int32_t> tokens(batch);
  std::vector<SequenceState*> states(batch);
  for (size_t b = 0; b < batch; ++b) {
    Session& s = rows[b]->session();
    tokens[b] = s.tokens().back();
    states[b] = s.mutable_state();
  }
  Status st;
  std::vector<float> logits;
  std::vector<int32_t> sampled;
  try {
    if (on_device) {
      std::vector<DecodeSampling> sampling(batch);
      for (size_t b = 0; b < batch; ++b) {
        const SamplingParams& p = rows[b]->params().sampling;
        sampling[b] = DecodeSampling{p.temperature, p.top_k, p.top_p, p.seed, rows[b]->runner().sample_step()};
      }
      sampled.assign(batch, -1);
      if (rider != nullptr) {
        bool called = false;
        const Session::Forwarder forward = [&](std::span<const int32_t> feed, SequenceState& state,
                                               const DecodeSampling* sp, int32_t* token, float* kept) {
          called = true;
          return model.DecodeAndPrefill(tokens, states, sampling, sampled.data(),
                                        PrefillPart{feed, &state, sp, token, kept});
        };
        std::vector<int64_t> before(batch);
        for (size_t b = 0; b < batch; ++b) before[b] = states[b]->num_tokens();
        rider->used = PrefillChunk(*rider->r, rider->chunk, &rider->first_token, &forward);
        rider->ran = true;
        st = rider->used.status();
        // An argument error leaves the session as it was (Session::Run);
        // with no decode row advanced either, nothing ran.
        bool untouched = !st.ok() && !rider->r->session().failed();
        for (size_t b = 0; untouched && b < batch; ++b) untouched = states[b]->num_tokens() == before[b];
        if (untouched) {
          // Each part runs on its own, the chunk in PrefillSteps (which
          // reports its error).
          rider->ran = false;
          st = model.DecodeBatchSample(tokens, states, sampling, sampled.data());
        } else if (st.ok() && !called) {
          // The chunk needed no forward (a chat round with nothing new).
          st = model.DecodeBatchSample(tokens, states, sampling, sampled.data());
        } else if (st.ok()) {
          steps_with_prefill_.fetch_add(1, std::memory_order_relaxed);
        }
      } else {
        st = model.DecodeBatchSample(tokens, states, sampling, sampled.data());
      }
      for (size_t b = 0; st.ok() && b < batch; ++b) {
        if (sampled[b] < 0 || static_cast<size_t>(sampled[b]) >= vocab) {
          st = absl::InternalError(absl::StrCat("DecodeBatchSample returned token ", sampled[b], " for row ", b));
        }
      }
    } else {
      logits.resize(batch * vocab);
      st = model.DecodeBatch(tokens, states, logits.data());
    }
  } catch (const std::bad_alloc&) {
    st = OutOfMemoryError("out of memory while running the batched decode step");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("internal error in the batched decode step: ", e.what()));
  }
  // A row whose state consumed its token: its logits row (host path) or
  // token (device path) is the step's result for it.
  auto take = [&](size_t b) {
    // On the device path the logits never left the device; the sampled
    // token follows at once.
    rows[b]->session().CommitDecodeStep(on_device ? std::span<const float>()
                                                  : std::span<const float>(logits).subspan(b * vocab, vocab));
    ready->push_back({rows[b], on_device ? sampled[b] : -1});
  };
  if (st.ok()) {
    decode_steps_.fetch_add(1, std::memory_order_relaxed);
    decode_rows_.fetch_add(static_cast<int64_t>(batch), std::memory_order_relaxed);
    (on_device ? device_sampled_rows_ : host_sampled_rows_).fetch_add(static_cast<int64_t>(batch),
                                                                      std::memory_order_relaxed);
    for (size_t b = 0; b < batch; ++b) take(b);
    return;
  }
  // One failing request must not take the batch with it. A batch runs its
  // rows in order (the CPU default) or fails before any row runs (argument
  // errors, checked first). Rows whose state advanced were run, logits
  // row written (host path); the first row that did not is the one at
  // fault (its state is unknown: it fails and its session needs a reset);
  // the rows after it never ran and are retried one by one. On the device
  // path a failed call returns no tokens, so rows that advanced fail too.
  Log(LogLevel::kWarning, absl::StrCat("batched decode of ", batch, " rows failed (", st.message(), ")"));
  const bool argument = absl::IsInvalidArgument(st) || absl::IsOutOfRange(st);
  bool blamed = false;
  for (size_t b = 0; b < batch; ++b) {
    const RequestPtr& r = rows[b];
    Session& s = r->session();
    if (s.state_caught_up()) {
      if (!on_device && !logits.empty()) {
        take(b);
      } else {
        s.MarkFailed();
        Fail(r, st);
      }
      continue;
    }
    if (!blamed && !argument) {
      blamed = true;
      s.MarkFailed();
      Fail(r, st);
      continue;
    }
    ForRequest(this, r, "evaluating the step's token alone", [&] {
      Status one = r->session().Evaluate({});
      if (one.ok()) {
        ready->push_back({r, -1});
      } else {
        Fail(r, std::move(one));
      }
    }, &Engine::Fail);
  }
}

void Engine::NoteToken(Request& r) {
  bool first = false;
  const double ms = r.runner().TokenInterval(Request::Clock::now(), r.submitted_at(), &first);
  if (first) {
    recorder_.AddTtft(ms);
  } else {
    recorder_.AddTpot(ms);
  }
  generated_tokens_.fetch_add(1, std::memory_order_relaxed);
}

// Host sampling from the session's logits, timed as the sampling phase.
static int32_t HostSample(Sampler& sampler, std::span<const float> logits, std::span<const int32_t> history,
                          std::atomic<int64_t>* ns) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t token = sampler.Sample(logits, history);
  ns->fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
      std::memory_order_relaxed);
  return token;
}

void Engine::SampleAndEmit(const RequestPtr& rp, int32_t device_token) {
  Request& r = *rp;
  Session& s = r.session();
  RequestRunner& run = r.runner();
  const int32_t token =
      device_token >= 0 ? device_token : HostSample(run.sampler(), s.kept_logits(), run.history(), &sample_ns_);
  // The token joins the history now and is evaluated by the next step (or lazily
  // by the session), so a request that ends here costs no extra forward.
  s.PushPending(token);
  run.Selected(token);
  // A chat request counts every generated token, end tokens included (its
  // text never shows them); a token request counts the delivered ones.
  if (r.chat() != nullptr) r.AppendGenerated(token);
  NoteToken(r);
  const GenerationParams& p = r.params();
  if (const FinishReason end = EndTokenReason(p, s.model().info().eos_token_id, token); end != FinishReason::kNone) {
    EndMessage(rp, end, token);
    return;
  }
  if (!Deliver(rp, token)) return;
  const FinishReason limit = LimitReason(p, r.num_generated(), s.num_tokens(), ContextCap(p, s.max_context_tokens()));
  if (limit != FinishReason::kNone) Finish(rp, limit, OkStatus());
}

void Engine::EndMessage(const RequestPtr& r, FinishReason reason, int32_t token) {
  ChatTurn* c = r->chat();
  if (c == nullptr) {
    Finish(r, reason, OkStatus(), token);
    return;
  }
  PushEvents(r, c->EndMessage());
  if (c->wait_state() == ChatTurn::Wait::kNone) {
    Finish(r, reason, OkStatus(), token);
  } else if (c->rounds() >= c->options().max_tool_rounds) {
    Finish(r, FinishReason::kToolCalls, OkStatus(), token);
  } else {
    r->runner().AwaitTools();  // until the results are in (Eligible), then the next round
  }
}

bool Engine::Deliver(const RequestPtr& r, int32_t token) {
  ChatTurn* c = r->chat();
  if (c == nullptr) {
    r->AppendGenerated(token);
    Event ev;
    ev.type = EventType::kToken;
    ev.token = token;
    PushEvents(r, {std::move(ev)});
    return true;
  }
  bool stopped = false;
  auto events = c->Push(token, &stopped);
  if (!events.ok()) {
    Finish(r, FinishReason::kError, events.status());
    return false;
  }
  PushEvents(r, *std::move(events));
  if (!stopped) return true;
  Finish(r, FinishReason::kStopString, OkStatus());
  return false;
}

void Engine::PushEvents(const std::shared_ptr<Request>& r, std::vector<Event> events) {
  if (events.empty()) return;
  const int64_t n = r->num_generated();
  std::lock_guard<std::mutex> lock(mu_);
  if (r->delivery().detached) return;
  for (Event& ev : events) {
    ev.request = r;
    ev.num_generated = n;
    ++r->delivery().pending_events;
    events_.Push(std::move(ev));
  }
  event_cv_.notify_all();
}

void Engine::Finish(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token) {
  if (ChatTurn* c = r->chat(); c != nullptr) {
    if (c->in_message()) PushEvents(r, c->EndMessage());
    // Results that did arrive join the conversation; unanswered calls stay
    // open in it for the host to answer with tool messages.
    if (c->wait_state() != ChatTurn::Wait::kNone) c->AppendResults();
  }
  // A preempted request's state comes back into the accounting with its
  // session, which leaves the budget (idle sessions are the host's).
  r->session().LeaveBudget();
  r->runner().Finish();
  finished_.fetch_add(1, std::memory_order_relaxed);
  const int64_t n = r->num_generated();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(queue_.begin(), queue_.end(), r);
  if (it != queue_.end()) queue_.erase(it);
  // The scheduler does not touch the session after this point, so its owner may
  // use it as soon as it sees the session idle, the request finished or the
  // FINISHED event. The session goes idle first: a host that polls the
  // request's status (strata_request_get_status) and then forks or submits on
  // the session must find it idle (the stress test caught the other order).
  r->session().EndRequest();
  r->SetOutcome(reason, status);
  if (!r->delivery().detached) {
    Event ev;
    ev.type = EventType::kFinished;
    ev.request = r;
    ev.token = token;
    ev.status = std::move(status);
    ev.finish_reason = reason;
    ev.num_generated = n;
    events_.Push(std::move(ev));
    event_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

bool Engine::TakeEvent(const Request* only, Event* out) {
  if (!(only != nullptr ? events_.TakeFor(only, out) : events_.TakeAny(out))) return false;
  Request* r = out->request.get();
  if (out->type != EventType::kFinished && r->delivery().pending_events > 0) {
    --r->delivery().pending_events;
    work_cv_.notify_one();
  }
  return true;
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
  return RunEvents(request, [&](const Event& ev) { return !on_token || on_token(ev.token); }, reason);
}

Status Engine::RunChatToCompletion(Request& request, const std::function<bool(const Event&)>& on_event,
                                   FinishReason* reason) {
  return RunEvents(request, on_event, reason);
}

Status Engine::RunEvents(Request& request, const std::function<bool(const Event&)>& on_event,
                         FinishReason* reason) {
  bool stopped = false;
  Event ev;
  for (;;) {
    PollEventFor(request, &ev, -1);
    if (ev.type == EventType::kFinished) {
      if (reason != nullptr) *reason = ev.finish_reason;
      return ev.status;
    }
    // Events the scheduler produced after the callback said stop are not shown to it.
    if (stopped) continue;
    if (on_event && !on_event(ev)) {
      stopped = true;
      Cancel(request, FinishReason::kCallback);
      continue;
    }
    if (ev.type == EventType::kToolCall) AnswerToolCall(request, ev);
  }
}

void Engine::AnswerToolCall(Request& request, const Event& ev) {
  // Tools are not changed while a request runs, so reading them here, beside
  // the scheduler thread, is safe.
  const ToolSpec* tool = request.session().conversation()->FindTool(ev.tool_name);
  if (tool == nullptr || !tool->handler) {
    (void)SubmitToolResult(request, ev.call_id, std::nullopt);
    return;
  }
  const int32_t rc = tool->handler(request, ev);
  if (request.chat()->HasResult(ev.call_id)) return;
  (void)SubmitToolResult(request, ev.call_id,
                         rc == 0 ? std::string()
                                 : nlohmann::json({{"error", absl::StrCat("tool '", ev.tool_name,
                                                                           "' failed with code ", rc)}})
                                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Engine::Cancel(Request& request, FinishReason reason) {
  request.Cancel(reason);
  // Under the mutex, so a scheduler between Eligible and wait cannot miss it.
  std::lock_guard<std::mutex> lock(mu_);
  work_cv_.notify_one();
}

Status Engine::CheckWorstCaseFits(const Session& session, int64_t prompt_tokens, int64_t max_tokens,
                                  int64_t context_tokens) const {
  const uint64_t budget = options_.memory_budget_bytes;
  if (budget == 0) return OkStatus();
  const int64_t worst =
      std::min(context_tokens, max_tokens > 0 ? prompt_tokens + max_tokens : context_tokens);
  const uint64_t bytes = StateBytes(session.model().info(), worst);
  if (bytes <= budget) return OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "at its longest (", worst, " tokens: prompt and history ", prompt_tokens, ", max_tokens ", max_tokens,
      ", context ", context_tokens, ") the request needs ", bytes,
      " bytes of state, more than the engine's memory budget of ", budget,
      " bytes; lower max_tokens or raise memory_budget_bytes"));
}

void Engine::Detach(Request& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.delivery() = Request::Delivery{/*detached=*/true, /*pending_events=*/0};
    events_.Drop(&request);
  }
  request.Cancel();
  work_cv_.notify_one();
  // The owner may reuse the session as soon as this returns, so wait until
  // the scheduler has let go of it (Finish marks the session idle and the
  // request finished under mu_). The scheduler itself never waits on itself:
  // a log or metrics callback that misuses the API must not deadlock it.
  if (std::this_thread::get_id() == scheduler_.get_id()) return;
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return request.finished(); });
}

void Engine::CancelAndWait(Session& session) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Request* active = session.active_request(); active != nullptr) active->Cancel();
  work_cv_.notify_one();
  idle_cv_.wait(lock, [&] { return session.active_request() == nullptr; });
}

}  // namespace strata
