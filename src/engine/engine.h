// Engine: the compute thread pool, the scheduler thread that serves every
// submitted request with continuous batching (each iteration: one batched
// decode step of all decoding requests, plus prefill chunks under a token
// budget, admitted under a memory budget by priority and effective cost),
// the exact prefix cache, serving metrics, and the event queue that carries
// tokens, text, tool calls and outcomes back to the host. docs/serving.md
// describes the design. Chat requests
// run the tool loop here: generate, deliver tool calls, wait for results,
// append them through the template and continue from the held state.
#ifndef STRATA_ENGINE_ENGINE_H_
#define STRATA_ENGINE_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/chat_turn.h"
#include "engine/event.h"
#include "engine/event_queue.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/session.h"
#include "engine/worker_thread.h"
#include "memory/memory_ledger.h"
#include "memory/prefix_cache.h"
#include "memory/prefix_store.h"

namespace strata {

enum class LogLevel : int32_t { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
using LogFn = std::function<void(LogLevel, std::string_view)>;

struct EngineOptions {
  int num_threads = 0;  // compute threads; 0: one per core
  LogFn log;            // may be empty
  LogLevel min_log_level = LogLevel::kInfo;
  // Undelivered TOKEN events per request before the scheduler pauses it, so a
  // host that polls slowly bounds memory and a cancel lands within this many tokens.
  size_t max_pending_token_events = 64;

  // Prompt tokens evaluated per scheduler iteration, all prefills together,
  // so a long prompt is fed in chunks between decode steps of the running
  // requests instead of stalling them. 0: automatic: kCpuPrefillChunk on the
  // CPU; kGpuPrefillChunk when the iteration's work runs on a GPU, whose
  // prefill rate needs large chunks (a 33K prompt in 512-token slices took
  // 2.8x as long as one Forward on the H200). >= 0.
  int64_t prefill_chunk_tokens = 0;
  // The prefill budget of an iteration that also runs a decode step: how
  // long decoding requests may stall behind prefills per token (TPOT),
  // traded against time to first token. Capped by the chunk. 0: automatic:
  // the chunk on the CPU; kGpuPrefillWhileDecoding on a GPU. >= 0.
  int64_t prefill_tokens_while_decoding = 0;
  // Lets decode steps select tokens on the device (Model::DecodeBatchSample)
  // where the model can and the request's sampling allows; false copies
  // every row's logits to the host sampler (for A/B measurements).
  bool device_sampling = true;
  // Most decode rows in one batched step. >= 1.
  int32_t max_batch = 64;
  // Bytes of sequence state (ModelInfo::state_bytes_per_token/_per_sequence
  // accounting) plus prefix-cache snapshots the scheduler may keep resident.
  // Growth is planned before it is applied: short of room, the cache is
  // evicted, then lower-priority requests are preempted, else the request
  // waits. 0: unlimited.
  uint64_t memory_budget_bytes = 0;
  // Capacity of the prefix cache in bytes; 0 turns it off.
  uint64_t prefix_cache_bytes = 256ull << 20;
  // Block size of the prefix cache's chained hashes; a prefill snapshots its
  // state at the last block boundary of its prompt. >= 1.
  int32_t prefix_block_tokens = 64;
  // A disk tier under the prefix cache (empty: none): every entry the cache
  // takes is also written there as a state object (memory/prefix_store.h),
  // and a request whose prompt the cache cannot cover looks there before it
  // runs, so engines in other processes on the same directory, and the next
  // run of this one, restore the prefixes exactly. Reads and writes run on
  // the engine's I/O thread, never the scheduler's; a request waits for its
  // own lookup. Only models whose states can be saved (the CPU's) use it.
  std::string kv_disk_dir;
  uint64_t kv_disk_bytes = uint64_t{8} << 30;  // the directory's capacity, > 0
  // How long the engine's destruction may spend writing the entries still
  // queued for the disk tier (a short-lived process leaves its prefixes for
  // the next one, within this bound); what is left then is not written.
  int64_t kv_disk_shutdown_ms = 10000;
  // Which entries go down: kAll writes every entry the cache takes (the
  // next process finds any prefix this one saw); kReused only marks and
  // entries once a later request hit them (shared system prompts and
  // documents go down, one-off prompt tails do not).
  enum class DiskPolicy { kAll, kReused };
  DiskPolicy kv_disk_policy = DiskPolicy::kAll;
  // Called every metrics_interval_ms on the scheduler thread (keep it short).
  std::function<void(const EngineMetrics&)> metrics_callback;
  int64_t metrics_interval_ms = 1000;
};

// Applies a `key=value,...` tuning string (strata_engine_params::options) to
// `options`: the scheduler knobs that are not part of the stable C structs
// (`scheduler.prefill_chunk_tokens`, `scheduler.prefill_tokens_while_decoding`,
// `sampling.on_device` for device_sampling).
// Unknown keys and bad values are InvalidArgument naming `what` and the key;
// on error `options` is unchanged.
Status ApplyEngineOptionString(absl::string_view text, absl::string_view what, EngineOptions* options);

// Thread-safety: every public method is thread-safe. Sessions must be
// destroyed before the engine.
class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // Cancels whatever still runs and joins the scheduler thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  ThreadPool* pool() { return &pool_; }
  void Log(LogLevel level, std::string_view message) const;

  // Validates, then queues a generation on `session` (which must not be busy).
  // On error nothing is queued and the session is unchanged.
  StatusOr<std::shared_ptr<Request>> Submit(Session& session, std::span<const int32_t> prompt,
                                            GenerationParams params, void* tag = nullptr,
                                            bool private_events = false);

  // Validates, renders the session's conversation with the generation prompt
  // and queues a chat request: kText / kToolCall / kToolError events, then
  // kFinished. Generation stops at the model's EOS, the template's end-of-turn
  // tokens and params.stop_tokens. A message with tool calls waits until
  // every call is answered (SubmitToolResult), then the tool messages are
  // appended and generation continues after aligning the history with the
  // new rendering (Session::AlignTo: normally only the new suffix is
  // evaluated). FailedPrecondition when the session has no conversation or
  // the model no chat template; template errors are InvalidArgument.
  StatusOr<std::shared_ptr<Request>> SubmitChat(Session& session, GenerationParams params, ChatOptions chat,
                                                void* tag = nullptr, bool private_events = false);
  // Answers tool call `call_id` of a chat request with `content` (the tool
  // message's content), or declines it (nullopt: the request then ends with
  // kToolCalls once its message is complete). Safe from any thread.
  Status SubmitToolResult(Request& request, const std::string& call_id, std::optional<std::string> content);

  // Takes the oldest event of a non-private request. Waits up to `timeout_ms`
  // (negative: forever). False when none arrived in time.
  bool PollEvent(Event* out, int64_t timeout_ms);
  // Takes the oldest event of `request` only.
  bool PollEventFor(const Request& request, Event* out, int64_t timeout_ms);

  // The blocking loop: polls `request`'s events, hands each token to `on_token`
  // on this thread (returning false cancels the request with kCallback) and
  // returns at its FINISHED event. Returns the request's status (OK for
  // kCallback) and stores the reason in `*reason` when non-null.
  Status RunToCompletion(Request& request, const std::function<bool(int32_t)>& on_token,
                         FinishReason* reason);

  // The blocking chat loop: polls `request`'s events on this thread and hands
  // each non-final one to `on_event` (false cancels with kCallback). For a
  // kToolCall event it then calls the tool's handler on this thread; when the
  // handler returns without answering, the call is answered with "" (handler
  // returned 0) or with {"error": "tool 'NAME' failed with code N"} (nonzero),
  // so the model sees the failure and the loop goes on. A tool without a
  // handler is declined (the request ends with kToolCalls).
  Status RunChatToCompletion(Request& request, const std::function<bool(const Event&)>& on_event,
                             FinishReason* reason);

  // Cancels `request` (see Request::Cancel) and wakes the scheduler, which a
  // request waiting for tool results or for its events to be polled needs.
  void Cancel(Request& request, FinishReason reason = FinishReason::kCancelled);

  // The owner lets go of `request`: it is cancelled, its queued and future
  // events are dropped, and the call returns once the scheduler has finished
  // it, so its session is idle (a cancelled request finishes within one
  // scheduler iteration).
  void Detach(Request& request);

  // ResourceExhausted when a request's longest possible state (prompt and
  // history plus max_tokens, at most `context_tokens`; 0 max_tokens: the
  // whole context) exceeds the memory budget on its own, so it is refused at
  // submit instead of failing after part of its prefill.
  Status CheckWorstCaseFits(const Session& session, int64_t prompt_tokens, int64_t max_tokens,
                            int64_t context_tokens) const;

  // Cancels the request running on `session`, if any, and waits until the
  // scheduler has finished it. Called by ~Session.
  void CancelAndWait(Session& session);

  // Serving metrics now.
  EngineMetrics Metrics() const;
  PrefixCache& prefix_cache() { return cache_; }
  // Keeps `snap` (a snapshot of `model`'s state) in the prefix cache, and
  // in the disk tier when there is one and its policy takes it (`mark`: a
  // session's mark, which every policy writes).
  void KeepSnapshot(const std::shared_ptr<const Model>& model,
                    std::shared_ptr<const StateSnapshot> snap, bool mark = false);
  const EngineOptions& options() const { return options_; }
  // The byte counters of sequence state; each session holds an account in it.
  MemoryLedger& ledger() { return ledger_; }

 private:
  using RequestPtr = std::shared_ptr<Request>;
  // What a request needs from this iteration.
  enum class Need { kNone, kPrefill, kDecode, kSample };

  explicit Engine(const EngineOptions& options);
  // Claims the idle `session` and queues a validated request on it.
  StatusOr<std::shared_ptr<Request>> Enqueue(Session& session, std::vector<int32_t> prompt, GenerationParams params,
                                             void* tag, bool private_events, std::unique_ptr<ChatTurn> chat);
  // The blocking loop of RunToCompletion and RunChatToCompletion: hands
  // every non-final event to `on_event` and answers tool calls.
  Status RunEvents(Request& request, const std::function<bool(const Event&)>& on_event, FinishReason* reason);
  // Runs the tool of a kToolCall event on this thread and answers the call.
  void AnswerToolCall(Request& request, const Event& ev);
  void SchedulerLoop();
  // A token or logits ready for sampling; token >= 0 was sampled on the device.
  struct DecodeRow {
    RequestPtr r;
    int32_t token = -1;  // sampled on the device; -1: sample from the session's logits
  };
  // One scheduler iteration over `runnable` (no lock held): prepare, plan
  // (PlanIteration), apply the plan's memory actions, run its steps, emit.
  // `parked`: admitted requests not runnable now (backpressure, waiting for
  // tool results), whose states may still be preempted.
  void RunIteration(std::vector<RequestPtr> runnable, std::vector<RequestPtr> parked);
  // Prepares every runnable request in priority order under the state-pool
  // admission; those that then want work go to `wanting`, those still
  // waiting for a state slot count in `held`.
  void PrepareRunnable(std::vector<RequestPtr> runnable, const std::vector<RequestPtr>& parked,
                       std::vector<RequestPtr>* wanting, int64_t* held);
  // The scheduler's view of the iteration (indices follow the two lists).
  ScheduleInput ScheduleSnapshot(const std::vector<RequestPtr>& wanting,
                                 const std::vector<RequestPtr>& parked) const;
  // Applies `plan`'s memory actions in order; where one does not do what the
  // plan assumed, records the fact in `input` and replaces `plan`.
  void ApplyMemoryActions(const std::vector<RequestPtr>& wanting, const std::vector<RequestPtr>& parked,
                          ScheduleInput* input, SchedulePlan* plan);
  // Nothing fit the budget: fails the request that never can, or waits a little.
  void ResolveStall(const Stall& stall, const RequestPtr& first, size_t wanting, size_t parked);
  // A prefill chunk run by a decode group's step (Model::DecodeAndPrefill).
  struct Rider {
    RequestPtr r;
    int64_t chunk = 0;
    bool ran = false;  // else PrefillSteps runs it alone
    StatusOr<int64_t> used = 0;
    int32_t first_token = -1;
  };
  // One step per decode group; a group sampling on the device takes the
  // first prefill chunk of its model along (`ridden` marks its step).
  void DecodeSteps(const std::vector<RequestPtr>& wanting, const std::vector<ScheduledStep>& steps,
                   std::vector<char>* ridden, std::vector<DecodeRow>* ready);
  void PrefillSteps(const std::vector<RequestPtr>& wanting, const std::vector<ScheduledStep>& steps,
                    const std::vector<char>& ridden, std::vector<DecodeRow>* ready);
  // Samples (where needed), emits events and applies the stop rules.
  void EmitReady(const std::vector<DecodeRow>& ready);
  // Cancellation, deadlines, chat round transitions and admission of a
  // request; false when it finished.
  // `may_start`: false while the model's state pool
  // (ModelInfo::max_live_states) is taken by admitted requests; a request
  // not started yet then waits.
  bool Prepare(const RequestPtr& r, bool may_start = true);
  Need NeedOf(const Request& r) const;
  // Renders a chat request's next round on the render worker (its tool
  // results are appended); Eligible once the rendering is in.
  void RenderNextRound(const RequestPtr& r);
  StatusOr<std::vector<int32_t>> TakeRendering(Request& r);
  // The runner has started a feed after the session's history: restores the
  // longest cached prefix first and plans the feed's snapshot points.
  // A restore that failed on the device (the session's state is unknown) is
  // the request's error.
  Status BeginPrefill(Request& r);
  // Evaluates up to `max_tokens` of r's prefill; returns the tokens used.
  // The chunk that ends the prefill selects the first token on the device
  // when the request allows it (DeviceSamplable): *first_token, else -1.
  // `forward`: how the session calls the model (null: on its own).
  StatusOr<int64_t> PrefillChunk(Request& r, int64_t max_tokens, int32_t* first_token,
                                 const Session::Forwarder* forward = nullptr);
  // Logits are ready: selects the token, applies the stop rules
  // (stop_rules.h) and emits events, for token and chat requests alike.
  // `token` >= 0: already selected on the device (no logits to sample).
  void SampleAndEmit(const RequestPtr& r, int32_t token = -1);
  // An end token (`reason` kEos or kStopToken) closes the message: the
  // request finishes, or a chat message with tool calls waits for results.
  void EndMessage(const RequestPtr& r, FinishReason reason, int32_t token);
  // Delivers a non-end token: a kToken event, or a chat message's text and
  // tool-call events. False when that finished the request (a stop string,
  // a detokenizer error).
  bool Deliver(const RequestPtr& r, int32_t token);
  // Scheduling order (higher first): priority, then running before waiting,
  // then lower effective cost, then arrival.
  double EffectiveCost(const Request& r) const;
  // Snapshot points of a prefill ending at `target_len` after `evaluated`
  // whose first `shared` tokens are the most it has in common with a cached
  // entry (PrefixCache::SharedPrefix), in ascending order.
  std::vector<int64_t> SnapshotPoints(const Model& model, int64_t evaluated, int64_t target_len,
                                      int64_t shared) const;
  // Puts a checkpoint of `s` in the prefix cache (none when there is no room
  // for its copy).
  void CacheSnapshot(Session& s);
  // Posts `r`'s lookup of `target` (its whole prompt after the history) in
  // the disk tier to the I/O thread, which puts what it finds in the prefix
  // cache and clears r->fetching() (set by the caller, under mu_).
  void FetchFromDisk(const RequestPtr& r, std::vector<int32_t> target);
  // Writes `snap` to the disk tier on the I/O thread.
  void Publish(const std::shared_ptr<const Model>& model, std::shared_ptr<const StateSnapshot> snap);
  // Session::SwapIn, evicting prefix-cache snapshots of the session's model
  // while its pools have no room; false: the request keeps waiting.
  bool SwapInSession(Session& s);
  // Token selection for one decode group on the device (DecodeBatchSample)
  // or from host logits; rows that got a token or logits join `ready`.
  // With `rider`, its prefill chunk runs in the same step where it can.
  void DecodeGroup(const Model& model, const std::vector<RequestPtr>& rows, bool on_device,
                   std::vector<DecodeRow>* ready, Rider* rider = nullptr);
  // Whether r's token selection is expressible as a DecodeSampling row on
  // a model that samples on the device (no penalties over the history, no
  // min-p): then its decode rows never copy logits to the host.
  bool DeviceSamplable(const Model& model, const Request& r) const;
  void Fail(const RequestPtr& r, Status status);
  void MaybeReportMetrics();
  void NoteToken(Request& r);
  // Queues `events` of `r` (non-final) unless its owner let go.
  void PushEvents(const std::shared_ptr<Request>& r, std::vector<Event> events);
  // Ends a request: a chat request's open message is closed and its
  // answered tool results appended; then the outcome and kFinished.
  void Finish(const std::shared_ptr<Request>& r, FinishReason reason, Status status, int32_t token = -1);
  bool PollImpl(const Request* only, Event* out, int64_t timeout_ms);
  // The oldest event of `only`, or of any non-private request when null.
  bool TakeEvent(const Request* only, Event* out);  // requires mu_
  bool Eligible(const Request& r) const;            // requires mu_

  const EngineOptions options_;
  ThreadPool pool_;
  mutable std::mutex log_mu_;  // serialises the log callback

  std::mutex mu_;
  std::condition_variable work_cv_;   // scheduler: a request became runnable, or stop
  std::condition_variable event_cv_;  // pollers: an event was queued
  std::condition_variable idle_cv_;   // CancelAndWait: a request finished
  std::deque<std::shared_ptr<Request>> queue_;  // unfinished requests, guarded by mu_
  EventQueue events_;                           // guarded by mu_
  uint64_t next_id_ = 1;                        // guarded by mu_
  bool stop_ = false;                           // guarded by mu_

  PrefixCache cache_;
  MetricsRecorder recorder_;
  MemoryLedger ledger_;  // active: resident state of sessions running a request (budgeted)
  std::atomic<int64_t> submitted_{0}, finished_{0}, preemptions_{0}, deadline_misses_{0};
  std::atomic<int64_t> prefix_lookup_tokens_{0}, prefix_hit_tokens_{0}, prefill_tokens_{0};
  std::atomic<int64_t> generated_tokens_{0}, decode_steps_{0}, decode_rows_{0};
  std::atomic<int64_t> running_{0}, waiting_{0};
  std::atomic<int64_t> device_sampled_rows_{0}, host_sampled_rows_{0}, cache_slot_evictions_{0};
  std::atomic<int64_t> device_first_tokens_{0};
  std::atomic<int64_t> steps_with_prefill_{0};
  // Scheduler phase times, nanoseconds summed over iterations.
  std::atomic<int64_t> iterations_{0}, schedule_ns_{0}, prefill_ns_{0}, decode_ns_{0}, sample_ns_{0},
      emit_ns_{0};
  std::chrono::steady_clock::time_point next_report_{};  // scheduler thread
  std::unique_ptr<PrefixStore> store_;  // the disk tier; null without one
  // Set by the destructor: queued writes after it are dropped (nanoseconds
  // of steady_clock; 0 while the engine runs).
  std::atomic<int64_t> publish_deadline_ns_{0};
  WorkerThread renderer_;  // chat rounds' renders; joined after the scheduler
  // The store's reads and writes; joined (its queue run) before the store goes.
  WorkerThread io_;
  std::thread scheduler_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_ENGINE_H_
