// `strata tokenize`: token ids of each line of a JSONL file of strings, with the
// model directory's tokenizer (tokenizer.json or tiktoken; a directory holding
// only tokenizer files is enough), through strata_tokenizer_encode. One JSON
// array of ids per input line.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "jsonl.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata tokenize --model DIR --jsonl IN.jsonl [--no-special]\n"
    "\n"
    "  --model DIR      directory with tokenizer.json (or tiktoken.model) and "
    "tokenizer_config.json\n"
    "  --jsonl IN       one JSON string per line; prints one JSON array of ids per line\n"
    "  --no-special     do not add BOS/EOS or the post-processor's special tokens\n"
    "                   (by default they are added as the tokenizer's config says)\n";

}  // namespace

int RunTokenize(int argc, char** argv) {
  const std::string cmd = "tokenize";
  Flags flags(cmd, {"model", "jsonl"}, {"no-special", "help"});
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
  try {
    tokenizer.emplace(*dir);
  } catch (const api::Error& e) {
    return Fail(cmd, e, kExitFailure);
  }

  const bool add_special_tokens = !flags.Bool("no-special");
  // Output is printed only when every line succeeded, so a failed run never
  // leaves a truncated file that looks complete.
  std::string out;
  Status st =
      ForEachJsonLine(*input, [&](const nlohmann::json& line, const std::string& where) -> Status {
        if (!line.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": expected a JSON string, got ", line.type_name()));
        }
        try {
          out += nlohmann::json(tokenizer->Encode(line.get_ref<const std::string&>(), add_special_tokens)).dump();
        } catch (const api::Error& e) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", MessageOf(e)));
        }
        out += '\n';
        return absl::OkStatus();
      });
  if (!st.ok()) return Fail(cmd, st, kExitFailure);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
