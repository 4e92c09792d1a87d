// `strata template`: the prompt a model directory's chat template renders for a
// conversation file, printed byte for byte (nothing added, no final newline).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "cli.h"
#include "text/chat_template.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata template --model DIR --conversation FILE.json\n"
    "\n"
    "  --model DIR            directory with tokenizer_config.json (its chat_template)\n"
    "  --conversation FILE    a JSON object: \"messages\", optional \"tools\",\n"
    "                         \"add_generation_prompt\" and any other template variable\n"
    "                         (enable_thinking, ...). Prints the rendered prompt exactly.\n";

// Reads the conversation keeping object keys in file order: templates print
// tool schemas with `tojson`, which keeps the caller's key order.
StatusOr<nlohmann::ordered_json> ReadConversation(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json j;
  STRATA_RETURN_IF_ERROR(CheckJsonNesting(ss.str(), path));
  try {
    j = nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", msg));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object, got ", j.type_name()));
  }
  if (!j.contains("messages") || !j["messages"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": needs \"messages\", an array"));
  }
  return j;
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
  auto tmpl = ChatTemplate::FromDirectory(*dir);
  if (!tmpl.ok()) return Fail(cmd, tmpl.status(), kExitFailure);
  auto prompt = (*tmpl)->RenderOrdered(*conversation);
  if (!prompt.ok()) return Fail(cmd, prompt.status(), kExitFailure);
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
