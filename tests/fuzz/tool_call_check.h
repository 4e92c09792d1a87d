// The oracle shared by the tool-call parser fuzzer and its corpus replay.
// Input: byte 0 picks the family, byte 1 seeds the chunking, the rest is
// model output. The parsers promise that the events do not depend on how
// the stream is cut (once adjacent text events are merged) and that every
// call's arguments are a canonical JSON object; both are checked, parsing the
// text whole and in chunks of 1 to 16 bytes.
#ifndef STRATA_TESTS_FUZZ_TOOL_CALL_CHECK_H_
#define STRATA_TESTS_FUZZ_TOOL_CALL_CHECK_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/bounded_json.h"
#include "text/tool_call_parser.h"

namespace strata::fuzz {

struct ToolCallResult {
  int calls = 0;
  int errors = 0;
  std::string violation;
};

inline void AppendMerged(std::vector<ToolCallEvent> events, std::vector<ToolCallEvent>* out) {
  for (ToolCallEvent& e : events) {
    if (e.kind == ToolCallEvent::Kind::kText && !out->empty() &&
        out->back().kind == ToolCallEvent::Kind::kText) {
      out->back().text += e.text;
    } else if (e.kind != ToolCallEvent::Kind::kText || !e.text.empty()) {
      out->push_back(std::move(e));
    }
  }
}

inline ToolCallResult CheckToolCalls(const uint8_t* data, size_t size) {
  ToolCallResult r;
  if (size < 2) return r;
  static constexpr ToolCallFamily kFamilies[] = {ToolCallFamily::kHermes, ToolCallFamily::kDeepSeek,
                                                 ToolCallFamily::kKimiK2};
  const ToolCallFamily family = kFamilies[data[0] % 3];
  uint32_t seed = data[1] + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  std::vector<ToolCallEvent> whole, chunked;
  auto parser = ToolCallParser::Create(family);
  AppendMerged(parser->Feed(text), &whole);
  AppendMerged(parser->Finish(), &whole);

  parser = ToolCallParser::Create(family);
  for (size_t at = 0; at < text.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(1 + (seed >> 16) % 16, text.size() - at);
    AppendMerged(parser->Feed(text.substr(at, n)), &chunked);
    at += n;
  }
  AppendMerged(parser->Finish(), &chunked);
  if (whole != chunked) {
    r.violation = "events depend on the chunking";
    return r;
  }
  for (const ToolCallEvent& e : whole) {
    if (e.kind == ToolCallEvent::Kind::kError) {
      ++r.errors;
      if (e.text.empty()) r.violation = "error event without a message";
      continue;
    }
    if (e.kind != ToolCallEvent::Kind::kToolCall) continue;
    ++r.calls;
    auto args = ParseBoundedJson<nlohmann::json>(e.arguments, "arguments");
    if (!args.ok() || !args->is_object()) {
      r.violation = "call arguments are not a JSON object: " + e.arguments;
    } else if (args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) !=
               e.arguments) {
      r.violation = "call arguments are not canonical: " + e.arguments;
    }
    if (e.name.empty() || e.id.empty()) r.violation = "call without a name or id";
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_TOOL_CALL_CHECK_H_
