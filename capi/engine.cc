// strata_engine_*: engine lifecycle and the event poll, translated to strata::Engine.
#include <cstddef>
#include <cstring>
#include <string>

#include "convert.h"
#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kEngineMagic;

extern "C" {

STRATA_API strata_status strata_engine_params_init_sized(strata_engine_params* params, size_t struct_size) {
  strata_engine_params d{};
  const strata::EngineOptions core;
  d.log_level = STRATA_LOG_INFO;
  d.memory_budget_bytes = core.memory_budget_bytes;
  d.max_batch = core.max_batch;
  d.prefix_cache_bytes = 0;  // opt-in through the C ABI: snapshots cost a state copy each on the CPU
  d.prefix_block_tokens = core.prefix_block_tokens;
  d.metrics_interval_ms = static_cast<int32_t>(core.metrics_interval_ms);
  return strata::capi::InitSized("strata_engine_params_init_sized", params, struct_size, d);
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
  return c;
}

}  // namespace

STRATA_API strata_status strata_engine_create(const strata_engine_params* params, strata_engine** out_engine) {
  const Call call("strata_engine_create", "building the engine");
  return Guarded(call, [&]() -> strata_status {
    if (out_engine == nullptr) return call.NullArgument("out_engine");
    *out_engine = nullptr;
    strata_engine_params p;
    strata_engine_params_init(&p);
    if (strata_status s = strata::capi::ReadParams(call, params, &p); s != STRATA_OK) return s;
    if (p.log_level < STRATA_LOG_DEBUG || p.log_level > STRATA_LOG_ERROR) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("log_level must be in [0, 3], got ", p.log_level));
    }
    if (p.max_batch < 0 || p.prefix_block_tokens < 0 || p.metrics_interval_ms < 0) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("max_batch (", p.max_batch, "), prefix_block_tokens (", p.prefix_block_tokens,
                                    ") and metrics_interval_ms (", p.metrics_interval_ms, ") must be >= 0"));
    }
    strata::EngineOptions options;
    options.num_threads = p.num_threads;
    if (p.options != nullptr) {
      if (strata_status s = call.From(
              strata::ApplyEngineOptionString(p.options, "strata_engine_params.options", &options));
          s != STRATA_OK) {
        return s;
      }
    }
    // Zero keeps each default.
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
  const Call call("strata_engine_destroy", "destroying the engine");
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
  const Call call("strata_engine_get_metrics", "reading the metrics");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    if (out_metrics == nullptr) return call.NullArgument("out_metrics");
    return strata::capi::WriteOut(call, out_metrics, ToCMetrics(engine->impl->Metrics()));
  });
}

STRATA_API strata_status strata_engine_poll_event(strata_engine* engine, strata_event* out_event,
                                                  int32_t timeout_ms) {
  const Call call("strata_engine_poll_event", "taking the next event");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    if (out_event == nullptr) return call.NullArgument("out_event");
    strata_event ev{};
    ev.type = STRATA_EVENT_NONE;
    ev.token = -1;
    // Validate the caller's struct_size before waiting, so a bad struct fails fast.
    if (strata_status s = strata::capi::WriteOut(call, out_event, ev); s != STRATA_OK) {
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
    return strata::capi::WriteOut(call, out_event, ev);
  });
}

STRATA_API strata_status strata_engine_get_stat(strata_engine* engine, const char* name, double* out_value) {
  const Call call("strata_engine_get_stat", "reading the statistic");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    if (name == nullptr) return call.NullArgument("name");
    if (out_value == nullptr) return call.NullArgument("out_value");
    for (const strata::NamedStat& stat : strata::EngineStats()) {
      if (std::strcmp(stat.name, name) == 0) {
        *out_value = stat.get(engine->impl->Metrics());
        return STRATA_OK;
      }
    }
    return call.Fail(STRATA_ERR_NOT_FOUND, absl::StrCat("no statistic named '", name,
                                                        "' (strata_engine_list_stats() names them)"));
  });
}

STRATA_API strata_status strata_engine_list_stats(strata_engine* engine, size_t index, const char** out_name) {
  const Call call("strata_engine_list_stats", "listing the statistics");
  return Guarded(call, [&]() -> strata_status {
    if (out_name == nullptr) return call.NullArgument("out_name");
    *out_name = nullptr;
    if (strata_status s = CheckHandle(call, engine, kEngineMagic, "engine"); s != STRATA_OK) return s;
    const auto stats = strata::EngineStats();
    if (index >= stats.size()) {
      return call.Fail(STRATA_ERR_OUT_OF_RANGE,
                       absl::StrCat("index ", index, " is past the last of ", stats.size(), " statistics"));
    }
    *out_name = stats[index].name;
    return STRATA_OK;
  });
}

}  // extern "C"
