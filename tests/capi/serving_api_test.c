/* The serving part of the C ABI, in C99: the scheduling fields of the engine
 * and request params (old layouts still accepted), metrics (getter and
 * periodic callback), session fork / mark / rollback / release_mark with
 * their misuse cases (NULL, dead handles, unknown marks, busy sessions),
 * deadlines, and batched greedy generation equal to generation alone.
 * Usage: capi_serving_api_test [MODEL_DIR]. Prints "N passed, M failed". */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"
#include "test_util.h"

#define GEN 8
#define NPROMPTS 5

static const char *g_model_dir = NULL;
static strata_engine *g_engine = NULL;
static strata_model *g_model = NULL;
static int g_metrics_calls = 0;
static pthread_mutex_t g_metrics_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_metrics(const strata_metrics *m, void *user_data) {
  (void)user_data;
  pthread_mutex_lock(&g_metrics_mu);
  if (m != NULL && m->struct_size == sizeof(strata_metrics)) g_metrics_calls++;
  pthread_mutex_unlock(&g_metrics_mu);
}

/* Polls until `r` finishes, storing its tokens. */
static strata_status drain(strata_request *r, int32_t *tokens, size_t *count, strata_finish_reason *reason) {
  strata_event ev;
  *count = 0;
  for (;;) {
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    if (strata_engine_poll_event(g_engine, &ev, -1) != STRATA_OK) return STRATA_ERR_INTERNAL;
    if (ev.request != r) continue; /* only one request is in flight per drain here */
    if (ev.type == STRATA_EVENT_TOKEN && *count < GEN * 4) tokens[(*count)++] = ev.token;
    if (ev.type == STRATA_EVENT_FINISHED) {
      if (reason != NULL) *reason = ev.finish_reason;
      return ev.status;
    }
  }
}

/* A named statistic of g_engine, or -1 when it cannot be read. */
static double stat(const char *name) {
  double v = -1;
  if (strata_engine_get_stat(g_engine, name, &v) != STRATA_OK) return -1;
  return v;
}

static void test_params(void) {
  strata_engine_params p;
  strata_engine *e = NULL;
  strata_request_params rp;
  strata_engine_params_init(&p);
  CHECK(p.prefix_cache_bytes == 0); /* opt-in */
  CHECK(p.memory_budget_bytes == 0);
  CHECK(p.options == NULL); /* scheduler knobs: automatic, by device */
  p.options = "scheduler.prefill_chunk_tokens=-1";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(e == NULL);
  CHECK(strstr(strata_last_error_message(), "scheduler.prefill_chunk_tokens") != NULL);
  p.options = "scheduler.prefill_tokens_while_decoding=x";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "scheduler.prefill_tokens_while_decoding") != NULL);
  p.options = "scheduler.prefill_chunk=8";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "unknown key 'scheduler.prefill_chunk'") != NULL);
  p.options = "scheduler.prefill_chunk_tokens=8,scheduler.prefill_chunk_tokens=9";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "given twice") != NULL);
  p.options = " scheduler.prefill_chunk_tokens = 16 , scheduler.prefill_tokens_while_decoding=4,";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(e), STRATA_OK);
  /* Device sampling is a switch (what it saves is measured against 0). */
  p.options = "sampling.on_device=2";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "sampling.on_device") != NULL);
  p.options = "sampling.on_device=0";
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(e), STRATA_OK);
  /* A struct_size shorter than the released layout is refused, not read past. */
  strata_engine_params_init(&p);
  p.struct_size = (uint32_t)offsetof(strata_engine_params, options);
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(e == NULL);
  strata_request_params_init(&rp);
  CHECK(rp.priority == 0 && rp.deadline_ms == 0 && rp.max_context_tokens == 0);
}

static void test_setup(void) {
  strata_engine_params p;
  strata_engine_params_init(&p);
  p.num_threads = 2;
  p.options = "scheduler.prefill_chunk_tokens=8";
  p.prefix_block_tokens = 4;
  p.prefix_cache_bytes = 16u << 20;
  p.metrics_callback = on_metrics;
  p.metrics_interval_ms = 1;
  CHECK_STATUS(strata_engine_create(&p, &g_engine), STRATA_OK);
  REQUIRE(g_engine != NULL);
  CHECK_STATUS(test_load_model(g_engine, g_model_dir, &g_model), STRATA_OK);
}

static void prompt_of(int i, int32_t *out, size_t *len) {
  size_t n = (size_t)(3 + 7 * i), k;
  for (k = 0; k < n; ++k) out[k] = (int32_t)((k * 31 + (size_t)i * 7 + 5) % 500);
  *len = n;
}

static void test_batched_equals_alone(void) {
  int32_t prompt[64], alone[NPROMPTS][GEN * 4], got[GEN * 4];
  size_t len, n[NPROMPTS], count;
  strata_session *s[NPROMPTS];
  strata_request *r[NPROMPTS];
  strata_request_params gp = test_greedy_params(GEN);
  int i;
  for (i = 0; i < NPROMPTS; ++i) {
    strata_session *one = NULL;
    strata_request *req = NULL;
    prompt_of(i, prompt, &len);
    CHECK_STATUS(strata_session_create(g_model, NULL, &one), STRATA_OK);
    REQUIRE(one != NULL);
    CHECK_STATUS(strata_session_submit(one, prompt, len, &gp, &req), STRATA_OK);
    REQUIRE(req != NULL);
    CHECK_STATUS(drain(req, alone[i], &n[i], NULL), STRATA_OK);
    CHECK(n[i] == GEN);
    CHECK_STATUS(strata_request_destroy(req), STRATA_OK);
    CHECK_STATUS(strata_session_destroy(one), STRATA_OK);
  }
  for (i = 0; i < NPROMPTS; ++i) {
    s[i] = NULL;
    r[i] = NULL;
    prompt_of(i, prompt, &len);
    CHECK_STATUS(strata_session_create(g_model, NULL, &s[i]), STRATA_OK);
    REQUIRE(s[i] != NULL);
    CHECK_STATUS(strata_session_submit(s[i], prompt, len, &gp, &r[i]), STRATA_OK);
  }
  /* All five run concurrently; collect each one's tokens from the shared poll. */
  {
    int finished = 0, j;
    int32_t toks[NPROMPTS][GEN * 4];
    size_t cnt[NPROMPTS] = {0};
    strata_event ev;
    while (finished < NPROMPTS) {
      memset(&ev, 0, sizeof ev);
      ev.struct_size = sizeof ev;
      CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, -1), STRATA_OK);
      for (j = 0; j < NPROMPTS; ++j) {
        if (ev.request != r[j]) continue;
        if (ev.type == STRATA_EVENT_TOKEN && cnt[j] < GEN * 4) toks[j][cnt[j]++] = ev.token;
        if (ev.type == STRATA_EVENT_FINISHED) {
          CHECK(ev.status == STRATA_OK);
          ++finished;
        }
      }
    }
    for (j = 0; j < NPROMPTS; ++j) {
      CHECK(cnt[j] == n[j] && memcmp(toks[j], alone[j], n[j] * sizeof(int32_t)) == 0);
      CHECK_STATUS(strata_request_destroy(r[j]), STRATA_OK);
      CHECK_STATUS(strata_session_destroy(s[j]), STRATA_OK);
    }
  }
  (void)got;
  (void)count;
}

static void test_fork_mark_rollback(void) {
  int32_t prompt[64], first[GEN * 4], again[GEN * 4], forked[GEN * 4];
  size_t len, n1, n2, n3, before, tokens;
  strata_session *s = NULL, *f = NULL, *dead = NULL;
  strata_request *r = NULL;
  strata_request_params gp = test_greedy_params(GEN);
  uint64_t mark = 0;
  prompt_of(3, prompt, &len);
  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  CHECK_STATUS(strata_session_append_tokens(s, prompt, len), STRATA_OK);
  CHECK_STATUS(strata_session_mark(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_mark(NULL, &mark), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_mark(s, &mark), STRATA_OK);
  CHECK(mark > 0);
  CHECK_STATUS(strata_session_fork(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_fork(NULL, &f), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(f == NULL);
  CHECK_STATUS(strata_session_fork(s, &f), STRATA_OK);
  REQUIRE(f != NULL);

  CHECK_STATUS(strata_session_submit(s, NULL, 0, &gp, &r), STRATA_OK);
  REQUIRE(r != NULL);
  /* Busy: no fork, mark or rollback while a request runs. */
  {
    strata_session *busy_fork = NULL;
    uint64_t m2 = 0;
    strata_status st = strata_session_fork(s, &busy_fork);
    CHECK(st == STRATA_ERR_FAILED_PRECONDITION || st == STRATA_OK); /* OK only if it already finished */
    if (busy_fork != NULL) strata_session_destroy(busy_fork);
    st = strata_session_mark(s, &m2);
    CHECK(st == STRATA_ERR_FAILED_PRECONDITION || st == STRATA_OK);
  }
  CHECK_STATUS(drain(r, first, &n1, NULL), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);
  r = NULL;
  CHECK(n1 == GEN);

  /* The fork continues exactly like the original did. */
  CHECK_STATUS(strata_session_submit(f, NULL, 0, &gp, &r), STRATA_OK);
  REQUIRE(r != NULL);
  CHECK_STATUS(drain(r, forked, &n2, NULL), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);
  r = NULL;
  CHECK(n2 == n1 && memcmp(forked, first, n1 * sizeof(int32_t)) == 0);

  /* Rollback returns to the mark; generating again repeats the output. */
  CHECK_STATUS(strata_session_get_num_tokens(s, &before), STRATA_OK);
  CHECK(before == len + GEN);
  CHECK_STATUS(strata_session_rollback(s, mark), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &tokens), STRATA_OK);
  CHECK(tokens == len);
  CHECK_STATUS(strata_session_submit(s, NULL, 0, &gp, &r), STRATA_OK);
  REQUIRE(r != NULL);
  CHECK_STATUS(drain(r, again, &n3, NULL), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);
  CHECK(n3 == n1 && memcmp(again, first, n1 * sizeof(int32_t)) == 0);

  CHECK_STATUS(strata_session_rollback(s, mark + 1000), STRATA_ERR_NOT_FOUND);
  CHECK_STATUS(strata_session_rollback(NULL, mark), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_release_mark(s, mark), STRATA_OK);
  CHECK_STATUS(strata_session_release_mark(s, mark), STRATA_ERR_NOT_FOUND);
  CHECK_STATUS(strata_session_rollback(s, mark), STRATA_ERR_NOT_FOUND);
  /* The fork kept its own copy of the mark. */
  CHECK_STATUS(strata_session_rollback(f, mark), STRATA_OK);

  /* Dead and wrong-type handles. */
  CHECK_STATUS(strata_session_create(g_model, NULL, &dead), STRATA_OK);
  REQUIRE(dead != NULL);
  CHECK_STATUS(strata_session_destroy(dead), STRATA_OK);
  {
    strata_session *none = NULL;
    CHECK_STATUS(strata_session_fork(dead, &none), STRATA_ERR_MISUSE);
    CHECK(none == NULL);
  }
  CHECK_STATUS(strata_session_mark(dead, &mark), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_rollback(dead, 1), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_release_mark(dead, 1), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_mark((strata_session *)(void *)g_model, &mark), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_destroy(f), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(f), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static void test_deadline_and_context_limit(void) {
  int32_t prompt[64], toks[GEN * 4];
  size_t len, n;
  strata_session *s = NULL;
  strata_request *r = NULL;
  strata_request_params gp = test_greedy_params(0); /* until the context is full */
  strata_finish_reason reason = STRATA_FINISH_NONE;
  prompt_of(1, prompt, &len);
  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  gp.max_context_tokens = (int64_t)len + 5;
  CHECK_STATUS(strata_session_submit(s, prompt, len, &gp, &r), STRATA_OK);
  REQUIRE(r != NULL);
  CHECK_STATUS(drain(r, toks, &n, &reason), STRATA_OK);
  CHECK(reason == STRATA_FINISH_CONTEXT_FULL);
  CHECK(n == 5);
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);
  r = NULL;
  /* A deadline far shorter than 4000 tokens of decoding. */
  gp = test_greedy_params(4000);
  gp.deadline_ms = 1;
  CHECK_STATUS(strata_session_reset(s), STRATA_OK);
  CHECK_STATUS(strata_session_submit(s, prompt, len, &gp, &r), STRATA_OK);
  REQUIRE(r != NULL);
  CHECK_STATUS(drain(r, toks, &n, &reason), STRATA_ERR_DEADLINE_EXCEEDED);
  CHECK(reason == STRATA_FINISH_DEADLINE);
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);
  gp.deadline_ms = -1;
  CHECK_STATUS(strata_session_submit(s, prompt, len, &gp, &r), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static void test_metrics(void) {
  strata_metrics m;
  int calls;
  CHECK_STATUS(strata_engine_get_metrics(g_engine, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_engine_get_metrics(NULL, &m), STRATA_ERR_INVALID_ARGUMENT);
  m.struct_size = 4;
  CHECK_STATUS(strata_engine_get_metrics(g_engine, &m), STRATA_ERR_INVALID_ARGUMENT);
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  CHECK_STATUS(strata_engine_get_metrics(g_engine, &m), STRATA_OK);
  CHECK(m.struct_size == sizeof m);
  CHECK(m.requests_submitted >= 2 * NPROMPTS + 4);
  CHECK(m.requests_finished == m.requests_submitted); /* the refused deadline_ms = -1 never counted */
  CHECK(m.generated_tokens > 0);
  CHECK(m.ttft.count > 0 && m.ttft.p50_ms > 0 && m.ttft.p99_ms >= m.ttft.p50_ms);
  CHECK(m.tpot.count > 0);
  CHECK(m.queue.count > 0);
  CHECK(m.decode_rows > m.decode_steps); /* batching happened */
  CHECK(m.deadline_misses == 1);
  CHECK(m.prefix_lookup_tokens > 0);
  CHECK(m.state_resident_bytes == m.state_attention_bytes + m.state_recurrent_bytes);
  CHECK(m.state_swapped_bytes == 0);
  /* A CPU model samples on the host, a GPU model on the device (rows with penalties or min_p aside); the phases
     add up to some time. */
  CHECK(stat("sampling.device_rows") + stat("sampling.host_rows") == (double)m.decode_rows);
  if (!test_on_gpu()) CHECK(stat("sampling.device_rows") == 0);
  if (test_on_gpu()) CHECK(stat("sampling.device_rows") > 0);
  CHECK(stat("scheduler.iterations") > 0 && stat("scheduler.decode_ms") > 0 && stat("scheduler.prefill_ms") > 0 &&
        stat("scheduler.emit_ms") >= 0);
  if (!test_on_gpu()) CHECK(stat("scheduler.sample_ms") > 0);
  CHECK(stat("requests.submitted") >= (double)m.requests_submitted);
  CHECK(stat("prefix_cache.slot_evictions") >= 0);
  CHECK(stat("engine.compute_threads") == 2); /* num_threads of test_setup */
  {
    double v = -1;
    const char *name = NULL;
    size_t n = 0;
    CHECK_STATUS(strata_engine_get_stat(g_engine, "no.such.stat", &v), STRATA_ERR_NOT_FOUND);
    CHECK(strstr(strata_last_error_message(), "no.such.stat") != NULL);
    CHECK_STATUS(strata_engine_get_stat(g_engine, NULL, &v), STRATA_ERR_INVALID_ARGUMENT);
    /* Every listed name reads. */
    while (strata_engine_list_stats(g_engine, n, &name) == STRATA_OK) {
      CHECK(name != NULL);
      CHECK_STATUS(strata_engine_get_stat(g_engine, name, &v), STRATA_OK);
      ++n;
    }
    CHECK(name == NULL);
    CHECK(n >= 40);
    CHECK_STATUS(strata_engine_list_stats(g_engine, n, &name), STRATA_ERR_OUT_OF_RANGE);
  }
  /* A struct_size below the released layout is refused. */
  memset(&m, 0, sizeof m);
  m.struct_size = (uint32_t)offsetof(strata_metrics, state_active_bytes);
  CHECK_STATUS(strata_engine_get_metrics(g_engine, &m), STRATA_ERR_INVALID_ARGUMENT);
  pthread_mutex_lock(&g_metrics_mu);
  calls = g_metrics_calls;
  pthread_mutex_unlock(&g_metrics_mu);
  CHECK(calls > 0);
}

static void test_teardown(void) {
  CHECK_STATUS(strata_model_destroy(g_model), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_OK);
  CHECK_STATUS(strata_engine_get_metrics(g_engine, NULL), STRATA_ERR_MISUSE);
}

int main(int argc, char **argv) {
  g_model_dir = test_model_dir(argc, argv);
  test_params();
  test_setup();
  if (g_engine != NULL && g_model != NULL) {
    test_batched_equals_alone();
    test_fork_mark_rollback();
    test_deadline_and_context_limit();
    test_metrics();
    test_teardown();
  }
  return test_report();
}
