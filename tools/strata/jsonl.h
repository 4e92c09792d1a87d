// Line-by-line JSON input for the text subcommands (`strata tokenize`,
// `strata detokenize`): one JSON value per line, errors naming file and line.
#ifndef STRATA_TOOLS_STRATA_JSONL_H_
#define STRATA_TOOLS_STRATA_JSONL_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli.h"

namespace strata::cli {

// The library refuses JSON nested deeper than this (strata.h, "Input from
// outside"); the tool holds its own input files to the same bound.
inline constexpr int kMaxJsonDepth = 256;

// nlohmann's parse is iterative, but copies and dumps of the document recurse
// once per level: a file nested 100,000 deep must never become a document.
// The parser callback sees each level as it opens, so the parse stops there.
// Throws nlohmann::json::parse_error's base (json::exception) on the limit.
template <typename Json>
Json ParseJsonWithin(const std::string& text, int max_depth = kMaxJsonDepth) {
  return Json::parse(text, [max_depth](int depth, typename Json::parse_event_t event, Json&) {
    if (depth >= max_depth && (event == Json::parse_event_t::object_start ||
                               event == Json::parse_event_t::array_start)) {
      throw std::length_error(absl::StrCat("JSON nested deeper than ", max_depth, " levels"));
    }
    return true;
  });
}

// Calls `fn(value, where)` for each line of `path`, where `where` is
// "<path>:<line>" for messages. A final newline does not make an extra line;
// a blank line in the middle is an error (it cannot be a JSON value, and
// skipping it would shift the output against the input). Stops at the first
// error, returning it prefixed by `where`.
inline absl::Status ForEachJsonLine(
    const std::string& path,
    const std::function<absl::Status(const nlohmann::json&, const std::string&)>& fn) {
  const absl::StatusOr<std::string> read = ReadTextFile(path);
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  size_t start = 0;
  for (int line = 1; start < data.size(); ++line) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    std::string text = data.substr(start, end - start);
    start = end + 1;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const std::string where = absl::StrCat(path, ":", line);
    nlohmann::json value;
    try {
      value = ParseJsonWithin<nlohmann::json>(text);
    } catch (const nlohmann::json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at ...": keep the tail.
      std::string msg = e.what();
      if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", msg));
    } catch (const std::length_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what()));
    }
    if (absl::Status st = fn(value, where); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace strata::cli

#endif  // STRATA_TOOLS_STRATA_JSONL_H_
