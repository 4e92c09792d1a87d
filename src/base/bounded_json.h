// JSON from outside the library (files of a model directory, strings the
// host passes, text the model writes), parsed only when its nesting is within
// limits::kMaxJsonDepth. nlohmann's parser is iterative, but copying, dumping
// and comparing a document recurse once per level, so a document nested
// 100,000 deep must be refused before it exists: the text is scanned first.
#ifndef STRATA_BASE_BOUNDED_JSON_H_
#define STRATA_BASE_BOUNDED_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/input_limits.h"
#include "base/status.h"

namespace strata {

// InvalidArgument "<what>: JSON nested deeper than N levels at byte B" when an
// object or array opens below depth `max_depth`; OK otherwise, also for text
// that is not JSON (the parser says what is wrong with it). Linear, no
// allocation: brackets inside strings do not count.
Status CheckJsonNesting(std::string_view text, std::string_view what,
                        int max_depth = limits::kMaxJsonDepth);

// Parses `text` (nlohmann::json or nlohmann::ordered_json). Errors are
// InvalidArgument starting with "<what>: ": the nesting error above, or
// "not valid JSON at byte B: <reason>".
template <typename Json>
StatusOr<Json> ParseBoundedJson(std::string_view text, std::string_view what,
                                int max_depth = limits::kMaxJsonDepth);

// Reads and parses a file; `path` is the `what` of the messages. NotFound
// when it cannot be opened.
template <typename Json>
StatusOr<Json> ReadBoundedJsonFile(const std::string& path, int max_depth = limits::kMaxJsonDepth);

// Whether a document built in code (rather than parsed here) nests at most
// `max_depth` levels. Recurses at most max_depth + 1 levels.
template <typename Json>
bool JsonDepthWithin(const Json& json, int max_depth = limits::kMaxJsonDepth);

}  // namespace strata

#endif  // STRATA_BASE_BOUNDED_JSON_H_
