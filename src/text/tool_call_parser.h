// Incremental tool-call parsers: turn a model's streamed output into user text,
// tool calls (id, name, canonical JSON arguments) and error events, for the
// syntaxes of the Hermes/Qwen, DeepSeek (V3 and V3.1) and Kimi K2 families.
//
// The contract that matters most: the event sequence does not depend on how the
// stream is cut into chunks. Every decision is taken only once the bytes that
// decide it have arrived (text that could still become a marker is held back),
// so feeding a stream whole or byte by byte gives the same events once adjacent
// text events are merged.
#ifndef STRATA_TEXT_TOOL_CALL_PARSER_H_
#define STRATA_TEXT_TOOL_CALL_PARSER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata {

struct ToolCallEvent {
  enum class Kind { kText, kToolCall, kError };
  Kind kind = Kind::kText;
  // kText: content to show the user (tool-call markup removed).
  // kError: what went wrong, for logs and for telling the model.
  std::string text;
  // kToolCall: the call's id (from the syntax when it carries one, else
  // "call_<n>" counted per parser), the tool name and the arguments as a
  // canonical JSON object (keys sorted, no insignificant whitespace, UTF-8).
  std::string id;
  std::string name;  // also set on kError when the name was readable
  std::string arguments;
  // kError: the markup that was rejected, verbatim.
  std::string raw;

  bool operator==(const ToolCallEvent&) const = default;
};

enum class ToolCallFamily {
  kHermes,  // Qwen2.5/Qwen3, Hermes: <tool_call>{"name":..,"arguments":..}</tool_call>
  kDeepSeek,  // DeepSeek V3 (function<｜tool▁sep｜>NAME ```json) and V3.1 (NAME<｜tool▁sep｜>ARGS)
  kKimiK2,  // Kimi K2: <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS
};

// "hermes", "deepseek", "kimi_k2".
std::string_view ToolCallFamilyName(ToolCallFamily family);

struct ToolCallParserOptions {
  // When non-empty, a call naming any other tool becomes an error event.
  std::vector<std::string> tool_names;
};

// Not thread-safe; one parser per generated message stream.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;

  // Picks the family from the markers a chat template emits. NotFound when the
  // template shows none of the known tool-call syntaxes.
  static StatusOr<std::unique_ptr<ToolCallParser>> ForTemplate(
      std::string_view chat_template, const ToolCallParserOptions& options = {});
  // By name: "hermes" (or "qwen"), "deepseek" (or "deepseek_v3", "deepseek_v31"),
  // "kimi_k2" (or "kimi"). InvalidArgument for other names.
  static StatusOr<std::unique_ptr<ToolCallParser>> ForFamily(
      std::string_view family, const ToolCallParserOptions& options = {});
  static std::unique_ptr<ToolCallParser> Create(ToolCallFamily family,
                                                const ToolCallParserOptions& options = {});

  // Consumes the next chunk (any byte boundary, including inside a UTF-8
  // sequence or a marker) and returns the events it completes.
  virtual std::vector<ToolCallEvent> Feed(std::string_view chunk) = 0;
  // Ends the message: flushes held-back text and reports an unterminated call
  // as an error. The parser is then ready for the next message; generated ids
  // keep counting so they stay unique within a conversation.
  virtual std::vector<ToolCallEvent> Finish() = 0;

  virtual ToolCallFamily family() const = 0;
};

}  // namespace strata

#endif  // STRATA_TEXT_TOOL_CALL_PARSER_H_
