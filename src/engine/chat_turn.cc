// ChatTurn: detokenize, parse tool calls, record messages, collect results.
#include "engine/chat_turn.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"

namespace strata {

ChatTurn::ChatTurn(Conversation* conversation, ChatOptions options)
    : conversation_(conversation), options_(std::move(options)) {}

StatusOr<std::vector<int32_t>> ChatTurn::Prompt(std::function<bool()> cancelled) const {
  return conversation_->RenderTokens(/*add_generation_prompt=*/true, options_.variables, std::move(cancelled));
}

void ChatTurn::BeginMessage() {
  DetokenizerOptions d;
  d.skip_special_tokens = options_.skip_special_tokens;
  d.stop_strings = options_.stop_strings;
  detokenizer_ = std::make_unique<StreamingDetokenizer>(conversation_->text().tokenizer(), std::move(d));
  content_.clear();
  tool_calls_ = nlohmann::ordered_json::array();
}

StatusOr<std::vector<Event>> ChatTurn::Push(int32_t token, bool* stopped) {
  std::vector<Event> out;
  *stopped = false;
  // Models often have more embedding rows than the tokenizer has ids (padding
  // to a multiple of 64 or 128); such ids have no text.
  if (token < 0 || token >= conversation_->text().tokenizer().vocab_size()) return out;
  STRATA_ASSIGN_OR_RETURN(DetokenizerOutput d, detokenizer_->Push(token));
  FeedText(d.text, token, &out);
  *stopped = d.stopped;
  return out;
}

void ChatTurn::FeedText(const std::string& text, int32_t token, std::vector<Event>* out) {
  if (text.empty()) return;
  ToolCallParser* parser = conversation_->parser();
  if (parser == nullptr) {
    ToolCallEvent e;
    e.text = text;
    Route({std::move(e)}, token, out);
    return;
  }
  Route(parser->Feed(text), token, out);
}

void ChatTurn::Route(std::vector<ToolCallEvent> parsed, int32_t token, std::vector<Event>* out) {
  for (ToolCallEvent& p : parsed) {
    Event ev;
    ev.token = token;
    switch (p.kind) {
      case ToolCallEvent::Kind::kText: {
        if (p.text.empty()) continue;
        content_ += p.text;
        ev.type = EventType::kText;
        ev.text = std::move(p.text);
        break;
      }
      case ToolCallEvent::Kind::kError: {
        // The rejected markup stays in the message so the conversation shows
        // what the model wrote; nothing is called.
        content_ += p.raw;
        ev.type = EventType::kToolError;
        ev.text = std::move(p.text);
        ev.tool_name = std::move(p.name);
        ev.arguments = std::move(p.raw);
        break;
      }
      case ToolCallEvent::Kind::kToolCall: {
        Call call;
        call.id = p.id;
        call.name = p.name;
        call.arguments = p.arguments;
        // Hermes templates print object arguments with tojson, as the model
        // was trained to write them; the other families concatenate strings.
        nlohmann::ordered_json args = p.arguments;
        if (conversation_->parser()->family() == ToolCallFamily::kHermes) {
          auto parsed = ParseBoundedJson<nlohmann::ordered_json>(p.arguments, "tool call arguments");
          if (parsed.ok()) args = *std::move(parsed);
        }
        tool_calls_.push_back({{"id", p.id},
                               {"type", "function"},
                               {"function", {{"name", p.name}, {"arguments", std::move(args)}}}});
        if (conversation_->FindTool(p.name) == nullptr) {
          // An unknown tool is answered at once with an error tool message, so
          // the template sees a complete exchange and the model can correct
          // itself in the next round.
          // The name is model output and may not be UTF-8: replaced, never thrown on.
          call.result = nlohmann::json({{"error", absl::StrCat("unknown tool '", p.name, "'")}})
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
          ev.type = EventType::kToolError;
          ev.text = absl::StrCat("unknown tool '", p.name, "'");
        } else {
          ev.type = EventType::kToolCall;
          ev.arguments = p.arguments;
        }
        ev.call_id = p.id;
        ev.tool_name = p.name;
        std::lock_guard<std::mutex> lock(mu_);
        calls_.push_back(std::move(call));
        break;
      }
    }
    out->push_back(std::move(ev));
  }
}

std::vector<Event> ChatTurn::EndMessage() {
  std::vector<Event> out;
  if (detokenizer_ == nullptr) return out;
  const DetokenizerOutput rest = detokenizer_->Finish();
  FeedText(rest.text, -1, &out);
  if (ToolCallParser* parser = conversation_->parser()) Route(parser->Finish(), -1, &out);
  nlohmann::ordered_json message = {{"role", "assistant"}, {"content", content_}};
  if (!tool_calls_.empty()) message["tool_calls"] = tool_calls_;
  // Built from parser output, so it is valid by construction.
  (void)conversation_->AddMessage(std::move(message));
  detokenizer_.reset();
  content_.clear();
  tool_calls_ = nlohmann::ordered_json::array();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_ = !calls_.empty();
  return out;
}

void ChatTurn::AppendResults() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Call& c : calls_) {
    if (c.result || c.declined) answered_.push_back(c.id);
    if (!c.result) continue;
    (void)conversation_->AddMessage(
        {{"role", "tool"}, {"tool_call_id", c.id}, {"name", c.name}, {"content", *c.result}});
  }
  calls_.clear();
  waiting_ = false;
  ++rounds_;
}

ChatTurn::Wait ChatTurn::wait_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!waiting_) return Wait::kNone;
  bool all = true;
  for (const Call& c : calls_) {
    if (c.declined) return Wait::kDeclined;
    if (!c.result) all = false;
  }
  return all ? Wait::kReady : Wait::kBlocked;
}

Status ChatTurn::SubmitResult(const std::string& id, std::optional<std::string> content) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Call& c : calls_) {
    if (c.id != id) continue;
    if (c.result || c.declined) {
      return absl::AlreadyExistsError(absl::StrCat("tool call '", id, "' was already answered"));
    }
    if (content) {
      c.result = std::move(content);
    } else {
      c.declined = true;
    }
    return OkStatus();
  }
  // A call of an earlier round: its answer was consumed when the next round
  // started, and it stays answered (the host may race the scheduler there).
  for (const std::string& a : answered_) {
    if (a == id) {
      return absl::AlreadyExistsError(absl::StrCat("tool call '", id, "' was already answered"));
    }
  }
  return absl::NotFoundError(absl::StrCat("'", id, "' is not an open tool call of this request"));
}

bool ChatTurn::HasResult(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Call& c : calls_) {
    if (c.id == id) return c.result.has_value() || c.declined;
  }
  return false;
}

}  // namespace strata
