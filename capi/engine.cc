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
}

STRATA_API strata_status strata_engine_create(const strata_engine_params* params, strata_engine** out_engine) {
  const Call call("strata_engine_create");
  return Guarded(call, [&]() -> strata_status {
    if (out_engine == nullptr) return call.NullArgument("out_engine");
    *out_engine = nullptr;
    strata_engine_params p;
    strata_engine_params_init(&p);
    if (strata_status s = strata::capi::ReadParams(call, params, &p, sizeof(strata_engine_params),
                                                   "strata_engine_params");
        s != STRATA_OK) {
      return s;
    }
    if (p.log_level < STRATA_LOG_DEBUG || p.log_level > STRATA_LOG_ERROR) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("log_level must be in [0, 3], got ", p.log_level));
    }
    strata::EngineOptions options;
    options.num_threads = p.num_threads;
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
