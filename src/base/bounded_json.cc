#include "base/bounded_json.h"

#include "base/read_file.h"


namespace strata {

Status CheckJsonNesting(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(what), ": JSON nested deeper than ", max_depth, " levels at byte ", i));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      // Unbalanced closers make the text invalid, and the parser stops at the
      // first one; up to there this count is exact.
      --depth;
    }
  }
  return OkStatus();
}

template <typename Json>
StatusOr<Json> ParseBoundedJson(std::string_view text, std::string_view what, int max_depth) {
  STRATA_RETURN_IF_ERROR(CheckJsonNesting(text, what, max_depth));
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 9: <reason>"; the byte offset says the same for any input.
    std::string reason = e.what();
    const size_t colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": not valid JSON at byte ",
                                                   e.byte > 0 ? e.byte - 1 : 0, ": ", reason));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": not valid JSON: ", e.what()));
  }
}

template <typename Json>
StatusOr<Json> ReadBoundedJsonFile(const std::string& path, int max_depth) {
  STRATA_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return ParseBoundedJson<Json>(text, path, max_depth);
}

template <typename Json>
bool JsonDepthWithin(const Json& json, int max_depth) {
  if (!json.is_structured()) return true;
  if (max_depth <= 0) return false;
  for (const auto& child : json) {
    if (!JsonDepthWithin(child, max_depth - 1)) return false;
  }
  return true;
}

template StatusOr<nlohmann::json> ParseBoundedJson(std::string_view, std::string_view, int);
template StatusOr<nlohmann::ordered_json> ParseBoundedJson(std::string_view, std::string_view, int);
template StatusOr<nlohmann::json> ReadBoundedJsonFile(const std::string&, int);
template StatusOr<nlohmann::ordered_json> ReadBoundedJsonFile(const std::string&, int);
template bool JsonDepthWithin(const nlohmann::json&, int);
template bool JsonDepthWithin(const nlohmann::ordered_json&, int);

}  // namespace strata
