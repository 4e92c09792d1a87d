// strata_session_* chat functions, strata_tool / strata_chat_message /
// strata_chat_params, and strata_request_submit_tool_result: translated to
// strata::Conversation and the engine's chat requests.
#include <cstring>
#include <string>
#include <utility>

#include "base/bounded_json.h"
#include "convert.h"
#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kSessionMagic;

namespace {

using Json = nlohmann::ordered_json;

// The session's conversation, or FAILED_PRECONDITION when it has none or is busy.
strata_status GetConversation(const Call& call, strata_session* session, strata::Conversation** out) {
  if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
  *out = session->impl->conversation();
  if (*out == nullptr) {
    return call.Fail(STRATA_ERR_FAILED_PRECONDITION,
                     "the model directory has no usable tokenizer (strata_model_open_tokenizer says why)");
  }
  if (session->impl->busy()) return call.Fail(STRATA_ERR_FAILED_PRECONDITION, "the session is running a request");
  return STRATA_OK;
}

// Parses a NUL-terminated JSON text (NULL: `fallback`). Nesting deeper than
// limits::kMaxJsonDepth is refused before a document exists.
strata_status ParseJson(const Call& call, const char* text, const char* name, Json fallback, Json* out) {
  if (text == nullptr) {
    *out = std::move(fallback);
    return STRATA_OK;
  }
  auto parsed = strata::ParseBoundedJson<Json>(text, name);
  if (!parsed.ok()) return call.From(parsed.status());
  *out = *std::move(parsed);
  return STRATA_OK;
}

strata_status ToChatOptions(const Call& call, const strata_chat_params* in, strata::ChatOptions* out,
                            strata_chat_params* c) {
  strata_chat_params_init(c);
  if (strata_status s = strata::capi::ReadParams(call, in, c); s != STRATA_OK) return s;
  if (c->stop_strings == nullptr && c->num_stop_strings > 0) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                     absl::StrCat("stop_strings is NULL but num_stop_strings is ", c->num_stop_strings));
  }
  if (c->num_stop_strings > 1024) return call.Fail(STRATA_ERR_INVALID_ARGUMENT, "more than 1024 stop_strings");
  for (size_t i = 0; i < c->num_stop_strings; ++i) {
    if (c->stop_strings[i] == nullptr || c->stop_strings[i][0] == '\0') {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat("stop_strings[", i, "] is NULL or empty"));
    }
    const std::string field = absl::StrCat("stop_strings[", i, "]");
    if (strata_status s = strata::capi::CheckUtf8(call, c->stop_strings[i], field.c_str()); s != STRATA_OK) return s;
    out->stop_strings.emplace_back(c->stop_strings[i]);
  }
  if (c->max_tool_rounds < 0 || c->max_tool_rounds > 1000) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                     absl::StrCat("max_tool_rounds must be in [0, 1000], got ", c->max_tool_rounds));
  }
  out->max_tool_rounds = c->max_tool_rounds;
  out->skip_special_tokens = c->skip_special_tokens;
  if (strata_status s = ParseJson(call, c->template_variables_json, "template_variables_json", Json::object(),
                                  &out->variables);
      s != STRATA_OK) {
    return s;
  }
  if (!out->variables.is_object()) {
    return call.Fail(STRATA_ERR_INVALID_ARGUMENT, "template_variables_json must be a JSON object");
  }
  return STRATA_OK;
}

// Shared by submit_chat and chat: checks and translates every argument.
strata_status PrepareChat(const Call& call, strata_session* session, const strata_request_params* params,
                          const strata_chat_params* chat, strata::GenerationParams* gp, strata::ChatOptions* co,
                          strata_chat_params* c_chat) {
  if (strata_status s = CheckHandle(call, session, kSessionMagic, "session"); s != STRATA_OK) return s;
  strata_request_params cp;
  if (strata_status s = strata::capi::ToGenerationParams(call, params, gp, &cp); s != STRATA_OK) return s;
  return ToChatOptions(call, chat, co, c_chat);
}

}  // namespace

extern "C" {

STRATA_API strata_status strata_chat_message_init_sized(strata_chat_message* message, size_t struct_size) {
  strata_chat_message m{};
  m.role = STRATA_ROLE_USER;
  m.content_len = STRATA_NUL_TERMINATED;
  m.reasoning_content_len = STRATA_NUL_TERMINATED;
  return strata::capi::InitSized("strata_chat_message_init_sized", message, struct_size, m);
}

STRATA_API strata_status strata_tool_init_sized(strata_tool* tool, size_t struct_size) {
  return strata::capi::InitSized("strata_tool_init_sized", tool, struct_size, strata_tool{});
}

STRATA_API strata_status strata_chat_params_init_sized(strata_chat_params* params, size_t struct_size) {
  strata_chat_params p{};
  p.max_tool_rounds = strata::ChatOptions().max_tool_rounds;
  return strata::capi::InitSized("strata_chat_params_init_sized", params, struct_size, p);
}

STRATA_API strata_status strata_session_add_message(strata_session* session, const strata_chat_message* message) {
  const Call call("strata_session_add_message", "copying the message into the conversation");
  return Guarded(call, [&]() -> strata_status {
    strata::Conversation* conv = nullptr;
    if (strata_status s = GetConversation(call, session, &conv); s != STRATA_OK) return s;
    if (message == nullptr) return call.NullArgument("message");
    strata_chat_message m;
    strata_chat_message_init(&m);
    if (strata_status s = strata::capi::ReadParams(call, message, &m); s != STRATA_OK) return s;
    static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
    if (m.role < STRATA_ROLE_SYSTEM || m.role > STRATA_ROLE_TOOL) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT, absl::StrCat("role ", m.role, " is not a STRATA_ROLE_* value"));
    }
    Json json = Json::object();
    json["role"] = kRoles[m.role];
    std::string content;
    if (strata_status s = strata::capi::ReadString(call, m.content, m.content_len, "content", &content);
        s != STRATA_OK) {
      return s;
    }
    json["content"] = std::move(content);
    // Read even when NULL, so NULL with a length is refused as for content.
    std::string reasoning;
    if (strata_status s = strata::capi::ReadString(call, m.reasoning_content, m.reasoning_content_len,
                                                   "reasoning_content", &reasoning);
        s != STRATA_OK) {
      return s;
    }
    if (m.reasoning_content != nullptr) json["reasoning_content"] = std::move(reasoning);
    for (const auto& [field, value] : {std::pair<const char*, const char*>{"tool_call_id", m.tool_call_id},
                                       {"name", m.name}}) {
      if (value == nullptr) continue;
      if (strata_status s = strata::capi::CheckUtf8(call, value, field); s != STRATA_OK) return s;
      json[field] = value;
    }
    if (m.tool_calls_json != nullptr) {
      Json calls;
      if (strata_status s = ParseJson(call, m.tool_calls_json, "tool_calls_json", Json(), &calls); s != STRATA_OK) {
        return s;
      }
      json["tool_calls"] = std::move(calls);
    }
    return call.From(conv->AddMessage(std::move(json)));
  });
}

STRATA_API strata_status strata_session_get_conversation(strata_session* session, char* json, size_t capacity,
                                                         size_t* out_len) {
  const Call call("strata_session_get_conversation", "writing the conversation as JSON");
  return Guarded(call, [&]() -> strata_status {
    if (out_len == nullptr) return call.NullArgument("out_len");
    *out_len = 0;
    strata::Conversation* conv = nullptr;
    if (strata_status s = GetConversation(call, session, &conv); s != STRATA_OK) return s;
    const std::string text = conv->messages().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return strata::capi::CopyTextOut(call, text, json, capacity, out_len);
  });
}

STRATA_API strata_status strata_session_add_tool(strata_session* session, const strata_tool* tool) {
  const Call call("strata_session_add_tool", "copying the tool into the session");
  return Guarded(call, [&]() -> strata_status {
    strata::Conversation* conv = nullptr;
    if (strata_status s = GetConversation(call, session, &conv); s != STRATA_OK) return s;
    if (tool == nullptr) return call.NullArgument("tool");
    strata_tool t;
    strata_tool_init(&t);
    if (strata_status s = strata::capi::ReadParams(call, tool, &t); s != STRATA_OK) return s;
    if (t.name == nullptr) return call.NullArgument("tool->name");
    if (strata_status s = strata::capi::CheckUtf8(call, t.name, "tool->name"); s != STRATA_OK) return s;
    if (t.description != nullptr) {
      if (strata_status s = strata::capi::CheckUtf8(call, t.description, "tool->description"); s != STRATA_OK) {
        return s;
      }
    }
    strata::ToolSpec spec;
    spec.name = t.name;
    spec.description = t.description != nullptr ? t.description : "";
    if (strata_status s = ParseJson(call, t.parameters_json, "parameters_json",
                                    Json{{"type", "object"}, {"properties", Json::object()}}, &spec.parameters);
        s != STRATA_OK) {
      return s;
    }
    if (t.callback != nullptr) {
      spec.handler = [cb = t.callback, ud = t.user_data](strata::Request& request, const strata::Event& ev) {
        strata_event c = strata::capi::ToCEvent(ev);
        c.request = static_cast<strata_request*>(request.tag());
        return cb(c.request, &c, ud);
      };
    }
    return call.From(conv->AddTool(std::move(spec)));
  });
}

STRATA_API strata_status strata_session_clear_tools(strata_session* session) {
  const Call call("strata_session_clear_tools", "clearing the tools");
  return Guarded(call, [&]() -> strata_status {
    strata::Conversation* conv = nullptr;
    if (strata_status s = GetConversation(call, session, &conv); s != STRATA_OK) return s;
    conv->ClearTools();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_submit_chat(strata_session* session, const strata_request_params* params,
                                                    const strata_chat_params* chat, strata_request** out_request) {
  const Call call("strata_session_submit_chat", "building the chat request");
  return Guarded(call, [&]() -> strata_status {
    if (out_request == nullptr) return call.NullArgument("out_request");
    *out_request = nullptr;
    strata::GenerationParams gp;
    strata::ChatOptions co;
    strata_chat_params cc;
    if (strata_status s = PrepareChat(call, session, params, chat, &gp, &co, &cc); s != STRATA_OK) return s;
    auto handle = std::make_unique<strata_request>();
    handle->engine = session->engine;
    auto request = session->engine->impl->SubmitChat(*session->impl, std::move(gp), std::move(co), handle.get(),
                                                     /*private_events=*/false);
    if (!request.ok()) return call.From(request.status());
    handle->impl = *std::move(request);
    session->engine->num_requests.fetch_add(1);
    *out_request = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_session_chat(strata_session* session, const strata_request_params* params,
                                             const strata_chat_params* chat, strata_finish_reason* out_finish_reason) {
  const Call call("strata_session_chat", "running the chat request");
  return Guarded(call, [&]() -> strata_status {
    if (out_finish_reason != nullptr) *out_finish_reason = STRATA_FINISH_NONE;
    strata::GenerationParams gp;
    strata::ChatOptions co;
    strata_chat_params cc;
    if (strata_status s = PrepareChat(call, session, params, chat, &gp, &co, &cc); s != STRATA_OK) return s;
    strata::Engine& engine = *session->engine->impl;
    // As in strata_session_generate: a library-owned handle the callbacks may
    // use, retired (dead magic) before returning.
    auto* handle = new strata_request();
    handle->engine = session->engine;
    handle->library_owned = true;
    auto request = engine.SubmitChat(*session->impl, std::move(gp), std::move(co), handle, /*private_events=*/true);
    if (!request.ok()) {
      delete handle;
      return call.From(request.status());
    }
    handle->impl = *request;
    session->in_generate.store(true);
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
    const strata_event_callback cb = cc.event_callback;
    void* const user_data = cc.user_data;
    strata::FinishReason reason = strata::FinishReason::kNone;
    const strata::Status status = engine.RunChatToCompletion(
        **request,
        [&](const strata::Event& ev) {
          if (cb == nullptr) return true;
          strata_event c = strata::capi::ToCEvent(ev);
          c.request = handle;
          return cb(handle, &c, user_data) == 0;
        },
        &reason);
    if (out_finish_reason != nullptr) *out_finish_reason = static_cast<strata_finish_reason>(reason);
    return call.From(status);
  });
}

STRATA_API strata_status strata_request_submit_tool_result(strata_request* request, const char* call_id,
                                                           const char* content, size_t content_len) {
  const Call call("strata_request_submit_tool_result", "recording the tool result");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, request, strata::capi::kRequestMagic, "request"); s != STRATA_OK) {
      return s;
    }
    if (call_id == nullptr) return call.NullArgument("call_id");
    std::optional<std::string> result;
    if (content != nullptr) {
      result.emplace();
      if (strata_status s = strata::capi::ReadString(call, content, content_len, "content", &*result);
          s != STRATA_OK) {
        return s;
      }
    }
    std::lock_guard<std::mutex> lock(request->mu);
    if (request->magic.load() != strata::capi::kRequestMagic) {
      return call.Fail(STRATA_ERR_MISUSE, "request was already destroyed");
    }
    return call.From(request->engine->impl->SubmitToolResult(*request->impl, call_id, std::move(result)));
  });
}

}  // extern "C"
