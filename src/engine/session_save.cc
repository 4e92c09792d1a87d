// Session::Save and Session::Load: a session to bytes and back
// (engine/session_file.h has the format).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/read_file.h"
#include "base/write_file.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine/session_file.h"

namespace strata {
namespace {

Status CheckLogits(const std::vector<float>& logits, int32_t vocab, const std::string& source,
                   const std::string& what) {
  if (logits.empty() || logits.size() == static_cast<size_t>(vocab)) return OkStatus();
  return absl::DataLossError(absl::StrCat(source, ": ", what, " holds ", logits.size(),
                                          " logits; the vocabulary has ", vocab));
}

// A saved state as a checkpoint of `tokens` tokens.
StatusOr<std::unique_ptr<StateCheckpoint>> LoadPoint(const Model& model, std::span<const uint8_t> bytes,
                                                     int64_t max_context, uint64_t tokens,
                                                     const std::string& source,
                                                     const std::string& what) {
  StatusOr<std::unique_ptr<StateCheckpoint>> cp = model.LoadCheckpoint(bytes, max_context);
  if (!cp.ok()) {
    return Status(cp.status().code(),
                  absl::StrCat(source, ": ", what, ": ", cp.status().message()));
  }
  if (static_cast<uint64_t>((*cp)->num_tokens()) != tokens) {
    return absl::DataLossError(absl::StrCat(source, ": ", what, " holds a state of ",
                                            (*cp)->num_tokens(), " tokens, expected ", tokens));
  }
  return std::move(cp);
}

Status LoadConversation(const SessionImage& im, const std::string& source, Conversation& c) {
  using Json = nlohmann::ordered_json;
  STRATA_ASSIGN_OR_RETURN(Json messages,
                          ParseBoundedJson<Json>(im.messages, absl::StrCat(source, ": messages"),
                                                 limits::kMaxJsonDepth + 4));
  STRATA_ASSIGN_OR_RETURN(Json tools, ParseBoundedJson<Json>(im.tools, absl::StrCat(source, ": tools")));
  if (!messages.is_array() || !tools.is_array()) {
    return absl::DataLossError(absl::StrCat(source, ": messages and tools must be JSON arrays"));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (Status st = c.AddMessage(std::move(messages[i])); !st.ok()) {
      return absl::DataLossError(absl::StrCat(source, ": messages[", i, "]: ", st.message()));
    }
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i].is_object() ? tools[i].value("function", Json()) : Json();
    if (!fn.is_object() || !fn.value("name", Json()).is_string() ||
        !fn.value("description", Json()).is_string()) {
      return absl::DataLossError(absl::StrCat(source, ": tools[", i,
                                              "] is not {\"function\": {name, description, parameters}}"));
    }
    ToolSpec t{fn["name"].get<std::string>(), fn["description"].get<std::string>(),
               fn.value("parameters", Json::object()), nullptr};
    if (Status st = c.AddTool(std::move(t)); !st.ok()) {
      return absl::DataLossError(absl::StrCat(source, ": tools[", i, "]: ", st.message()));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<uint8_t>> Session::Save() const {
  STRATA_RETURN_IF_ERROR(CheckIdle());
  if (swapped_ || state_->on_host()) {
    return absl::FailedPreconditionError("the session's state is swapped out of the device");
  }
  if (model_->SavedStateLayout().empty()) {
    return absl::UnimplementedError(
        absl::StrCat("sessions on ", model_->info().device, " cannot be saved yet"));
  }
  SessionImage im;
  im.max_context = max_context_;
  im.tokens = tokens_;
  im.evaluated = evaluated_;
  im.logits = logits_;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateCheckpoint> now, model_->Checkpoint(*state_));
  STRATA_ASSIGN_OR_RETURN(im.state, model_->SaveCheckpoint(*now));
  if (conversation_ != nullptr) {
    im.has_conversation = true;
    im.messages = conversation_->messages().dump();
    im.tools = conversation_->ToolsJson().dump();
  } else {
    im.messages = im.tools = "[]";
  }
  if (checkpoint_ != nullptr) {
    im.has_turn_checkpoint = true;
    im.turn_checkpoint.num_tokens = checkpoint_tokens_;
    im.turn_checkpoint.logits = checkpoint_logits_;
    STRATA_ASSIGN_OR_RETURN(im.turn_checkpoint.state, model_->SaveCheckpoint(*checkpoint_));
  }
  for (const auto& [id, m] : marks_) {
    SavedPoint p;
    p.id = id;
    p.tokens = m.snap->tokens;
    p.num_tokens = m.snap->tokens.size();
    p.messages = m.messages;
    p.logits = m.snap->logits;
    STRATA_ASSIGN_OR_RETURN(p.state, model_->SaveCheckpoint(*m.snap->checkpoint));
    im.marks.push_back(std::move(p));
  }
  im.next_mark = next_mark_;
  return EncodeSession(FingerprintOf(*model_), im);
}

StatusOr<std::unique_ptr<Session>> Session::Load(Engine* engine, std::shared_ptr<const Model> model,
                                                 std::span<const uint8_t> bytes,
                                                 const SessionOptions& options,
                                                 const std::string& source) {
  if (engine == nullptr || model == nullptr) {
    return absl::InvalidArgumentError("loading a session needs an engine and a model");
  }
  const ModelFingerprint fp = FingerprintOf(*model);
  if (fp.state_layout.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("sessions on ", model->info().device, " cannot be loaded yet"));
  }
  STRATA_ASSIGN_OR_RETURN(SessionImage im, DecodeSession(bytes, fp, source));
  if (im.has_conversation && options.text == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": the session has a chat conversation; the model was loaded without its tokenizer"));
  }
  SessionOptions o = options;
  if (o.max_context_tokens == 0) o.max_context_tokens = im.max_context;
  uint64_t longest = im.tokens.size();
  for (const SavedPoint& m : im.marks) longest = std::max<uint64_t>(longest, m.tokens.size());
  if (longest > static_cast<uint64_t>(o.max_context_tokens)) {
    return absl::OutOfRangeError(absl::StrCat(source, ": holds ", longest,
                                              " tokens; max_context_tokens is ",
                                              o.max_context_tokens));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Create(engine, model, o));
  const int32_t vocab = s->vocab_size();
  STRATA_RETURN_IF_ERROR(CheckLogits(im.logits, vocab, source, "logits"));
  if (Status st = s->CheckTokens(im.tokens, "tokens"); !st.ok()) {
    return absl::DataLossError(absl::StrCat(source, ": ", st.message()));
  }
  const int64_t cap = s->max_context_;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateCheckpoint> now,
                          LoadPoint(*model, im.state, cap, im.evaluated, source, "state"));
  STRATA_RETURN_IF_ERROR(model->Restore(*now, s->state_));
  s->tokens_ = std::move(im.tokens);
  s->evaluated_ = im.evaluated;
  s->logits_ = std::move(im.logits);
  if (im.has_turn_checkpoint) {
    SavedPoint& t = im.turn_checkpoint;
    STRATA_RETURN_IF_ERROR(CheckLogits(t.logits, vocab, source, "turn_checkpoint.logits"));
    STRATA_ASSIGN_OR_RETURN(s->checkpoint_, LoadPoint(*model, t.state, cap, t.num_tokens, source,
                                                      "turn_checkpoint"));
    s->checkpoint_tokens_ = t.num_tokens;
    s->checkpoint_logits_ = std::move(t.logits);
  }
  for (SavedPoint& m : im.marks) {
    const std::string what = absl::StrCat("mark ", m.id);
    STRATA_RETURN_IF_ERROR(CheckLogits(m.logits, vocab, source, what));
    if (Status st = s->CheckTokens(m.tokens, "tokens"); !st.ok()) {
      return absl::DataLossError(absl::StrCat(source, ": ", what, ": ", st.message()));
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateCheckpoint> cp,
                            LoadPoint(*model, m.state, cap, m.tokens.size(), source, what));
    s->marks_.emplace(m.id, MarkPoint{MakeSnapshot(*model, cap, std::move(m.tokens), std::move(cp),
                                                   std::move(m.logits)),
                                      m.messages});
  }
  s->next_mark_ = im.next_mark;
  if (s->conversation_ != nullptr && im.has_conversation) {
    STRATA_RETURN_IF_ERROR(LoadConversation(im, source, *s->conversation_));
  }
  for (const auto& [id, m] : s->marks_) {
    if (!m.snap->tokens.empty()) engine->KeepSnapshot(model, m.snap, /*mark=*/true);
  }
  s->UpdateAccounting();
  return s;
}

Status Session::SaveToFile(const std::string& path) const {
  STRATA_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, Save());
  return WriteFileAtomically(path, bytes);
}

StatusOr<std::unique_ptr<Session>> Session::LoadFromFile(Engine* engine,
                                                         std::shared_ptr<const Model> model,
                                                         const std::string& path,
                                                         const SessionOptions& options) {
  STRATA_ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  return Load(engine, std::move(model),
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              options, path);
}

}  // namespace strata
