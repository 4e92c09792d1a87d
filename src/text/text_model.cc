// TextModel loading: tokenizer, optional chat template, tool-call family and
// end-of-turn ids of a model directory.
#include "text/text_model.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/read_file.h"
#include "base/catch_allocation.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A file that cannot be read has no markers; loading it fails elsewhere.
std::string ReadWholeFile(const fs::path& path) {
  StatusOr<std::string> text = ReadFileToString(path.string());
  return text.ok() ? *std::move(text) : std::string();
}

// The template sources of a directory, concatenated: only used to find which
// tool-call markers they spell, so order and labels do not matter.
std::string TemplateSources(const std::string& dir) {
  std::string all;
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer_config.json", ec)) {
    // A config that does not parse has no markers; loading it fails elsewhere.
    const auto parsed = ParseBoundedJson<nlohmann::json>(ReadWholeFile(d / "tokenizer_config.json"),
                                                         "tokenizer_config.json");
    const nlohmann::json config = parsed.ok() ? *parsed : nlohmann::json();
    if (config.is_object() && config.contains("chat_template")) {
      const auto& ct = config["chat_template"];
      if (ct.is_string()) all += ct.get<std::string>();
      if (ct.is_array()) {
        for (const auto& e : ct) {
          if (e.is_object() && e.contains("template") && e["template"].is_string()) {
            all += e["template"].get<std::string>();
          }
        }
      }
    }
  }
  if (fs::exists(d / "chat_template.jinja", ec)) all += ReadWholeFile(d / "chat_template.jinja");
  if (fs::is_directory(d / "chat_templates", ec)) {
    for (const auto& e : fs::directory_iterator(d / "chat_templates", ec)) {
      if (e.path().extension() == ".jinja") all += ReadWholeFile(e.path());
    }
  }
  return all;
}

// The model's vocabulary as the directory's config.json states it, when it
// does: a tokenizer id at or beyond it would be refused by the model at every
// use, so it is refused at load. A config.json that does not say (or does not
// parse) leaves nothing to check here; loading the model reports it.
Status CheckFitsModelVocabulary(const fs::path& d, const Tokenizer& tokenizer) {
  std::error_code ec;
  if (!fs::exists(d / "config.json", ec)) return OkStatus();
  const auto parsed =
      ParseBoundedJson<nlohmann::json>(ReadWholeFile(d / "config.json"), "config.json");
  if (!parsed.ok() || !parsed->is_object()) return OkStatus();
  const auto it = parsed->find("vocab_size");
  if (it == parsed->end() || !it->is_number_integer() || it->get<int64_t>() <= 0) return OkStatus();
  const int64_t vocab = it->get<int64_t>();
  if (tokenizer.vocab_size() <= vocab) return OkStatus();
  const int32_t last = tokenizer.vocab_size() - 1;
  const StatusOr<std::string> bytes = tokenizer.TokenBytes(last);
  // The file the tokenizer was read from (Tokenizer::FromDirectory's order).
  fs::path file = d / "tokenizer.json";
  if (!fs::exists(file, ec)) {
    file = d / "tiktoken.model";
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (!fs::exists(file, ec) && e.path().extension() == ".tiktoken") file = e.path();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file.string(), ": token \"", bytes.ok() ? *bytes : std::string("?"), "\": id ",
                   last, " is outside the model's vocabulary [0, ", vocab, ") (",
                   (d / "config.json").string(), ": vocab_size)"));
}

}  // namespace

bool TextModel::DirectoryHasTokenizer(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json", ec) || fs::exists(d / "tiktoken.model", ec)) return true;
  for (const auto& e : fs::directory_iterator(d, ec)) {
    if (e.path().extension() == ".tiktoken") return true;
  }
  return false;
}

StatusOr<std::shared_ptr<const TextModel>> TextModel::FromDirectory(const std::string& dir) {
  return CatchAllocation(absl::StrCat("loading the tokenizer and chat template of ", dir),
                         [&] { return Load(dir); });
}

StatusOr<std::shared_ptr<const TextModel>> TextModel::Load(const std::string& dir) {
  std::shared_ptr<TextModel> m(new TextModel);
  STRATA_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::FromDirectory(dir));
  STRATA_RETURN_IF_ERROR(CheckFitsModelVocabulary(dir, *m->tokenizer_));
  auto tmpl = ChatTemplate::FromDirectory(dir);
  if (tmpl.ok()) {
    m->template_ = *std::move(tmpl);
    auto parser = ToolCallParser::ForTemplate(TemplateSources(dir));
    if (parser.ok()) m->family_ = (*parser)->family();
  } else if (!absl::IsNotFound(tmpl.status())) {
    // A template that is present but broken is an error, not "no template".
    return tmpl.status();
  }
  auto add = [&](std::string_view token) {
    const std::optional<int32_t> id = m->tokenizer_->TokenToId(token);
    if (id && std::find(m->end_of_turn_.begin(), m->end_of_turn_.end(), *id) == m->end_of_turn_.end()) {
      m->end_of_turn_.push_back(*id);
    }
  };
  if (auto eos = m->tokenizer_->eos_token()) add(*eos);
  // Chat models end a turn with their own marker, which is not always the
  // config's eos_token (Qwen base configs name <|endoftext|>).
  for (std::string_view marker : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<｜end▁of▁sentence｜>"}) {
    add(marker);
  }
  return std::shared_ptr<const TextModel>(std::move(m));
}

}  // namespace strata
