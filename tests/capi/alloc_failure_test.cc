// Allocation failures inside the C ABI's entry points (issue 27 point 2):
// each sweep fails the first allocation of a call, then the second, and so
// on until the call makes no more, and each failed call must return
// STRATA_ERR_OUT_OF_MEMORY with "<function>: out of memory while <what it was
// doing>" (or succeed, where the library recovers), leave its out_ handle
// NULL, and never crash, abort or return INTERNAL.
//
// This executable replaces the global operator new and delete; libstrata's
// allocations resolve to these definitions (the dynamic linker looks in the
// executable first), so no hook is compiled into the library. Only
// allocations of the thread that arms a failure count: the engine's own
// threads run as usual. Runs against the shared library and the demo model
// that the capi_make_demo_model fixture writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unwind.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "gtest_util.h"
#include "strata/strata.h"

namespace {

// The armed allocation (its index among this thread's allocations since the
// call began); -1: none. Plain thread-locals: operator new runs before and
// after any dynamic initialisation.
thread_local long t_fail_at = -1;
thread_local long t_count = 0;
thread_local bool t_failed = false;
thread_local bool t_fail_all = false;  // every allocation from t_fail_at on
thread_local long t_spared = 0;        // armed allocations not failed (see InUnsafeCode)

// Code that cannot survive a failed allocation whatever the library does,
// located in this process: nlohmann::json's destructor (since 3.11 it frees a
// document through a std::vector stack, so it allocates inside a destructor
// and a failure ends in std::terminate) and Abseil's hash tables of 2022
// (abseil-cpp issues 1524 and 1581: an insertion whose allocation fails leaves
// a slot marked full that holds nothing, and the destructor frees garbage).
// The sweeps spare allocations made inside them and fail the next one
// instead; the header's "no abort" holds for everything else. The library's
// own tables that must survive (the template scope) use std containers.
struct CodeRange {
  uintptr_t begin, end;
};
std::vector<CodeRange>* g_unsafe_code = nullptr;

bool InUnsafeCode() {
  if (g_unsafe_code == nullptr) return false;
  bool found = false;
  _Unwind_Backtrace(
      [](_Unwind_Context* context, void* arg) -> _Unwind_Reason_Code {
        const uintptr_t pc = _Unwind_GetIP(context);
        for (const CodeRange& r : *g_unsafe_code) {
          if (pc >= r.begin && pc < r.end) {
            *static_cast<bool*>(arg) = true;
            return _URC_END_OF_STACK;
          }
        }
        return _URC_NO_REASON;
      },
      &found);
  return found;
}

void* Allocate(size_t n) {
  if (t_fail_at >= 0 && (t_count++ == t_fail_at || (t_fail_all && t_count > t_fail_at))) {
    if (InUnsafeCode()) {
      ++t_spared;
      if (!t_fail_all) ++t_fail_at;
      if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
      throw std::bad_alloc();
    }
    t_failed = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(size_t n) { return Allocate(n); }
void* operator new[](size_t n) { return Allocate(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return Allocate(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using strata_capi_test::LastError;

const fs::path kDemoDir = strata_capi_test::DemoDir();

// Finds the code of InUnsafeCode in libstrata's symbol table (`nm -C -S`),
// relocated to where the library is loaded.
void FindUnsafeCode() {
  if (g_unsafe_code != nullptr) return;
  Dl_info info;
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&strata_version_string), &info), 0);
  const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  auto* ranges = new std::vector<CodeRange>;
  const std::string command = "nm -C -S --defined-only '" + std::string(STRATA_LIBRARY_FILE) + "'";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  int json = 0, tables = 0;
  std::string line;
  char chunk[4096];
  while (std::fgets(chunk, sizeof chunk, pipe) != nullptr) {
    line += chunk;
    if (line.back() != '\n') continue;  // demangled names can be long
    const bool is_json = line.find("::json_value::destroy(") != std::string::npos;
    const bool is_table = line.find("container_internal::raw_hash_set<") != std::string::npos;
    if (is_json || is_table) {
      std::istringstream fields(line);
      std::string address, size, type;
      if (fields >> address >> size >> type && (type == "t" || type == "T" || type == "W" || type == "w")) {
        const uintptr_t begin = base + std::stoull(address, nullptr, 16);
        ranges->push_back({begin, begin + std::stoull(size, nullptr, 16)});
        json += is_json;
        tables += is_table;
      }
    }
    line.clear();
  }
  pclose(pipe);
  ASSERT_GT(json, 0) << "no json_value::destroy in the symbols of " << STRATA_LIBRARY_FILE;
  g_unsafe_code = ranges;
  std::printf("sparing %d json destructors and %d hash-table functions\n", json, tables);
}

// How many allocations `call` makes on this thread.
long CountAllocations(const std::function<strata_status()>& call, strata_status* status) {
  t_count = 0;
  t_fail_at = std::numeric_limits<long>::max();
  *status = call();
  t_fail_at = -1;
  return t_count;
}

struct SweepResult {
  long allocations = 0;  // made by the call when none fails
  int failed_calls = 0;  // of the swept ones, those that returned an error
};

// Fails each allocation of `call` in turn (all of the first 200, then a
// stride that keeps a sweep near 400 calls). `prepare` runs before each call
// and `cleanup` after it (neither armed): they make and release what the call
// needs and what it made. `doing` is the start of what the message must say.
SweepResult Sweep(const char* fn, const std::function<void()>& prepare, const std::function<strata_status()>& call,
                  const std::function<void(strata_status)>& cleanup) {
  SweepResult result;
  t_spared = 0;
  prepare();
  strata_status st;
  result.allocations = CountAllocations(call, &st);
  EXPECT_EQ(st, STRATA_OK) << fn << " without failures: " << LastError();
  cleanup(st);
  const long stride = std::max<long>(1, (result.allocations - 200) / 200);
  for (long n = 0; n < result.allocations; n += n < 200 ? 1 : stride) {
    prepare();
    t_count = 0;
    t_failed = false;
    t_fail_at = n;
    const strata_status s = call();
    t_fail_at = -1;
    const std::string message = LastError();
    SCOPED_TRACE(testing::Message() << fn << " with allocation " << n << " of " << result.allocations
                                    << " failing: " << message);
    EXPECT_NE(s & 0xff, STRATA_ERR_INTERNAL);
    if (t_failed && s != STRATA_OK) {
      ++result.failed_calls;
      EXPECT_EQ(s, STRATA_ERR_OUT_OF_MEMORY);
      EXPECT_THAT(message, StartsWith(std::string(fn) + ": out of memory while "));
    }
    cleanup(s);
  }
  std::printf("%s: %ld allocations, %d failed calls swept, %ld spared in third-party code\n", fn,
              result.allocations, result.failed_calls, t_spared);
  return result;
}

class AllocFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kDemoDir / "config.json")) << "fixture missing: " << kDemoDir;
    FindUnsafeCode();
    strata_engine_params ep;
    strata_engine_params_init(&ep);
    ep.num_threads = 1;
    ASSERT_EQ(strata_engine_create(&ep, &engine_), STRATA_OK) << LastError();
    strata_model_params_init(&model_params_);
    model_params_.device = STRATA_DEVICE_CPU;
    ASSERT_EQ(strata_model_load(engine_, kDemoDir.c_str(), &model_params_, &model_), STRATA_OK) << LastError();
    ASSERT_EQ(strata_model_open_tokenizer(model_, &tokenizer_), STRATA_OK) << LastError();
  }
  void TearDown() override {
    strata_tokenizer_destroy(tokenizer_);
    strata_model_destroy(model_);
    EXPECT_EQ(strata_engine_destroy(engine_), STRATA_OK) << LastError();
  }

  strata_session* NewSession(int64_t context = 64) {
    strata_session* s = nullptr;
    strata_session_params sp;
    strata_session_params_init(&sp);
    sp.max_context_tokens = context;
    EXPECT_EQ(strata_session_create(model_, &sp, &s), STRATA_OK) << LastError();
    return s;
  }

  strata_engine* engine_ = nullptr;
  strata_model* model_ = nullptr;
  strata_tokenizer* tokenizer_ = nullptr;
  strata_model_params model_params_;
};

TEST_F(AllocFailureTest, EngineCreate) {
  strata_engine* e = nullptr;
  strata_engine_params ep;
  strata_engine_params_init(&ep);
  ep.num_threads = 2;
  ep.options = "scheduler.prefill_chunk_tokens=128";
  const SweepResult r = Sweep(
      "strata_engine_create", [] {}, [&] { return strata_engine_create(&ep, &e); },
      [&](strata_status s) {
        if (s == STRATA_OK) {
          EXPECT_EQ(strata_engine_destroy(e), STRATA_OK);
        } else {
          EXPECT_EQ(e, nullptr);
        }
      });
  // The library's allocations reach this executable's operator new.
  EXPECT_GT(r.allocations, 0);
  EXPECT_EQ(r.failed_calls, r.allocations);
}

TEST_F(AllocFailureTest, ModelLoadNamesWeightsOrTokenizer) {
  strata_model* m = nullptr;
  bool saw_weights = false, saw_tokenizer = false;
  Sweep(
      "strata_model_load", [] {}, [&] { return strata_model_load(engine_, kDemoDir.c_str(), &model_params_, &m); },
      [&](strata_status s) {
        const std::string message = LastError();
        saw_weights |= message.find("while loading the model's weights") != std::string::npos;
        saw_tokenizer |= message.find("while reading the model's tokenizer files") != std::string::npos ||
                         message.find("while loading the tokenizer and chat template of") != std::string::npos;
        if (s == STRATA_OK) {
          EXPECT_EQ(strata_model_destroy(m), STRATA_OK);
        } else {
          EXPECT_EQ(m, nullptr);
        }
      });
  EXPECT_TRUE(saw_weights);
  EXPECT_TRUE(saw_tokenizer);
}

TEST_F(AllocFailureTest, SessionCreateAndFork) {
  strata_session* s = nullptr;
  Sweep(
      "strata_session_create", [] {}, [&] { return strata_session_create(model_, nullptr, &s); },
      [&](strata_status st) {
        if (st == STRATA_OK) {
          EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
        } else {
          EXPECT_EQ(s, nullptr);
        }
      });
  strata_session* base = NewSession();
  const int32_t prompt[] = {1, 2, 3};
  ASSERT_EQ(strata_session_append_tokens(base, prompt, 3), STRATA_OK) << LastError();
  strata_session* fork = nullptr;
  Sweep(
      "strata_session_fork", [] {}, [&] { return strata_session_fork(base, &fork); },
      [&](strata_status st) {
        if (st == STRATA_OK) {
          EXPECT_EQ(strata_session_destroy(fork), STRATA_OK);
        } else {
          EXPECT_EQ(fork, nullptr);
        }
      });
  uint64_t mark = 0;
  Sweep(
      "strata_session_mark", [] {}, [&] { return strata_session_mark(base, &mark); },
      [&](strata_status st) {
        if (st == STRATA_OK) EXPECT_EQ(strata_session_release_mark(base, mark), STRATA_OK);
      });
  EXPECT_EQ(strata_session_destroy(base), STRATA_OK);
}

TEST_F(AllocFailureTest, AppendTokensAndLogits) {
  strata_session* s = nullptr;
  const int32_t prompt[] = {1, 2, 3, 4};
  Sweep(
      "strata_session_append_tokens", [&] { s = NewSession(); },
      [&] { return strata_session_append_tokens(s, prompt, 4); },
      [&](strata_status st) {
        // A failed evaluation leaves the session needing a reset (documented); it is destroyed anyway.
        (void)st;
        EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
      });
  std::vector<float> logits(4096);
  Sweep(
      "strata_session_get_logits",
      [&] {
        s = NewSession();
        ASSERT_EQ(strata_session_append_tokens(s, prompt, 4), STRATA_OK);
      },
      [&] {
        size_t n = 0;
        return strata_session_get_logits(s, logits.data(), logits.size(), &n);
      },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
}

TEST_F(AllocFailureTest, SubmitAndGenerate) {
  strata_session* s = nullptr;
  strata_request* r = nullptr;
  const int32_t prompt[] = {1, 2, 3};
  strata_request_params rp;
  strata_request_params_init(&rp);
  rp.max_tokens = 2;
  const int32_t stops[] = {5, 6};
  rp.stop_tokens = stops;
  rp.num_stop_tokens = 2;
  Sweep(
      "strata_session_submit", [&] { s = NewSession(); },
      [&] { return strata_session_submit(s, prompt, 3, &rp, &r); },
      [&](strata_status st) {
        if (st == STRATA_OK) {
          EXPECT_EQ(strata_request_destroy(r), STRATA_OK);
        } else {
          EXPECT_EQ(r, nullptr);
        }
        EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
      });
  Sweep(
      "strata_session_generate", [&] { s = NewSession(); },
      [&] { return strata_session_generate(s, prompt, 3, &rp, nullptr); },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
}

TEST_F(AllocFailureTest, Tokenizer) {
  strata_tokenizer* t = nullptr;
  Sweep(
      "strata_tokenizer_open", [] {}, [&] { return strata_tokenizer_open(kDemoDir.c_str(), &t); },
      [&](strata_status st) {
        if (st == STRATA_OK) {
          EXPECT_EQ(strata_tokenizer_destroy(t), STRATA_OK);
        } else {
          EXPECT_EQ(t, nullptr);
        }
      });
  int32_t ids[256];
  size_t count = 0;
  Sweep(
      "strata_tokenizer_encode", [] {},
      [&] {
        return strata_tokenizer_encode(tokenizer_, "What is 12.5 * 8 - 3? Hello, world.", STRATA_NUL_TERMINATED,
                                       true, ids, 256, &count);
      },
      [](strata_status) {});
  const size_t n = count;
  char text[1024];
  size_t len = 0;
  Sweep(
      "strata_tokenizer_decode", [] {},
      [&] { return strata_tokenizer_decode(tokenizer_, ids, n, false, text, sizeof text, &len); },
      [](strata_status) {});
  const char* conversation =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],)"
      R"( "add_generation_prompt": true})";
  Sweep(
      "strata_tokenizer_render_chat", [] {},
      [&] {
        return strata_tokenizer_render_chat(tokenizer_, conversation, STRATA_NUL_TERMINATED, text, sizeof text,
                                            &len);
      },
      [](strata_status) {});
}

TEST_F(AllocFailureTest, Chat) {
  strata_session* s = nullptr;
  strata_tool tool;
  strata_tool_init(&tool);
  tool.name = "calculator";
  tool.description = "Evaluates arithmetic.";
  tool.parameters_json = R"({"type": "object", "properties": {"expression": {"type": "string"}}})";
  Sweep(
      "strata_session_add_tool", [&] { s = NewSession(); }, [&] { return strata_session_add_tool(s, &tool); },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
  strata_chat_message m;
  strata_chat_message_init(&m);
  m.role = STRATA_ROLE_ASSISTANT;
  m.content = "Let me compute.";
  m.tool_calls_json =
      R"([{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}])";
  Sweep(
      "strata_session_add_message", [&] { s = NewSession(); }, [&] { return strata_session_add_message(s, &m); },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
  strata_request* r = nullptr;
  strata_request_params rp;
  strata_request_params_init(&rp);
  rp.max_tokens = 1;
  strata_chat_params cp;
  strata_chat_params_init(&cp);
  const char* const stops[] = {"STOP"};
  cp.stop_strings = stops;
  cp.num_stop_strings = 1;
  cp.template_variables_json = R"({"enable_thinking": false})";
  auto with_user_message = [&] {
    s = NewSession(1024);  // the template spells the tool out
    strata_chat_message user;
    strata_chat_message_init(&user);
    user.content = "What is 1+1?";
    ASSERT_EQ(strata_session_add_tool(s, &tool), STRATA_OK) << LastError();
    ASSERT_EQ(strata_session_add_message(s, &user), STRATA_OK) << LastError();
  };
  Sweep(
      "strata_session_submit_chat", with_user_message, [&] { return strata_session_submit_chat(s, &rp, &cp, &r); },
      [&](strata_status st) {
        if (st == STRATA_OK) {
          EXPECT_EQ(strata_request_destroy(r), STRATA_OK);
        } else {
          EXPECT_EQ(r, nullptr);
        }
        EXPECT_EQ(strata_session_destroy(s), STRATA_OK);
      });
  Sweep(
      "strata_session_chat", with_user_message, [&] { return strata_session_chat(s, &rp, &cp, nullptr); },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
  char json[4096];
  size_t len = 0;
  Sweep(
      "strata_session_get_conversation", with_user_message,
      [&] { return strata_session_get_conversation(s, json, sizeof json, &len); },
      [&](strata_status) { EXPECT_EQ(strata_session_destroy(s), STRATA_OK); });
}

TEST_F(AllocFailureTest, NoMemoryEvenForTheMessage) {
  // Every allocation fails: the call still returns OUT_OF_MEMORY, with a
  // message built without allocating.
  strata_session* s = nullptr;
  t_count = 0;
  t_fail_at = 0;
  t_fail_all = true;
  const strata_status st = strata_session_create(model_, nullptr, &s);
  t_fail_at = -1;
  t_fail_all = false;
  EXPECT_EQ(st, STRATA_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(s, nullptr);
  EXPECT_STREQ(strata_last_error_message(), "strata_session_create: out of memory (no memory left to say more)");
  // The next call's message is its own again.
  EXPECT_EQ(strata_session_create(nullptr, nullptr, &s), STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(LastError(), StartsWith("strata_session_create: model is NULL"));
}

}  // namespace
