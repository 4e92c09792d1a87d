// Conversation: message validation, tool registry and template rendering.
#include "engine/conversation.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"

namespace strata {

Conversation::Conversation(std::shared_ptr<const TextModel> text) : text_(std::move(text)) {
  if (auto family = text_->tool_call_family()) parser_ = ToolCallParser::Create(*family);
}

Status Conversation::AddMessage(nlohmann::ordered_json m) {
  if (!m.is_object()) return absl::InvalidArgumentError("a message must be a JSON object");
  // Parsed text is bounded already; this bounds documents built by C++ callers,
  // which every later copy and render would recurse through. A message wraps
  // its parts: the arguments of a call the model wrote (themselves bounded)
  // sit at tool_calls[i].function.arguments, four levels down.
  if (!JsonDepthWithin(m, limits::kMaxJsonDepth + 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message nests deeper than ", limits::kMaxJsonDepth, " levels"));
  }
  if (!m.contains("role") || !m["role"].is_string()) {
    return absl::InvalidArgumentError("a message needs a string role");
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    return absl::InvalidArgumentError(
        absl::StrCat("role '", role, "' is not one of system, user, assistant, tool"));
  }
  // Templates index content as a string (content.startswith, "+" concatenation).
  if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
  if (!m["content"].is_string()) return absl::InvalidArgumentError("message content must be a string");
  if (role == "tool" && !m.contains("tool_call_id") && !m.contains("name")) {
    return absl::InvalidArgumentError("a tool message needs tool_call_id or name");
  }
  if (m.contains("tool_calls")) {
    const auto& calls = m["tool_calls"];
    if (role != "assistant") return absl::InvalidArgumentError("only assistant messages carry tool_calls");
    if (!calls.is_array()) return absl::InvalidArgumentError("tool_calls must be a JSON array");
    for (size_t i = 0; i < calls.size(); ++i) {
      const auto& c = calls[i];
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tool_calls[", i, "] needs {\"function\": {\"name\": ..., \"arguments\": ...}}"));
      }
    }
  }
  messages_.push_back(std::move(m));
  return OkStatus();
}

Status Conversation::AddTool(ToolSpec tool) {
  if (tool.name.empty()) return absl::InvalidArgumentError("a tool needs a name");
  if (!tool.parameters.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("tool '", tool.name, "': parameters must be a JSON object"));
  }
  if (!JsonDepthWithin(tool.parameters)) {
    return absl::InvalidArgumentError(absl::StrCat("tool '", tool.name, "': parameters nest deeper than ",
                                                   limits::kMaxJsonDepth, " levels"));
  }
  for (ToolSpec& t : tools_) {
    if (t.name != tool.name) continue;
    if (!t.handler && tool.handler && t.description == tool.description &&
        t.parameters == tool.parameters) {
      t.handler = std::move(tool.handler);
      return OkStatus();
    }
    return absl::AlreadyExistsError(absl::StrCat("tool '", tool.name, "' is already registered"));
  }
  tools_.push_back(std::move(tool));
  return OkStatus();
}

void Conversation::ClearMessages() {
  messages_ = nlohmann::ordered_json::array();
  if (auto family = text_->tool_call_family()) parser_ = ToolCallParser::Create(*family);
}

void Conversation::TruncateMessages(size_t n) {
  while (messages_.size() > n) messages_.erase(messages_.size() - 1);
}

std::unique_ptr<Conversation> Conversation::Copy() const {
  auto c = std::make_unique<Conversation>(text_);
  c->messages_ = messages_;
  c->tools_ = tools_;
  return c;
}

const ToolSpec* Conversation::FindTool(const std::string& name) const {
  for (const ToolSpec& t : tools_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

nlohmann::ordered_json Conversation::ToolsJson() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ToolSpec& t : tools_) {
    nlohmann::ordered_json fn = nlohmann::ordered_json::object();
    fn["name"] = t.name;
    fn["description"] = t.description;
    fn["parameters"] = t.parameters;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

StatusOr<std::string> Conversation::Render(bool add_generation_prompt, const nlohmann::ordered_json& variables,
                                           std::function<bool()> cancelled) const {
  const ChatTemplate* tmpl = text_->chat_template();
  if (tmpl == nullptr) {
    return absl::FailedPreconditionError("the model directory has no chat template (tokenizer_config.json)");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it) context[it.key()] = it.value();
  }
  context["messages"] = messages_;
  // transformers passes tools=None when there are none; templates test `if tools`.
  if (!tools_.empty()) context["tools"] = ToolsJson();
  context["add_generation_prompt"] = add_generation_prompt;
  jinja::RenderOptions options;
  options.cancelled = std::move(cancelled);
  return tmpl->RenderOrdered(context, options);
}

StatusOr<std::vector<int32_t>> Conversation::RenderTokens(bool add_generation_prompt,
                                                          const nlohmann::ordered_json& variables,
                                                          std::function<bool()> cancelled) const {
  STRATA_ASSIGN_OR_RETURN(std::string text, Render(add_generation_prompt, variables, std::move(cancelled)));
  EncodeOptions options;
  options.add_special_tokens = false;
  return text_->tokenizer().Encode(text, options);
}

}  // namespace strata
