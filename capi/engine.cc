// strata_engine_*: engine lifecycle and the event poll, translated to strata::Engine.
#include <cstddef>
#include <string>

#include "convert.h"
#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kEngineMagic;

extern "C" {

STRATA_API void strata_engine_params_init(strata_engine_params* params) {
  if (params == nullptr) return;
  *params = strata_engine_params{};
  params->struct_size = sizeof(strata_engine_params);
  params->num_threads = 0;
  params->log_callback = nullptr;
  params->log_user_data = nullptr;
  params->log_level = STRATA_LOG_INFO;
  const strata::EngineOptions d;
  params->memory_budget_bytes = d.memory_budget_bytes;
  params->prefill_chunk_tokens = d.prefill_chunk_tokens;
  params->max_batch = d.max_batch;
  params->prefix_cache_bytes = 0;  // opt-in through the C ABI: snapshots cost a state copy each on the CPU
  params->prefix_block_tokens = d.prefix_block_tokens;
  params->metrics_callback = nullptr;
  params->metrics_user_data = nullptr;
  params->metrics_interval_ms = static_cast<int32_t>(d.metrics_interval_ms);
  params->prefill_tokens_while_decoding = d.prefill_tokens_while_decoding;
}

namespace {

strata_latency ToCLatency(const strata::LatencyPercentiles& p) {
  strata_latency l{};
  l.count = p.count;
  l.mean_ms = p.mean_ms;
  l.p50_ms = p.p50_ms;
  l.p90_ms = p.p90_ms;
  l.p99_ms = p.p99_ms;
  l.max_ms = p.max_ms;
  return l;
}

strata_metrics ToCMetrics(const strata::EngineMetrics& m) {
  strata_metrics c{};
  c.struct_size = sizeof(strata_metrics);
  c.requests_submitted = m.requests_submitted;
  c.requests_finished = m.requests_finished;
  c.requests_running = m.requests_running;
  c.requests_waiting = m.requests_waiting;
  c.preemptions = m.preemptions;
  c.deadline_misses = m.deadline_misses;
  c.ttft = ToCLatency(m.ttft);
  c.tpot = ToCLatency(m.tpot);
  c.queue = ToCLatency(m.queue);
  c.prefix_lookup_tokens = m.prefix_lookup_tokens;
  c.prefix_hit_tokens = m.prefix_hit_tokens;
  c.prefill_tokens = m.prefill_tokens;
  c.generated_tokens = m.generated_tokens;
  c.decode_steps = m.decode_steps;
  c.decode_rows = m.decode_rows;
  c.memory_budget_bytes = m.memory_budget_bytes;
  c.state_resident_bytes = m.state_resident_bytes;
  c.state_attention_bytes = m.state_attention_bytes;
  c.state_recurrent_bytes = m.state_recurrent_bytes;
  c.state_swapped_bytes = m.state_swapped_bytes;
  c.prefix_cache_bytes = m.prefix_cache_bytes;
  c.prefix_cache_entries = m.prefix_cache_entries;
  c.state_active_bytes = m.state_active_bytes;
  c.prefix_cache_slot_evictions = m.prefix_cache_slot_evictions;
  c.device_sampled_rows = m.device_sampled_rows;
  c.host_sampled_rows = m.host_sampled_rows;
  c.iterations = m.iterations;
  c.schedule_ms = m.schedule_ms;
  c.prefill_ms = m.prefill_ms;
  c.decode_ms = m.decode_ms;
  c.sample_ms = m.sample_ms;
  c.emit_ms = m.emit_ms;
  return c;
}

}  // namespace

STRATA_API strata_status strata_engine_create(const strata_engine_params* params, strata_engine** out_engine) {
  const Call call("strata_engine_create");
  return Guarded(call, [&]() -> strata_status {
    if (out_engine == nullptr) return call.NullArgument("out_engine");
    *out_engine = nullptr;
    strata_engine_params p;
    strata_engine_params_init(&p);
    // The first layout (before the scheduling fields) is still accepted.
    if (strata_status s = strata::capi::ReadParams(call, params, &p, offsetof(strata_engine_params, memory_budget_bytes),
                                                   "strata_engine_params");
        s != STRATA_OK) {
      return s;
    }
    if (p.log_level < STRATA_LOG_DEBUG || p.log_level > STRATA_LOG_ERROR) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("log_level must be in [0, 3], got ", p.log_level));
    }
    if (p.prefill_chunk_tokens < 0 || p.max_batch < 0 || p.prefix_block_tokens < 0 || p.metrics_interval_ms < 0 ||
        p.prefill_tokens_while_decoding < 0) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("prefill_chunk_tokens (", p.prefill_chunk_tokens, "), max_batch (", p.max_batch,
                                    "), prefix_block_tokens (", p.prefix_block_tokens, "), metrics_interval_ms (",
                                    p.metrics_interval_ms, ") and prefill_tokens_while_decoding (",
                                    p.prefill_tokens_while_decoding, ") must be >= 0"));
    }
    strata::EngineOptions options;
    options.num_threads = p.num_threads;
    // Zero keeps each default (the zero value of a field appended later means the old behaviour).
    options.prefill_chunk_tokens = p.prefill_chunk_tokens;  // 0: automatic, by device
    options.prefill_tokens_while_decoding = p.prefill_tokens_while_decoding;
    if (p.max_batch > 0) options.max_batch = p.max_batch;
    if (p.prefix_block_tokens > 0) options.prefix_block_tokens = p.prefix_block_tokens;
    if (p.metrics_interval_ms > 0) options.metrics_interval_ms = p.metrics_interval_ms;
    options.memory_budget_bytes = p.memory_budget_bytes;
    options.prefix_cache_bytes = p.prefix_cache_bytes;
    if (p.metrics_callback != nullptr) {
      options.metrics_callback = [cb = p.metrics_callback, ud = p.metrics_user_data](const strata::EngineMetrics& m) {
        const strata_metrics c = ToCMetrics(m);
        cb(&c, ud);
      };
    }
    options.min_log_level = static_cast<strata::LogLevel>(p.log_level);
    if (p.log_callback != nullptr) {
      options.log = [cb = p.log_callback, ud = p.log_user_data](strata::LogLevel level, std::string_view m) {
        const std::string text(m);  // the callback gets a NUL-terminated copy
        cb(static_cast<strata_log_level>(level), text.c_str(), ud);
      };
    }
    auto handle = std::make_unique<strata_engine>();
    auto engine = strata::Engine::Create(options);
    if (!engine.ok()) return call.From(engine.status());
    handle->impl = *std::move(engine);
    *out_engine = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_engine_destroy(strata_engine* engine) {
  const Call call("strata_engine_destroy");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    const int64_t models = engine->num_models.load(), sessions = engine->num_sessions.load(),
                  requests = engine->num_requests.load();
    if (models + sessions + requests > 0) {
      return call.Fail(STRATA_ERR_FAILED_PRECONDITION,
                       absl::StrCat("the engine still has ", models, " model(s), ", sessions, " session(s) and ",
                                    requests, " request(s); destroy them first"));
    }
    uint32_t expected = kEngineMagic;
    if (!engine->magic.compare_exchange_strong(expected, strata::capi::kDeadMagic)) {
      return call.Fail(STRATA_ERR_MISUSE, "engine was destroyed concurrently");
    }
    engine->impl.reset();  // joins the scheduler thread
    strata::capi::BuryHandle(engine);
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_engine_get_metrics(strata_engine* engine, strata_metrics* out_metrics) {
  const Call call("strata_engine_get_metrics");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    if (out_metrics == nullptr) return call.NullArgument("out_metrics");
    return strata::capi::WriteOut(call, out_metrics, ToCMetrics(engine->impl->Metrics()),
                                  offsetof(strata_metrics, prefix_cache_slot_evictions),
                                  "strata_metrics");
  });
}

STRATA_API strata_status strata_engine_poll_event(strata_engine* engine, strata_event* out_event,
                                                  int32_t timeout_ms) {
  const Call call("strata_engine_poll_event");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    if (out_event == nullptr) return call.NullArgument("out_event");
    strata_event ev{};
    ev.type = STRATA_EVENT_NONE;
    ev.token = -1;
    // Validate the caller's struct_size before waiting, so a bad struct fails fast.
    if (strata_status s = strata::capi::WriteOut(call, out_event, ev, offsetof(strata_event, text), "strata_event");
        s != STRATA_OK) {
      return s;
    }
    // The event's strings live here until this thread polls again (documented).
    thread_local strata::Event core;
    strata::Event next;
    if (!engine->impl->PollEvent(&next, timeout_ms)) return STRATA_AGAIN;
    void* const tag = next.request->tag();
    core = std::move(next);
    core.request.reset();  // the thread-local copy must not keep the request alive
    ev = strata::capi::ToCEvent(core);
    ev.request = static_cast<strata_request*>(tag);
    // A caller built against 0.1 sees the 0.1 layout only.
    return strata::capi::WriteOut(call, out_event, ev, offsetof(strata_event, text), "strata_event");
  });
}

}  // extern "C"
