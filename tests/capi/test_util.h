/* The C ABI tests' shared scaffolding (C99, header-only: each test is one
 * program): pass/fail counters safe across threads, CHECK/CHECK_STATUS/
 * REQUIRE (every failure prints strata_last_error_message()), the closing
 * "N passed, M failed" line, the model directory and the device the tests
 * load models on, greedy request params and a token collector.
 *
 * STRATA_TEST_DEVICE=cpu|auto|cuda picks the device (default cpu); ctest runs
 * the same programs again with cuda under the label gpu on a GPU machine. */
#ifndef STRATA_TESTS_CAPI_TEST_UTIL_H_
#define STRATA_TESTS_CAPI_TEST_UTIL_H_

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"

static int g_passed = 0;
static int g_failed = 0;
/* The stress test checks from eight threads at once. */
static pthread_mutex_t g_counts_mu = PTHREAD_MUTEX_INITIALIZER;

/* Counts one check; a failure prints `what` (already formatted) and the
 * thread's last error message. */
static inline void test_record(int ok, const char *file, int line, const char *what) {
  pthread_mutex_lock(&g_counts_mu);
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "%s:%d: %s\n  last error: %s\n", file, line, what, strata_last_error_message());
  }
  pthread_mutex_unlock(&g_counts_mu);
}

#define CHECK(cond) test_record((cond) != 0, __FILE__, __LINE__, "CHECK failed: " #cond)

/* CHECK that `expr` returns `want`, naming both statuses when it does not. */
#define CHECK_STATUS(expr, want)                                                             \
  do {                                                                                       \
    strata_status got_ = (expr);                                                             \
    char what_[512];                                                                         \
    snprintf(what_, sizeof what_, "%s\n  returned %d (%s), expected %d (%s)", #expr, (int)got_, \
             strata_status_string(got_), (int)(want), strata_status_string(want));           \
    test_record(got_ == (want), __FILE__, __LINE__, what_);                                  \
  } while (0)

/* Gives up on the rest of a section when a handle it needs did not come. `cond` is evaluated twice: no side
 * effects in it. */
#define REQUIRE(cond)                                                                 \
  do {                                                                                \
    CHECK(cond);                                                                      \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: cannot continue this section\n", __FILE__, __LINE__); \
      return;                                                                         \
    }                                                                                 \
  } while (0)

/* The device of STRATA_TEST_DEVICE (cpu when unset or unknown). */
static inline strata_device test_device(void) {
  const char *d = getenv("STRATA_TEST_DEVICE");
  if (d != NULL && strcmp(d, "cuda") == 0) return STRATA_DEVICE_CUDA;
  if (d != NULL && strcmp(d, "auto") == 0) return STRATA_DEVICE_AUTO;
  return STRATA_DEVICE_CPU;
}

/* Nonzero when the tests run on a GPU (their expectations differ there: device sampling). */
static inline int test_on_gpu(void) { return test_device() == STRATA_DEVICE_CUDA; }

/* strata_model_load() on the test device, with default params otherwise. */
static inline strata_status test_load_model(strata_engine *engine, const char *dir, strata_model **out) {
  strata_model_params mp;
  strata_model_params_init(&mp);
  mp.device = test_device();
  return strata_model_load(engine, dir, &mp, out);
}

/* The model directory: argv[1], else the demo model the capi_make_demo_model
 * fixture writes. */
static inline const char *test_model_dir(int argc, char **argv) {
  return argc > 1 ? argv[1] : STRATA_BINARY_DIR "/testdata/demo_kimi";
}

/* Greedy requests of `max_tokens` tokens that ignore EOS: the demo model's
 * random weights would otherwise make the lengths unpredictable. */
static inline strata_request_params test_greedy_params(int32_t max_tokens) {
  strata_request_params p;
  strata_request_params_init(&p);
  p.max_tokens = max_tokens;
  p.stop_at_eos = false;
  return p;
}

/* The tokens a request streamed, for its token callback. */
#define TEST_MAX_TOKENS 512
typedef struct test_tokens {
  int32_t tokens[TEST_MAX_TOKENS];
  size_t count;
  size_t stop_after;    /* return nonzero from the callback after this many tokens; 0: never */
  int numbering_errors; /* events whose num_generated_tokens was not the running count */
} test_tokens;

/* A strata_token_callback appending to the test_tokens in `user_data`. */
static inline int test_collect_token(strata_request *request, int32_t token, void *user_data) {
  test_tokens *c = (test_tokens *)user_data;
  (void)request;
  if (c->count < TEST_MAX_TOKENS) c->tokens[c->count] = token;
  c->count++;
  return c->stop_after != 0 && c->count >= c->stop_after;
}

/* Prints the closing line; the exit code fails on any failure or on no checks at all. */
static inline int test_report(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 && g_passed > 0 ? 0 : 1;
}

#endif /* STRATA_TESTS_CAPI_TEST_UTIL_H_ */
