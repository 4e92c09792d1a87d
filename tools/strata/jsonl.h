// Line-by-line JSON input for the text subcommands (`strata tokenize`,
// `strata detokenize`): one JSON value per line, errors naming file and line.
#ifndef STRATA_TOOLS_STRATA_JSONL_H_
#define STRATA_TOOLS_STRATA_JSONL_H_

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status.h"

namespace strata::cli {

// Calls `fn(value, where)` for each line of `path`, where `where` is
// "<path>:<line>" for messages. A final newline does not make an extra line;
// a blank line in the middle is an error (it cannot be a JSON value, and
// skipping it would shift the output against the input). Stops at the first
// error, returning it prefixed by `where`.
inline Status ForEachJsonLine(
    const std::string& path,
    const std::function<Status(const nlohmann::json&, const std::string&)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  size_t start = 0;
  for (int line = 1; start < data.size(); ++line) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    std::string text = data.substr(start, end - start);
    start = end + 1;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const std::string where = absl::StrCat(path, ":", line);
    nlohmann::json value;
    // Refused before parsing: a deep document would crash the copies below.
    if (Status st = CheckJsonNesting(text, where); !st.ok()) return st;
    try {
      value = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at ...": keep the tail.
      std::string msg = e.what();
      if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", msg));
    }
    if (Status st = fn(value, where); !st.ok()) return st;
  }
  return OkStatus();
}

}  // namespace strata::cli

#endif  // STRATA_TOOLS_STRATA_JSONL_H_
