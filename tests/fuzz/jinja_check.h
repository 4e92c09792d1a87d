// The oracle shared by the Jinja fuzzer and its corpus replay: compile
// arbitrary bytes as a chat template and render it under a small budget with
// a chat-like context (the bytes after a NUL, when they are a JSON object,
// replace it). Rejection and render errors are fine; what is checked is that
// every failure is a located InvalidArgument, that the budget holds, and that
// rendering is deterministic. A crash, UB, a leak or a hang is caught by the
// sanitizers and libFuzzer themselves.
#ifndef STRATA_TESTS_FUZZ_JINJA_CHECK_H_
#define STRATA_TESTS_FUZZ_JINJA_CHECK_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/bounded_json.h"
#include "text/chat_template.h"

namespace strata::fuzz {

struct JinjaResult {
  bool compiled = false;
  bool rendered = false;
  std::string violation;  // empty when every promise held
};

inline nlohmann::ordered_json DefaultJinjaContext() {
  return nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? <think>x</think>"},
      {"role": "assistant", "content": "", "reasoning_content": "look it up",
       "tool_calls": [{"id": "call_0", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "sunny"},
      {"role": "assistant", "content": "Sunny."}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>"
  })");
}

// Small budgets: each input must be cheap to judge.
inline jinja::RenderOptions FuzzRenderOptions() {
  jinja::RenderOptions o;
  o.limits.max_steps = 50'000;
  o.limits.max_output_bytes = 64 << 10;
  o.limits.max_string_bytes = 64 << 10;
  o.limits.max_items = 4096;
  o.limits.max_memory_bytes = 4 << 20;
  return o;
}

inline std::string JinjaErrorViolation(const Status& s, const char* stage) {
  if (s.code() != absl::StatusCode::kInvalidArgument) {
    return std::string(stage) + " error is not InvalidArgument: " + s.ToString();
  }
  if (s.message().rfind("fuzz:", 0) != 0) {
    return std::string(stage) + " error does not name the template position: " + s.ToString();
  }
  return "";
}

inline JinjaResult CheckJinja(const uint8_t* data, size_t size) {
  JinjaResult r;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json context = DefaultJinjaContext();
  if (nul != std::string::npos) {
    auto parsed = ParseBoundedJson<nlohmann::ordered_json>(input.substr(nul + 1), "context");
    if (parsed.ok() && parsed->is_object()) context = *std::move(parsed);
  }
  auto tmpl = ChatTemplate::Compile(source, "fuzz");
  if (!tmpl.ok()) {
    r.violation = JinjaErrorViolation(tmpl.status(), "compile");
    return r;
  }
  r.compiled = true;
  const jinja::RenderOptions options = FuzzRenderOptions();
  auto first = (*tmpl)->RenderOrdered(context, options);
  // Rendering is a function of template and context, except for the clock.
  if (source.find("strftime_now") == std::string::npos) {
    auto second = (*tmpl)->RenderOrdered(context, options);
    if (first.ok() != second.ok() || (first.ok() && *first != *second) ||
        (!first.ok() && first.status() != second.status())) {
      r.violation = "two renders of the same template and context differ";
      return r;
    }
  }
  if (!first.ok()) {
    r.violation = JinjaErrorViolation(first.status(), "render");
    return r;
  }
  r.rendered = true;
  if (static_cast<int64_t>(first->size()) > options.limits.max_output_bytes) {
    r.violation = "output exceeds max_output_bytes";
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_JINJA_CHECK_H_
