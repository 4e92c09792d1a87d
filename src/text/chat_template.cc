// ChatTemplate on top of the Jinja interpreter (text/jinja/): compiles the
// template(s) of a model directory and renders them with the variables
// transformers' apply_chat_template passes (messages, tools, documents,
// add_generation_prompt, special tokens, extra keyword arguments).
#include "text/chat_template.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/read_file.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace strata {
namespace {

struct CompiledTemplate {
  std::string label;
  jinja::StmtList body;
};

StatusOr<std::shared_ptr<const CompiledTemplate>> CompileOne(const std::string& source,
                                                             const std::string& label) {
  STRATA_ASSIGN_OR_RETURN(auto tokens, jinja::Tokenize(source, label));
  STRATA_ASSIGN_OR_RETURN(auto body, jinja::Parse(tokens, label));
  auto compiled = std::make_shared<CompiledTemplate>();
  compiled->label = label;
  compiled->body = std::move(body);
  return std::shared_ptr<const CompiledTemplate>(std::move(compiled));
}

class ChatTemplateImpl : public ChatTemplate {
 public:
  ChatTemplateImpl(std::map<std::string, std::shared_ptr<const CompiledTemplate>> templates,
                   nlohmann::ordered_json special_tokens)
      : templates_(std::move(templates)), special_tokens_(std::move(special_tokens)) {}

  StatusOr<std::string> Render(const nlohmann::json& context,
                               const jinja::RenderOptions& options) const override {
    // dump() recurses: a context built by the caller is bounded first.
    if (!JsonDepthWithin(context, limits::kMaxTemplateValueDepth)) {
      return absl::InvalidArgumentError(absl::StrCat("chat template context nests deeper than ",
                                                     limits::kMaxTemplateValueDepth, " levels"));
    }
    // dump() throws on strings that are not UTF-8: bad input, not a bug.
    std::string text;
    try {
      text = context.dump();
    } catch (const nlohmann::json::type_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("chat template context: ", e.what()));
    }
    STRATA_ASSIGN_OR_RETURN(auto ordered, ParseBoundedJson<nlohmann::ordered_json>(
                                              text, "chat template context", limits::kMaxTemplateValueDepth));
    return RenderOrdered(ordered, options);
  }

  StatusOr<std::string> RenderOrdered(const nlohmann::ordered_json& context,
                                      const jinja::RenderOptions& options) const override {
    if (!context.is_object())
      return absl::InvalidArgumentError("chat template context must be a JSON object");
    // transformers' get_chat_template: with several named templates, "tool_use"
    // when tools are given, else "default".
    const CompiledTemplate* chosen = nullptr;
    bool has_tools = context.contains("tools") && !context["tools"].is_null();
    if (templates_.size() == 1) {
      chosen = templates_.begin()->second.get();
    } else if (has_tools && templates_.count("tool_use")) {
      chosen = templates_.at("tool_use").get();
    } else if (templates_.count("default")) {
      chosen = templates_.at("default").get();
    } else {
      return absl::InvalidArgumentError(
          "This model has multiple chat templates with no default specified");
    }
    auto globals = jinja::MakeGlobalScope();
    auto scope = std::make_shared<jinja::Scope>(globals);
    // Precedence as in apply_chat_template: special tokens, then the caller's
    // variables; tools/documents default to None, add_generation_prompt to False.
    scope->Set("tools", jinja::Value::None());
    scope->Set("documents", jinja::Value::None());
    scope->Set("add_generation_prompt", jinja::Value::Bool(false));
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
      STRATA_ASSIGN_OR_RETURN(jinja::Value v, jinja::Value::FromJson(it.value()));
      scope->Set(it.key(), std::move(v));
    }
    for (auto it = context.begin(); it != context.end(); ++it) {
      STRATA_ASSIGN_OR_RETURN(jinja::Value v, jinja::Value::FromJson(it.value()));
      scope->Set(it.key(), std::move(v));
    }
    return jinja::RenderTemplate(chosen->body, chosen->label, scope, options);
  }

 private:
  std::map<std::string, std::shared_ptr<const CompiledTemplate>> templates_;
  nlohmann::ordered_json special_tokens_;
};

// Template name -> (source text, label for errors).
using TemplateSources = std::map<std::string, std::pair<std::string, std::string>>;

// The chat_template of tokenizer_config.json: a string, or the list of
// {name, template} entries.
Status AddConfigSources(const nlohmann::ordered_json& config, const std::string& label,
                        TemplateSources* sources) {
  if (!config.contains("chat_template")) return OkStatus();
  const auto& ct = config["chat_template"];
  if (ct.is_string()) {
    (*sources)["default"] = {ct.get<std::string>(), label};
  } else if (ct.is_array()) {
    for (const auto& entry : ct) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": chat_template list entries need string name and template"));
      }
      std::string name = entry["name"].get<std::string>();
      (*sources)[name] = {entry["template"].get<std::string>(), label + "[" + name + "]"};
    }
  } else if (!ct.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": chat_template must be a string or a list"));
  }
  return OkStatus();
}

// Compiles every source; the special-token variables are those of
// transformers' special_tokens_map: str(token) for each set named token,
// AddedToken objects giving their content.
StatusOr<std::unique_ptr<ChatTemplate>> Build(const TemplateSources& sources,
                                              const nlohmann::ordered_json& config) {
  std::map<std::string, std::shared_ptr<const CompiledTemplate>> templates;
  for (const auto& [name, src] : sources) {
    STRATA_ASSIGN_OR_RETURN(templates[name], CompileOne(src.first, src.second));
  }
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_string()) {
      special[key] = v;
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      special[key] = v["content"];
    }
  }
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplateImpl(std::move(templates), std::move(special)));
}

}  // namespace

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Compile(const std::string& source,
                                                              const std::string& label) {
  STRATA_ASSIGN_OR_RETURN(auto compiled, CompileOne(source, label));
  std::map<std::string, std::shared_ptr<const CompiledTemplate>> templates;
  templates["default"] = std::move(compiled);
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplateImpl(std::move(templates), nlohmann::ordered_json::object()));
}

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(config_path)) {
    STRATA_ASSIGN_OR_RETURN(config,
                            ReadBoundedJsonFile<nlohmann::ordered_json>(config_path.string()));
    if (!config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path.string(), ": not a JSON object"));
    }
  }
  // Template sources: chat_template.jinja and chat_templates/*.jinja (the
  // format transformers saves since 4.43) win over tokenizer_config.json.
  TemplateSources sources;
  STRATA_RETURN_IF_ERROR(AddConfigSources(config, config_path.string(), &sources));
  const fs::path jinja_file = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja_file)) {
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(jinja_file.string()));
    sources["default"] = {text, jinja_file.string()};
  }
  const fs::path jinja_dir = fs::path(dir) / "chat_templates";
  if (fs::is_directory(jinja_dir)) {
    for (const auto& entry : fs::directory_iterator(jinja_dir)) {
      if (entry.path().extension() != ".jinja") continue;
      STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(entry.path().string()));
      sources[entry.path().stem().string()] = {text, entry.path().string()};
    }
  }
  if (sources.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no chat_template in tokenizer_config.json"));
  }
  return Build(sources, config);
}

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromTokenizerConfig(
    std::string_view text, const std::string& label) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::ordered_json config,
                          ParseBoundedJson<nlohmann::ordered_json>(text, label));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a JSON object"));
  }
  TemplateSources sources;
  STRATA_RETURN_IF_ERROR(AddConfigSources(config, label, &sources));
  if (sources.empty()) return absl::NotFoundError(absl::StrCat(label, ": no chat_template"));
  return Build(sources, config);
}

}  // namespace strata
