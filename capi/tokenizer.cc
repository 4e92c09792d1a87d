// strata_tokenizer_*: open, encode, decode, chat-template rendering and release, translated to
// strata::TextModel.
#include <cstring>
#include <string>
#include <vector>

#include "base/bounded_json.h"
#include "convert.h"
#include "guard.h"
#include "handles.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;
using strata::capi::kTokenizerMagic;

namespace {

strata_status NewTokenizerHandle(std::shared_ptr<const strata::TextModel> text, strata_tokenizer** out) {
  auto handle = std::make_unique<strata_tokenizer>();
  handle->impl = std::move(text);
  *out = handle.release();
  return STRATA_OK;
}

}  // namespace

extern "C" {

STRATA_API strata_status strata_tokenizer_open(const char* dir, strata_tokenizer** out_tokenizer) {
  const Call call("strata_tokenizer_open", "loading the tokenizer");
  return Guarded(call, [&]() -> strata_status {
    if (out_tokenizer == nullptr) return call.NullArgument("out_tokenizer");
    *out_tokenizer = nullptr;
    if (dir == nullptr) return call.NullArgument("dir");
    auto text = strata::TextModel::FromDirectory(dir);
    if (!text.ok()) return call.From(text.status());
    return NewTokenizerHandle(*std::move(text), out_tokenizer);
  });
}

STRATA_API strata_status strata_model_open_tokenizer(strata_model* model, strata_tokenizer** out_tokenizer) {
  const Call call("strata_model_open_tokenizer", "opening the model's tokenizer");
  return Guarded(call, [&]() -> strata_status {
    if (out_tokenizer == nullptr) return call.NullArgument("out_tokenizer");
    *out_tokenizer = nullptr;
    if (strata_status s = CheckHandle(call, model, strata::capi::kModelMagic, "model"); s != STRATA_OK) return s;
    if (!model->text.ok()) return call.From(model->text.status());
    return NewTokenizerHandle(*model->text, out_tokenizer);
  });
}

STRATA_API strata_status strata_tokenizer_destroy(strata_tokenizer* tokenizer) {
  const Call call("strata_tokenizer_destroy", "destroying the tokenizer");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    uint32_t expected = kTokenizerMagic;
    if (!tokenizer->magic.compare_exchange_strong(expected, strata::capi::kDeadMagic)) {
      return call.Fail(STRATA_ERR_MISUSE, "tokenizer was destroyed concurrently");
    }
    tokenizer->impl.reset();
    strata::capi::BuryHandle(tokenizer);
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_tokenizer_encode(const strata_tokenizer* tokenizer, const char* text, size_t text_len,
                                                 bool add_special_tokens, int32_t* tokens, size_t capacity,
                                                 size_t* out_count) {
  const Call call("strata_tokenizer_encode", "encoding the text");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    if (out_count == nullptr) return call.NullArgument("out_count");
    *out_count = 0;
    std::string input;
    if (strata_status s = strata::capi::ReadString(call, text, text_len, "text", &input); s != STRATA_OK) return s;
    strata::EncodeOptions options;
    options.add_special_tokens = add_special_tokens;
    auto ids = tokenizer->impl->tokenizer().Encode(input, options);
    if (!ids.ok()) return call.From(ids.status());
    *out_count = ids->size();
    if (tokens == nullptr) return STRATA_OK;  // count query
    if (capacity < ids->size()) {
      return call.Fail(STRATA_ERR_OUT_OF_RANGE,
                       absl::StrCat("capacity ", capacity, " is smaller than the ", ids->size(), " token ids"));
    }
    if (!ids->empty()) std::memcpy(tokens, ids->data(), ids->size() * sizeof(int32_t));
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_tokenizer_decode(const strata_tokenizer* tokenizer, const int32_t* tokens,
                                                 size_t num_tokens, bool skip_special_tokens, char* text,
                                                 size_t capacity, size_t* out_len) {
  const Call call("strata_tokenizer_decode", "decoding the tokens");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    if (out_len == nullptr) return call.NullArgument("out_len");
    *out_len = 0;
    if (strata_status s = strata::capi::CheckTokenArray(call, tokens, num_tokens, "tokens"); s != STRATA_OK) {
      return s;
    }
    const strata::Tokenizer& tok = tokenizer->impl->tokenizer();
    const int32_t vocab = tok.vocab_size();
    for (size_t i = 0; i < num_tokens; ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab) {
        return call.Fail(STRATA_ERR_OUT_OF_RANGE, absl::StrCat("tokens[", i, "] = ", tokens[i],
                                                               " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
    strata::DecodeOptions options;
    options.skip_special_tokens = skip_special_tokens;
    auto decoded = tok.Decode(std::vector<int32_t>(tokens, tokens + num_tokens), options);
    if (!decoded.ok()) return call.From(decoded.status());
    return strata::capi::CopyTextOut(call, *decoded, text, capacity, out_len);
  });
}

STRATA_API strata_status strata_tokenizer_get_vocab_size(const strata_tokenizer* tokenizer, int32_t* out_vocab_size) {
  const Call call("strata_tokenizer_get_vocab_size", "reading the vocabulary size");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    if (out_vocab_size == nullptr) return call.NullArgument("out_vocab_size");
    *out_vocab_size = tokenizer->impl->tokenizer().vocab_size();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_tokenizer_has_chat_template(const strata_tokenizer* tokenizer, bool* out_has) {
  const Call call("strata_tokenizer_has_chat_template", "checking for a chat template");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    if (out_has == nullptr) return call.NullArgument("out_has");
    *out_has = tokenizer->impl->chat_template() != nullptr;
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_tokenizer_render_chat(const strata_tokenizer* tokenizer, const char* conversation_json,
                                                      size_t conversation_len, char* text, size_t capacity,
                                                      size_t* out_len) {
  const Call call("strata_tokenizer_render_chat", "rendering the conversation");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, tokenizer, kTokenizerMagic, "tokenizer"); s != STRATA_OK) return s;
    if (out_len == nullptr) return call.NullArgument("out_len");
    *out_len = 0;
    if (conversation_json == nullptr) return call.NullArgument("conversation_json");
    std::string input;
    if (strata_status s = strata::capi::ReadString(call, conversation_json, conversation_len, "conversation_json",
                                                   &input);
        s != STRATA_OK) {
      return s;
    }
    const strata::ChatTemplate* tmpl = tokenizer->impl->chat_template();
    if (tmpl == nullptr) return call.Fail(STRATA_ERR_FAILED_PRECONDITION, "the directory has no chat template");
    // Ordered: the template prints tool schemas in the caller's key order.
    // Bounded: a conversation nested past limits::kMaxJsonDepth is refused
    // before a document exists (copies and dumps would recurse per level).
    auto parsed = strata::ParseBoundedJson<nlohmann::ordered_json>(input, "conversation_json");
    if (!parsed.ok()) return call.From(parsed.status());
    const nlohmann::ordered_json& conversation = *parsed;
    if (!conversation.is_object() || !conversation.contains("messages") || !conversation["messages"].is_array()) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       "conversation_json must be a JSON object with \"messages\", an array");
    }
    auto prompt = tmpl->RenderOrdered(conversation);
    if (!prompt.ok()) return call.From(prompt.status());
    return strata::capi::CopyTextOut(call, *prompt, text, capacity, out_len);
  });
}

}  // extern "C"
