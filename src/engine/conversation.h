// Conversation: the chat side of a session: messages in the chat-template
// format (role, content, reasoning_content, tool_calls, tool_call_id, name),
// the registered tools, and their rendering through the model's template.
// The session aligns its token history with this rendering; nothing here
// evaluates the model.
#ifndef STRATA_ENGINE_CONVERSATION_H_
#define STRATA_ENGINE_CONVERSATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/text_model.h"
#include "text/tool_call_parser.h"

namespace strata {

class Request;
struct Event;

// A host tool. `handler` is called by Engine::RunChatToCompletion on the
// thread that runs the blocking chat loop, with the request and its
// kToolCall event; it answers through Engine::SubmitToolResult and returns 0,
// or returns a nonzero code (see RunChatToCompletion). Empty: the tool is
// answered through events only.
struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON schema
  std::function<int32_t(Request&, const Event&)> handler;
};

// Thread-safety: one thread at a time (the session's owner, or the engine's
// scheduler thread while a chat request runs on the session).
class Conversation {
 public:
  explicit Conversation(std::shared_ptr<const TextModel> text);

  // Validates and appends a message: role one of system/user/assistant/tool,
  // string content; tool messages need tool_call_id or name; tool_calls must
  // be an array of {function: {name, arguments}} objects.
  Status AddMessage(nlohmann::ordered_json message);
  // AlreadyExists for a name already registered, unless the registered tool
  // has no handler (a tool of a loaded session) and `tool` brings one with
  // the same description and parameters: the handler is then attached.
  // InvalidArgument for an empty name or a schema that is not a JSON object.
  Status AddTool(ToolSpec tool);
  void ClearTools() { tools_.clear(); }
  // Forgets the messages (tools stay registered) and restarts call ids.
  void ClearMessages();
  // Keeps the first `n` messages (session rollback).
  void TruncateMessages(size_t n);
  // A copy with the same messages and tools (session fork). Call ids of the
  // copy's parser restart.
  std::unique_ptr<Conversation> Copy() const;

  const ToolSpec* FindTool(const std::string& name) const;
  const std::vector<ToolSpec>& tools() const { return tools_; }
  const nlohmann::ordered_json& messages() const { return messages_; }
  const TextModel& text() const { return *text_; }

  // The tools in the OpenAI/transformers form templates expect:
  // [{"type": "function", "function": {name, description, parameters}}].
  nlohmann::ordered_json ToolsJson() const;
  // Renders messages and tools (when any) through the chat template, with
  // `variables` (a JSON object: enable_thinking, ...) added to the context.
  // FailedPrecondition when the model has no chat template. The render is
  // bounded (base/input_limits.h); `cancelled`, when set, is polled during it
  // and stops it with Cancelled.
  StatusOr<std::string> Render(bool add_generation_prompt, const nlohmann::ordered_json& variables,
                               std::function<bool()> cancelled = nullptr) const;
  // Render, then tokenize without adding BOS/EOS: templates spell their
  // special tokens themselves (as transformers' apply_chat_template(tokenize=True)).
  StatusOr<std::vector<int32_t>> RenderTokens(bool add_generation_prompt,
                                              const nlohmann::ordered_json& variables,
                                              std::function<bool()> cancelled = nullptr) const;

  // The session's tool-call parser (null when the template has no known
  // syntax). One per conversation so generated call ids stay unique in it.
  ToolCallParser* parser() { return parser_.get(); }

 private:
  std::shared_ptr<const TextModel> text_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::vector<ToolSpec> tools_;
  std::unique_ptr<ToolCallParser> parser_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_CONVERSATION_H_
