/* Stress test of the serving engine through the C ABI, in C99: 8 host
 * threads drive 64 sessions at once on the demo model with random prompt
 * lengths, random generation lengths, cancellations (callback, cancel from
 * the owner, destroy while running), forks, marks and rollbacks, under a
 * memory budget small enough to force preemptions and with the prefix cache
 * on. Every uncancelled greedy generation of a reference prompt on a fresh
 * session must equal that prompt's output computed alone beforehand. Meant
 * to be run under ThreadSanitizer and AddressSanitizer (tools/sanitize.sh).
 * Usage: capi_stress_test [MODEL_DIR] [ROUNDS]. Prints "N passed, M failed". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"
#include "test_util.h"

#define THREADS 8
#define SESSIONS_PER_THREAD 8
#define REFS 4
#define REF_GEN 6
#define MAX_PROMPT 48

static const char *g_model_dir = NULL;
static strata_engine *g_engine = NULL;
static strata_model *g_model = NULL;
static int g_rounds = 8;
static int32_t g_ref_prompt[REFS][MAX_PROMPT];
static size_t g_ref_len[REFS];
static int32_t g_ref_out[REFS][REF_GEN];
static int g_stop_poller = 0; /* guarded by g_mu */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
/* The stress runs on the CPU wherever it runs (its budget is sized by the CPU state accounting). */
static strata_model_params g_model_params;
static long g_cancelled = 0, g_forks = 0, g_rollbacks = 0, g_checked = 0;

/* xorshift: each thread its own stream. */
static uint32_t next_rand(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *s = x;
  return x;
}

typedef struct stop_after {
  int count, limit;
} stop_after;

static int stop_cb(strata_request *r, int32_t token, void *ud) {
  stop_after *s = (stop_after *)ud;
  (void)r;
  (void)token;
  return ++s->count >= s->limit;
}

/* Generates reference prompt k on a fresh session and compares. */
static void check_reference(int k) {
  strata_session *s = NULL;
  strata_request_params p = test_greedy_params(REF_GEN);
  test_tokens c;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  memset(&c, 0, sizeof c);
  p.token_callback = test_collect_token;
  p.user_data = &c;
  CHECK(strata_session_create(g_model, NULL, &s) == STRATA_OK);
  if (s == NULL) return;
  CHECK(strata_session_generate(s, g_ref_prompt[k], g_ref_len[k], &p, &reason) == STRATA_OK);
  CHECK(c.count == REF_GEN && memcmp(c.tokens, g_ref_out[k], sizeof g_ref_out[k]) == 0);
  CHECK(strata_session_destroy(s) == STRATA_OK);
  pthread_mutex_lock(&g_mu);
  ++g_checked;
  pthread_mutex_unlock(&g_mu);
}

static void print_log(strata_log_level level, const char *message, void *user_data) {
  (void)user_data;
  fprintf(stderr, "[%d] %s\n", (int)level, message);
}

static void *poller(void *arg) {
  strata_event ev;
  (void)arg;
  for (;;) {
    int stop;
    pthread_mutex_lock(&g_mu);
    stop = g_stop_poller;
    pthread_mutex_unlock(&g_mu);
    if (stop) break;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    (void)strata_engine_poll_event(g_engine, &ev, 5); /* events of submitted requests: drained, unused */
  }
  return NULL;
}

static void *worker(void *arg) {
  uint32_t seed = 0x9E3779B9u * (uint32_t)((size_t)arg + 1);
  strata_session *sessions[SESSIONS_PER_THREAD];
  uint64_t marks[SESSIONS_PER_THREAD];
  int i, round;
  for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
    sessions[i] = NULL;
    marks[i] = 0;
    CHECK(strata_session_create(g_model, NULL, &sessions[i]) == STRATA_OK);
  }
  for (round = 0; round < g_rounds; ++round) {
    strata_request *reqs[SESSIONS_PER_THREAD];
    /* Submit on every session at once: 64 requests in flight overall. */
    for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
      int32_t prompt[MAX_PROMPT];
      size_t len = 1 + next_rand(&seed) % (MAX_PROMPT - 1), k;
      size_t have = 0;
      strata_request_params p = test_greedy_params((int32_t)(1 + next_rand(&seed) % 16));
      strata_status st;
      reqs[i] = NULL;
      if (sessions[i] == NULL) continue;
      (void)strata_session_get_num_tokens(sessions[i], &have);
      if (have + len > 160) {
        CHECK(strata_session_reset(sessions[i]) == STRATA_OK); /* forgets the marks too */
        marks[i] = 0;
      }
      for (k = 0; k < len; ++k) prompt[k] = (int32_t)(next_rand(&seed) % 500);
      /* Shared prefixes: half the prompts start like reference prompt 0. */
      if (next_rand(&seed) % 2 == 0) memcpy(prompt, g_ref_prompt[0], (len < g_ref_len[0] ? len : g_ref_len[0]) * sizeof(int32_t));
      p.priority = (int32_t)(next_rand(&seed) % 3);
      st = strata_session_submit(sessions[i], prompt, len, &p, &reqs[i]);
      CHECK(st == STRATA_OK);
    }
    /* Cancel some now (possibly mid-prefill), some by destroying the handle. */
    for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
      uint32_t what = next_rand(&seed) % 8;
      if (reqs[i] == NULL) continue;
      if (what == 0) {
        CHECK(strata_request_cancel(reqs[i]) == STRATA_OK);
        pthread_mutex_lock(&g_mu);
        ++g_cancelled;
        pthread_mutex_unlock(&g_mu);
      } else if (what == 1) {
        CHECK(strata_request_destroy(reqs[i]) == STRATA_OK); /* cancels and detaches */
        reqs[i] = NULL;
      }
    }
    /* Wait for the rest. */
    for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
      bool finished = 0;
      strata_finish_reason reason;
      strata_status status;
      if (reqs[i] == NULL) continue;
      for (;;) {
        CHECK(strata_request_get_status(reqs[i], &finished, &reason, &status) == STRATA_OK);
        if (finished) break;
        {
          strata_event ev;
          memset(&ev, 0, sizeof ev);
          ev.struct_size = sizeof ev;
          (void)strata_engine_poll_event(g_engine, &ev, 1);
        }
      }
      CHECK(status == STRATA_OK || status == STRATA_ERR_CANCELLED);
      CHECK(strata_request_destroy(reqs[i]) == STRATA_OK);
    }
    /* Forks, marks, rollbacks, blocking generations with a stopping callback. */
    for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
      uint32_t what = next_rand(&seed) % 6;
      strata_session *s = sessions[i];
      if (s == NULL) continue;
      if (what == 0) {
        strata_session *f = NULL;
        stop_after sa;
        strata_request_params p = test_greedy_params(12);
        sa.count = 0;
        sa.limit = 1 + (int)(next_rand(&seed) % 8);
        p.token_callback = stop_cb;
        p.user_data = &sa;
        CHECK(strata_session_fork(s, &f) == STRATA_OK);
        if (f != NULL) {
          int32_t tok = (int32_t)(next_rand(&seed) % 500);
          CHECK(strata_session_generate(f, &tok, 1, &p, NULL) == STRATA_OK);
          CHECK(strata_session_destroy(f) == STRATA_OK);
        }
        pthread_mutex_lock(&g_mu);
        ++g_forks;
        pthread_mutex_unlock(&g_mu);
      } else if (what == 1) {
        if (marks[i] != 0) CHECK(strata_session_release_mark(s, marks[i]) == STRATA_OK);
        CHECK(strata_session_mark(s, &marks[i]) == STRATA_OK);
      } else if (what == 2 && marks[i] != 0) {
        CHECK(strata_session_rollback(s, marks[i]) == STRATA_OK);
        pthread_mutex_lock(&g_mu);
        ++g_rollbacks;
        pthread_mutex_unlock(&g_mu);
      } else if (what == 3) {
        CHECK(strata_session_destroy(s) == STRATA_OK);
        sessions[i] = NULL;
        marks[i] = 0;
        CHECK(strata_session_create(g_model, NULL, &sessions[i]) == STRATA_OK);
      }
    }
    check_reference((int)(next_rand(&seed) % REFS));
  }
  for (i = 0; i < SESSIONS_PER_THREAD; ++i) {
    if (sessions[i] != NULL) CHECK(strata_session_destroy(sessions[i]) == STRATA_OK);
  }
  return NULL;
}

int main(int argc, char **argv) {
  strata_engine_params ep;
  pthread_t threads[THREADS], poll_thread;
  strata_metrics m;
  strata_model_info info;
  int k;
  size_t t;
  g_model_dir = test_model_dir(argc, argv);
  if (argc > 2) g_rounds = atoi(argv[2]);
  strata_model_params_init(&g_model_params);
  g_model_params.device = STRATA_DEVICE_CPU;

  /* References, alone, on an engine of their own. */
  strata_engine_params_init(&ep);
  ep.num_threads = 2;
  ep.prefix_cache_bytes = 0;
  if (strata_engine_create(&ep, &g_engine) != STRATA_OK ||
      strata_model_load(g_engine, g_model_dir, &g_model_params, &g_model) != STRATA_OK) {
    fprintf(stderr, "setup failed: %s\n", strata_last_error_message());
    return 1;
  }
  for (k = 0; k < REFS; ++k) {
    strata_session *s = NULL;
    strata_request_params p = test_greedy_params(REF_GEN);
    test_tokens c;
    memset(&c, 0, sizeof c);
    p.token_callback = test_collect_token;
    p.user_data = &c;
    g_ref_len[k] = (size_t)(5 + 13 * k);
    for (t = 0; t < g_ref_len[k]; ++t) g_ref_prompt[k][t] = (int32_t)((t * 37 + (size_t)k * 11 + 3) % 500);
    CHECK(strata_session_create(g_model, NULL, &s) == STRATA_OK);
    CHECK(strata_session_generate(s, g_ref_prompt[k], g_ref_len[k], &p, NULL) == STRATA_OK);
    CHECK(c.count == REF_GEN);
    memcpy(g_ref_out[k], c.tokens, sizeof g_ref_out[k]);
    CHECK(strata_session_destroy(s) == STRATA_OK);
  }
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(strata_model_get_info(g_model, &info) == STRATA_OK);
  CHECK(strata_model_destroy(g_model) == STRATA_OK);
  CHECK(strata_engine_destroy(g_engine) == STRATA_OK);

  /* The serving engine: small chunks, small cache blocks, a tight budget. */
  strata_engine_params_init(&ep);
  if (getenv("STRATA_STRESS_LOG") != NULL) {
    ep.log_callback = print_log;
    ep.log_level = STRATA_LOG_DEBUG;
  }
  ep.num_threads = 2;
  ep.options = "scheduler.prefill_chunk_tokens=24";
  ep.max_batch = 32;
  ep.prefix_block_tokens = 8;
  ep.prefix_cache_bytes = 256u << 10; /* well under the budget: pinned marks never crowd requests out */
  /* Running requests' states (sessions hold up to ~230 tokens) within about
     12 of those at once: the others wait or are preempted. */
  ep.memory_budget_bytes = 12 * (info.state_bytes_per_sequence + 230 * info.state_bytes_per_token);
  if (strata_engine_create(&ep, &g_engine) != STRATA_OK ||
      strata_model_load(g_engine, g_model_dir, &g_model_params, &g_model) != STRATA_OK) {
    fprintf(stderr, "setup failed: %s\n", strata_last_error_message());
    return 1;
  }
  pthread_create(&poll_thread, NULL, poller, NULL);
  for (k = 0; k < THREADS; ++k) pthread_create(&threads[k], NULL, worker, (void *)(size_t)k);
  for (k = 0; k < THREADS; ++k) pthread_join(threads[k], NULL);
  pthread_mutex_lock(&g_mu);
  g_stop_poller = 1;
  pthread_mutex_unlock(&g_mu);
  pthread_join(poll_thread, NULL);

  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  CHECK(strata_engine_get_metrics(g_engine, &m) == STRATA_OK);
  CHECK(m.requests_finished == m.requests_submitted);
  CHECK(m.state_swapped_bytes == 0);
  printf("requests %lld, generated %lld, preemptions %lld, prefix hit %lld/%lld tokens, mean batch %.1f, "
         "cancel calls %ld, forks %ld, rollbacks %ld, reference checks %ld\n",
         (long long)m.requests_submitted, (long long)m.generated_tokens, (long long)m.preemptions,
         (long long)m.prefix_hit_tokens, (long long)m.prefix_lookup_tokens,
         m.decode_steps > 0 ? (double)m.decode_rows / (double)m.decode_steps : 0.0, g_cancelled, g_forks,
         g_rollbacks, g_checked);
  CHECK(strata_model_destroy(g_model) == STRATA_OK);
  CHECK(strata_engine_destroy(g_engine) == STRATA_OK);
  return test_report();
}
