// strata_session_*: session lifecycle, prefill, logits, and the two generation
// entry points (submit, and the blocking generate built on it).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "convert.h"
#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kSessionMagic;

namespace strata::capi {

strata_status CheckTokenArray(const Call& call, const int32_t* tokens, size_t count, const char* name) {
  if (tokens == nullptr && count > 0) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " is NULL but its count is ", count));
  }
  // Absurd counts are refused before anything reads the array.
  if (count >= kMaxInputLength) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat(name, " count ", count, " is too large"));
  }
  return STRATA_OK;
}

std::span<const int32_t> TokenSpan(const int32_t* tokens, size_t count) {
  return count == 0 ? std::span<const int32_t>() : std::span<const int32_t>(tokens, count);
}

// Translates the C request params (NULL: defaults) into the core's.
strata_status ToGenerationParams(const Call& call, const strata_request_params* in, GenerationParams* out,
                                 strata_request_params* c_params) {
  strata_request_params_init(c_params);
  if (strata_status s = ReadParams(call, in, c_params); s != STRATA_OK) return s;
  const strata_request_params& p = *c_params;
  if (strata_status s = CheckTokenArray(call, p.stop_tokens, p.num_stop_tokens, "stop_tokens"); s != STRATA_OK) {
    return s;
  }
  out->max_tokens = p.max_tokens;
  if (p.num_stop_tokens > 0) out->stop_tokens.assign(p.stop_tokens, p.stop_tokens + p.num_stop_tokens);
  out->stop_at_eos = p.stop_at_eos;
  out->sampling.temperature = p.temperature;
  out->sampling.top_k = p.top_k;
  out->sampling.top_p = p.top_p;
  out->sampling.min_p = p.min_p;
  out->sampling.repetition_penalty = p.repetition_penalty;
  out->sampling.presence_penalty = p.presence_penalty;
  out->sampling.frequency_penalty = p.frequency_penalty;
  out->sampling.seed = p.seed;
  out->priority = p.priority;
  out->deadline_ms = p.deadline_ms;
  out->max_context_tokens = p.max_context_tokens;
  return STRATA_OK;
}

// A session handle on `model`, made by `make` from the options `params` give.
strata_status NewSessionHandle(
    const Call& call, strata_model* model, const strata_session_params* params, strata_session** out_session,
    const std::function<StatusOr<std::unique_ptr<Session>>(const SessionOptions&)>& make) {
  return Guarded(call, [&]() -> strata_status {
    if (out_session == nullptr) return call.NullArgument("out_session");
    *out_session = nullptr;
    if (strata_status s = CheckHandle(call, model, kModelMagic, "model"); s != STRATA_OK) return s;
    strata_session_params p;
    strata_session_params_init(&p);
    if (strata_status s = ReadParams(call, params, &p); s != STRATA_OK) return s;
    SessionOptions options;
    options.max_context_tokens = p.max_context_tokens;
    if (model->text.ok()) options.text = *model->text;
    auto handle = std::make_unique<strata_session>();
    StatusOr<std::unique_ptr<Session>> session = make(options);
    if (!session.ok()) return call.From(session.status());
    handle->engine = model->engine;
    handle->impl = *std::move(session);
    model->engine->num_sessions.fetch_add(1);
    *out_session = handle.release();
    return STRATA_OK;
  });
}

}  // namespace strata::capi

extern "C" {

STRATA_API strata_status strata_session_params_init_sized(strata_session_params* params, size_t struct_size) {
  return strata::capi::InitSized("strata_session_params_init_sized", params, struct_size, strata_session_params{});
}

STRATA_API strata_status strata_request_params_init_sized(strata_request_params* params, size_t struct_size) {
  strata_request_params p{};
  const strata::GenerationParams d;
  p.max_tokens = d.max_tokens;
  p.stop_at_eos = d.stop_at_eos;
  p.temperature = d.sampling.temperature;
  p.top_k = d.sampling.top_k;
  p.top_p = d.sampling.top_p;
  p.min_p = d.sampling.min_p;
  p.repetition_penalty = d.sampling.repetition_penalty;
  p.presence_penalty = d.sampling.presence_penalty;
  p.frequency_penalty = d.sampling.frequency_penalty;
  p.seed = d.sampling.seed;
  p.priority = d.priority;
  p.deadline_ms = d.deadline_ms;
  p.max_context_tokens = d.max_context_tokens;
  return strata::capi::InitSized("strata_request_params_init_sized", params, struct_size, p);
}

STRATA_API strata_status strata_session_create(strata_model* model, const strata_session_params* params,
                                               strata_session** out_session) {
  const Call call("strata_session_create", "building the session");
  return strata::capi::NewSessionHandle(call, model, params, out_session, [&](const strata::SessionOptions& o) {
    return strata::Session::Create(model->engine->impl.get(), model->impl, o);
  });
}

STRATA_API strata_status strata_session_destroy(strata_session* session) {
  const Call call("strata_session_destroy", "destroying the session");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (session->in_generate.load()) {
      return call.Fail(STRATA_ERR_MISUSE, "the session is inside strata_session_generate (destroy it afterwards)");
    }
    uint32_t expected = kSessionMagic;
    if (!session->magic.compare_exchange_strong(expected, strata::capi::kDeadMagic)) {
      return call.Fail(STRATA_ERR_MISUSE, "session was destroyed concurrently");
    }
    session->impl.reset();  // cancels and waits for its running request
    session->engine->num_sessions.fetch_sub(1);
    strata::capi::BuryHandle(session);
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_append_tokens(strata_session* session, const int32_t* tokens,
                                                      size_t num_tokens) {
  const Call call("strata_session_append_tokens", "evaluating the appended tokens");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (strata_status s = strata::capi::CheckTokenArray(call, tokens, num_tokens, "tokens"); s != STRATA_OK) {
      return s;
    }
    return call.From(session->impl->Append(strata::capi::TokenSpan(tokens, num_tokens)));
  });
}

STRATA_API strata_status strata_session_get_logits(strata_session* session, float* logits, size_t capacity,
                                                   size_t* out_count) {
  const Call call("strata_session_get_logits", "computing the logits");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    const size_t vocab = static_cast<size_t>(session->impl->vocab_size());
    if (out_count != nullptr) *out_count = vocab;
    if (logits == nullptr) return STRATA_OK;  // size query
    if (capacity < vocab) {
      return call.Fail(STRATA_ERR_OUT_OF_RANGE,
                       absl::StrCat("capacity ", capacity, " is smaller than the vocabulary (", vocab, ")"));
    }
    auto row = session->impl->Logits();
    if (!row.ok()) return call.From(row.status());
    std::memcpy(logits, row->data(), row->size() * sizeof(float));
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_get_num_tokens(const strata_session* session, size_t* out_tokens) {
  const Call call("strata_session_get_num_tokens", "counting the tokens");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (out_tokens == nullptr) return call.NullArgument("out_tokens");
    *out_tokens = static_cast<size_t>(session->impl->num_tokens());
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_reset(strata_session* session) {
  const Call call("strata_session_reset", "resetting the session");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    return call.From(session->impl->Reset());
  });
}

STRATA_API strata_status strata_session_fork(strata_session* session, strata_session** out_session) {
  const Call call("strata_session_fork", "building the forked session");
  return Guarded(call, [&]() -> strata_status {
    if (out_session == nullptr) return call.NullArgument("out_session");
    *out_session = nullptr;
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    auto handle = std::make_unique<strata_session>();
    auto fork = session->impl->Fork();
    if (!fork.ok()) return call.From(fork.status());
    handle->engine = session->engine;
    handle->impl = *std::move(fork);
    session->engine->num_sessions.fetch_add(1);
    *out_session = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_mark(strata_session* session, uint64_t* out_mark) {
  const Call call("strata_session_mark", "saving the marked state");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (out_mark == nullptr) return call.NullArgument("out_mark");
    *out_mark = 0;
    auto mark = session->impl->Mark();
    if (!mark.ok()) return call.From(mark.status());
    *out_mark = *mark;
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_rollback(strata_session* session, uint64_t mark) {
  const Call call("strata_session_rollback", "restoring the marked state");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    return call.From(session->impl->Rollback(mark));
  });
}

STRATA_API strata_status strata_session_release_mark(strata_session* session, uint64_t mark) {
  const Call call("strata_session_release_mark", "releasing the mark");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    return call.From(session->impl->ReleaseMark(mark));
  });
}

STRATA_API strata_status strata_session_save(strata_session* session, const char* path) {
  const Call call("strata_session_save", "saving the session");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (path == nullptr) return call.NullArgument("path");
    return call.From(session->impl->SaveToFile(path));
  });
}

STRATA_API strata_status strata_session_save_to_buffer(strata_session* session, void* buffer, size_t capacity,
                                                       size_t* out_size) {
  const Call call("strata_session_save_to_buffer", "saving the session");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (out_size == nullptr) return call.NullArgument("out_size");
    if (buffer == nullptr && capacity > 0) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat("buffer is NULL but capacity is ", capacity));
    }
    strata::StatusOr<std::vector<uint8_t>> bytes = session->impl->Save();
    if (!bytes.ok()) return call.From(bytes.status());
    *out_size = bytes->size();
    if (buffer == nullptr) return STRATA_OK;
    if (capacity < bytes->size()) {
      return call.Fail(STRATA_ERR_OUT_OF_RANGE,
                       absl::StrCat("capacity ", capacity, " is below the saved size ", bytes->size()));
    }
    std::memcpy(buffer, bytes->data(), bytes->size());
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_load(strata_model* model, const char* path,
                                             const strata_session_params* params, strata_session** out_session) {
  const Call call("strata_session_load", "loading the session");
  return strata::capi::NewSessionHandle(call, model, params, out_session, [&](const strata::SessionOptions& o) {
    if (path == nullptr) return strata::StatusOr<std::unique_ptr<strata::Session>>(absl::InvalidArgumentError("path is NULL"));
    return strata::Session::LoadFromFile(model->engine->impl.get(), model->impl, path, o);
  });
}

STRATA_API strata_status strata_session_load_from_buffer(strata_model* model, const void* buffer, size_t size,
                                                         const strata_session_params* params,
                                                         strata_session** out_session) {
  const Call call("strata_session_load_from_buffer", "loading the session");
  return strata::capi::NewSessionHandle(call, model, params, out_session, [&](const strata::SessionOptions& o) {
    if (buffer == nullptr) {
      return strata::StatusOr<std::unique_ptr<strata::Session>>(absl::InvalidArgumentError("buffer is NULL"));
    }
    return strata::Session::Load(model->engine->impl.get(), model->impl,
                                 std::span<const uint8_t>(static_cast<const uint8_t*>(buffer), size), o,
                                 "session buffer");
  });
}

STRATA_API strata_status strata_session_submit(strata_session* session, const int32_t* prompt_tokens,
                                               size_t num_prompt_tokens, const strata_request_params* params,
                                               strata_request** out_request) {
  const Call call("strata_session_submit", "building the request");
  return Guarded(call, [&]() -> strata_status {
    if (out_request == nullptr) return call.NullArgument("out_request");
    *out_request = nullptr;
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (strata_status s = strata::capi::CheckTokenArray(call, prompt_tokens, num_prompt_tokens, "prompt_tokens");
        s != STRATA_OK) {
      return s;
    }
    strata::GenerationParams gp;
    strata_request_params cp;
    if (strata_status s = strata::capi::ToGenerationParams(call, params, &gp, &cp); s != STRATA_OK) return s;
    auto handle = std::make_unique<strata_request>();
    handle->engine = session->engine;
    auto request = session->engine->impl->Submit(*session->impl,
                                                 strata::capi::TokenSpan(prompt_tokens, num_prompt_tokens),
                                                 std::move(gp), handle.get(), /*private_events=*/false);
    if (!request.ok()) return call.From(request.status());
    handle->impl = *std::move(request);
    session->engine->num_requests.fetch_add(1);
    *out_request = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_generate(strata_session* session, const int32_t* prompt_tokens,
                                                 size_t num_prompt_tokens, const strata_request_params* params,
                                                 strata_finish_reason* out_finish_reason) {
  const Call call("strata_session_generate", "running the generation");
  return Guarded(call, [&]() -> strata_status {
    if (out_finish_reason != nullptr) *out_finish_reason = STRATA_FINISH_NONE;
    if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
    if (strata_status s = strata::capi::CheckTokenArray(call, prompt_tokens, num_prompt_tokens, "prompt_tokens");
        s != STRATA_OK) {
      return s;
    }
    strata::GenerationParams gp;
    strata_request_params cp;
    if (strata_status s = strata::capi::ToGenerationParams(call, params, &gp, &cp); s != STRATA_OK) return s;
    strata::Engine& engine = *session->engine->impl;
    // The callback needs a handle it may cancel; the library owns it and retires
    // it (dead magic) before returning, so a late cancel is MISUSE, not a crash.
    auto* handle = new strata_request();
    handle->engine = session->engine;
    handle->library_owned = true;
    auto request = engine.Submit(*session->impl, strata::capi::TokenSpan(prompt_tokens, num_prompt_tokens),
                                 std::move(gp), handle, /*private_events=*/true);
    if (!request.ok()) {
      delete handle;
      return call.From(request.status());
    }
    handle->impl = *request;
    session->in_generate.store(true);
    // Runs however the loop ends (also if it throws): the request must not
    // outlive the call running, and the handle is retired so a late cancel from
    // another thread is MISUSE, not a use of freed memory.
    struct Retire {
      strata_session* session;
      strata_request* handle;
      strata::Engine& engine;
      ~Retire() {
        std::shared_ptr<strata::Request> impl;
        {
          std::lock_guard<std::mutex> lock(handle->mu);
          handle->magic.store(strata::capi::kDeadMagic);
          impl = std::move(handle->impl);
        }
        if (!impl->finished()) engine.Detach(*impl);
        session->in_generate.store(false);
        strata::capi::BuryHandle(handle);
      }
    } retire{session, handle, engine};
    strata::FinishReason reason = strata::FinishReason::kNone;
    const strata_token_callback cb = cp.token_callback;
    void* const user_data = cp.user_data;
    const strata::Status status = engine.RunToCompletion(
        **request, [&](int32_t token) { return cb == nullptr || cb(handle, token, user_data) == 0; }, &reason);
    if (out_finish_reason != nullptr) *out_finish_reason = static_cast<strata_finish_reason>(reason);
    return call.From(status);
  });
}

}  // extern "C"
