/* The C ABI tests' shared scaffolding (C99, header-only: each test is one
 * program): pass/fail counters, CHECK/CHECK_STATUS/REQUIRE, the closing
 * "N passed, M failed" line, and the device the tests load models on.
 *
 * STRATA_TEST_DEVICE=cpu|auto|cuda picks the device (default cpu); ctest runs
 * the same programs again with cuda under the label gpu on a GPU machine. */
#ifndef STRATA_TESTS_CAPI_TEST_UTIL_H_
#define STRATA_TESTS_CAPI_TEST_UTIL_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"

static int g_passed = 0;
static int g_failed = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (cond) {                                                                                \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__, __LINE__, #cond, \
              strata_last_error_message());                                                    \
    }                                                                                          \
  } while (0)

#define CHECK_STATUS(expr, want)                                                                   \
  do {                                                                                             \
    strata_status got_ = (expr);                                                                   \
    if (got_ == (want)) {                                                                          \
      ++g_passed;                                                                                  \
    } else {                                                                                       \
      ++g_failed;                                                                                  \
      fprintf(stderr, "%s:%d: %s\n  returned %d (%s), expected %d (%s)\n  last error: %s\n",        \
              __FILE__, __LINE__, #expr, (int)got_, strata_status_string(got_), (int)(want),        \
              strata_status_string(want), strata_last_error_message());                            \
    }                                                                                              \
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

/* Prints the closing line; the exit code fails on any failure or on no checks at all. */
static inline int test_report(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 && g_passed > 0 ? 0 : 1;
}

#endif /* STRATA_TESTS_CAPI_TEST_UTIL_H_ */
