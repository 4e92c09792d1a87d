// The oracle shared by the host-JSON fuzzer and its corpus replay: arbitrary
// bytes as the JSON text a host passes (template_variables_json,
// parameters_json, tool_calls_json). A text is accepted only within
// limits::kMaxJsonDepth; an accepted document then goes where host JSON
// goes: copied, dumped, converted to template values and printed by
// `tojson`, which must succeed and give back the same document.
#ifndef STRATA_TESTS_FUZZ_HOST_JSON_CHECK_H_
#define STRATA_TESTS_FUZZ_HOST_JSON_CHECK_H_

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/bounded_json.h"
#include "base/input_limits.h"
#include "text/chat_template.h"

namespace strata::fuzz {

struct HostJsonResult {
  bool accepted = false;
  std::string violation;
};

// Equal as JSON values, numbers by value (template values keep int64 and
// double; a uint64 past int64 becomes a double).
inline bool SameJsonValue(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float() || a.is_number_unsigned() ||
        b.is_number_unsigned()) {
      return a.get<double>() == b.get<double>();
    }
    return a.get<int64_t>() == b.get<int64_t>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!SameJsonValue(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y) {
      if (x.key() != y.key() || !SameJsonValue(x.value(), y.value())) return false;
    }
    return true;
  }
  return a == b;
}

inline bool AllFinite(const nlohmann::ordered_json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  for (const auto& c : j) {
    if (c.is_structured() ? !AllFinite(c)
                          : (c.is_number_float() && !std::isfinite(c.get<double>()))) {
      return false;
    }
  }
  return true;
}

inline HostJsonResult CheckHostJson(const uint8_t* data, size_t size) {
  HostJsonResult r;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseBoundedJson<nlohmann::ordered_json>(text, "template_variables_json");
  if (!parsed.ok()) {
    const std::string message(parsed.status().message());
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument ||
        message.rfind("template_variables_json: ", 0) != 0) {
      r.violation = "rejection does not name the field: " + parsed.status().ToString();
    }
    return r;
  }
  r.accepted = true;
  const nlohmann::ordered_json& doc = *parsed;
  if (!JsonDepthWithin(doc, limits::kMaxJsonDepth)) {
    r.violation = "accepted a document nested deeper than the limit";
    return r;
  }
  const nlohmann::ordered_json copy = doc;
  (void)copy.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  static const auto* tmpl =
      ChatTemplate::Compile("{{ x | tojson(separators=(',', ':')) }}", "fuzz")->release();
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  // Wrapped as templates see it: tools[i].function.parameters.
  context["x"] = {{"type", "function"}, {"function", {{"parameters", doc}}}};
  auto out = tmpl->RenderOrdered(context);
  if (!out.ok()) {
    r.violation = "tojson failed on an accepted document: " + out.status().ToString();
    return r;
  }
  if (!AllFinite(doc)) return r;  // Infinity is printed as Python does, not as JSON
  auto back = ParseBoundedJson<nlohmann::ordered_json>(*out, "tojson output",
                                                       limits::kMaxTemplateValueDepth);
  if (!back.ok() || !SameJsonValue((*back)["function"]["parameters"], doc)) {
    r.violation = "tojson did not give the document back: " + *out;
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_HOST_JSON_CHECK_H_
