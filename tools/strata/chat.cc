// `strata run` in chat mode: the conversation goes through the model's chat
// template, generated text streams to stdout as the engine's TEXT events
// arrive (complete UTF-8 only), and tool calls are parsed with the template's
// syntax. One-shot with --prompt, otherwise a REPL: each stdin line is a user
// message; /reset starts over, /quit or end of input ends.
#include <cstdio>
#include <iostream>
#include <string>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace strata::cli {
namespace {

// Runs one assistant turn after `user`, streaming to stdout. Returns false
// when the turn failed (the error is printed).
bool Turn(Engine& engine, Session& session, const ChatCliOptions& o, const std::string& user) {
  Conversation& conv = *session.conversation();
  if (Status st = conv.AddMessage({{"role", "user"}, {"content", user}}); !st.ok()) {
    Fail("run", st, kExitFailure);
    return false;
  }
  GenerationParams gp;
  gp.max_tokens = o.max_new_tokens;
  gp.sampling.temperature = o.temperature;
  gp.sampling.seed = o.seed;
  ChatOptions co;
  co.variables = o.template_variables;
  const auto t0 = std::chrono::steady_clock::now();
  auto request = engine.SubmitChat(session, gp, co);
  if (!request.ok()) {
    Fail("run", request.status(), kExitFailure);
    return false;
  }
  std::fputs("assistant: ", stdout);
  std::fflush(stdout);
  FinishReason reason = FinishReason::kNone;
  const Status st = engine.RunChatToCompletion(
      **request,
      [&](const Event& ev) {
        switch (ev.type) {
          case EventType::kText: std::fwrite(ev.text.data(), 1, ev.text.size(), stdout); break;
          case EventType::kToolCall:
            std::printf("\n[tool call %s %s: no tools in the CLI, declined]", ev.tool_name.c_str(),
                        ev.arguments.c_str());
            break;
          case EventType::kToolError: std::printf("\n[tool-call error: %s]", ev.text.c_str()); break;
          default: break;
        }
        std::fflush(stdout);  // stream as it arrives
        return true;
      },
      &reason);
  const double seconds = SecondsSince(t0);
  const int64_t n = (*request)->num_generated();
  std::printf("\n");
  if (!st.ok()) {
    Fail("run", st, kExitFailure);
    return false;
  }
  std::printf("finish: %s after %lld tokens (%.1f tokens/s)\n", FinishReasonName(reason),
              static_cast<long long>(n), seconds > 0 ? n / seconds : 0.0);
  std::fflush(stdout);
  return true;
}

}  // namespace

int RunChat(Engine& engine, Session& session, const ChatCliOptions& o) {
  Conversation& conv = *session.conversation();
  auto add_system = [&]() -> bool {
    if (o.system.empty()) return true;
    if (Status st = conv.AddMessage({{"role", "system"}, {"content", o.system}}); !st.ok()) {
      Fail("run", st, kExitFailure);
      return false;
    }
    return true;
  };
  if (!add_system()) return kExitFailure;
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
      if (Status st = session.Reset(); !st.ok()) return Fail("run", st, kExitFailure);
      if (!add_system()) return kExitFailure;
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
