// `strata run` in chat mode: the conversation goes through the model's chat
// template, generated text streams to stdout as the engine's TEXT events
// arrive (complete UTF-8 only), and tool calls are parsed with the template's
// syntax. One-shot with --prompt, otherwise a REPL: each stdin line is a user
// message; /reset starts over, /quit or end of input ends.
#include <cstdio>
#include <iostream>
#include <string>

#include <unistd.h>

#include "cli.h"

namespace strata::cli {
namespace {

// Runs one assistant turn after `user`, streaming to stdout. Returns false
// when the turn failed (the error is printed).
bool Turn(const api::Engine& engine, api::Session& session, const ChatCliOptions& o, const std::string& user) {
  try {
    session.AddMessage(STRATA_ROLE_USER, user);
    const api::RequestParams params =
        api::RequestParams().MaxTokens(o.max_new_tokens).Temperature(o.temperature).Seed(o.seed);
    const std::string variables = o.template_variables.dump();
    strata_chat_params chat;
    strata_chat_params_init(&chat);
    chat.template_variables_json = variables.c_str();
    const auto t0 = std::chrono::steady_clock::now();
    const api::Request request = session.SubmitChat(params, &chat);
    std::fputs("assistant: ", stdout);
    std::fflush(stdout);
    const Finished f = WaitForRequest(engine, request, [&](const strata_event& ev) {
      switch (ev.type) {
        case STRATA_EVENT_TEXT: std::fwrite(ev.text, 1, ev.text_len, stdout); break;
        case STRATA_EVENT_TOOL_CALL:
          // Unreachable while the CLI registers no tools; declined so the turn ends.
          std::printf("\n[tool call %s %.*s: no tools in the CLI, declined]", ev.tool_name,
                      static_cast<int>(ev.tool_arguments_len), ev.tool_arguments);
          request.DeclineToolCall(ev.tool_call_id);
          break;
        case STRATA_EVENT_TOOL_ERROR: std::printf("\n[tool-call error: %.*s]", static_cast<int>(ev.text_len), ev.text); break;
        default: break;
      }
      std::fflush(stdout);  // stream as it arrives
    });
    const double seconds = SecondsSince(t0);
    std::printf("\n");
    if (f.status != STRATA_OK) {
      Fail("run", f.message, kExitFailure);
      return false;
    }
    const uint32_t n = f.generated_tokens;
    std::printf("finish: %s after %u tokens (%.1f tokens/s)\n", strata_finish_reason_string(f.reason), n,
                seconds > 0 ? n / seconds : 0.0);
    std::fflush(stdout);
    return true;
  } catch (const api::Error& e) {
    Fail("run", e, kExitFailure);
    return false;
  }
}

// The --system message, when there is one.
bool AddSystem(api::Session& session, const ChatCliOptions& o) {
  if (o.system.empty()) return true;
  try {
    session.AddMessage(STRATA_ROLE_SYSTEM, o.system);
    return true;
  } catch (const api::Error& e) {
    Fail("run", e, kExitFailure);
    return false;
  }
}

}  // namespace

int RunChat(const api::Engine& engine, api::Session& session, const ChatCliOptions& o) {
  if (!AddSystem(session, o)) return kExitFailure;
  if (!o.prompt.empty()) {
    std::printf("user: %s\n", o.prompt.c_str());
    return Turn(engine, session, o, o.prompt) ? kExitOk : kExitFailure;
  }
  const bool tty = isatty(STDIN_FILENO) != 0;
  if (tty) std::fputs("chat: type a message; /reset starts over, /quit or Ctrl-D ends\n", stderr);
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/quit") break;
    if (line == "/reset") {
      try {
        session.Reset();
      } catch (const api::Error& e) {
        return Fail("run", e, kExitFailure);
      }
      if (!AddSystem(session, o)) return kExitFailure;
      std::printf("(conversation reset)\n");
      continue;
    }
    if (line.empty()) continue;
    if (!tty) std::printf("user: %s\n", line.c_str());
    if (!Turn(engine, session, o, line)) return kExitFailure;
  }
  return kExitOk;
}

}  // namespace strata::cli
