// Chat templates: the Jinja `chat_template` of tokenizer_config.json rendered
// byte-exactly as transformers' apply_chat_template renders it.
#ifndef STRATA_TEXT_CHAT_TEMPLATE_H_
#define STRATA_TEXT_CHAT_TEMPLATE_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/jinja/render_state.h"

namespace strata {

// Thread-safety: immutable after Compile; Render is thread-safe.
class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;

  // Parses the template source. Syntax errors report "<label>:<line>:<column>: ...".
  static StatusOr<std::unique_ptr<ChatTemplate>> Compile(const std::string& source,
                                                         const std::string& label);
  // Reads chat_template from <dir>/tokenizer_config.json (string, or the list of
  // {name, template} where "default" is used), plus bos_token/eos_token/... for
  // the special-token variables.
  static StatusOr<std::unique_ptr<ChatTemplate>> FromDirectory(const std::string& dir);
  // The same from the text of a tokenizer_config.json alone (no .jinja files);
  // `label` stands for its path in errors. NotFound when it has no chat_template.
  static StatusOr<std::unique_ptr<ChatTemplate>> FromTokenizerConfig(std::string_view text,
                                                                     const std::string& label);

  // Renders with `context` (a JSON object): messages, tools, add_generation_prompt,
  // any extra variables (enable_thinking, ...). Special-token variables from the
  // directory are added unless the context sets them. raise_exception(msg) and
  // runtime errors return InvalidArgument "<label>:<line>:<column>: msg".
  // The render is bounded by options.limits (steps, output, value sizes and
  // depths: base/input_limits.h) and stops with Cancelled when
  // options.cancelled returns true; both are checked inside the render.
  virtual StatusOr<std::string> Render(const nlohmann::json& context,
                                       const jinja::RenderOptions& options) const = 0;
  StatusOr<std::string> Render(const nlohmann::json& context) const { return Render(context, {}); }

  // As Render, with the context's object keys in their given order. Python
  // dicts keep insertion order and `tojson` prints them in it, so hosts that
  // pass tool schemas should use this form (nlohmann::json sorts keys).
  virtual StatusOr<std::string> RenderOrdered(const nlohmann::ordered_json& context,
                                              const jinja::RenderOptions& options) const = 0;
  StatusOr<std::string> RenderOrdered(const nlohmann::ordered_json& context) const {
    return RenderOrdered(context, {});
  }
};

}  // namespace strata

#endif  // STRATA_TEXT_CHAT_TEMPLATE_H_
