// Every exported function of libstrata, walked with hostile arguments (issue
// 27, "no exception escapes"). The table below has one entry per exported
// function; EveryExportIsWalked reads the library's dynamic symbols at run
// time (`nm -D --defined-only`) and fails when an exported strata_* function
// has no entry, so a new export cannot be forgotten. Each entry calls its
// function with NULL for each pointer in turn, destroyed handles, handles of
// another type and a pointer that is no handle at all, struct_size values
// that are zero, too small, beyond any struct or with a non-zero unknown
// tail, out-of-range enumerators, negative and huge sizes and counts,
// non-UTF-8 text and strings whose length is passed without a NUL. Each call
// must return the status the header documents (INVALID_ARGUMENT for bad
// input and NULL, MISUSE for a destroyed or foreign handle, never INTERNAL),
// with a last error message that starts with the function's name and names
// the argument, file or field. A crash or an exception escaping the library
// kills the test; the signal handler names the case that was running.
//
// Runs against the shared library and the demo model that the
// capi_make_demo_model fixture writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest_util.h"
#include "strata/strata.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using strata_capi_test::LastError;
using strata_capi_test::ReadFile;
using strata_capi_test::WriteFile;

const fs::path kDemoDir = strata_capi_test::DemoDir();
const fs::path kBareDir = strata_capi_test::DemoDir("_no_tokenizer");
const fs::path kNoTemplateDir = strata_capi_test::DemoDir("_no_template");
const fs::path kScratch = fs::path(STRATA_BINARY_DIR) / "testdata" / "abi_walk";

constexpr uint32_t kHugeStructSize = std::numeric_limits<uint32_t>::max();
constexpr size_t kHugeCount = std::numeric_limits<size_t>::max() - 1;  // not STRATA_NUL_TERMINATED
const char kNotUtf8[] = "ab\xff\xfe";                                    // invalid at byte 2

// --- crash attribution ------------------------------------------------------

// The case running now, for the signal handler (a crash ends the process).
char g_case[256] = "setup";

void OnFatalSignal(int sig) {
  const char prefix[] = "\nabi_walk_test: fatal signal while running: ";
  (void)!write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!write(STDERR_FILENO, g_case, strnlen(g_case, sizeof(g_case)));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void InstallCrashHandlers() {
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, OnFatalSignal);
}

// --- the walk's bookkeeping -------------------------------------------------

// Counts the cases per function, over the whole run.
std::map<std::string, int>& CaseCounts() {
  static auto* counts = new std::map<std::string, int>;
  return *counts;
}

// One hostile call: `fn` must return `want` and leave a message that starts
// with "fn: " and contains `needle` (the argument, field or file it names).
void Expect(const char* fn, int line, strata_status want, const std::string& needle,
            const std::function<strata_status()>& call) {
  std::snprintf(g_case, sizeof(g_case), "%s (abi_walk_test.cc:%d)", fn, line);
  const strata_status got = call();
  ++CaseCounts()[fn];
  const std::string message = LastError();
  SCOPED_TRACE(testing::Message() << fn << " case at line " << line << " (expecting \"" << needle << "\")");
  EXPECT_EQ(got, want) << "got " << strata_status_string(got) << ", want " << strata_status_string(want)
                       << "; message: " << message;
  EXPECT_NE(got & 0xff, STRATA_ERR_INTERNAL) << message;
  if (want == STRATA_OK || want == STRATA_AGAIN) {
    EXPECT_EQ(message, "");
    return;
  }
  EXPECT_THAT(message, StartsWith(std::string(fn) + ": "));
  if (!needle.empty()) EXPECT_THAT(message, HasSubstr(needle));
}

#define EXPECT_CALL_STATUS(fn, want, needle, ...) Expect(#fn, __LINE__, want, needle, [&] { return __VA_ARGS__; })

// A function that returns no status: `check` holds its expectations.
void ExpectValue(const char* fn, int line, const std::function<void()>& check) {
  std::snprintf(g_case, sizeof(g_case), "%s (abi_walk_test.cc:%d)", fn, line);
  ++CaseCounts()[fn];
  SCOPED_TRACE(testing::Message() << fn << " case at line " << line);
  check();
}

#define EXPECT_VALUE(fn, ...) ExpectValue(#fn, __LINE__, [&] { __VA_ARGS__; })

template <class T, class U>
T* As(U* p) {
  return reinterpret_cast<T*>(p);
}

// Heap bytes of exactly `text` (no NUL after them), so a read past the
// length is a heap overflow that AddressSanitizer reports.
std::unique_ptr<char[]> Unterminated(const std::string& text) {
  std::unique_ptr<char[]> p(new char[text.size()]);
  std::memcpy(p.get(), text.data(), text.size());
  return p;
}

// A copy of the demo model directory (files linked) with `file` replaced by
// `contents`, or by a directory when `as_directory`.
fs::path DemoWith(const std::string& name, const std::string& file, const std::string& contents,
                  bool as_directory = false) {
  const fs::path dir = kScratch / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kDemoDir)) {
    if (entry.path().filename() == file) continue;
    fs::create_symlink(fs::absolute(entry.path()), dir / entry.path().filename());
  }
  if (as_directory) {
    fs::create_directories(dir / file);
  } else {
    WriteFile(dir / file, contents);
  }
  return dir;
}

// --- the world every entry walks in -----------------------------------------

int CountToken(strata_request*, int32_t, void*) { return 0; }

class World {
 public:
  World() {
    fs::create_directories(kScratch);
    strata_engine_params ep;
    strata_engine_params_init(&ep);
    ep.num_threads = 1;
    Must(strata_engine_create(&ep, &engine), "engine");
    Must(strata_engine_create(&ep, &idle_engine), "idle engine");
    strata_model_params mp;
    strata_model_params_init(&mp);
    mp.device = STRATA_DEVICE_CPU;
    Must(strata_model_load(engine, kDemoDir.c_str(), &mp, &model), "model");
    Must(strata_model_load(engine, kBareDir.c_str(), &mp, &bare_model), "bare model");
    strata_model_info info;
    info.struct_size = sizeof info;
    Must(strata_model_get_info(model, &info), "info");
    vocab = info.vocab_size;
    max_context = info.max_context_tokens;
    strata_session_params sp;
    strata_session_params_init(&sp);
    sp.max_context_tokens = kContext;
    Must(strata_session_create(model, &sp, &session), "session");
    Must(strata_session_create(bare_model, &sp, &bare_session), "bare session");
    Must(strata_model_open_tokenizer(model, &tokenizer), "tokenizer");
    Must(strata_tokenizer_open(kNoTemplateDir.c_str(), &no_template_tokenizer), "no-template tokenizer");
    // A request that stays unfinished: no one polls its events, so it pauses
    // after the engine's event limit, and its session stays busy.
    Must(strata_session_create(model, nullptr, &busy_session), "busy session");
    strata_request_params rp;
    strata_request_params_init(&rp);
    rp.max_tokens = 0;
    const int32_t prompt[] = {1, 2, 3};
    Must(strata_session_submit(busy_session, prompt, 3, &rp, &busy_request), "busy request");
    MakeDead();
  }

  ~World() {
    strata_request_destroy(busy_request);
    for (strata_session* s : {session, bare_session, busy_session}) strata_session_destroy(s);
    strata_tokenizer_destroy(tokenizer);
    strata_tokenizer_destroy(no_template_tokenizer);
    strata_model_destroy(model);
    strata_model_destroy(bare_model);
    // Every handle the walk made is gone: the engines die cleanly.
    EXPECT_EQ(strata_engine_destroy(idle_engine), STRATA_OK) << LastError();
    EXPECT_EQ(strata_engine_destroy(engine), STRATA_OK) << LastError();
  }

  // One of each kind of handle, destroyed.
  void MakeDead() {
    Must(strata_engine_create(nullptr, &dead_engine), "dead engine");
    strata_model_params mp;
    strata_model_params_init(&mp);
    mp.device = STRATA_DEVICE_CPU;
    Must(strata_model_load(engine, kDemoDir.c_str(), &mp, &dead_model), "dead model");
    Must(strata_session_create(model, nullptr, &dead_session), "dead session");
    Must(strata_model_open_tokenizer(model, &dead_tokenizer), "dead tokenizer");
    const int32_t prompt[] = {1};
    strata_request_params rp;
    strata_request_params_init(&rp);
    rp.max_tokens = 1;
    Must(strata_session_submit(dead_session, prompt, 1, &rp, &dead_request), "dead request");
    Must(strata_request_destroy(dead_request), "destroy request");
    Must(strata_session_destroy(dead_session), "destroy session");
    Must(strata_tokenizer_destroy(dead_tokenizer), "destroy tokenizer");
    Must(strata_model_destroy(dead_model), "destroy model");
    Must(strata_engine_destroy(dead_engine), "destroy engine");
  }

  // Live handles of the other kinds, for the wrong-type cases.
  std::vector<void*> Others(const void* self) const {
    std::vector<void*> out;
    for (void* h : std::initializer_list<void*>{engine, model, session, busy_request, tokenizer}) {
      if (h != self) out.push_back(h);
    }
    return out;
  }

  // The live handle of type H the walk uses.
  template <class H>
  void* LiveOf() const {
    if constexpr (std::is_same_v<H, strata_engine>) return engine;
    if constexpr (std::is_same_v<H, strata_model>) return model;
    if constexpr (std::is_same_v<H, strata_session>) return session;
    if constexpr (std::is_same_v<H, strata_request>) return busy_request;
    if constexpr (std::is_same_v<H, strata_tokenizer>) return tokenizer;
    return nullptr;
  }

  static void Must(strata_status s, const char* what) {
    ASSERT_EQ(s, STRATA_OK) << what << ": " << LastError();
  }

  static constexpr int64_t kContext = 64;

  strata_engine* engine = nullptr;
  strata_engine* idle_engine = nullptr;
  strata_model* model = nullptr;
  strata_model* bare_model = nullptr;
  strata_session* session = nullptr;
  strata_session* bare_session = nullptr;
  strata_session* busy_session = nullptr;
  strata_request* busy_request = nullptr;
  strata_tokenizer* tokenizer = nullptr;
  strata_tokenizer* no_template_tokenizer = nullptr;
  strata_engine* dead_engine = nullptr;
  strata_model* dead_model = nullptr;
  strata_session* dead_session = nullptr;
  strata_request* dead_request = nullptr;
  strata_tokenizer* dead_tokenizer = nullptr;
  // Readable memory that is no handle (its first word is no magic).
  alignas(16) unsigned char foreign[64] = {};
  int32_t vocab = 0;
  int64_t max_context = 0;
};

// The four handle cases of a function's handle argument `arg`: NULL, a
// destroyed handle, every live handle of another type, and foreign memory.
template <class H>
void HandleCases(World& w, const char* fn, int line, const char* arg, H* dead,
                 const std::function<strata_status(H*)>& call) {
  Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, std::string(arg) + " is NULL", [&] { return call(nullptr); });
  Expect(fn, line, STRATA_ERR_MISUSE, std::string(arg) + " was already destroyed", [&] { return call(dead); });
  for (void* other : w.Others(w.LiveOf<H>())) {
    Expect(fn, line, STRATA_ERR_MISUSE, std::string(arg) + " is not a live " + arg,
           [&] { return call(As<H>(other)); });
  }
  Expect(fn, line, STRATA_ERR_MISUSE, std::string(arg) + " is not a live " + arg,
         [&] { return call(As<H>(w.foreign)); });
}

#define HANDLE_CASES(fn, arg, H, dead, ...) \
  HandleCases<H>(w, #fn, __LINE__, arg, dead, [&](H * h) -> strata_status { return __VA_ARGS__; })

// An input struct's struct_size cases: below every released layout, beyond
// any struct of the API, and larger than the library's with a non-zero
// tail; a larger struct with a zero tail is accepted (`accepted` is what the
// call returns then). `call` gets the struct to pass.
template <class P>
void InputStructCases(const char* fn, int line, const char* type, const P& base,
                      const std::function<strata_status(const P*)>& call, strata_status accepted) {
  const std::string field = std::string(type) + ".struct_size";
  for (uint32_t size : {0u, 1u, 4u, 4097u, kHugeStructSize}) {
    P p = base;
    p.struct_size = size;
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, field, [&] { return call(&p); });
  }
  struct {
    P p;
    uint64_t newer_field;
  } bigger;
  std::memset(&bigger, 0, sizeof bigger);
  bigger.p = base;
  bigger.p.struct_size = sizeof bigger;
  bigger.newer_field = 1;
  Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, "not zero", [&] { return call(&bigger.p); });
  // The largest claim allowed, all zero beyond the library's layout.
  std::vector<unsigned char> page(4096, 0);
  std::memcpy(page.data(), &base, sizeof base);
  reinterpret_cast<P*>(page.data())->struct_size = 4096;
  Expect(fn, line, accepted, "", [&] { return call(reinterpret_cast<const P*>(page.data())); });
}

#define INPUT_STRUCT_CASES(fn, P, base, accepted, ...) \
  InputStructCases<P>(#fn, __LINE__, #P, base, [&](const P* p) -> strata_status { return __VA_ARGS__; }, accepted)

// An output struct's struct_size cases: zero and too small are refused; a
// size beyond the library's struct is accepted and nothing past the
// library's own size is written.
template <class P>
void OutputStructCases(const char* fn, int line, const char* type,
                       const std::function<strata_status(P*)>& call, strata_status accepted) {
  for (uint32_t size : {0u, 1u, 4u}) {
    P p{};
    p.struct_size = size;
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, std::string(type) + ".struct_size", [&] { return call(&p); });
  }
  struct {
    P p;
    unsigned char guard[64];
  } out;
  std::memset(&out, 0xAB, sizeof out);
  out.p.struct_size = kHugeStructSize;
  Expect(fn, line, accepted, "", [&] { return call(&out.p); });
  for (unsigned char b : out.guard) ASSERT_EQ(b, 0xAB) << fn << " wrote past its struct";
  EXPECT_EQ(out.p.struct_size, kHugeStructSize);
}

#define OUTPUT_STRUCT_CASES(fn, P, accepted, ...) \
  OutputStructCases<P>(#fn, __LINE__, #P, [&](P * p) -> strata_status { return __VA_ARGS__; }, accepted)

// The `_init_sized` functions: NULL and sizes below the first layout are
// refused with nothing written; a huge size fills only the library's struct.
template <class P>
void InitSizedCases(const char* fn, int line, const char* type, strata_status (*init)(P*, size_t)) {
  Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, std::string(type) + " is NULL",
         [&] { return init(nullptr, sizeof(P)); });
  for (size_t size : {size_t{0}, size_t{1}, size_t{4}}) {
    P p;
    std::memset(&p, 0xAB, sizeof p);
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, "struct_size", [&] { return init(&p, size); });
    const auto* bytes = reinterpret_cast<const unsigned char*>(&p);
    for (size_t i = 0; i < sizeof p; ++i) ASSERT_EQ(bytes[i], 0xAB) << fn << " wrote into a refused struct";
  }
  struct {
    P p;
    unsigned char guard[64];
  } out;
  std::memset(&out, 0xAB, sizeof out);
  Expect(fn, line, STRATA_OK, "", [&] { return init(&out.p, std::numeric_limits<size_t>::max()); });
  EXPECT_EQ(out.p.struct_size, sizeof(P));
  for (unsigned char b : out.guard) ASSERT_EQ(b, 0xAB) << fn << " wrote past its struct";
}

#define INIT_SIZED_CASES(fn, P) InitSizedCases<P>(#fn, __LINE__, #P, fn)

// --- the walk table ----------------------------------------------------------

using Walk = std::function<void(World&)>;

strata_request_params RequestParams() {
  strata_request_params p;
  strata_request_params_init(&p);
  p.max_tokens = 1;
  return p;
}

// Submits a one-token request on a fresh session and waits for it to finish.
struct FinishedRequest {
  explicit FinishedRequest(World& w) {
    World::Must(strata_session_create(w.model, nullptr, &session), "session");
    const int32_t prompt[] = {1};
    const strata_request_params rp = RequestParams();
    World::Must(strata_session_submit(session, prompt, 1, &rp, &request), "submit");
    strata_event ev;
    ev.struct_size = sizeof ev;
    for (;;) {
      if (strata_engine_poll_event(w.engine, &ev, 1000) != STRATA_OK) continue;
      if (ev.request == request && ev.type == STRATA_EVENT_FINISHED) break;
    }
  }
  ~FinishedRequest() {
    strata_request_destroy(request);
    strata_session_destroy(session);
  }
  strata_session* session = nullptr;
  strata_request* request = nullptr;
};

// The hostile request params of submit, generate and the chat calls, each
// with the field its message must name.
std::vector<std::pair<strata_request_params, std::string>> HostileRequestParams() {
  std::vector<std::pair<strata_request_params, std::string>> out;
  auto add = [&](const std::string& field, const std::function<void(strata_request_params&)>& edit) {
    strata_request_params p = RequestParams();
    edit(p);
    out.emplace_back(p, field);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  add("max_tokens", [](auto& p) { p.max_tokens = -1; });
  add("max_tokens", [](auto& p) { p.max_tokens = std::numeric_limits<int32_t>::min(); });
  for (float t : {-1.0f, 101.0f, nan, inf}) add("temperature", [t](auto& p) { p.temperature = t; });
  add("top_k", [](auto& p) { p.top_k = -1; });
  for (float v : {0.0f, -0.5f, 1.5f, nan}) add("top_p", [v](auto& p) { p.top_p = v; });
  for (float v : {-0.1f, 1.1f, nan}) add("min_p", [v](auto& p) { p.min_p = v; });
  for (float v : {0.0f, -1.0f, 101.0f, nan, inf}) {
    add("repetition_penalty", [v](auto& p) { p.repetition_penalty = v; });
  }
  for (float v : {-101.0f, 101.0f, nan}) {
    add("presence_penalty", [v](auto& p) { p.presence_penalty = v; });
    add("frequency_penalty", [v](auto& p) { p.frequency_penalty = v; });
  }
  add("deadline_ms", [](auto& p) { p.deadline_ms = -1; });
  add("max_context_tokens", [](auto& p) { p.max_context_tokens = -1; });
  add("stop_tokens", [](auto& p) {
    p.stop_tokens = nullptr;
    p.num_stop_tokens = 1;
  });
  static const int32_t kOneStop[] = {7};
  add("stop_tokens", [](auto& p) {
    p.stop_tokens = kOneStop;
    p.num_stop_tokens = kHugeCount;
  });
  return out;
}

// Hostile request params for a call taking `const strata_request_params*`.
void RequestParamsCases(const char* fn, int line,
                        const std::function<strata_status(const strata_request_params*)>& call) {
  for (const auto& [p, field] : HostileRequestParams()) {
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, field, [&] { return call(&p); });
  }
  const strata_request_params base = RequestParams();
  InputStructCases<strata_request_params>(fn, line, "strata_request_params", base, call, STRATA_OK);
}

std::vector<std::pair<std::string, Walk>> WalkTable() {
  std::vector<std::pair<std::string, Walk>> t;
  auto add = [&](const char* name, Walk walk) { t.emplace_back(name, std::move(walk)); };

  // --- errors and versions ---
  add("strata_status_string", [](World&) {
    for (strata_status s : {-1, 16, 99, 101, 0x101, std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max()}) {
      EXPECT_VALUE(strata_status_string, EXPECT_STREQ(strata_status_string(s), "unknown status code") << s);
    }
    EXPECT_VALUE(strata_status_string, EXPECT_STREQ(strata_status_string(STRATA_ERR_MISUSE), "API misuse"));
  });
  add("strata_last_error_message", [](World& w) {
    EXPECT_VALUE(strata_last_error_message, {
      strata_engine_destroy(nullptr);
      ASSERT_NE(strata_last_error_message(), nullptr);
      EXPECT_THAT(std::string(strata_last_error_message()), StartsWith("strata_engine_destroy: engine is NULL"));
    });
    EXPECT_VALUE(strata_last_error_message, {
      size_t n = 0;
      ASSERT_EQ(strata_session_get_num_tokens(w.session, &n), STRATA_OK);
      ASSERT_NE(strata_last_error_message(), nullptr);
      EXPECT_STREQ(strata_last_error_message(), "");
    });
  });
  add("strata_version_string", [](World&) {
    EXPECT_VALUE(strata_version_string, EXPECT_STREQ(strata_version_string(), STRATA_VERSION_STRING));
  });
  add("strata_version_number", [](World&) {
    EXPECT_VALUE(strata_version_number, EXPECT_EQ(strata_version_number(), uint32_t{STRATA_VERSION_NUMBER}));
  });
  add("strata_abi_version", [](World&) {
    EXPECT_VALUE(strata_abi_version, EXPECT_EQ(strata_abi_version(), uint32_t{STRATA_ABI_VERSION}));
  });
  add("strata_abi_struct_size", [](World&) {
    size_t v = 0;
    EXPECT_CALL_STATUS(strata_abi_struct_size, STRATA_ERR_INVALID_ARGUMENT, "struct_name is NULL",
                       strata_abi_struct_size(nullptr, &v));
    EXPECT_CALL_STATUS(strata_abi_struct_size, STRATA_ERR_INVALID_ARGUMENT, "out_size is NULL",
                       strata_abi_struct_size("strata_event", nullptr));
    for (const char* name : {"", "strata_nothing", kNotUtf8, "strata_event "}) {
      EXPECT_CALL_STATUS(strata_abi_struct_size, STRATA_ERR_NOT_FOUND, "no public struct",
                         strata_abi_struct_size(name, &v));
    }
  });
  add("strata_abi_field_offset", [](World&) {
    size_t v = 0;
    EXPECT_CALL_STATUS(strata_abi_field_offset, STRATA_ERR_INVALID_ARGUMENT, "struct_name is NULL",
                       strata_abi_field_offset(nullptr, "type", &v));
    EXPECT_CALL_STATUS(strata_abi_field_offset, STRATA_ERR_INVALID_ARGUMENT, "field_name is NULL",
                       strata_abi_field_offset("strata_event", nullptr, &v));
    EXPECT_CALL_STATUS(strata_abi_field_offset, STRATA_ERR_INVALID_ARGUMENT, "out_offset is NULL",
                       strata_abi_field_offset("strata_event", "type", nullptr));
    EXPECT_CALL_STATUS(strata_abi_field_offset, STRATA_ERR_NOT_FOUND, "no public struct",
                       strata_abi_field_offset(kNotUtf8, "type", &v));
    for (const char* field : {"", "nothing", kNotUtf8}) {
      EXPECT_CALL_STATUS(strata_abi_field_offset, STRATA_ERR_NOT_FOUND, "has no field",
                         strata_abi_field_offset("strata_event", field, &v));
    }
  });

  // --- _init_sized ---
  add("strata_engine_params_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_engine_params_init_sized, strata_engine_params);
  });
  add("strata_model_params_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_model_params_init_sized, strata_model_params);
  });
  add("strata_session_params_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_session_params_init_sized, strata_session_params);
  });
  add("strata_request_params_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_request_params_init_sized, strata_request_params);
  });
  add("strata_chat_message_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_chat_message_init_sized, strata_chat_message);
  });
  add("strata_tool_init_sized", [](World&) { INIT_SIZED_CASES(strata_tool_init_sized, strata_tool); });
  add("strata_chat_params_init_sized", [](World&) {
    INIT_SIZED_CASES(strata_chat_params_init_sized, strata_chat_params);
  });

  // --- engine ---
  add("strata_engine_create", [](World&) {
    strata_engine* e = nullptr;
    // Every failure leaves *out_engine NULL; the walk checks it after each.
    auto create = [&](const strata_engine_params* p) {
      e = As<strata_engine>(&e);  // not NULL, so a failure must write NULL
      const strata_status s = strata_engine_create(p, &e);
      if (s != STRATA_OK) {
        EXPECT_EQ(e, nullptr);
      } else {
        EXPECT_EQ(strata_engine_destroy(e), STRATA_OK) << LastError();
      }
      return s;
    };
    EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "out_engine is NULL",
                       strata_engine_create(nullptr, nullptr));
    strata_engine_params base;
    strata_engine_params_init(&base);
    base.num_threads = 1;
    INPUT_STRUCT_CASES(strata_engine_create, strata_engine_params, base, STRATA_OK, create(p));
    auto with = [&](const std::function<void(strata_engine_params&)>& edit) {
      strata_engine_params p = base;
      edit(p);
      return create(&p);
    };
    for (int32_t v : {-1, 4, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "log_level",
                         with([v](auto& p) { p.log_level = v; }));
    }
    for (int32_t v : {-1, 1025, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "num_threads",
                         with([v](auto& p) { p.num_threads = v; }));
    }
    EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "max_batch",
                       with([](auto& p) { p.max_batch = -1; }));
    EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "prefix_block_tokens",
                       with([](auto& p) { p.prefix_block_tokens = std::numeric_limits<int32_t>::min(); }));
    EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "metrics_interval_ms",
                       with([](auto& p) { p.metrics_interval_ms = -1; }));
    for (const char* options :
         {"bogus=1", "scheduler.prefill_chunk_tokens", "scheduler.prefill_chunk_tokens=abc",
          "scheduler.prefill_chunk_tokens=99999999999999999999", "scheduler.prefill_chunk_tokens=-5", "=1",
          ",,,=", kNotUtf8, "sampling.on_device=2"}) {
      EXPECT_CALL_STATUS(strata_engine_create, STRATA_ERR_INVALID_ARGUMENT, "options",
                         with([options](auto& p) { p.options = options; }));
    }
  });
  add("strata_engine_destroy", [](World& w) {
    HANDLE_CASES(strata_engine_destroy, "engine", strata_engine, w.dead_engine, strata_engine_destroy(h));
    EXPECT_CALL_STATUS(strata_engine_destroy, STRATA_ERR_FAILED_PRECONDITION, "model(s)",
                       strata_engine_destroy(w.engine));
  });
  add("strata_engine_get_metrics", [](World& w) {
    strata_metrics m;
    m.struct_size = sizeof m;
    HANDLE_CASES(strata_engine_get_metrics, "engine", strata_engine, w.dead_engine,
                 strata_engine_get_metrics(h, &m));
    EXPECT_CALL_STATUS(strata_engine_get_metrics, STRATA_ERR_INVALID_ARGUMENT, "out_metrics is NULL",
                       strata_engine_get_metrics(w.engine, nullptr));
    OUTPUT_STRUCT_CASES(strata_engine_get_metrics, strata_metrics, STRATA_OK, strata_engine_get_metrics(w.engine, p));
  });
  add("strata_engine_get_stat", [](World& w) {
    double v = 0;
    HANDLE_CASES(strata_engine_get_stat, "engine", strata_engine, w.dead_engine,
                 strata_engine_get_stat(h, "requests.submitted", &v));
    EXPECT_CALL_STATUS(strata_engine_get_stat, STRATA_ERR_INVALID_ARGUMENT, "name is NULL",
                       strata_engine_get_stat(w.engine, nullptr, &v));
    EXPECT_CALL_STATUS(strata_engine_get_stat, STRATA_ERR_INVALID_ARGUMENT, "out_value is NULL",
                       strata_engine_get_stat(w.engine, "requests.submitted", nullptr));
    for (const char* name : {"", "requests", "requests.submitted.", kNotUtf8}) {
      EXPECT_CALL_STATUS(strata_engine_get_stat, STRATA_ERR_NOT_FOUND, "no statistic named",
                         strata_engine_get_stat(w.engine, name, &v));
    }
  });
  add("strata_engine_list_stats", [](World& w) {
    const char* name = "x";
    HANDLE_CASES(strata_engine_list_stats, "engine", strata_engine, w.dead_engine,
                 strata_engine_list_stats(h, 0, &name));
    EXPECT_EQ(name, nullptr) << "a failure writes NULL";
    EXPECT_CALL_STATUS(strata_engine_list_stats, STRATA_ERR_INVALID_ARGUMENT, "out_name is NULL",
                       strata_engine_list_stats(w.engine, 0, nullptr));
    for (size_t index : {size_t{100000}, std::numeric_limits<size_t>::max()}) {
      name = "x";
      EXPECT_CALL_STATUS(strata_engine_list_stats, STRATA_ERR_OUT_OF_RANGE, "index",
                         strata_engine_list_stats(w.engine, index, &name));
      EXPECT_EQ(name, nullptr);
    }
  });
  add("strata_engine_poll_event", [](World& w) {
    strata_event ev;
    ev.struct_size = sizeof ev;
    // A negative timeout waits forever: the checks come before any wait.
    HANDLE_CASES(strata_engine_poll_event, "engine", strata_engine, w.dead_engine,
                 strata_engine_poll_event(h, &ev, -1));
    EXPECT_CALL_STATUS(strata_engine_poll_event, STRATA_ERR_INVALID_ARGUMENT, "out_event is NULL",
                       strata_engine_poll_event(w.idle_engine, nullptr, -1));
    for (uint32_t size : {0u, 1u, 4u}) {
      ev.struct_size = size;
      EXPECT_CALL_STATUS(strata_engine_poll_event, STRATA_ERR_INVALID_ARGUMENT, "strata_event.struct_size",
                         strata_engine_poll_event(w.idle_engine, &ev, -1));
    }
    OUTPUT_STRUCT_CASES(strata_engine_poll_event, strata_event, STRATA_AGAIN,
                        strata_engine_poll_event(w.idle_engine, p, 0));
    for (int32_t timeout : {0, 1}) {
      ev.struct_size = sizeof ev;
      EXPECT_CALL_STATUS(strata_engine_poll_event, STRATA_AGAIN, "",
                         strata_engine_poll_event(w.idle_engine, &ev, timeout));
      EXPECT_EQ(ev.type, STRATA_EVENT_NONE);
    }
  });
  add("strata_finish_reason_string", [](World&) {
    for (strata_finish_reason r : {-1, 11, 255, std::numeric_limits<int32_t>::min(),
                                   std::numeric_limits<int32_t>::max()}) {
      EXPECT_VALUE(strata_finish_reason_string, EXPECT_STREQ(strata_finish_reason_string(r), "unknown") << r);
    }
    EXPECT_VALUE(strata_finish_reason_string,
                 EXPECT_STREQ(strata_finish_reason_string(STRATA_FINISH_DEADLINE), "deadline"));
  });

  // --- model ---
  add("strata_model_load", [](World& w) {
    strata_model* m = nullptr;
    auto load = [&](strata_engine* e, const char* dir, const strata_model_params* p) {
      m = As<strata_model>(&m);
      const strata_status s = strata_model_load(e, dir, p, &m);
      if (s != STRATA_OK) {
        EXPECT_EQ(m, nullptr);
      } else {
        EXPECT_EQ(strata_model_destroy(m), STRATA_OK);
      }
      return s;
    };
    strata_model_params base;
    strata_model_params_init(&base);
    base.device = STRATA_DEVICE_CPU;
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "out_model is NULL",
                       strata_model_load(w.engine, kDemoDir.c_str(), &base, nullptr));
    HANDLE_CASES(strata_model_load, "engine", strata_engine, w.dead_engine, load(h, kDemoDir.c_str(), &base));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "model_dir is NULL",
                       load(w.engine, nullptr, &base));
    INPUT_STRUCT_CASES(strata_model_load, strata_model_params, base, STRATA_OK,
                       load(w.engine, kDemoDir.c_str(), p));
    auto with = [&](const std::function<void(strata_model_params&)>& edit) {
      strata_model_params p = base;
      edit(p);
      return load(w.engine, kDemoDir.c_str(), &p);
    };
    for (int32_t d : {-1, 3, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "device",
                         with([d](auto& p) { p.device = d; }));
    }
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "device_index",
                       with([](auto& p) { p.device_index = -1; }));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "max_batch",
                       with([](auto& p) { p.max_batch = -1; }));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "max_sequences",
                       with([](auto& p) { p.max_sequences = std::numeric_limits<int64_t>::min(); }));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "max_context_tokens",
                       with([](auto& p) { p.max_context_tokens = -1; }));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "prefill_slice_tokens",
                       with([](auto& p) { p.prefill_slice_tokens = -1; }));
    for (double f : {0.0, -1.0, 1.5, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
      EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "gpu_memory_fraction",
                         with([f](auto& p) { p.gpu_memory_fraction = f; }));
    }
    for (const char* options : {"nope=1", "=", "a=b=c", kNotUtf8}) {
      EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_INVALID_ARGUMENT, "options",
                         with([options](auto& p) { p.options = options; }));
    }
    // Directories that are not models, and models whose files are hostile.
    const std::string missing = (kScratch / "no_such_model").string();
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_NOT_FOUND, missing, load(w.engine, missing.c_str(), &base));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_NOT_FOUND, "not a model directory", load(w.engine, "", &base));
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_NOT_FOUND, "no_such",
                       load(w.engine, (missing + kNotUtf8).c_str(), &base));
    const std::string a_file = (kDemoDir / "config.json").string();
    EXPECT_CALL_STATUS(strata_model_load, STRATA_ERR_NOT_FOUND, "not a model directory",
                       load(w.engine, a_file.c_str(), &base));
    const std::string config = ReadFile(kDemoDir / "config.json");
    auto replaced = [&](const std::string& key, const std::string& value) {
      std::string c = config;
      const size_t at = c.find("\"" + key + "\"");
      EXPECT_NE(at, std::string::npos) << key;
      const size_t colon = c.find(':', at);
      const size_t end = c.find_first_of(",}", colon);
      c.replace(colon + 1, end - colon - 1, " " + value);
      return c;
    };
    struct Bad {
      const char* name;
      std::string file, contents;
      bool as_directory;
      strata_status want;
      std::string needle;
    };
    const std::string tensors = ReadFile(kDemoDir / "model.safetensors");
    // Malformed files are INVALID_ARGUMENT naming the file and the field or
    // byte offset; a weights file cut short is DATA_LOSS.
    const int32_t kInvalid = STRATA_ERR_INVALID_ARGUMENT;
    const std::vector<Bad> bad = {
        {"config_dir", "config.json", "", true, kInvalid, "config.json: is a directory"},
        {"config_empty", "config.json", "", false, kInvalid, "config.json: invalid JSON at byte 0"},
        {"config_syntax", "config.json", config.substr(0, config.size() / 2), false, kInvalid,
         "config.json: invalid JSON at byte"},
        {"config_not_object", "config.json", "[1, 2]", false, kInvalid, "config.json"},
        {"config_deep", "config.json", std::string(100000, '[') + std::string(100000, ']'), false, kInvalid,
         "config.json: JSON nested deeper than"},
        {"config_not_utf8", "config.json", replaced("model_type", "\"kimi\xff\""), false, kInvalid,
         "config.json: invalid JSON at byte"},
        {"config_vocab", "config.json", replaced("vocab_size", "-1"), false, kInvalid, "vocab_size"},
        {"config_vocab_huge", "config.json", replaced("vocab_size", "99999999999999999999999"), false, kInvalid,
         "vocab_size"},
        {"config_layers", "config.json", replaced("num_hidden_layers", "\"two\""), false, kInvalid,
         "num_hidden_layers"},
        {"config_arch", "config.json", replaced("model_type", "\"no_such_arch\""), false, STRATA_ERR_UNSUPPORTED,
         "field 'model_type': unsupported architecture 'no_such_arch'"},
        {"weights_dir", "model.safetensors", "", true, kInvalid, "model.safetensors: is a directory"},
        {"weights_empty", "model.safetensors", "", false, STRATA_ERR_DATA_LOSS, "model.safetensors"},
        {"weights_truncated", "model.safetensors", tensors.substr(0, tensors.size() / 2), false,
         STRATA_ERR_DATA_LOSS, "model.safetensors"},
        {"weights_header_huge", "model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}",
         false, STRATA_ERR_DATA_LOSS, "model.safetensors: header length"},
        {"weights_header_garbage", "model.safetensors", std::string("\x10\0\0\0\0\0\0\0", 8) + "not json at all!",
         false, kInvalid, "model.safetensors: invalid JSON at byte"},
    };
    for (const Bad& b : bad) {
      const fs::path dir = DemoWith(b.name, b.file, b.contents, b.as_directory);
      EXPECT_CALL_STATUS(strata_model_load, b.want, b.needle, load(w.engine, dir.c_str(), &base));
    }
  });
  add("strata_model_get_info", [](World& w) {
    strata_model_info info;
    info.struct_size = sizeof info;
    HANDLE_CASES(strata_model_get_info, "model", strata_model, w.dead_model, strata_model_get_info(h, &info));
    EXPECT_CALL_STATUS(strata_model_get_info, STRATA_ERR_INVALID_ARGUMENT, "out_info is NULL",
                       strata_model_get_info(w.model, nullptr));
    OUTPUT_STRUCT_CASES(strata_model_get_info, strata_model_info, STRATA_OK, strata_model_get_info(w.model, p));
  });
  add("strata_model_destroy", [](World& w) {
    HANDLE_CASES(strata_model_destroy, "model", strata_model, w.dead_model, strata_model_destroy(h));
  });

  // --- session ---
  add("strata_session_create", [](World& w) {
    strata_session* s = nullptr;
    auto create = [&](strata_model* m, const strata_session_params* p) {
      s = As<strata_session>(&s);
      const strata_status st = strata_session_create(m, p, &s);
      if (st != STRATA_OK) {
        EXPECT_EQ(s, nullptr);
      } else {
        EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
      }
      return st;
    };
    EXPECT_CALL_STATUS(strata_session_create, STRATA_ERR_INVALID_ARGUMENT, "out_session is NULL",
                       strata_session_create(w.model, nullptr, nullptr));
    HANDLE_CASES(strata_session_create, "model", strata_model, w.dead_model, create(h, nullptr));
    strata_session_params base;
    strata_session_params_init(&base);
    INPUT_STRUCT_CASES(strata_session_create, strata_session_params, base, STRATA_OK, create(w.model, p));
    for (int64_t v : {int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
      strata_session_params p = base;
      p.max_context_tokens = v;
      EXPECT_CALL_STATUS(strata_session_create, STRATA_ERR_INVALID_ARGUMENT, "max_context_tokens",
                         create(w.model, &p));
    }
    for (int64_t v : {w.max_context + 1, std::numeric_limits<int64_t>::max()}) {
      strata_session_params p = base;
      p.max_context_tokens = v;
      EXPECT_CALL_STATUS(strata_session_create, STRATA_ERR_OUT_OF_RANGE, "max_context_tokens",
                         create(w.model, &p));
    }
  });
  add("strata_session_destroy", [](World& w) {
    HANDLE_CASES(strata_session_destroy, "session", strata_session, w.dead_session, strata_session_destroy(h));
  });
  add("strata_session_append_tokens", [](World& w) {
    const int32_t one[] = {1};
    HANDLE_CASES(strata_session_append_tokens, "session", strata_session, w.dead_session,
                 strata_session_append_tokens(h, one, 1));
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_INVALID_ARGUMENT, "tokens is NULL",
                       strata_session_append_tokens(w.session, nullptr, 1));
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_INVALID_ARGUMENT, "tokens count",
                       strata_session_append_tokens(w.session, one, kHugeCount));
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_INVALID_ARGUMENT, "tokens count",
                       strata_session_append_tokens(w.session, one, size_t{1} << 40));
    for (int32_t id : {-1, w.vocab, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      const int32_t bad[] = {1, id};
      EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_OUT_OF_RANGE, "token",
                         strata_session_append_tokens(w.session, bad, 2));
    }
    const std::vector<int32_t> too_long(World::kContext + 1, 1);
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_OUT_OF_RANGE, "",
                       strata_session_append_tokens(w.session, too_long.data(), too_long.size()));
    size_t n = 1;
    EXPECT_EQ(strata_session_get_num_tokens(w.session, &n), STRATA_OK);
    EXPECT_EQ(n, 0u) << "a refused append leaves the session unchanged";
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_OK, "",
                       strata_session_append_tokens(w.session, nullptr, 0));
    EXPECT_CALL_STATUS(strata_session_append_tokens, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_append_tokens(w.busy_session, one, 1));
  });
  add("strata_session_get_logits", [](World& w) {
    std::vector<float> logits(w.vocab);
    size_t count = 0;
    HANDLE_CASES(strata_session_get_logits, "session", strata_session, w.dead_session,
                 strata_session_get_logits(h, logits.data(), logits.size(), &count));
    EXPECT_CALL_STATUS(strata_session_get_logits, STRATA_ERR_FAILED_PRECONDITION, "",
                       strata_session_get_logits(w.session, logits.data(), logits.size(), &count));
    const int32_t one[] = {1};
    ASSERT_EQ(strata_session_append_tokens(w.session, one, 1), STRATA_OK) << LastError();
    for (size_t capacity : {size_t{0}, logits.size() - 1}) {
      count = 0;
      EXPECT_CALL_STATUS(strata_session_get_logits, STRATA_ERR_OUT_OF_RANGE, "capacity",
                         strata_session_get_logits(w.session, logits.data(), capacity, &count));
      EXPECT_EQ(count, logits.size());
    }
    // A huge capacity is the caller's claim; only vocab_size floats are written.
    EXPECT_CALL_STATUS(strata_session_get_logits, STRATA_OK, "",
                       strata_session_get_logits(w.session, logits.data(), kHugeCount, nullptr));
    EXPECT_CALL_STATUS(strata_session_get_logits, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_get_logits(w.busy_session, logits.data(), logits.size(), &count));
  });
  add("strata_session_get_num_tokens", [](World& w) {
    size_t n = 0;
    HANDLE_CASES(strata_session_get_num_tokens, "session", strata_session, w.dead_session,
                 strata_session_get_num_tokens(h, &n));
    EXPECT_CALL_STATUS(strata_session_get_num_tokens, STRATA_ERR_INVALID_ARGUMENT, "out_tokens is NULL",
                       strata_session_get_num_tokens(w.session, nullptr));
  });
  add("strata_session_reset", [](World& w) {
    HANDLE_CASES(strata_session_reset, "session", strata_session, w.dead_session, strata_session_reset(h));
    EXPECT_CALL_STATUS(strata_session_reset, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_reset(w.busy_session));
  });
  add("strata_session_fork", [](World& w) {
    strata_session* s = nullptr;
    HANDLE_CASES(strata_session_fork, "session", strata_session, w.dead_session, strata_session_fork(h, &s));
    EXPECT_EQ(s, nullptr);
    EXPECT_CALL_STATUS(strata_session_fork, STRATA_ERR_INVALID_ARGUMENT, "out_session is NULL",
                       strata_session_fork(w.session, nullptr));
    s = As<strata_session>(&s);
    EXPECT_CALL_STATUS(strata_session_fork, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_fork(w.busy_session, &s));
    EXPECT_EQ(s, nullptr);
  });
  add("strata_session_mark", [](World& w) {
    uint64_t mark = 0;
    HANDLE_CASES(strata_session_mark, "session", strata_session, w.dead_session, strata_session_mark(h, &mark));
    EXPECT_CALL_STATUS(strata_session_mark, STRATA_ERR_INVALID_ARGUMENT, "out_mark is NULL",
                       strata_session_mark(w.session, nullptr));
    EXPECT_CALL_STATUS(strata_session_mark, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_mark(w.busy_session, &mark));
  });
  add("strata_session_rollback", [](World& w) {
    HANDLE_CASES(strata_session_rollback, "session", strata_session, w.dead_session,
                 strata_session_rollback(h, 1));
    for (uint64_t mark : {uint64_t{0}, uint64_t{12345}, std::numeric_limits<uint64_t>::max()}) {
      EXPECT_CALL_STATUS(strata_session_rollback, STRATA_ERR_NOT_FOUND, "mark",
                         strata_session_rollback(w.session, mark));
    }
    EXPECT_CALL_STATUS(strata_session_rollback, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_rollback(w.busy_session, 1));
  });
  add("strata_session_save", [](World& w) {
    const std::string path = (kScratch / "walk_session.bin").string();
    HANDLE_CASES(strata_session_save, "session", strata_session, w.dead_session,
                 strata_session_save(h, path.c_str()));
    EXPECT_CALL_STATUS(strata_session_save, STRATA_ERR_INVALID_ARGUMENT, "path is NULL",
                       strata_session_save(w.session, nullptr));
    EXPECT_CALL_STATUS(strata_session_save, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_save(w.busy_session, path.c_str()));
    EXPECT_CALL_STATUS(strata_session_save, STRATA_ERR_NOT_FOUND, "no/such/dir",
                       strata_session_save(w.session, ((kScratch / "no/such/dir/s.bin").string()).c_str()));
    EXPECT_CALL_STATUS(strata_session_save, STRATA_ERR_FAILED_PRECONDITION, "Is a directory",
                       strata_session_save(w.session, kScratch.c_str()));
  });
  add("strata_session_save_to_buffer", [](World& w) {
    size_t n = 0;
    unsigned char small[8];
    HANDLE_CASES(strata_session_save_to_buffer, "session", strata_session, w.dead_session,
                 strata_session_save_to_buffer(h, nullptr, 0, &n));
    EXPECT_CALL_STATUS(strata_session_save_to_buffer, STRATA_ERR_INVALID_ARGUMENT, "out_size is NULL",
                       strata_session_save_to_buffer(w.session, nullptr, 0, nullptr));
    EXPECT_CALL_STATUS(strata_session_save_to_buffer, STRATA_ERR_INVALID_ARGUMENT, "buffer is NULL",
                       strata_session_save_to_buffer(w.session, nullptr, 8, &n));
    EXPECT_CALL_STATUS(strata_session_save_to_buffer, STRATA_ERR_OUT_OF_RANGE, "capacity",
                       strata_session_save_to_buffer(w.session, small, sizeof small, &n));
    EXPECT_GT(n, sizeof small);
    EXPECT_CALL_STATUS(strata_session_save_to_buffer, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_save_to_buffer(w.busy_session, nullptr, 0, &n));
  });
  // Loads of a file or buffer saved from w.session, with every argument case.
  auto load_cases = [](World& w, const char* fn, int line,
                       const std::function<strata_status(strata_model*, const strata_session_params*,
                                                         strata_session**)>& load) {
    strata_session* s = nullptr;
    auto loaded = [&](strata_model* m, const strata_session_params* p) {
      s = As<strata_session>(&s);
      const strata_status st = load(m, p, &s);
      if (st != STRATA_OK) {
        EXPECT_EQ(s, nullptr) << fn;
      } else {
        EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
      }
      return st;
    };
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, "out_session is NULL",
           [&] { return load(w.model, nullptr, nullptr); });
    HandleCases<strata_model>(w, fn, line, "model", w.dead_model,
                              [&](strata_model* h) { return loaded(h, nullptr); });
    strata_session_params base;
    strata_session_params_init(&base);
    InputStructCases<strata_session_params>(
        fn, line, "strata_session_params", base,
        [&](const strata_session_params* p) { return loaded(w.model, p); }, STRATA_OK);
    strata_session_params p = base;
    p.max_context_tokens = -1;
    Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, "max_context_tokens", [&] { return loaded(w.model, &p); });
    p.max_context_tokens = 1;
    Expect(fn, line, STRATA_ERR_OUT_OF_RANGE, "max_context_tokens", [&] { return loaded(w.model, &p); });
    // The same model without its tokenizer cannot hold the conversation.
    Expect(fn, line, STRATA_ERR_FAILED_PRECONDITION, "without its tokenizer",
           [&] { return loaded(w.bare_model, nullptr); });
  };
  add("strata_session_load", [load_cases](World& w) {
    const std::string path = (kScratch / "walk_load.bin").string();
    const int32_t prompt[] = {1, 2, 3, 4, 5};
    ASSERT_EQ(strata_session_reset(w.session), STRATA_OK);
    ASSERT_EQ(strata_session_append_tokens(w.session, prompt, 5), STRATA_OK) << LastError();
    ASSERT_EQ(strata_session_save(w.session, path.c_str()), STRATA_OK) << LastError();
    load_cases(w, "strata_session_load", __LINE__,
               [&](strata_model* m, const strata_session_params* p, strata_session** out) {
                 return strata_session_load(m, path.c_str(), p, out);
               });
    strata_session* s = As<strata_session>(&s);
    EXPECT_CALL_STATUS(strata_session_load, STRATA_ERR_INVALID_ARGUMENT, "path is NULL",
                       strata_session_load(w.model, nullptr, nullptr, &s));
    EXPECT_EQ(s, nullptr);
    EXPECT_CALL_STATUS(strata_session_load, STRATA_ERR_NOT_FOUND, "missing.bin",
                       strata_session_load(w.model, ((kScratch / "missing.bin").string()).c_str(), nullptr, &s));
    EXPECT_CALL_STATUS(strata_session_load, STRATA_ERR_DATA_LOSS, "not a Strata session",
                       strata_session_load(w.model, (kDemoDir / "config.json").c_str(), nullptr, &s));
    EXPECT_CALL_STATUS(strata_session_load, STRATA_ERR_INVALID_ARGUMENT, "is a directory",
                       strata_session_load(w.model, kDemoDir.c_str(), nullptr, &s));
    ASSERT_EQ(strata_session_reset(w.session), STRATA_OK);
  });
  add("strata_session_load_from_buffer", [load_cases](World& w) {
    const int32_t prompt[] = {1, 2, 3, 4, 5};
    ASSERT_EQ(strata_session_reset(w.session), STRATA_OK);
    ASSERT_EQ(strata_session_append_tokens(w.session, prompt, 5), STRATA_OK) << LastError();
    size_t n = 0;
    ASSERT_EQ(strata_session_save_to_buffer(w.session, nullptr, 0, &n), STRATA_OK) << LastError();
    std::vector<unsigned char> bytes(n);
    ASSERT_EQ(strata_session_save_to_buffer(w.session, bytes.data(), n, &n), STRATA_OK) << LastError();
    load_cases(w, "strata_session_load_from_buffer", __LINE__,
               [&](strata_model* m, const strata_session_params* p, strata_session** out) {
                 return strata_session_load_from_buffer(m, bytes.data(), bytes.size(), p, out);
               });
    strata_session* s = As<strata_session>(&s);
    EXPECT_CALL_STATUS(strata_session_load_from_buffer, STRATA_ERR_INVALID_ARGUMENT, "buffer is NULL",
                       strata_session_load_from_buffer(w.model, nullptr, 4, nullptr, &s));
    EXPECT_EQ(s, nullptr);
    for (size_t size : {size_t{0}, size_t{55}, bytes.size() - 1}) {
      EXPECT_CALL_STATUS(strata_session_load_from_buffer, STRATA_ERR_DATA_LOSS, "session buffer",
                         strata_session_load_from_buffer(w.model, bytes.data(), size, nullptr, &s));
    }
    ASSERT_EQ(strata_session_reset(w.session), STRATA_OK);
  });
  add("strata_session_release_mark", [](World& w) {
    HANDLE_CASES(strata_session_release_mark, "session", strata_session, w.dead_session,
                 strata_session_release_mark(h, 1));
    for (uint64_t mark : {uint64_t{0}, uint64_t{12345}, std::numeric_limits<uint64_t>::max()}) {
      EXPECT_CALL_STATUS(strata_session_release_mark, STRATA_ERR_NOT_FOUND, "mark",
                         strata_session_release_mark(w.session, mark));
    }
    EXPECT_CALL_STATUS(strata_session_release_mark, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_release_mark(w.busy_session, 1));
  });

  // --- request ---
  add("strata_session_submit", [](World& w) {
    strata_request* r = nullptr;
    const int32_t one[] = {1};
    auto submit = [&](strata_session* s, const int32_t* tokens, size_t n, const strata_request_params* p) {
      r = As<strata_request>(&r);
      const strata_status st = strata_session_submit(s, tokens, n, p, &r);
      if (st != STRATA_OK) {
        EXPECT_EQ(r, nullptr);
      } else {
        EXPECT_EQ(strata_request_destroy(r), STRATA_OK);
      }
      return st;
    };
    const strata_request_params base = RequestParams();
    EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_INVALID_ARGUMENT, "out_request is NULL",
                       strata_session_submit(w.session, one, 1, &base, nullptr));
    HANDLE_CASES(strata_session_submit, "session", strata_session, w.dead_session, submit(h, one, 1, &base));
    EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_INVALID_ARGUMENT, "prompt_tokens is NULL",
                       submit(w.session, nullptr, 1, &base));
    EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_INVALID_ARGUMENT, "prompt_tokens count",
                       submit(w.session, one, kHugeCount, &base));
    EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_INVALID_ARGUMENT, "empty",
                       submit(w.session, nullptr, 0, &base));
    for (int32_t id : {-1, w.vocab, std::numeric_limits<int32_t>::min()}) {
      const int32_t bad[] = {id};
      EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_OUT_OF_RANGE, "", submit(w.session, bad, 1, &base));
    }
    {
      strata_request_params p = base;
      const int32_t stop[] = {-1};
      p.stop_tokens = stop;
      p.num_stop_tokens = 1;
      EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_OUT_OF_RANGE, "stop", submit(w.session, one, 1, &p));
    }
    RequestParamsCases("strata_session_submit", __LINE__,
                       [&](const strata_request_params* p) { return submit(w.session, one, 1, p); });
    EXPECT_CALL_STATUS(strata_session_submit, STRATA_ERR_FAILED_PRECONDITION, "running",
                       submit(w.busy_session, one, 1, &base));
  });
  add("strata_session_generate", [](World& w) {
    const int32_t one[] = {1};
    const strata_request_params base = RequestParams();
    strata_finish_reason reason = 99;
    HANDLE_CASES(strata_session_generate, "session", strata_session, w.dead_session,
                 strata_session_generate(h, one, 1, &base, &reason));
    EXPECT_EQ(reason, STRATA_FINISH_NONE);
    EXPECT_CALL_STATUS(strata_session_generate, STRATA_ERR_INVALID_ARGUMENT, "prompt_tokens is NULL",
                       strata_session_generate(w.session, nullptr, 1, &base, nullptr));
    EXPECT_CALL_STATUS(strata_session_generate, STRATA_ERR_INVALID_ARGUMENT, "prompt_tokens count",
                       strata_session_generate(w.session, one, kHugeCount, &base, nullptr));
    RequestParamsCases("strata_session_generate", __LINE__, [&](const strata_request_params* p) {
      return strata_session_generate(w.session, one, 1, p, nullptr);
    });
    EXPECT_CALL_STATUS(strata_session_generate, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_generate(w.busy_session, one, 1, &base, nullptr));
    // What a token callback may not do, and the library-owned handle after the call.
    struct Probe {
      strata_session* session;
      strata_request* request = nullptr;
      strata_status destroy_session = STRATA_OK, destroy_request = STRATA_OK;
      std::string destroy_session_message, destroy_request_message;
    } probe{w.session};
    strata_request_params p = base;
    p.user_data = &probe;
    p.token_callback = [](strata_request* request, int32_t, void* ud) {
      auto* pr = static_cast<Probe*>(ud);
      pr->request = request;
      pr->destroy_session = strata_session_destroy(pr->session);
      pr->destroy_session_message = strata_last_error_message();
      pr->destroy_request = strata_request_destroy(request);
      pr->destroy_request_message = strata_last_error_message();
      return 0;
    };
    ASSERT_EQ(strata_session_generate(w.session, one, 1, &p, &reason), STRATA_OK) << LastError();
    ++CaseCounts()["strata_session_destroy"];
    EXPECT_EQ(probe.destroy_session, STRATA_ERR_MISUSE);
    EXPECT_THAT(probe.destroy_session_message, StartsWith("strata_session_destroy: "));
    ++CaseCounts()["strata_request_destroy"];
    EXPECT_EQ(probe.destroy_request, STRATA_ERR_MISUSE);
    EXPECT_THAT(probe.destroy_request_message, HasSubstr("strata_session_generate"));
    EXPECT_CALL_STATUS(strata_request_cancel, STRATA_ERR_MISUSE, "request", strata_request_cancel(probe.request));
    EXPECT_CALL_STATUS(strata_request_get_status, STRATA_ERR_MISUSE, "request",
                       strata_request_get_status(probe.request, nullptr, nullptr, nullptr));
  });
  add("strata_request_cancel", [](World& w) {
    HANDLE_CASES(strata_request_cancel, "request", strata_request, w.dead_request, strata_request_cancel(h));
    FinishedRequest done(w);
    EXPECT_CALL_STATUS(strata_request_cancel, STRATA_OK, "", strata_request_cancel(done.request));
    EXPECT_CALL_STATUS(strata_request_cancel, STRATA_OK, "", strata_request_cancel(done.request));
  });
  add("strata_request_get_status", [](World& w) {
    bool finished = false;
    HANDLE_CASES(strata_request_get_status, "request", strata_request, w.dead_request,
                 strata_request_get_status(h, &finished, nullptr, nullptr));
    EXPECT_CALL_STATUS(strata_request_get_status, STRATA_OK, "",
                       strata_request_get_status(w.busy_request, nullptr, nullptr, nullptr));
  });
  add("strata_request_error_message", [](World& w) {
    auto message = [](strata_request* r) {
      const char* m = strata_request_error_message(r);
      EXPECT_NE(m, nullptr);
      return std::string(m != nullptr ? m : "");
    };
    EXPECT_VALUE(strata_request_error_message, EXPECT_THAT(message(nullptr), HasSubstr("NULL")));
    EXPECT_VALUE(strata_request_error_message, EXPECT_THAT(message(w.dead_request), HasSubstr("request")));
    for (void* other : w.Others(w.busy_request)) {
      EXPECT_VALUE(strata_request_error_message,
                   EXPECT_THAT(message(As<strata_request>(other)), HasSubstr("not a live request")));
    }
    EXPECT_VALUE(strata_request_error_message,
                 EXPECT_THAT(message(As<strata_request>(w.foreign)), HasSubstr("not a live request")));
    EXPECT_VALUE(strata_request_error_message, EXPECT_EQ(message(w.busy_request), ""));
  });
  add("strata_request_destroy", [](World& w) {
    HANDLE_CASES(strata_request_destroy, "request", strata_request, w.dead_request, strata_request_destroy(h));
  });

  // --- tokenizer ---
  add("strata_tokenizer_open", [](World&) {
    strata_tokenizer* t = nullptr;
    auto open = [&](const char* dir) {
      t = As<strata_tokenizer>(&t);
      const strata_status s = strata_tokenizer_open(dir, &t);
      if (s != STRATA_OK) {
        EXPECT_EQ(t, nullptr);
      } else {
        EXPECT_EQ(strata_tokenizer_destroy(t), STRATA_OK);
      }
      return s;
    };
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_INVALID_ARGUMENT, "out_tokenizer is NULL",
                       strata_tokenizer_open(kDemoDir.c_str(), nullptr));
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_INVALID_ARGUMENT, "dir is NULL", open(nullptr));
    const std::string missing = (kScratch / "no_such_tokenizer").string();
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_NOT_FOUND, missing, open(missing.c_str()));
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_NOT_FOUND, "", open(""));
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_NOT_FOUND, "", open((missing + kNotUtf8).c_str()));
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_NOT_FOUND, "", open(kBareDir.c_str()));
    const std::string a_file = (kDemoDir / "tokenizer.json").string();
    EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_NOT_FOUND, "", open(a_file.c_str()));
    const std::string tokenizer = ReadFile(kDemoDir / "tokenizer.json");
    const std::string config = ReadFile(kDemoDir / "tokenizer_config.json");
    struct Bad {
      const char* name;
      std::string file, contents;
      bool as_directory;
      std::string needle;
    };
    const std::vector<Bad> bad = {
        {"tok_dir", "tokenizer.json", "", true, "tokenizer.json"},
        {"tok_empty", "tokenizer.json", "", false, "tokenizer.json"},
        {"tok_truncated", "tokenizer.json", tokenizer.substr(0, tokenizer.size() / 2), false, "tokenizer.json"},
        {"tok_not_object", "tokenizer.json", "\"x\"", false, "tokenizer.json"},
        {"tok_deep", "tokenizer.json", std::string(100000, '{') , false, "tokenizer.json"},
        {"tok_no_model", "tokenizer.json", "{\"added_tokens\": []}", false, "tokenizer.json"},
        {"tok_not_utf8", "tokenizer.json", "{\"model\": \"\xff\"}", false, "tokenizer.json"},
        {"tok_config_dir", "tokenizer_config.json", "", true, "tokenizer_config.json"},
        {"tok_config_syntax", "tokenizer_config.json", config.substr(0, config.size() / 2), false,
         "tokenizer_config.json"},
        {"tok_config_template_type", "tokenizer_config.json", "{\"chat_template\": 5}", false,
         "tokenizer_config.json"},
        {"tok_config_template_syntax", "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}", false,
         "tokenizer_config.json:1:"},
    };
    for (const Bad& b : bad) {
      const fs::path dir = DemoWith(b.name, b.file, b.contents, b.as_directory);
      EXPECT_CALL_STATUS(strata_tokenizer_open, STRATA_ERR_INVALID_ARGUMENT, b.needle, open(dir.c_str()));
    }
  });
  add("strata_model_open_tokenizer", [](World& w) {
    strata_tokenizer* t = nullptr;
    HANDLE_CASES(strata_model_open_tokenizer, "model", strata_model, w.dead_model, strata_model_open_tokenizer(h, &t));
    EXPECT_EQ(t, nullptr);
    EXPECT_CALL_STATUS(strata_model_open_tokenizer, STRATA_ERR_INVALID_ARGUMENT, "out_tokenizer is NULL",
                       strata_model_open_tokenizer(w.model, nullptr));
    EXPECT_CALL_STATUS(strata_model_open_tokenizer, STRATA_ERR_NOT_FOUND, "",
                       strata_model_open_tokenizer(w.bare_model, &t));
    EXPECT_EQ(t, nullptr);
  });
  add("strata_tokenizer_destroy", [](World& w) {
    HANDLE_CASES(strata_tokenizer_destroy, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_destroy(h));
  });
  add("strata_tokenizer_encode", [](World& w) {
    int32_t ids[64];
    size_t count = 0;
    HANDLE_CASES(strata_tokenizer_encode, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_encode(h, "hi", 2, true, ids, 64, &count));
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT, "out_count is NULL",
                       strata_tokenizer_encode(w.tokenizer, "hi", 2, true, ids, 64, nullptr));
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT, "text is NULL",
                       strata_tokenizer_encode(w.tokenizer, nullptr, 3, true, ids, 64, &count));
    for (size_t len : {kHugeCount, size_t{1} << 40}) {
      EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT, "text",
                         strata_tokenizer_encode(w.tokenizer, "hi", len, true, ids, 64, &count));
    }
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT, "byte 2",
                       strata_tokenizer_encode(w.tokenizer, kNotUtf8, STRATA_NUL_TERMINATED, true, ids, 64, &count));
    for (const char* bad : {"\xc0\x80", "\xed\xa0\x80", "a\xf4\x90\x80\x80", "\xe2\x82"}) {
      EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT, "UTF-8",
                         strata_tokenizer_encode(w.tokenizer, bad, STRATA_NUL_TERMINATED, true, ids, 64, &count));
    }
    const std::string hello = "hello world";
    const auto exact = Unterminated(hello);
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_OK, "",
                       strata_tokenizer_encode(w.tokenizer, exact.get(), hello.size(), true, ids, 64, &count));
    ASSERT_GT(count, 1u);
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_OUT_OF_RANGE, "capacity",
                       strata_tokenizer_encode(w.tokenizer, exact.get(), hello.size(), true, ids, 1, &count));
    // Embedded NUL bytes are text like any other when the length is given.
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_OK, "",
                       strata_tokenizer_encode(w.tokenizer, "a\0b", 3, false, ids, 64, &count));
    // A tokenizer file whose pattern backtracks without bound on this text:
    // the regex engine's limit, reported as bad input with the offset.
    std::string file = ReadFile(kDemoDir / "tokenizer.json");
    const size_t begin = file.find('{', file.find("\"pre_tokenizer\""));
    size_t end = begin;  // one past the object's closing brace
    int depth = 0;
    do {
      depth += file[end] == '{' ? 1 : file[end] == '}' ? -1 : 0;
      ++end;
    } while (depth > 0);
    file.replace(begin, end - begin,
                 R"({"type": "Split", "pattern": {"Regex": "(?:a|a)+$"}, "behavior": "Isolated", "invert": false})");
    const fs::path dir = DemoWith("tok_backtracking", "tokenizer.json", file);
    strata_tokenizer* slow = nullptr;
    ASSERT_EQ(strata_tokenizer_open(dir.c_str(), &slow), STRATA_OK) << LastError();
    const std::string text = "xy" + std::string(40, 'a') + "b";
    EXPECT_CALL_STATUS(strata_tokenizer_encode, STRATA_ERR_INVALID_ARGUMENT,
                       "pre-tokenizer pattern, matching from byte",
                       strata_tokenizer_encode(slow, text.data(), text.size(), false, ids, 64, &count));
    EXPECT_EQ(strata_tokenizer_destroy(slow), STRATA_OK);
  });
  add("strata_tokenizer_decode", [](World& w) {
    char text[256];
    size_t len = 0;
    const int32_t ids[] = {1, 2, 3};
    HANDLE_CASES(strata_tokenizer_decode, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_decode(h, ids, 3, false, text, sizeof text, &len));
    EXPECT_CALL_STATUS(strata_tokenizer_decode, STRATA_ERR_INVALID_ARGUMENT, "out_len is NULL",
                       strata_tokenizer_decode(w.tokenizer, ids, 3, false, text, sizeof text, nullptr));
    EXPECT_CALL_STATUS(strata_tokenizer_decode, STRATA_ERR_INVALID_ARGUMENT, "tokens is NULL",
                       strata_tokenizer_decode(w.tokenizer, nullptr, 3, false, text, sizeof text, &len));
    EXPECT_CALL_STATUS(strata_tokenizer_decode, STRATA_ERR_INVALID_ARGUMENT, "tokens count",
                       strata_tokenizer_decode(w.tokenizer, ids, kHugeCount, false, text, sizeof text, &len));
    int32_t vocab = 0;
    ASSERT_EQ(strata_tokenizer_get_vocab_size(w.tokenizer, &vocab), STRATA_OK);
    for (int32_t id : {-1, vocab, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      const int32_t bad[] = {1, id};
      EXPECT_CALL_STATUS(strata_tokenizer_decode, STRATA_ERR_OUT_OF_RANGE, "tokens[1]",
                         strata_tokenizer_decode(w.tokenizer, bad, 2, false, text, sizeof text, &len));
    }
    for (size_t capacity : {size_t{0}, size_t{1}}) {
      EXPECT_CALL_STATUS(strata_tokenizer_decode, STRATA_ERR_OUT_OF_RANGE, "capacity",
                         strata_tokenizer_decode(w.tokenizer, ids, 3, false, text, capacity, &len));
    }
  });
  add("strata_tokenizer_get_vocab_size", [](World& w) {
    int32_t v = 0;
    HANDLE_CASES(strata_tokenizer_get_vocab_size, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_get_vocab_size(h, &v));
    EXPECT_CALL_STATUS(strata_tokenizer_get_vocab_size, STRATA_ERR_INVALID_ARGUMENT, "out_vocab_size is NULL",
                       strata_tokenizer_get_vocab_size(w.tokenizer, nullptr));
  });
  add("strata_tokenizer_has_chat_template", [](World& w) {
    bool has = false;
    HANDLE_CASES(strata_tokenizer_has_chat_template, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_has_chat_template(h, &has));
    EXPECT_CALL_STATUS(strata_tokenizer_has_chat_template, STRATA_ERR_INVALID_ARGUMENT, "out_has is NULL",
                       strata_tokenizer_has_chat_template(w.tokenizer, nullptr));
  });
  add("strata_tokenizer_render_chat", [](World& w) {
    char text[4096];
    size_t len = 0;
    const std::string ok = R"({"messages": [{"role": "user", "content": "hi"}]})";
    HANDLE_CASES(strata_tokenizer_render_chat, "tokenizer", strata_tokenizer, w.dead_tokenizer,
                 strata_tokenizer_render_chat(h, ok.c_str(), STRATA_NUL_TERMINATED, text, sizeof text, &len));
    EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_INVALID_ARGUMENT, "out_len is NULL",
                       strata_tokenizer_render_chat(w.tokenizer, ok.c_str(), STRATA_NUL_TERMINATED, text,
                                                    sizeof text, nullptr));
    EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_INVALID_ARGUMENT, "conversation_json is NULL",
                       strata_tokenizer_render_chat(w.tokenizer, nullptr, 0, text, sizeof text, &len));
    for (size_t n : {kHugeCount, size_t{1} << 40}) {
      EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_INVALID_ARGUMENT, "conversation_json",
                         strata_tokenizer_render_chat(w.tokenizer, ok.c_str(), n, text, sizeof text, &len));
    }
    for (const std::string& bad :
         {std::string(""), std::string("{"), std::string("[]"), std::string("{\"messages\": 5}"),
          std::string("{\"messages\": [] "), std::string("{\"messages\": [], \"x\": \"\xff\"}"),
          std::string(100000, '[') + std::string(100000, ']'), std::string("{\"messages\": [1, 2]}x")}) {
      EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_INVALID_ARGUMENT, "conversation_json",
                         strata_tokenizer_render_chat(w.tokenizer, bad.c_str(), STRATA_NUL_TERMINATED, text,
                                                      sizeof text, &len));
    }
    // Messages of the wrong shape render as Jinja renders them (missing
    // fields are undefined), as transformers would.
    for (const std::string& odd : {std::string(R"({"messages": [5, null]})"),
                                   std::string(R"({"messages": [{"role": 5, "content": {"a": 1}}]})")}) {
      EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_OK, "",
                         strata_tokenizer_render_chat(w.tokenizer, odd.c_str(), STRATA_NUL_TERMINATED, text,
                                                      sizeof text, &len));
    }
    const auto exact = Unterminated(ok);
    EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_OK, "",
                       strata_tokenizer_render_chat(w.tokenizer, exact.get(), ok.size(), text, sizeof text, &len));
    EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_OUT_OF_RANGE, "capacity",
                       strata_tokenizer_render_chat(w.tokenizer, exact.get(), ok.size(), text, 1, &len));
    EXPECT_CALL_STATUS(strata_tokenizer_render_chat, STRATA_ERR_FAILED_PRECONDITION, "chat template",
                       strata_tokenizer_render_chat(w.no_template_tokenizer, ok.c_str(), STRATA_NUL_TERMINATED, text,
                                                    sizeof text, &len));
  });

  // --- chat ---
  add("strata_session_add_message", [](World& w) {
    strata_chat_message base;
    strata_chat_message_init(&base);
    base.content = "hi";
    HANDLE_CASES(strata_session_add_message, "session", strata_session, w.dead_session,
                 strata_session_add_message(h, &base));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "message is NULL",
                       strata_session_add_message(w.session, nullptr));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_FAILED_PRECONDITION, "tokenizer",
                       strata_session_add_message(w.bare_session, &base));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_add_message(w.busy_session, &base));
    INPUT_STRUCT_CASES(strata_session_add_message, strata_chat_message, base, STRATA_OK,
                       strata_session_add_message(w.session, p));
    auto with = [&](const std::function<void(strata_chat_message&)>& edit) {
      strata_chat_message m = base;
      edit(m);
      return strata_session_add_message(w.session, &m);
    };
    for (int32_t role : {-1, 4, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
      EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "role",
                         with([role](auto& m) { m.role = role; }));
    }
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "content is NULL",
                       with([](auto& m) {
                         m.content = nullptr;
                         m.content_len = 5;
                       }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "content",
                       with([](auto& m) { m.content_len = kHugeCount; }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "content",
                       with([](auto& m) { m.content = kNotUtf8; }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "reasoning_content",
                       with([](auto& m) {
                         m.role = STRATA_ROLE_ASSISTANT;
                         m.reasoning_content = kNotUtf8;
                       }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "reasoning_content",
                       with([](auto& m) {
                         m.role = STRATA_ROLE_ASSISTANT;
                         m.reasoning_content = nullptr;
                         m.reasoning_content_len = 3;
                       }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "tool_call_id",
                       with([](auto& m) {
                         m.role = STRATA_ROLE_TOOL;
                         m.tool_call_id = kNotUtf8;
                       }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "name",
                       with([](auto& m) {
                         m.role = STRATA_ROLE_TOOL;
                         m.name = kNotUtf8;
                       }));
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "tool_call_id or name",
                       with([](auto& m) { m.role = STRATA_ROLE_TOOL; }));
    for (const char* calls : {"", "[", "{}", "5", "[5]", "[{\"function\": {}}]", "[{\"function\": {\"name\": 5}}]",
                              "[\"\xff\"]", "[] x"}) {
      EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "tool_calls",
                         with([calls](auto& m) {
                           m.role = STRATA_ROLE_ASSISTANT;
                           m.tool_calls_json = calls;
                         }));
    }
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_ERR_INVALID_ARGUMENT, "tool_calls",
                       with([](auto& m) { m.tool_calls_json = "[]"; }));  // only assistants call tools
    const std::string hello = "hello";
    const auto exact = Unterminated(hello);
    EXPECT_CALL_STATUS(strata_session_add_message, STRATA_OK, "", with([&](auto& m) {
                         m.content = exact.get();
                         m.content_len = hello.size();
                       }));
  });
  add("strata_session_get_conversation", [](World& w) {
    char json[4096];
    size_t len = 0;
    HANDLE_CASES(strata_session_get_conversation, "session", strata_session, w.dead_session,
                 strata_session_get_conversation(h, json, sizeof json, &len));
    EXPECT_CALL_STATUS(strata_session_get_conversation, STRATA_ERR_INVALID_ARGUMENT, "out_len is NULL",
                       strata_session_get_conversation(w.session, json, sizeof json, nullptr));
    EXPECT_CALL_STATUS(strata_session_get_conversation, STRATA_ERR_FAILED_PRECONDITION, "tokenizer",
                       strata_session_get_conversation(w.bare_session, json, sizeof json, &len));
    EXPECT_CALL_STATUS(strata_session_get_conversation, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_get_conversation(w.busy_session, json, sizeof json, &len));
    EXPECT_CALL_STATUS(strata_session_get_conversation, STRATA_ERR_OUT_OF_RANGE, "capacity",
                       strata_session_get_conversation(w.session, json, 1, &len));
  });
  add("strata_session_add_tool", [](World& w) {
    strata_tool base;
    strata_tool_init(&base);
    base.name = "calc";
    HANDLE_CASES(strata_session_add_tool, "session", strata_session, w.dead_session,
                 strata_session_add_tool(h, &base));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "tool is NULL",
                       strata_session_add_tool(w.session, nullptr));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_FAILED_PRECONDITION, "tokenizer",
                       strata_session_add_tool(w.bare_session, &base));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_add_tool(w.busy_session, &base));
    INPUT_STRUCT_CASES(strata_session_add_tool, strata_tool, base, STRATA_OK, strata_session_add_tool(w.session, p));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_ALREADY_EXISTS, "calc",
                       strata_session_add_tool(w.session, &base));
    auto with = [&](const std::function<void(strata_tool&)>& edit) {
      strata_tool t = base;
      t.name = "other";
      edit(t);
      return strata_session_add_tool(w.session, &t);
    };
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "name is NULL",
                       with([](auto& t) { t.name = nullptr; }));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "name",
                       with([](auto& t) { t.name = ""; }));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "name",
                       with([](auto& t) { t.name = kNotUtf8; }));
    EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "description",
                       with([](auto& t) { t.description = kNotUtf8; }));
    for (const char* params : {"", "{", "[]", "5", "\"s\"", "{\"a\": \"\xff\"}", "{} x", "null"}) {
      EXPECT_CALL_STATUS(strata_session_add_tool, STRATA_ERR_INVALID_ARGUMENT, "parameters",
                         with([params](auto& t) { t.parameters_json = params; }));
    }
  });
  add("strata_session_clear_tools", [](World& w) {
    HANDLE_CASES(strata_session_clear_tools, "session", strata_session, w.dead_session,
                 strata_session_clear_tools(h));
    EXPECT_CALL_STATUS(strata_session_clear_tools, STRATA_ERR_FAILED_PRECONDITION, "tokenizer",
                       strata_session_clear_tools(w.bare_session));
    EXPECT_CALL_STATUS(strata_session_clear_tools, STRATA_ERR_FAILED_PRECONDITION, "running",
                       strata_session_clear_tools(w.busy_session));
  });

  // The chat calls share their argument cases.
  auto chat_cases = [](World& w, const char* fn, int line,
                       const std::function<strata_status(strata_session*, const strata_request_params*,
                                                         const strata_chat_params*)>& call) {
    strata_chat_message user;
    strata_chat_message_init(&user);
    user.content = "hi";
    ASSERT_EQ(strata_session_add_message(w.session, &user), STRATA_OK) << LastError();
    const strata_request_params rp = RequestParams();
    strata_chat_params base;
    strata_chat_params_init(&base);
    HandleCases<strata_session>(w, fn, line, "session", w.dead_session,
                                [&](strata_session* h) { return call(h, &rp, &base); });
    Expect(fn, line, STRATA_ERR_FAILED_PRECONDITION, "tokenizer", [&] { return call(w.bare_session, &rp, &base); });
    Expect(fn, line, STRATA_ERR_FAILED_PRECONDITION, "running", [&] { return call(w.busy_session, &rp, &base); });
    RequestParamsCases(fn, line, [&](const strata_request_params* p) { return call(w.session, p, &base); });
    InputStructCases<strata_chat_params>(
        fn, line, "strata_chat_params", base,
        [&](const strata_chat_params* p) { return call(w.session, &rp, p); }, STRATA_OK);
    auto with = [&](const std::function<void(strata_chat_params&)>& edit) {
      strata_chat_params c = base;
      edit(c);
      return call(w.session, &rp, &c);
    };
    static const char* const kNullStop[] = {nullptr};
    static const char* const kEmptyStop[] = {""};
    static const char* const kBadStop[] = {kNotUtf8};
    static const char* const kOneStop[] = {"stop"};
    const std::vector<std::pair<std::function<void(strata_chat_params&)>, std::string>> bad = {
        {[](auto& c) { c.num_stop_strings = 1; }, "stop_strings is NULL"},
        {[](auto& c) {
           c.stop_strings = kOneStop;
           c.num_stop_strings = kHugeCount;
         },
         "stop_strings"},
        {[](auto& c) {
           c.stop_strings = kNullStop;
           c.num_stop_strings = 1;
         },
         "stop_strings[0]"},
        {[](auto& c) {
           c.stop_strings = kEmptyStop;
           c.num_stop_strings = 1;
         },
         "stop_strings[0]"},
        {[](auto& c) {
           c.stop_strings = kBadStop;
           c.num_stop_strings = 1;
         },
         "stop_strings[0]"},
        {[](auto& c) { c.max_tool_rounds = -1; }, "max_tool_rounds"},
        {[](auto& c) { c.max_tool_rounds = 1001; }, "max_tool_rounds"},
        {[](auto& c) { c.max_tool_rounds = std::numeric_limits<int32_t>::min(); }, "max_tool_rounds"},
        {[](auto& c) { c.template_variables_json = ""; }, "template_variables_json"},
        {[](auto& c) { c.template_variables_json = "{"; }, "template_variables_json"},
        {[](auto& c) { c.template_variables_json = "[1]"; }, "template_variables_json"},
        {[](auto& c) { c.template_variables_json = "{\"x\": \"\xff\"}"; }, "template_variables_json"},
        {[](auto& c) { c.template_variables_json = "{} {}"; }, "template_variables_json"},
    };
    for (const auto& [edit, needle] : bad) {
      Expect(fn, line, STRATA_ERR_INVALID_ARGUMENT, needle, [&] { return with(edit); });
    }
  };
  add("strata_session_submit_chat", [chat_cases](World& w) {
    strata_request* r = nullptr;
    EXPECT_CALL_STATUS(strata_session_submit_chat, STRATA_ERR_INVALID_ARGUMENT, "out_request is NULL",
                       strata_session_submit_chat(w.session, nullptr, nullptr, nullptr));
    chat_cases(w, "strata_session_submit_chat", __LINE__,
               [&](strata_session* s, const strata_request_params* p, const strata_chat_params* c) {
                 r = As<strata_request>(&r);
                 const strata_status st = strata_session_submit_chat(s, p, c, &r);
                 if (st != STRATA_OK) {
                   EXPECT_EQ(r, nullptr);
                 } else {
                   EXPECT_EQ(strata_request_destroy(r), STRATA_OK);
                 }
                 return st;
               });
  });
  add("strata_session_chat", [chat_cases](World& w) {
    chat_cases(w, "strata_session_chat", __LINE__,
               [&](strata_session* s, const strata_request_params* p, const strata_chat_params* c) {
                 strata_finish_reason reason = 99;
                 const strata_status st = strata_session_chat(s, p, c, &reason);
                 if (st != STRATA_OK) EXPECT_EQ(reason, STRATA_FINISH_NONE);
                 return st;
               });
  });
  add("strata_request_submit_tool_result", [](World& w) {
    HANDLE_CASES(strata_request_submit_tool_result, "request", strata_request, w.dead_request,
                 strata_request_submit_tool_result(h, "call_0", "{}", STRATA_NUL_TERMINATED));
    EXPECT_CALL_STATUS(strata_request_submit_tool_result, STRATA_ERR_INVALID_ARGUMENT, "call_id is NULL",
                       strata_request_submit_tool_result(w.busy_request, nullptr, "{}", STRATA_NUL_TERMINATED));
    EXPECT_CALL_STATUS(strata_request_submit_tool_result, STRATA_ERR_INVALID_ARGUMENT, "content",
                       strata_request_submit_tool_result(w.busy_request, "call_0", "{}", kHugeCount));
    EXPECT_CALL_STATUS(strata_request_submit_tool_result, STRATA_ERR_INVALID_ARGUMENT, "content",
                       strata_request_submit_tool_result(w.busy_request, "call_0", kNotUtf8, STRATA_NUL_TERMINATED));
    EXPECT_CALL_STATUS(strata_request_submit_tool_result, STRATA_ERR_FAILED_PRECONDITION, "not a chat request",
                       strata_request_submit_tool_result(w.busy_request, "call_0", "{}", STRATA_NUL_TERMINATED));
    // A chat request: an id it never issued, and after it finished.
    strata_chat_message user;
    strata_chat_message_init(&user);
    user.content = "hi";
    ASSERT_EQ(strata_session_add_message(w.session, &user), STRATA_OK) << LastError();
    strata_request* chat = nullptr;
    const strata_request_params rp = RequestParams();
    ASSERT_EQ(strata_session_submit_chat(w.session, &rp, nullptr, &chat), STRATA_OK) << LastError();
    const std::string id = "no_such_call";
    const auto exact = Unterminated("{}");
    const strata_status first = strata_request_submit_tool_result(chat, id.c_str(), exact.get(), 2);
    ++CaseCounts()["strata_request_submit_tool_result"];
    // Before the request finishes the id is unknown; after, the request is done.
    EXPECT_TRUE(first == STRATA_ERR_NOT_FOUND || first == STRATA_ERR_FAILED_PRECONDITION) << LastError();
    EXPECT_THAT(LastError(), StartsWith("strata_request_submit_tool_result: "));
    strata_event ev;
    ev.struct_size = sizeof ev;
    for (;;) {
      if (strata_engine_poll_event(w.engine, &ev, 1000) != STRATA_OK) continue;
      if (ev.request == chat && ev.type == STRATA_EVENT_FINISHED) break;
    }
    EXPECT_CALL_STATUS(strata_request_submit_tool_result, STRATA_ERR_FAILED_PRECONDITION, "finished",
                       strata_request_submit_tool_result(chat, id.c_str(), "{}", STRATA_NUL_TERMINATED));
    EXPECT_EQ(strata_request_destroy(chat), STRATA_OK);
  });
  return t;
}

// --- the exported symbols ------------------------------------------------------

// The strata_* functions libstrata exports, from its dynamic symbol table.
std::set<std::string> ExportedFunctions() {
  std::set<std::string> out;
  const std::string command = "nm -D --defined-only '" + std::string(STRATA_LIBRARY_FILE) + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    // "<address> <type> <name>[@@<version>]"
    std::istringstream fields(line);
    std::string address, type, name;
    if (!(fields >> address >> type >> name)) continue;
    name = name.substr(0, name.find('@'));
    if ((type == "T" || type == "t" || type == "i") && name.rfind("strata_", 0) == 0) out.insert(name);
  }
  pclose(pipe);
  return out;
}

TEST(AbiWalkTest, EveryExportIsWalked) {
  const std::set<std::string> exported = ExportedFunctions();
  ASSERT_GT(exported.size(), 40u) << "could not read the symbols of " << STRATA_LIBRARY_FILE
                                  << " with nm -D --defined-only";
  std::set<std::string> walked;
  for (const auto& [name, walk] : WalkTable()) {
    EXPECT_TRUE(walked.insert(name).second) << name << " is in the walk table twice";
  }
  for (const std::string& name : exported) {
    EXPECT_TRUE(walked.count(name)) << name << " is exported but not in the walk table of abi_walk_test.cc";
  }
  for (const std::string& name : walked) {
    EXPECT_TRUE(exported.count(name)) << name << " is in the walk table but not exported";
  }
  std::printf("libstrata exports %zu strata_* functions; the walk table covers %zu\n", exported.size(),
              walked.size());
}

class AbiWalk : public ::testing::TestWithParam<std::string> {};

TEST_P(AbiWalk, HostileArgumentsGetDocumentedErrors) {
  ASSERT_TRUE(fs::exists(kDemoDir / "config.json")) << "fixture missing: " << kDemoDir;
  InstallCrashHandlers();
  for (const auto& [name, walk] : WalkTable()) {
    if (name != GetParam()) continue;
    const int before = CaseCounts()[name];
    {
      World world;
      if (HasFatalFailure()) return;
      walk(world);
    }
    const int cases = CaseCounts()[name] - before;
    EXPECT_GT(cases, 0) << name << " walked no case of its own";
    std::printf("%s: %d cases\n", name.c_str(), cases);
  }
  std::snprintf(g_case, sizeof(g_case), "between cases");
}

std::vector<std::string> WalkNames() {
  std::vector<std::string> names;
  for (const auto& [name, walk] : WalkTable()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Exports, AbiWalk, ::testing::ValuesIn(WalkNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
