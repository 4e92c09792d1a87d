// `strata detokenize`: text of each line of a JSONL file of id arrays, with the
// model directory's tokenizer. One JSON string per input line.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "jsonl.h"
#include "text/tokenizer.h"

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
  auto tokenizer = Tokenizer::FromDirectory(*dir);
  if (!tokenizer.ok()) return Fail(cmd, tokenizer.status(), kExitFailure);

  DecodeOptions options;
  options.skip_special_tokens = flags.Bool("skip-special");
  const int64_t vocab = (*tokenizer)->vocab_size();
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
        auto text = (*tokenizer)->Decode(ids, options);
        if (!text.ok())
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", text.status().message()));
        // Invalid UTF-8 (ids that end mid-character) prints as U+FFFD rather than
        // failing, as the reference's decode does.
        out += nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
        return OkStatus();
      });
  if (!st.ok()) return Fail(cmd, st, kExitFailure);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
