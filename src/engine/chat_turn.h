// ChatTurn: the text side of one chat request, driven by the engine's
// scheduler thread token by token. It turns tokens into text through the
// streaming detokenizer (never partial UTF-8, stop strings across tokens),
// finds tool calls with the conversation's incremental parser, records the
// assistant message in the conversation, and keeps the table of tool calls
// that the host answers (from any thread) before the next round starts.
//
// One request may run several rounds: prompt -> assistant message with tool
// calls -> (host answers) -> tool messages -> next assistant message ...
#ifndef STRATA_ENGINE_CHAT_TURN_H_
#define STRATA_ENGINE_CHAT_TURN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/conversation.h"
#include "engine/event.h"
#include "text/detokenizer.h"

namespace strata {

struct ChatOptions {
  std::vector<std::string> stop_strings;  // end the request; not part of the text
  bool skip_special_tokens = false;       // leave special tokens out of the text
  // Rounds of tool results per request; a message with tool calls beyond it
  // ends the request with kToolCalls (the calls stay unanswered).
  int32_t max_tool_rounds = 8;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // extra template variables
};

class ChatTurn {
 public:
  // `conversation` must outlive the turn (the session owns both).
  ChatTurn(Conversation* conversation, ChatOptions options);

  const ChatOptions& options() const { return options_; }
  Conversation& conversation() { return *conversation_; }

  // Scheduler thread -------------------------------------------------------
  // The conversation rendered with the generation prompt, as tokens.
  // `cancelled`, when set, is polled during the render (Cancelled when true).
  StatusOr<std::vector<int32_t>> Prompt(std::function<bool()> cancelled = nullptr) const;
  // Starts an assistant message (fresh detokenizer state).
  void BeginMessage();
  bool in_message() const { return detokenizer_ != nullptr; }
  // One generated token of the message; returns the events it completes.
  // Sets *stopped when a stop string ended the text.
  StatusOr<std::vector<Event>> Push(int32_t token, bool* stopped);
  // Ends the message: flushes held-back text, reports an unterminated call,
  // and appends the assistant message (content, tool_calls) to the
  // conversation. Returns the last events. Calls of the message now wait for
  // results (waiting()).
  std::vector<Event> EndMessage();
  // Appends the answered calls as tool messages, in call order, and clears
  // the table; counts a round.
  void AppendResults();
  int32_t rounds() const { return rounds_; }

  // Any thread --------------------------------------------------------------
  enum class Wait {
    kNone,      // no calls outstanding
    kBlocked,   // some call has neither a result nor a decline
    kReady,     // every call answered: the next round may start
    kDeclined,  // the host declined a call: the request ends with kToolCalls
  };
  Wait wait_state() const;
  // A result (content) or a decline (nullopt) for call `id`. NotFound for an
  // id that is not a call of this request; AlreadyExists when answered,
  // also once a later round has consumed the answer.
  Status SubmitResult(const std::string& id, std::optional<std::string> content);
  bool HasResult(const std::string& id) const;

 private:
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;  // canonical JSON object
    std::optional<std::string> result;
    bool declined = false;
  };
  // Handles the parser's events for a piece of text.
  void Route(std::vector<ToolCallEvent> parsed, int32_t token, std::vector<Event>* out);
  void FeedText(const std::string& text, int32_t token, std::vector<Event>* out);

  Conversation* const conversation_;
  const ChatOptions options_;
  std::unique_ptr<StreamingDetokenizer> detokenizer_;  // null between messages
  std::string content_;                 // the message's text (plus rejected markup)
  nlohmann::ordered_json tool_calls_;   // the message's calls, template form
  int32_t rounds_ = 0;

  mutable std::mutex mu_;
  std::vector<Call> calls_;            // guarded by mu_
  std::vector<std::string> answered_;  // guarded by mu_: ids answered in earlier rounds
  bool waiting_ = false;               // guarded by mu_: the message ended with calls
};

}  // namespace strata

#endif  // STRATA_ENGINE_CHAT_TURN_H_
