/* The ABI's own promises, in C99: size-aware _init() (a caller's older,
 * shorter struct is never written past its end), the struct layout queries
 * bindings use, and device selection through strata_model_params with what
 * strata_model_info reports about it.
 *
 * On a machine without a usable GPU (CI) STRATA_DEVICE_CUDA must fail with
 * STRATA_ERR_UNAVAILABLE and AUTO must fall back with a notice; with
 * STRATA_TEST_DEVICE=cuda (the gpu-labelled run) both must land on the GPU.
 * Usage: capi_abi_test [MODEL_DIR]. Prints "N passed, M failed". */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "strata/strata.h"
#include "test_util.h"

static const char *g_model_dir = NULL;
static strata_engine *g_engine = NULL;

/* strata_model_params as a program built against the first header had it:
 * the progress callback only. */
typedef struct old_model_params {
  uint32_t struct_size;
  strata_progress_callback progress_callback;
  void *progress_user_data;
} old_model_params;

/* strata_model_info before device and device_notice. */
typedef struct old_model_info {
  uint32_t struct_size;
  const char *architecture;
  int32_t num_layers;
  int32_t vocab_size;
  int32_t hidden_size;
  int32_t bos_token_id;
  int32_t eos_token_id;
  int64_t num_parameters;
  uint64_t parameter_bytes;
  int64_t max_context_tokens;
  uint64_t state_bytes_per_token;
  uint64_t state_bytes_per_sequence;
} old_model_info;

#define CANARY 0xA5

/* Nonzero when every byte of `p[0, n)` is CANARY. */
static int untouched(const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    if (p[i] != CANARY) return 0;
  }
  return 1;
}

static void test_init_sizes(void) {
  strata_engine_params ep;
  strata_model_params mp;
  strata_session_params sp;
  strata_request_params rp;
  strata_chat_message cm;
  strata_tool tool;
  strata_chat_params cp;
  strata_engine_params_init(&ep);
  strata_model_params_init(&mp);
  strata_session_params_init(&sp);
  strata_request_params_init(&rp);
  strata_chat_message_init(&cm);
  strata_tool_init(&tool);
  strata_chat_params_init(&cp);
  CHECK(ep.struct_size == sizeof ep && mp.struct_size == sizeof mp && sp.struct_size == sizeof sp);
  CHECK(rp.struct_size == sizeof rp && cm.struct_size == sizeof cm && tool.struct_size == sizeof tool);
  CHECK(cp.struct_size == sizeof cp);
  CHECK(mp.device == STRATA_DEVICE_AUTO && mp.device_index == 0 && mp.cuda_graphs && !mp.batch_invariant);
  CHECK(mp.gpu_memory_fraction > 0.5 && mp.gpu_memory_fraction <= 1.0 && mp.options == NULL);
  CHECK(cm.role == STRATA_ROLE_USER && cm.content_len == STRATA_NUL_TERMINATED);

  /* An older, shorter struct in a larger buffer: only its own bytes are written. */
  {
    union {
      old_model_params p;
      unsigned char bytes[sizeof(strata_model_params) + 16];
    } buf;
    memset(buf.bytes, CANARY, sizeof buf.bytes);
    CHECK_STATUS(strata_model_params_init_sized((strata_model_params *)(void *)&buf.p, sizeof buf.p), STRATA_OK);
    CHECK(buf.p.struct_size == sizeof(old_model_params));
    CHECK(buf.p.progress_callback == NULL && buf.p.progress_user_data == NULL);
    CHECK(untouched(buf.bytes + sizeof(old_model_params), sizeof buf.bytes - sizeof(old_model_params)));
  }
  /* Smaller than the first released layout: refused, nothing written. */
  {
    unsigned char bytes[sizeof(strata_request_params)];
    memset(bytes, CANARY, sizeof bytes);
    CHECK_STATUS(strata_request_params_init_sized((strata_request_params *)(void *)bytes, 8),
                 STRATA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(strata_last_error_message(), "strata_request_params") != NULL);
    CHECK(untouched(bytes, sizeof bytes));
  }
  CHECK_STATUS(strata_session_params_init_sized(NULL, sizeof sp), STRATA_ERR_INVALID_ARGUMENT);
}

static void test_old_structs_work(void) {
  old_model_params op;
  strata_model *m = NULL;
  union {
    old_model_info info;
    unsigned char bytes[sizeof(strata_model_info) + 16];
  } out;
  CHECK_STATUS(strata_model_params_init_sized((strata_model_params *)(void *)&op, sizeof op), STRATA_OK);
  /* An older program's params load with the defaults of the fields it lacks (device AUTO). */
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, (const strata_model_params *)(const void *)&op, &m),
               STRATA_OK);
  REQUIRE(m != NULL);
  memset(out.bytes, CANARY, sizeof out.bytes);
  out.info.struct_size = sizeof(old_model_info);
  CHECK_STATUS(strata_model_get_info(m, (strata_model_info *)(void *)&out.info), STRATA_OK);
  CHECK(out.info.struct_size == sizeof(old_model_info));
  CHECK(out.info.num_layers > 0 && strcmp(out.info.architecture, "kimi_linear") == 0);
  CHECK(untouched(out.bytes + sizeof(old_model_info), sizeof out.bytes - sizeof(old_model_info)));
  out.info.struct_size = 4;
  CHECK_STATUS(strata_model_get_info(m, (strata_model_info *)(void *)&out.info), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
}

static void test_layout_queries(void) {
  size_t v = 0;
  CHECK_STATUS(strata_abi_struct_size("strata_request_params", &v), STRATA_OK);
  CHECK(v == sizeof(strata_request_params));
  CHECK_STATUS(strata_abi_field_offset("strata_request_params", "max_context_tokens", &v), STRATA_OK);
  CHECK(v == offsetof(strata_request_params, max_context_tokens));
  CHECK_STATUS(strata_abi_field_offset("strata_event", "tool_arguments_len", &v), STRATA_OK);
  CHECK(v == offsetof(strata_event, tool_arguments_len));
  CHECK_STATUS(strata_abi_field_offset("strata_model_params", "options", &v), STRATA_OK);
  CHECK(v == offsetof(strata_model_params, options));
  CHECK_STATUS(strata_abi_struct_size("strata_latency", &v), STRATA_OK);
  CHECK(v == sizeof(strata_latency));
  CHECK_STATUS(strata_abi_struct_size("strata_nothing", &v), STRATA_ERR_NOT_FOUND);
  CHECK_STATUS(strata_abi_field_offset("strata_event", "no_such_field", &v), STRATA_ERR_NOT_FOUND);
  CHECK(strstr(strata_last_error_message(), "no_such_field") != NULL);
  CHECK_STATUS(strata_abi_field_offset(NULL, "x", &v), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_abi_struct_size("strata_event", NULL), STRATA_ERR_INVALID_ARGUMENT);
}

/* Loads with `device`; fills *out_info on success. */
static strata_status load_on(strata_device device, strata_model **out, strata_model_info *out_info) {
  strata_model_params mp;
  strata_status s;
  strata_model_params_init(&mp);
  mp.device = device;
  s = strata_model_load(g_engine, g_model_dir, &mp, out);
  if (s == STRATA_OK) {
    out_info->struct_size = sizeof *out_info;
    s = strata_model_get_info(*out, out_info);
  }
  return s;
}

/* Greedy tokens of one generation from `prompt`. */
static size_t greedy(strata_model *m, int32_t *out, size_t max) {
  strata_session *s = NULL;
  strata_request_params rp;
  strata_request *r = NULL;
  strata_event ev;
  size_t n = 0;
  static const int32_t prompt[] = {1, 17, 42, 99, 7, 3, 250, 11};
  if (strata_session_create(m, NULL, &s) != STRATA_OK) return 0;
  strata_request_params_init(&rp);
  rp.max_tokens = (int32_t)max;
  rp.stop_at_eos = false;
  if (strata_session_submit(s, prompt, sizeof prompt / sizeof prompt[0], &rp, &r) == STRATA_OK) {
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    while (strata_engine_poll_event(g_engine, &ev, 60000) == STRATA_OK) {
      if (ev.type == STRATA_EVENT_TOKEN && n < max) out[n++] = ev.token;
      if (ev.type == STRATA_EVENT_FINISHED) break;
    }
    strata_request_destroy(r);
  }
  strata_session_destroy(s);
  return n;
}

static void test_devices(void) {
  strata_model *cpu = NULL, *m = NULL;
  strata_model_info info;
  strata_model_params mp;
  int32_t want[12], got[12];
  size_t n_want, n_got;
  const int gpu = test_on_gpu();
  int gpu_usable;

  CHECK_STATUS(load_on(STRATA_DEVICE_CPU, &cpu, &info), STRATA_OK);
  REQUIRE(cpu != NULL);
  CHECK(strcmp(info.device, "cpu") == 0 && strcmp(info.device_notice, "") == 0);
  n_want = greedy(cpu, want, 12);
  CHECK(n_want == 12);

  /* AUTO: the GPU when usable, else the CPU with the reason; never an error. Where it lands decides what
     CUDA must do below (the gpu-labelled run insists that it is the GPU). */
  CHECK_STATUS(load_on(STRATA_DEVICE_AUTO, &m, &info), STRATA_OK);
  REQUIRE(m != NULL);
  gpu_usable = strncmp(info.device, "cuda:", 5) == 0;
  if (gpu) CHECK(gpu_usable);
  if (gpu_usable) {
    CHECK(strcmp(info.device_notice, "") == 0);
  } else {
    CHECK(strcmp(info.device, "cpu") == 0);
    CHECK(strncmp(info.device_notice, "device auto: ", 13) == 0 &&
          strstr(info.device_notice, "running on the CPU") != NULL);
    n_got = greedy(m, got, 12);
    CHECK(n_got == n_want && memcmp(got, want, n_want * sizeof want[0]) == 0);
  }
  CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
  m = NULL;

  /* CUDA is strict. */
  if (gpu_usable) {
    CHECK_STATUS(load_on(STRATA_DEVICE_CUDA, &m, &info), STRATA_OK);
    REQUIRE(m != NULL);
    CHECK(strncmp(info.device, "cuda:0 ", 7) == 0 && strcmp(info.device_notice, "") == 0);
    n_got = greedy(m, got, 12);
    CHECK(n_got == 12);
    printf("tokens on %s:", info.device);
    for (n_got = 0; n_got < 12; ++n_got) printf(" %d", (int)got[n_got]);
    printf("\n");
    CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
    m = NULL;
    /* A device ordinal that is not there. */
    strata_model_params_init(&mp);
    mp.device = STRATA_DEVICE_CUDA;
    mp.device_index = 64;
    CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_UNAVAILABLE);
    CHECK(m == NULL && strstr(strata_last_error_message(), "device index 64") != NULL);
  } else {
    CHECK_STATUS(load_on(STRATA_DEVICE_CUDA, &m, &info), STRATA_ERR_UNAVAILABLE);
    CHECK(m == NULL);
    CHECK(strstr(strata_last_error_message(), "CUDA requested but") != NULL);
  }

  /* Arguments out of range name the field. */
  strata_model_params_init(&mp);
  mp.device = 7;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "device") != NULL);
  strata_model_params_init(&mp);
  mp.device_index = -1;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  strata_model_params_init(&mp);
  mp.gpu_memory_fraction = 0;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "gpu_memory_fraction") != NULL);
  strata_model_params_init(&mp);
  mp.max_sequences = -2;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(m == NULL);

  /* Tuning options: checked on every device, reported where they apply (the GPU). A rolled-back kernel
     family computes what the default does (argmax margins of the demo model are checked by c_api_test;
     here the tokens must only be in the vocabulary). */
  strata_model_params_init(&mp);
  mp.device = test_device();
  mp.options = "moe.gem=mma";
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(m == NULL && strstr(strata_last_error_message(), "unknown key 'moe.gem'") != NULL);
  mp.options = "cuda.pdl=0,cuda.pdl=1";
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(m == NULL && strstr(strata_last_error_message(), "given twice") != NULL);
  mp.options = "cuda.pdl=0,rollback=moe+mla";
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_OK);
  REQUIRE(m != NULL);
  info.struct_size = sizeof info;
  CHECK_STATUS(strata_model_get_info(m, &info), STRATA_OK);
  if (strncmp(info.device, "cuda:", 5) == 0) {
    CHECK(strstr(info.tuning, "cuda.pdl=0") != NULL && strstr(info.tuning, "moe.gemm=mma") != NULL);
    n_got = greedy(m, got, 4);
    CHECK(n_got == 4);
  } else {
    CHECK(strcmp(info.tuning, "") == 0);
  }
  CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
  m = NULL;

  /* Dummy weights (benchmarks): the config's shapes with random weights; it runs. */
  strata_model_params_init(&mp);
  mp.device = test_device();
  mp.dummy_weights = true;
  mp.dummy_seed = 3;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_OK);
  REQUIRE(m != NULL);
  n_got = greedy(m, got, 4);
  CHECK(n_got == 4);
  CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
  CHECK_STATUS(strata_model_destroy(cpu), STRATA_OK);
}

/* Destroying a running request leaves its session idle at once; a request
 * that can never fit the memory budget is refused at submit. */
static void test_lifecycle(void) {
  strata_model *m = NULL;
  strata_session *s = NULL;
  strata_request *r = NULL;
  strata_request_params rp;
  strata_model_info info;
  strata_engine_params ep;
  strata_engine *tight = NULL;
  strata_session *ts = NULL;
  static const int32_t prompt[] = {1, 17, 42, 99, 7};
  int i, idle = 0;
  CHECK_STATUS(load_on(test_device(), &m, &info), STRATA_OK);
  REQUIRE(m != NULL);
  CHECK_STATUS(strata_session_create(m, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  strata_request_params_init(&rp);
  rp.max_tokens = 1000;
  rp.stop_at_eos = false;
  for (i = 0; i < 40; ++i) {
    CHECK_STATUS(strata_session_reset(s), STRATA_OK);
    if (strata_session_submit(s, prompt, 5, &rp, &r) != STRATA_OK) break;
    strata_request_destroy(r);
    /* Free now: no "running a request". */
    if (strata_session_reset(s) == STRATA_OK) ++idle;
  }
  CHECK(idle == 40);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);

  /* A budget of two tokens' state: a 5-token prompt plus 100 new tokens can never fit. */
  strata_engine_params_init(&ep);
  ep.memory_budget_bytes = info.state_bytes_per_sequence + 2 * info.state_bytes_per_token;
  CHECK_STATUS(strata_engine_create(&ep, &tight), STRATA_OK);
  REQUIRE(tight != NULL);
  {
    strata_model *tm = NULL;
    strata_model_params mp;
    strata_model_params_init(&mp);
    mp.device = test_device();
    CHECK_STATUS(strata_model_load(tight, g_model_dir, &mp, &tm), STRATA_OK);
    if (tm != NULL) {
      CHECK_STATUS(strata_session_create(tm, NULL, &ts), STRATA_OK);
      rp.max_tokens = 100;
      CHECK_STATUS(strata_session_submit(ts, prompt, 5, &rp, &r), STRATA_ERR_RESOURCE_EXHAUSTED);
      CHECK(r == NULL && strstr(strata_last_error_message(), "memory budget") != NULL);
      CHECK_STATUS(strata_session_destroy(ts), STRATA_OK);
      CHECK_STATUS(strata_model_destroy(tm), STRATA_OK);
    }
  }
  CHECK_STATUS(strata_engine_destroy(tight), STRATA_OK);
  CHECK_STATUS(strata_model_destroy(m), STRATA_OK);
}

int main(int argc, char **argv) {
  g_model_dir = test_model_dir(argc, argv);
  test_init_sizes();
  test_layout_queries();
  if (strata_engine_create(NULL, &g_engine) != STRATA_OK) {
    fprintf(stderr, "engine: %s\n", strata_last_error_message());
    return 1;
  }
  test_old_structs_work();
  test_devices();
  test_lifecycle();
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_OK);
  return test_report();
}
