// Event: what the engine reports to the host about a request: a token, a
// piece of text, a tool call, a tool-call error, or the end of the request.
#ifndef STRATA_ENGINE_EVENT_H_
#define STRATA_ENGINE_EVENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/request.h"

namespace strata {

// Values equal the public STRATA_EVENT_* codes.
enum class EventType : int32_t {
  kToken = 1,      // token-level requests: one generated token
  kText = 3,       // chat requests: complete UTF-8 text, tool-call markup removed
  kToolCall = 4,   // chat requests: the model called a registered tool
  kToolError = 5,  // chat requests: a malformed call, or a call of an unknown tool
  kFinished = 2,   // always the last event of a request
};

struct Event {
  EventType type = EventType::kToken;
  std::shared_ptr<Request> request;
  int32_t token = -1;  // kToken: the token; kFinished: the EOS/stop token, else -1; kText: the last token
  Status status;       // kFinished: the outcome
  FinishReason finish_reason = FinishReason::kNone;
  int64_t num_generated = 0;  // generated tokens so far
  std::string text;       // kText: the text; kToolError: what went wrong
  std::string call_id;    // kToolCall, and kToolError for an unknown tool
  std::string tool_name;  // kToolCall; kToolError when the name was readable
  std::string arguments;  // kToolCall: canonical JSON object; kToolError: the rejected markup
};

}  // namespace strata

#endif  // STRATA_ENGINE_EVENT_H_
