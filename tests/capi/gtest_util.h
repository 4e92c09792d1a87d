// The scaffolding of the C ABI's GoogleTest programs (hostile_input,
// hostile_config, abi_walk, alloc_failure, cpp_wrapper), which drive
// libstrata through strata.h from C++: where the demo model is, the thread's
// last error message for failure output, whole-file reads and writes, and a
// fixture that owns one engine and the model and session a test opens on it.
// Header-only: these programs link the shared library alone, not the core.
#ifndef STRATA_TESTS_CAPI_GTEST_UTIL_H_
#define STRATA_TESTS_CAPI_GTEST_UTIL_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "strata/strata.h"

namespace strata_capi_test {

// The demo kimi_linear model the capi_make_demo_model fixture writes, and
// its variants beside it (`suffix`: "_no_tokenizer", "_no_template").
inline std::filesystem::path DemoDir(const std::string& suffix = "") {
  return std::filesystem::path(STRATA_BINARY_DIR) / "testdata" / ("demo_kimi" + suffix);
}

// For failure messages: what the last failed call on this thread said.
inline std::string LastError() { return strata_last_error_message(); }

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::filesystem::path& p, const std::string& data) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
}

// One engine on one thread (calls finish in a predictable order), created in
// SetUp; the model and session a test opens are destroyed with it.
class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    strata_engine_params ep;
    strata_engine_params_init(&ep);
    ep.num_threads = 1;
    ASSERT_EQ(strata_engine_create(&ep, &engine_), STRATA_OK) << LastError();
  }
  void TearDown() override {
    if (session_ != nullptr) strata_session_destroy(session_);
    if (model_ != nullptr) strata_model_destroy(model_);
    if (engine_ != nullptr) strata_engine_destroy(engine_);
  }

  // Loads `dir` (default params) and opens a session on it; false (with a
  // test failure) if either fails.
  bool Open(const std::filesystem::path& dir) {
    if (strata_model_load(engine_, dir.c_str(), nullptr, &model_) != STRATA_OK) {
      ADD_FAILURE() << LastError();
      return false;
    }
    if (strata_session_create(model_, nullptr, &session_) != STRATA_OK) {
      ADD_FAILURE() << LastError();
      return false;
    }
    return true;
  }

  strata_engine* engine_ = nullptr;
  strata_model* model_ = nullptr;
  strata_session* session_ = nullptr;
};

}  // namespace strata_capi_test

#endif  // STRATA_TESTS_CAPI_GTEST_UTIL_H_
