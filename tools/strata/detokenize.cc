// `strata detokenize`: text of each line of a JSONL file of id arrays, with the
// model directory's tokenizer, through strata_tokenizer_decode. One JSON
// string per input line.
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "jsonl.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata detokenize --model DIR --jsonl IN.jsonl [--skip-special]\n"
    "\n"
    "  --model DIR      directory with tokenizer.json (or tiktoken.model) and "
    "tokenizer_config.json\n"
    "  --jsonl IN       one JSON array of token ids per line; prints one JSON string per line\n"
    "  --skip-special   leave special tokens out of the text\n";

}  // namespace

int RunDetokenize(int argc, char** argv) {
  const std::string cmd = "detokenize";
  Flags flags(cmd, {"model", "jsonl"}, {"skip-special", "help"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  auto dir = flags.Required("model");
  auto input = flags.Required("jsonl");
  for (const auto* s : {&dir, &input}) {
    if (!s->ok()) return Fail(cmd, s->status(), kExitUsage);
  }
  std::optional<api::Tokenizer> tokenizer;
  int64_t vocab = 0;
  try {
    tokenizer.emplace(*dir);
    vocab = tokenizer->VocabSize();
  } catch (const api::Error& e) {
    return Fail(cmd, e, kExitFailure);
  }

  const bool skip_special_tokens = flags.Bool("skip-special");
  std::string out;  // printed only when every line succeeded
  Status st =
      ForEachJsonLine(*input, [&](const nlohmann::json& line, const std::string& where) -> Status {
        if (!line.is_array()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": expected a JSON array of token ids, got ", line.type_name()));
        }
        std::vector<int32_t> ids;
        ids.reserve(line.size());
        for (size_t i = 0; i < line.size(); ++i) {
          const nlohmann::json& v = line[i];
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": element ", i, " (", v.dump(), ") is not a token id in [0, ", vocab, ")"));
          }
          ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        std::string text;
        try {
          text = tokenizer->Decode(ids, skip_special_tokens);
        } catch (const api::Error& e) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", MessageOf(e)));
        }
        // Invalid UTF-8 (ids that end mid-character) prints as U+FFFD rather than
        // failing, as the reference's decode does.
        out += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
        return absl::OkStatus();
      });
  if (!st.ok()) return Fail(cmd, st, kExitFailure);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
