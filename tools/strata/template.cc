// `strata template`: the prompt a model directory's chat template renders for a
// conversation file, printed byte for byte (nothing added, no final newline),
// through strata_tokenizer_render_chat.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "jsonl.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata template --model DIR --conversation FILE.json\n"
    "\n"
    "  --model DIR            directory with the tokenizer files and tokenizer_config.json (its chat_template)\n"
    "  --conversation FILE    a JSON object: \"messages\", optional \"tools\",\n"
    "                         \"add_generation_prompt\" and any other template variable\n"
    "                         (enable_thinking, ...). Prints the rendered prompt exactly.\n";

// Reads the conversation file and checks its shape, so errors name the file.
// Returns the text as written: the library keeps its key order (templates
// print tool schemas with `tojson`, in the caller's order).
StatusOr<std::string> ReadConversation(const std::string& path) {
  const StatusOr<std::string> read = ReadTextFile(path);
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  nlohmann::ordered_json j;
  try {
    j = ParseJsonWithin<nlohmann::ordered_json>(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", msg));
  } catch (const std::length_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object, got ", j.type_name()));
  }
  if (!j.contains("messages") || !j["messages"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": needs \"messages\", an array"));
  }
  return text;
}

}  // namespace

int RunTemplate(int argc, char** argv) {
  const std::string cmd = "template";
  Flags flags(cmd, {"model", "conversation"}, {"help"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  auto dir = flags.Required("model");
  auto conversation_path = flags.Required("conversation");
  for (const auto* s : {&dir, &conversation_path}) {
    if (!s->ok()) return Fail(cmd, s->status(), kExitUsage);
  }
  auto conversation = ReadConversation(*conversation_path);
  if (!conversation.ok()) return Fail(cmd, conversation.status(), kExitFailure);
  std::string prompt;
  try {
    prompt = api::Tokenizer(*dir).RenderChat(*conversation);
  } catch (const api::Error& e) {
    return Fail(cmd, e, kExitFailure);
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
