/**
 * @file strata.hpp
 * @brief Header-only C++17 RAII wrapper over the C ABI of strata.h.
 *
 * Nothing here is compiled into libstrata: every call goes through the
 * stable C functions, so a C++ program built against this header has exactly
 * the ABI of a C program. Handles are move-only owners that call the matching
 * `_destroy` function; failures throw strata::api::Error carrying the status
 * code and the library's message. The threading rules of strata.h apply
 * unchanged (an Engine is thread-safe; a Session is used by one thread at a
 * time).
 *
 * @code
 *   strata::api::Engine engine;
 *   strata::api::Model model(engine, "models/strata-demo");   // STRATA_DEVICE_AUTO
 *   strata::api::Session session(model);
 *   std::vector<int32_t> out = session.Generate({1, 17, 42}, strata::api::RequestParams().MaxTokens(16));
 * @endcode
 */
#ifndef STRATA_STRATA_HPP_
#define STRATA_STRATA_HPP_

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/strata.h"

namespace strata {
namespace api {

/** @brief A failed call: the status code and strata_last_error_message() at the time. */
class Error : public std::runtime_error {
 public:
  Error(strata_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  /** The `STRATA_ERR_*` code (classify with `status() & 0xff`). */
  strata_status status() const noexcept { return status_; }

 private:
  strata_status status_;
};

/** @brief Throws Error for anything but ::STRATA_OK; returns @p status otherwise. */
inline strata_status Check(strata_status status) {
  if (status != STRATA_OK) {
    const char* m = strata_last_error_message();
    throw Error(status, (m != nullptr && *m != '\0') ? m : strata_status_string(status));
  }
  return status;
}

namespace detail {

// A move-only owner of one C handle, released with `Destroy`.
template <class H, strata_status (*Destroy)(H*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H* h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Reset(); }

  H* get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  // Destroys the handle now; a failure (e.g. an engine that still has models) throws.
  void Close() {
    if (h_ != nullptr) Check(Destroy(std::exchange(h_, nullptr)));
  }

 private:
  void Reset() noexcept {
    if (h_ != nullptr) Destroy(std::exchange(h_, nullptr));
  }
  H* h_ = nullptr;
};

}  // namespace detail

/** @brief strata_engine_params with chainable setters. */
struct EngineParams {
  strata_engine_params c{};
  EngineParams() { strata_engine_params_init(&c); }
  EngineParams& Threads(int32_t n) { c.num_threads = n; return *this; }
  EngineParams& Log(strata_log_callback cb, void* user_data, strata_log_level level = STRATA_LOG_INFO) {
    c.log_callback = cb;
    c.log_user_data = user_data;
    c.log_level = level;
    return *this;
  }
  EngineParams& MemoryBudget(uint64_t bytes) { c.memory_budget_bytes = bytes; return *this; }
  EngineParams& MaxBatch(int32_t n) { c.max_batch = n; return *this; }
  EngineParams& PrefixCache(uint64_t bytes, int32_t block_tokens = 0) {
    c.prefix_cache_bytes = bytes;
    c.prefix_block_tokens = block_tokens;
    return *this;
  }
  /** The string must outlive the strata_engine_create() call. */
  EngineParams& Options(const char* options) { c.options = options; return *this; }
};

/** @brief strata_model_params with chainable setters. */
struct ModelParams {
  strata_model_params c{};
  ModelParams() { strata_model_params_init(&c); }
  ModelParams& Device(strata_device d, int32_t index = 0) {
    c.device = d;
    c.device_index = index;
    return *this;
  }
  ModelParams& MaxBatch(int64_t n) { c.max_batch = n; return *this; }
  ModelParams& MaxSequences(int64_t n) { c.max_sequences = n; return *this; }
  ModelParams& MaxContext(int64_t n) { c.max_context_tokens = n; return *this; }
  ModelParams& PrefillSlice(int64_t n) { c.prefill_slice_tokens = n; return *this; }
  ModelParams& GpuMemoryFraction(double f) { c.gpu_memory_fraction = f; return *this; }
  ModelParams& CudaGraphs(bool on) { c.cuda_graphs = on; return *this; }
  ModelParams& BatchInvariant(bool on) { c.batch_invariant = on; return *this; }
  ModelParams& DummyWeights(bool on, uint64_t seed = 0) {
    c.dummy_weights = on;
    c.dummy_seed = seed;
    return *this;
  }
  /** The string must outlive the strata_model_load() call. */
  ModelParams& Options(const char* options) { c.options = options; return *this; }
  /** strata_model_params::check_weights: fail the load on a NaN or infinite weight, naming it. */
  ModelParams& CheckWeights(bool on) { c.check_weights = on; return *this; }
  ModelParams& Progress(strata_progress_callback cb, void* user_data) {
    c.progress_callback = cb;
    c.progress_user_data = user_data;
    return *this;
  }
};

/** @brief strata_request_params with chainable setters. */
struct RequestParams {
  strata_request_params c{};
  RequestParams() { strata_request_params_init(&c); }
  RequestParams& MaxTokens(int32_t n) { c.max_tokens = n; return *this; }
  RequestParams& Temperature(float t) { c.temperature = t; return *this; }
  RequestParams& TopK(int32_t k) { c.top_k = k; return *this; }
  RequestParams& TopP(float p) { c.top_p = p; return *this; }
  RequestParams& MinP(float p) { c.min_p = p; return *this; }
  RequestParams& Seed(uint64_t s) { c.seed = s; return *this; }
  RequestParams& StopAtEos(bool on) { c.stop_at_eos = on; return *this; }
  /** The array must outlive the submit call (the library copies it there). */
  RequestParams& StopTokens(const std::vector<int32_t>& ids) {
    c.stop_tokens = ids.empty() ? nullptr : ids.data();
    c.num_stop_tokens = ids.size();
    return *this;
  }
  RequestParams& Priority(int32_t p) { c.priority = p; return *this; }
  RequestParams& DeadlineMs(int64_t ms) { c.deadline_ms = ms; return *this; }
  RequestParams& MaxContext(int64_t n) { c.max_context_tokens = n; return *this; }
};

/** @brief An engine: worker threads, scheduler, event queue (strata_engine). */
class Engine {
 public:
  explicit Engine(const EngineParams& params = EngineParams()) {
    strata_engine* e = nullptr;
    Check(strata_engine_create(&params.c, &e));
    h_ = Owner(e);
  }
  strata_engine* get() const noexcept { return h_.get(); }
  /** Destroys the engine now (it must have no models, sessions or requests left). */
  void Close() { h_.Close(); }

  strata_metrics Metrics() const {
    strata_metrics m{};
    m.struct_size = sizeof m;
    Check(strata_engine_get_metrics(h_.get(), &m));
    return m;
  }
  /** A named statistic (strata_engine_get_stat()); nullopt when there is none of that name. */
  std::optional<double> Stat(const char* name) const {
    double v = 0;
    const strata_status s = strata_engine_get_stat(h_.get(), name, &v);
    if (s == STRATA_ERR_NOT_FOUND) return std::nullopt;
    Check(s);
    return v;
  }
  /** The next event of a submitted request, or nullopt when none came within @p timeout_ms. */
  std::optional<strata_event> Poll(int32_t timeout_ms) const {
    strata_event ev{};
    ev.struct_size = sizeof ev;
    const strata_status s = strata_engine_poll_event(h_.get(), &ev, timeout_ms);
    if (s == STRATA_AGAIN) return std::nullopt;
    Check(s);
    return ev;
  }

 private:
  using Owner = detail::Handle<strata_engine, strata_engine_destroy>;
  Owner h_;
};

/** @brief A tokenizer (strata_tokenizer): text to ids and back. */
class Tokenizer {
 public:
  /** Opens the tokenizer files of @p dir (no weights needed). */
  explicit Tokenizer(const std::string& dir) {
    strata_tokenizer* t = nullptr;
    Check(strata_tokenizer_open(dir.c_str(), &t));
    h_ = Owner(t);
  }
  /** Takes ownership of a handle from strata_model_open_tokenizer(). */
  explicit Tokenizer(strata_tokenizer* adopted) : h_(adopted) {}
  strata_tokenizer* get() const noexcept { return h_.get(); }

  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const {
    size_t n = 0;
    Check(strata_tokenizer_encode(h_.get(), text.data(), text.size(), add_special_tokens, nullptr, 0, &n));
    std::vector<int32_t> ids(n);
    Check(strata_tokenizer_encode(h_.get(), text.data(), text.size(), add_special_tokens, ids.data(), ids.size(),
                                  &n));
    ids.resize(n);
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    size_t n = 0;
    Check(strata_tokenizer_decode(h_.get(), ids.data(), ids.size(), skip_special_tokens, nullptr, 0, &n));
    std::string text(n + 1, '\0');
    Check(strata_tokenizer_decode(h_.get(), ids.data(), ids.size(), skip_special_tokens, text.data(), text.size(),
                                  &n));
    text.resize(n);
    return text;
  }
  int32_t VocabSize() const {
    int32_t v = 0;
    Check(strata_tokenizer_get_vocab_size(h_.get(), &v));
    return v;
  }
  bool HasChatTemplate() const {
    bool has = false;
    Check(strata_tokenizer_has_chat_template(h_.get(), &has));
    return has;
  }
  /** The prompt the chat template renders for @p conversation_json (strata_tokenizer_render_chat()). */
  std::string RenderChat(std::string_view conversation_json) const {
    size_t n = 0;
    Check(strata_tokenizer_render_chat(h_.get(), conversation_json.data(), conversation_json.size(), nullptr, 0, &n));
    std::string text(n + 1, '\0');
    Check(strata_tokenizer_render_chat(h_.get(), conversation_json.data(), conversation_json.size(), text.data(),
                                       text.size(), &n));
    text.resize(n);
    return text;
  }

 private:
  using Owner = detail::Handle<strata_tokenizer, strata_tokenizer_destroy>;
  Owner h_;
};

/** @brief A loaded model (strata_model). */
class Model {
 public:
  Model(const Engine& engine, const std::string& dir, const ModelParams& params = ModelParams()) {
    strata_model* m = nullptr;
    Check(strata_model_load(engine.get(), dir.c_str(), &params.c, &m));
    h_ = Owner(m);
  }
  strata_model* get() const noexcept { return h_.get(); }
  /** Facts about the model; its strings are valid while the model lives. */
  strata_model_info Info() const {
    strata_model_info info{};
    info.struct_size = sizeof info;
    Check(strata_model_get_info(h_.get(), &info));
    return info;
  }
  /** The tokenizer of the model directory (::STRATA_ERR_FAILED_PRECONDITION when it has none). */
  Tokenizer OpenTokenizer() const {
    strata_tokenizer* t = nullptr;
    Check(strata_model_open_tokenizer(h_.get(), &t));
    return Tokenizer(t);
  }

 private:
  using Owner = detail::Handle<strata_model, strata_model_destroy>;
  Owner h_;
};

/** @brief A request submitted with Session::Submit() or Session::SubmitChat() (strata_request). */
class Request {
 public:
  explicit Request(strata_request* adopted) : h_(adopted) {}
  strata_request* get() const noexcept { return h_.get(); }
  void Cancel() const { Check(strata_request_cancel(h_.get())); }
  /** Answers a tool call of a chat request (strata_request_submit_tool_result()). */
  void SubmitToolResult(const char* call_id, std::string_view content) const {
    Check(strata_request_submit_tool_result(h_.get(), call_id, content.data(), content.size()));
  }
  /** Declines a tool call. */
  void DeclineToolCall(const char* call_id) const {
    Check(strata_request_submit_tool_result(h_.get(), call_id, nullptr, 0));
  }
  std::string ErrorMessage() const { return strata_request_error_message(h_.get()); }

 private:
  using Owner = detail::Handle<strata_request, strata_request_destroy>;
  Owner h_;
};

/** @brief A conversation on a model (strata_session). */
class Session {
 public:
  explicit Session(const Model& model, int64_t max_context_tokens = 0) {
    strata_session_params p;
    strata_session_params_init(&p);
    p.max_context_tokens = max_context_tokens;
    strata_session* s = nullptr;
    Check(strata_session_create(model.get(), &p, &s));
    h_ = Owner(s);
  }
  strata_session* get() const noexcept { return h_.get(); }

  void Append(const std::vector<int32_t>& tokens) {
    Check(strata_session_append_tokens(h_.get(), tokens.data(), tokens.size()));
  }
  /** The next-token distribution after the history (vocab_size floats). */
  std::vector<float> Logits() const {
    size_t n = 0;
    Check(strata_session_get_logits(h_.get(), nullptr, 0, &n));
    std::vector<float> logits(n);
    Check(strata_session_get_logits(h_.get(), logits.data(), logits.size(), &n));
    return logits;
  }
  size_t NumTokens() const {
    size_t n = 0;
    Check(strata_session_get_num_tokens(h_.get(), &n));
    return n;
  }
  void Reset() { Check(strata_session_reset(h_.get())); }

  /**
   * Generates on the calling thread and returns the new tokens; @p on_token
   * (if set) sees each one and returns false to stop. @p finish receives why
   * it ended. An exception thrown by @p on_token stops the generation and is
   * rethrown here.
   */
  std::vector<int32_t> Generate(const std::vector<int32_t>& prompt, RequestParams params = RequestParams(),
                                std::function<bool(int32_t)> on_token = nullptr,
                                strata_finish_reason* finish = nullptr) {
    struct Ctx {
      std::vector<int32_t> out;
      std::function<bool(int32_t)>* cb;
      std::exception_ptr error;
    } ctx{{}, &on_token, nullptr};
    params.c.user_data = &ctx;
    params.c.token_callback = [](strata_request*, int32_t token, void* ud) -> int {
      Ctx* c = static_cast<Ctx*>(ud);
      c->out.push_back(token);
      if (*c->cb == nullptr) return 0;
      try {
        return (*c->cb)(token) ? 0 : 1;
      } catch (...) {
        c->error = std::current_exception();
        return 1;
      }
    };
    strata_finish_reason reason = STRATA_FINISH_NONE;
    const strata_status s =
        strata_session_generate(h_.get(), prompt.data(), prompt.size(), &params.c, &reason);
    if (ctx.error) std::rethrow_exception(ctx.error);
    Check(s);
    if (finish != nullptr) *finish = reason;
    return std::move(ctx.out);
  }
  /** Starts a generation whose events arrive through Engine::Poll(). */
  Request Submit(const std::vector<int32_t>& prompt, const RequestParams& params = RequestParams()) {
    strata_request* r = nullptr;
    Check(strata_session_submit(h_.get(), prompt.data(), prompt.size(), &params.c, &r));
    return Request(r);
  }
  /** A branch that continues from this session's history (strata_session_fork()). */
  Session Fork() const {
    strata_session* s = nullptr;
    Check(strata_session_fork(h_.get(), &s));
    return Session(s);
  }
  uint64_t Mark() {
    uint64_t m = 0;
    Check(strata_session_mark(h_.get(), &m));
    return m;
  }
  void Rollback(uint64_t mark) { Check(strata_session_rollback(h_.get(), mark)); }
  void ReleaseMark(uint64_t mark) { Check(strata_session_release_mark(h_.get(), mark)); }

  /** Saves the session to a file (strata_session_save()). */
  void Save(const std::string& path) const { Check(strata_session_save(h_.get(), path.c_str())); }
  /** The session as bytes (strata_session_save_to_buffer()). */
  std::vector<uint8_t> SaveToBuffer() const {
    size_t n = 0;
    Check(strata_session_save_to_buffer(h_.get(), nullptr, 0, &n));
    std::vector<uint8_t> bytes(n);
    Check(strata_session_save_to_buffer(h_.get(), bytes.data(), bytes.size(), &n));
    return bytes;
  }
  /** A session from a file strata_session_save() wrote (strata_session_load()). */
  static Session Load(const Model& model, const std::string& path, int64_t max_context_tokens = 0) {
    strata_session_params p;
    strata_session_params_init(&p);
    p.max_context_tokens = max_context_tokens;
    strata_session* s = nullptr;
    Check(strata_session_load(model.get(), path.c_str(), &p, &s));
    return Session(s);
  }
  /** A session from saved bytes (strata_session_load_from_buffer()). */
  static Session LoadFromBuffer(const Model& model, const std::vector<uint8_t>& bytes,
                                int64_t max_context_tokens = 0) {
    strata_session_params p;
    strata_session_params_init(&p);
    p.max_context_tokens = max_context_tokens;
    strata_session* s = nullptr;
    Check(strata_session_load_from_buffer(model.get(), bytes.data(), bytes.size(), &p, &s));
    return Session(s);
  }

  /** Appends a chat message; fill @p m with strata_chat_message_init() first. */
  void AddMessage(const strata_chat_message& m) { Check(strata_session_add_message(h_.get(), &m)); }
  void AddMessage(strata_role role, std::string_view content) {
    strata_chat_message m;
    strata_chat_message_init(&m);
    m.role = role;
    m.content = content.data();
    m.content_len = content.size();
    AddMessage(m);
  }
  void AddTool(const strata_tool& tool) { Check(strata_session_add_tool(h_.get(), &tool)); }
  /** The conversation as JSON (strata_session_get_conversation()). */
  std::string Conversation() const {
    size_t n = 0;
    Check(strata_session_get_conversation(h_.get(), nullptr, 0, &n));
    std::string json(n + 1, '\0');
    Check(strata_session_get_conversation(h_.get(), json.data(), json.size(), &n));
    json.resize(n);
    return json;
  }
  /** Runs an assistant turn on the calling thread (strata_session_chat()). */
  strata_finish_reason Chat(const RequestParams& params, const strata_chat_params* chat = nullptr) {
    strata_finish_reason reason = STRATA_FINISH_NONE;
    Check(strata_session_chat(h_.get(), &params.c, chat, &reason));
    return reason;
  }
  /** Starts an assistant turn whose events arrive through Engine::Poll(). */
  Request SubmitChat(const RequestParams& params, const strata_chat_params* chat = nullptr) {
    strata_request* r = nullptr;
    Check(strata_session_submit_chat(h_.get(), &params.c, chat, &r));
    return Request(r);
  }

 private:
  explicit Session(strata_session* adopted) : h_(adopted) {}
  using Owner = detail::Handle<strata_session, strata_session_destroy>;
  Owner h_;
};

}  // namespace api
}  // namespace strata

#endif  // STRATA_STRATA_HPP_
