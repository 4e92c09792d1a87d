// TextModel: everything a model directory says about text, loaded once and
// shared by the sessions of a model: the tokenizer, the chat template (when
// the directory has one), the tool-call syntax that template uses, and the
// tokens that end an assistant turn.
#ifndef STRATA_TEXT_TEXT_MODEL_H_
#define STRATA_TEXT_TEXT_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tool_call_parser.h"

namespace strata {

// Thread-safety: immutable after load; every method is thread-safe.
class TextModel {
 public:
  // True when `dir` holds tokenizer files (tokenizer.json, tiktoken.model or
  // *.tiktoken): a model directory without them still runs on token ids.
  static bool DirectoryHasTokenizer(const std::string& dir);

  // Loads the tokenizer (required) and the chat template (optional: a
  // directory without one can tokenize but not chat). Errors name the file;
  // a tokenizer id beyond config.json's vocab_size (when the directory has
  // one) is refused, and an allocation failure is ResourceExhausted.
  static StatusOr<std::shared_ptr<const TextModel>> FromDirectory(const std::string& dir);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Null when the directory has no chat template.
  const ChatTemplate* chat_template() const { return template_.get(); }
  // The tool-call syntax the template spells; nullopt when it shows none
  // (then generated text is never parsed for tool calls).
  std::optional<ToolCallFamily> tool_call_family() const { return family_; }
  // Ids that end an assistant turn: the tokenizer config's eos_token and the
  // ids of the end-of-turn markers known for each family (<|im_end|>, ...)
  // that exist in this vocabulary.
  const std::vector<int32_t>& end_of_turn_tokens() const { return end_of_turn_; }

 private:
  TextModel() = default;
  static StatusOr<std::shared_ptr<const TextModel>> Load(const std::string& dir);

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::optional<ToolCallFamily> family_;
  std::vector<int32_t> end_of_turn_;
};

}  // namespace strata

#endif  // STRATA_TEXT_TEXT_MODEL_H_
