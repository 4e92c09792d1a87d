/* The C ABI test, written in C99: drives libstrata through strata.h only, with
 * the demo kimi_linear model that the capi_make_demo_model fixture writes.
 * Covers versions, lifecycles, model info, prefill + logits, greedy and seeded
 * generation, stop rules, callbacks, submit/poll events, cancellation from
 * another thread, and misuse (NULL, double destroy, use after destroy, wrong
 * struct_size, bad token ids, missing directory, cancelled load).
 * Usage: capi_c_api_test [MODEL_DIR]. Prints "N passed, M failed". */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"
#include "test_util.h"

static const char *g_model_dir = NULL;
static strata_engine *g_engine = NULL;
static strata_model *g_model = NULL;
static int32_t g_vocab = 0;
static const int32_t kPrompt[] = {1, 17, 42, 99, 7};
#define PROMPT_LEN (sizeof(kPrompt) / sizeof(kPrompt[0]))

/* ---- helpers ------------------------------------------------------------ */

static strata_session *new_session(int64_t max_context) {
  strata_session_params sp;
  strata_session *s = NULL;
  strata_session_params_init(&sp);
  sp.max_context_tokens = max_context;
  if (strata_session_create(g_model, &sp, &s) != STRATA_OK) return NULL;
  return s;
}

static strata_request_params greedy_params(int32_t max_tokens, test_tokens *c) {
  strata_request_params p = test_greedy_params(max_tokens);
  p.token_callback = test_collect_token;
  p.user_data = c;
  return p;
}

/* Generates on a fresh session; returns the finish reason via *reason. */
static strata_status generate_fresh(const strata_request_params *p, strata_finish_reason *reason) {
  strata_session *s = new_session(0);
  strata_status st;
  if (s == NULL) return STRATA_ERR_INTERNAL;
  st = strata_session_generate(s, kPrompt, PROMPT_LEN, p, reason);
  strata_session_destroy(s);
  return st;
}

static int same_tokens(const test_tokens *a, const test_tokens *b) {
  return a->count == b->count && memcmp(a->tokens, b->tokens, a->count * sizeof(int32_t)) == 0;
}

/* ---- sections ----------------------------------------------------------- */

static void test_version(void) {
  CHECK(strata_abi_version() == STRATA_ABI_VERSION);
  CHECK(strata_version_number() == (uint32_t)STRATA_VERSION_NUMBER);
  CHECK(strcmp(strata_version_string(), STRATA_VERSION_STRING) == 0);
  CHECK(STRATA_AT_LEAST_VERSION(0, 1, 0));
  CHECK(strcmp(strata_status_string(STRATA_OK), "ok") == 0);
  CHECK(strcmp(strata_status_string(STRATA_ERR_MISUSE), "API misuse") == 0);
  CHECK(strcmp(strata_status_string(12345), "unknown status code") == 0);
  CHECK(strcmp(strata_finish_reason_string(STRATA_FINISH_MAX_TOKENS), "max_tokens") == 0);
  CHECK(strcmp(strata_finish_reason_string(STRATA_FINISH_TOOL_CALLS), "tool_calls") == 0);
  CHECK(strcmp(strata_finish_reason_string(STRATA_FINISH_NONE), "none") == 0);
  CHECK(strcmp(strata_finish_reason_string(12345), "unknown") == 0);
  CHECK(strcmp(strata_finish_reason_string(-1), "unknown") == 0);
}

static int g_log_messages = 0;
static void count_log(strata_log_level level, const char *message, void *user_data) {
  (void)level;
  (void)user_data;
  if (message != NULL && message[0] != '\0') g_log_messages++;
}

static void test_engine_params(void) {
  strata_engine *e = NULL;
  strata_engine_params p;
  struct {
    strata_engine_params p;
    uint64_t newer_field;
  } bigger;

  CHECK_STATUS(strata_engine_create(NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "strata_engine_create") != NULL);

  strata_engine_params_init(&p);
  CHECK(p.struct_size == sizeof(strata_engine_params));
  p.struct_size = 0;
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(e == NULL);
  CHECK(strstr(strata_last_error_message(), "struct_size") != NULL);
  p.struct_size = (uint32_t)offsetof(strata_engine_params, log_level); /* shorter than the first layout */
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);

  /* A newer caller's bigger struct works while the unknown tail is zero. */
  memset(&bigger, 0, sizeof bigger);
  strata_engine_params_init(&bigger.p);
  bigger.p.struct_size = sizeof bigger;
  bigger.p.num_threads = 1;
  bigger.newer_field = 7;
  CHECK_STATUS(strata_engine_create(&bigger.p, &e), STRATA_ERR_INVALID_ARGUMENT);
  bigger.newer_field = 0;
  CHECK_STATUS(strata_engine_create(&bigger.p, &e), STRATA_OK);
  CHECK(e != NULL);
  CHECK_STATUS(strata_engine_destroy(e), STRATA_OK);
  CHECK(strcmp(strata_last_error_message(), "") == 0);
  CHECK_STATUS(strata_engine_destroy(e), STRATA_ERR_MISUSE); /* double destroy */
  CHECK(strstr(strata_last_error_message(), "already destroyed") != NULL);
  CHECK_STATUS(strata_engine_destroy(NULL), STRATA_ERR_INVALID_ARGUMENT);

  strata_engine_params_init(&p);
  p.num_threads = -3;
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "num_threads") != NULL);
  strata_engine_params_init(&p);
  p.log_level = 9;
  CHECK_STATUS(strata_engine_create(&p, &e), STRATA_ERR_INVALID_ARGUMENT);
}

static void test_engine_create(void) {
  strata_engine_params p;
  strata_engine_params_init(&p);
  p.num_threads = 2;
  p.log_callback = count_log;
  p.log_level = STRATA_LOG_INFO;
  CHECK_STATUS(strata_engine_create(&p, &g_engine), STRATA_OK);
  CHECK(g_engine != NULL);
}

typedef struct progress_state {
  int calls;
  float last;
  int monotonic;
  int cancel_at_call; /* return false at this call (1-based); 0: never */
} progress_state;

static int on_progress(float fraction, void *user_data) {
  progress_state *ps = (progress_state *)user_data;
  ps->calls++;
  if (fraction < ps->last || fraction < 0.0f || fraction > 1.0f) ps->monotonic = 0;
  ps->last = fraction;
  return ps->cancel_at_call != 0 && ps->calls >= ps->cancel_at_call; /* nonzero cancels */
}

static void test_model_load(void) {
  strata_model *m = NULL;
  strata_model_params mp;
  progress_state ps;
  strata_model_info info;
  const char *missing = "/nonexistent/strata/model-dir";

  /* Missing directory: NOT_FOUND, message names the path. */
  CHECK_STATUS(strata_model_load(g_engine, missing, NULL, &m), STRATA_ERR_NOT_FOUND);
  CHECK(m == NULL);
  CHECK(strstr(strata_last_error_message(), missing) != NULL);
  CHECK_STATUS(strata_model_load(g_engine, NULL, NULL, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_load(NULL, g_model_dir, NULL, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  strata_model_params_init(&mp);
  mp.struct_size = 3;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_INVALID_ARGUMENT);

  /* Cancelled by the progress callback. */
  memset(&ps, 0, sizeof ps);
  ps.monotonic = 1;
  ps.cancel_at_call = 1;
  strata_model_params_init(&mp);
  mp.device = test_device();
  mp.progress_callback = on_progress;
  mp.progress_user_data = &ps;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &m), STRATA_ERR_CANCELLED);
  CHECK(m == NULL);
  CHECK(ps.calls >= 1);

  /* A real load with progress reports. */
  memset(&ps, 0, sizeof ps);
  ps.monotonic = 1;
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, &mp, &g_model), STRATA_OK);
  REQUIRE(g_model != NULL);
  CHECK(ps.calls >= 1);
  CHECK(ps.monotonic);
  CHECK(ps.last == 1.0f);
  CHECK(g_log_messages >= 1); /* "loaded ..." at INFO */

  memset(&info, 0, sizeof info);
  CHECK_STATUS(strata_model_get_info(g_model, &info), STRATA_ERR_INVALID_ARGUMENT); /* struct_size 0 */
  info.struct_size = sizeof info;
  CHECK_STATUS(strata_model_get_info(g_model, &info), STRATA_OK);
  CHECK(info.architecture != NULL && strcmp(info.architecture, "kimi_linear") == 0);
  CHECK(info.num_layers == 4);
  CHECK(info.vocab_size == 512);
  CHECK(info.hidden_size == 128);
  CHECK(info.bos_token_id == 1);
  CHECK(info.eos_token_id == 2);
  CHECK(info.num_parameters > 0);
  CHECK(info.parameter_bytes > 0);
  CHECK(info.max_context_tokens > 0);
  CHECK(info.state_bytes_per_token > 0 || info.state_bytes_per_sequence > 0);
  CHECK_STATUS(strata_model_get_info(NULL, &info), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_get_info(g_model, NULL), STRATA_ERR_INVALID_ARGUMENT);
  g_vocab = info.vocab_size;
}

static void test_append_and_logits(void) {
  strata_session *s = new_session(256);
  float *logits = NULL;
  float small[4];
  size_t count = 0, n = 0, i;
  int finite = 1;
  const int32_t bad_high[] = {3, 512};
  const int32_t bad_negative[] = {-1};
  REQUIRE(s != NULL);

  CHECK_STATUS(strata_session_get_logits(s, small, 4, &count), STRATA_ERR_OUT_OF_RANGE);
  CHECK_STATUS(strata_session_get_logits(s, NULL, 0, &count), STRATA_OK); /* size query */
  CHECK(count == (size_t)g_vocab);
  logits = (float *)malloc(count * sizeof(float));
  REQUIRE(logits != NULL);
  CHECK_STATUS(strata_session_get_logits(s, logits, count, NULL), STRATA_ERR_FAILED_PRECONDITION); /* empty */

  CHECK_STATUS(strata_session_append_tokens(s, kPrompt, PROMPT_LEN), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == PROMPT_LEN);
  CHECK_STATUS(strata_session_get_logits(s, logits, count, &count), STRATA_OK);
  for (i = 0; i < count; ++i) finite &= isfinite(logits[i]) ? 1 : 0;
  CHECK(finite);

  /* Bad token ids: OUT_OF_RANGE, the session is unchanged. */
  CHECK_STATUS(strata_session_append_tokens(s, bad_high, 2), STRATA_ERR_OUT_OF_RANGE);
  CHECK(strstr(strata_last_error_message(), "512") != NULL);
  CHECK_STATUS(strata_session_append_tokens(s, bad_negative, 1), STRATA_ERR_OUT_OF_RANGE);
  CHECK_STATUS(strata_session_append_tokens(s, NULL, 3), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_append_tokens(s, NULL, 0), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == PROMPT_LEN);

  CHECK_STATUS(strata_session_reset(s), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == 0);
  CHECK_STATUS(strata_session_get_num_tokens(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  free(logits);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static size_t argmax(const float *v, size_t n) {
  size_t i, best = 0;
  for (i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

static void test_greedy_generate(void) {
  test_tokens a, b;
  strata_request_params p;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_session *s1, *s2;
  float *l1, *l2;
  size_t i, n = 0;
  double max_diff = 0.0;
  int32_t history[PROMPT_LEN + 8];

  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  p = greedy_params(8, &a);
  CHECK_STATUS(generate_fresh(&p, &reason), STRATA_OK);
  CHECK(reason == STRATA_FINISH_MAX_TOKENS);
  CHECK(a.count == 8);
  p.user_data = &b;
  CHECK_STATUS(generate_fresh(&p, &reason), STRATA_OK);
  CHECK(same_tokens(&a, &b)); /* greedy is reproducible */

  /* The first greedy token is the argmax of the prompt's logits, and the logits
   * after a generation (pending token evaluated lazily) match a session that
   * appended the same history in one prefill. */
  s1 = new_session(0);
  s2 = new_session(0);
  REQUIRE(s1 != NULL && s2 != NULL);
  l1 = (float *)malloc((size_t)g_vocab * sizeof(float));
  l2 = (float *)malloc((size_t)g_vocab * sizeof(float));
  REQUIRE(l1 != NULL && l2 != NULL);
  CHECK_STATUS(strata_session_append_tokens(s2, kPrompt, PROMPT_LEN), STRATA_OK);
  CHECK_STATUS(strata_session_get_logits(s2, l2, (size_t)g_vocab, NULL), STRATA_OK);
  CHECK((int32_t)argmax(l2, (size_t)g_vocab) == a.tokens[0]);
  CHECK_STATUS(strata_session_reset(s2), STRATA_OK);

  memset(&b, 0, sizeof b);
  p.user_data = &b;
  CHECK_STATUS(strata_session_generate(s1, kPrompt, PROMPT_LEN, &p, NULL), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s1, &n), STRATA_OK);
  CHECK(n == PROMPT_LEN + 8);
  memcpy(history, kPrompt, sizeof kPrompt);
  memcpy(history + PROMPT_LEN, b.tokens, 8 * sizeof(int32_t));
  CHECK_STATUS(strata_session_append_tokens(s2, history, PROMPT_LEN + 8), STRATA_OK);
  CHECK_STATUS(strata_session_get_logits(s1, l1, (size_t)g_vocab, NULL), STRATA_OK);
  CHECK_STATUS(strata_session_get_logits(s2, l2, (size_t)g_vocab, NULL), STRATA_OK);
  for (i = 0; i < (size_t)g_vocab; ++i) {
    double d = fabs((double)l1[i] - (double)l2[i]);
    if (d > max_diff) max_diff = d;
  }
  if (!test_on_gpu()) {
    CHECK(max_diff < 1e-2); /* decode path vs chunked prefill path, fp32 */
    CHECK(argmax(l1, (size_t)g_vocab) == argmax(l2, (size_t)g_vocab));
  } else {
    /* bf16 activations: the decode kernels (absorbed MLA, recurrent KDA) and the prefill kernels round
       differently, and this random demo model has MoE routing near-ties (no margins, unlike the GPU parity
       fixtures), so one flipped expert can move a row's logits by O(1) and the recurrent state carries it on
       (docs/dev/journal/validation.md, 2026-12-01). Numerics are the parity tests' job; here both paths must give finite
       logits, and the same argmax where the prefill's top two are further apart than the paths differ. */
    double scale = 1, top1 = -1e30, top2 = -1e30;
    int finite = 1;
    for (i = 0; i < (size_t)g_vocab; ++i) {
      if (!isfinite(l1[i]) || !isfinite(l2[i])) finite = 0;
      if (fabs((double)l2[i]) > scale) scale = fabs((double)l2[i]);
      if (l2[i] > top1) {
        top2 = top1;
        top1 = l2[i];
      } else if (l2[i] > top2) {
        top2 = l2[i];
      }
    }
    printf("decode vs prefill on the GPU: max |diff| %.4g, max |logit| %.4g, top-2 gap %.4g\n", max_diff, scale,
           top1 - top2);
    CHECK(finite);
    if (top1 - top2 > 2 * max_diff) CHECK(argmax(l1, (size_t)g_vocab) == argmax(l2, (size_t)g_vocab));
  }
  free(l1);
  free(l2);
  CHECK_STATUS(strata_session_destroy(s1), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(s2), STRATA_OK);
}

static void test_seeded_sampling(void) {
  test_tokens a, b, c;
  strata_request_params p;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  p = greedy_params(16, &a);
  p.temperature = 1.5f;
  p.top_k = 100;
  p.top_p = 0.98f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.1f;
  p.frequency_penalty = 0.1f;
  p.seed = 1234;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_OK);
  p.user_data = &b;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_OK);
  CHECK(a.count == 16);
  CHECK(same_tokens(&a, &b)); /* same seed, same tokens */
  p.user_data = &c;
  p.seed = 99;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_OK);
  CHECK(!same_tokens(&a, &c)); /* another seed, another sample */

  /* Out-of-range sampling values are rejected before anything runs. */
  {
    strata_session *s = new_session(0);
    REQUIRE(s != NULL);
    p.top_p = 0.0f;
    CHECK_STATUS(strata_session_generate(s, kPrompt, PROMPT_LEN, &p, NULL), STRATA_ERR_INVALID_ARGUMENT);
    CHECK(strstr(strata_last_error_message(), "top_p") != NULL);
    CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
  }
  p.top_p = 1.0f;
  p.temperature = -1.0f;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_ERR_INVALID_ARGUMENT);
}

static void test_stop_rules(void) {
  test_tokens ref, c;
  strata_request_params p;
  strata_finish_reason reason;
  strata_session *s;
  size_t k, j, n = 0;
  int32_t stop[2];

  memset(&ref, 0, sizeof ref);
  p = greedy_params(8, &ref);
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_OK);
  REQUIRE(ref.count == 8);

  /* Stop token: the first position k >= 1 whose token did not occur before. */
  for (k = 1; k < 8; ++k) {
    int seen = 0;
    for (j = 0; j < k; ++j) seen |= ref.tokens[j] == ref.tokens[k];
    if (!seen) break;
  }
  CHECK(k < 8); /* some token differs from all before it, or the stop test below is vacuous */
  if (k < 8) {
    memset(&c, 0, sizeof c);
    p = greedy_params(8, &c);
    stop[0] = ref.tokens[k];
    stop[1] = (ref.tokens[k] + 1) % g_vocab;
    p.stop_tokens = stop;
    p.num_stop_tokens = 2;
    reason = STRATA_FINISH_NONE;
    CHECK_STATUS(generate_fresh(&p, &reason), STRATA_OK);
    CHECK(reason == STRATA_FINISH_STOP_TOKEN);
    CHECK(c.count <= k);
    CHECK(memcmp(c.tokens, ref.tokens, c.count * sizeof(int32_t)) == 0);
  }
  /* Bad stop token ids are OUT_OF_RANGE; NULL with a count is INVALID_ARGUMENT. */
  p = greedy_params(8, NULL);
  stop[0] = g_vocab;
  p.stop_tokens = stop;
  p.num_stop_tokens = 1;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_ERR_OUT_OF_RANGE);
  p.stop_tokens = NULL;
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_ERR_INVALID_ARGUMENT);

  /* max_tokens: exactly that many tokens, all joining the history. */
  s = new_session(0);
  REQUIRE(s != NULL);
  memset(&c, 0, sizeof c);
  p = greedy_params(5, &c);
  reason = STRATA_FINISH_NONE;
  CHECK_STATUS(strata_session_generate(s, kPrompt, PROMPT_LEN, &p, &reason), STRATA_OK);
  CHECK(reason == STRATA_FINISH_MAX_TOKENS);
  CHECK(c.count == 5);
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == PROMPT_LEN + 5);
  /* An empty prompt continues the conversation. */
  memset(&c, 0, sizeof c);
  CHECK_STATUS(strata_session_generate(s, NULL, 0, &p, &reason), STRATA_OK);
  CHECK(c.count == 5);
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == PROMPT_LEN + 10);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);

  /* The token callback stops the generation early. */
  memset(&c, 0, sizeof c);
  c.stop_after = 3;
  p = greedy_params(0, &c); /* 0: until the context is full */
  reason = STRATA_FINISH_NONE;
  CHECK_STATUS(generate_fresh(&p, &reason), STRATA_OK);
  CHECK(reason == STRATA_FINISH_CALLBACK);
  CHECK(c.count == 3);

  /* A context that fills up ends the request. */
  s = new_session(PROMPT_LEN + 4);
  REQUIRE(s != NULL);
  memset(&c, 0, sizeof c);
  p = greedy_params(0, &c);
  CHECK_STATUS(strata_session_generate(s, kPrompt, PROMPT_LEN, &p, &reason), STRATA_OK);
  CHECK(reason == STRATA_FINISH_CONTEXT_FULL);
  CHECK(c.count == 4);
  /* ... and a prompt that leaves no room is refused up front. */
  CHECK_STATUS(strata_session_reset(s), STRATA_OK);
  {
    int32_t long_prompt[PROMPT_LEN + 4];
    memset(long_prompt, 0, sizeof long_prompt);
    CHECK_STATUS(strata_session_generate(s, long_prompt, PROMPT_LEN + 4, &p, &reason), STRATA_ERR_OUT_OF_RANGE);
  }
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

/* Polls until the FINISHED event of `r`, collecting its tokens into `c`. */
static strata_event drain(strata_request *r, test_tokens *c) {
  strata_event ev;
  for (;;) {
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    if (strata_engine_poll_event(g_engine, &ev, -1) != STRATA_OK) break;
    if (ev.request != r) continue;
    if (ev.type == STRATA_EVENT_FINISHED) break;
    if (c->count < TEST_MAX_TOKENS) c->tokens[c->count] = ev.token;
    c->count++;
    if (ev.num_generated_tokens != c->count) c->numbering_errors++;
  }
  return ev;
}

static void test_submit_poll(void) {
  test_tokens ref_a, ref_b, a, b;
  strata_request_params p;
  strata_session *s1 = new_session(0), *s2 = new_session(0);
  strata_request *r1 = NULL, *r2 = NULL, *busy = NULL;
  strata_event ev;
  bool finished = false;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_status status = -1;
  int done1 = 0, done2 = 0;
  const int32_t other_prompt[] = {5, 6, 7};
  REQUIRE(s1 != NULL && s2 != NULL);

  memset(&ref_a, 0, sizeof ref_a);
  memset(&ref_b, 0, sizeof ref_b);
  p = greedy_params(6, &ref_a);
  CHECK_STATUS(generate_fresh(&p, NULL), STRATA_OK);
  {
    strata_session *t = new_session(0);
    REQUIRE(t != NULL);
    p.user_data = &ref_b;
    CHECK_STATUS(strata_session_generate(t, other_prompt, 3, &p, NULL), STRATA_OK);
    strata_session_destroy(t);
  }

  /* Two sessions at once: round-robin must not mix their states. */
  p = greedy_params(6, NULL);
  CHECK_STATUS(strata_session_submit(s1, kPrompt, PROMPT_LEN, &p, &r1), STRATA_OK);
  CHECK_STATUS(strata_session_submit(s2, other_prompt, 3, &p, &r2), STRATA_OK);
  REQUIRE(r1 != NULL && r2 != NULL);
  CHECK_STATUS(strata_session_submit(s1, kPrompt, PROMPT_LEN, &p, &busy), STRATA_ERR_FAILED_PRECONDITION);
  CHECK(busy == NULL);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  while (!(done1 && done2)) {
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, -1), STRATA_OK);
    if (ev.request == r1 || ev.request == r2) {
      test_tokens *c = ev.request == r1 ? &a : &b;
      int *done = ev.request == r1 ? &done1 : &done2;
      CHECK(!*done); /* nothing after FINISHED */
      if (ev.type == STRATA_EVENT_TOKEN) {
        if (c->count < TEST_MAX_TOKENS) c->tokens[c->count] = ev.token;
        c->count++;
        CHECK(ev.num_generated_tokens == c->count);
        CHECK(ev.status == STRATA_OK && ev.finish_reason == STRATA_FINISH_NONE);
      } else {
        CHECK(ev.type == STRATA_EVENT_FINISHED);
        CHECK(ev.status == STRATA_OK);
        CHECK(ev.finish_reason == STRATA_FINISH_MAX_TOKENS);
        *done = 1;
      }
    } else {
      CHECK(!"event of an unknown request");
      break;
    }
  }
  CHECK(same_tokens(&a, &ref_a));
  CHECK(same_tokens(&b, &ref_b));
  CHECK_STATUS(strata_request_get_status(r1, &finished, &reason, &status), STRATA_OK);
  CHECK(finished && reason == STRATA_FINISH_MAX_TOKENS && status == STRATA_OK);
  CHECK(strcmp(strata_request_error_message(r1), "") == 0);

  /* Nothing left: AGAIN, type NONE. */
  memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, 0), STRATA_AGAIN);
  CHECK(ev.type == STRATA_EVENT_NONE);
  CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, 5), STRATA_AGAIN);
  ev.struct_size = 0;
  CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, 0), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_engine_poll_event(g_engine, NULL, 0), STRATA_ERR_INVALID_ARGUMENT);

  /* The engine refuses to die while children live. */
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_ERR_FAILED_PRECONDITION);
  CHECK(strstr(strata_last_error_message(), "destroy them first") != NULL);

  CHECK_STATUS(strata_request_destroy(r1), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r2), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r1), STRATA_ERR_MISUSE); /* double destroy */
  CHECK_STATUS(strata_request_cancel(r2), STRATA_ERR_MISUSE);  /* use after destroy */
  CHECK(strstr(strata_request_error_message(r2), "request") != NULL);

  /* A destroyed request's events never show up. */
  CHECK_STATUS(strata_session_submit(s1, NULL, 0, &p, &r1), STRATA_OK);
  CHECK_STATUS(strata_request_destroy(r1), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(s1), STRATA_OK); /* waits for the scheduler to let go */
  memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, 0), STRATA_AGAIN);
  CHECK_STATUS(strata_session_destroy(s2), STRATA_OK);
}

typedef struct canceller {
  strata_request *request;
  strata_status result;
} canceller;

static void *cancel_thread(void *arg) {
  canceller *c = (canceller *)arg;
  c->result = strata_request_cancel(c->request);
  return NULL;
}

/* Token callback for generate: at the 2nd token, cancels from another thread
 * and waits for it, so the cancel lands while the generation runs. */
typedef struct generate_cancel {
  int tokens;
  canceller c;
  int thread_ok;
} generate_cancel;

static int cancel_from_thread_cb(strata_request *request, int32_t token, void *user_data) {
  generate_cancel *g = (generate_cancel *)user_data;
  (void)token;
  if (++g->tokens == 2) {
    pthread_t t;
    g->c.request = request;
    g->thread_ok = pthread_create(&t, NULL, cancel_thread, &g->c) == 0 && pthread_join(t, NULL) == 0;
  }
  return 0;
}

static int destroy_own_request_cb(strata_request *request, int32_t token, void *user_data) {
  strata_status *st = (strata_status *)user_data;
  (void)token;
  *st = strata_request_destroy(request);
  return 1;
}

static void test_cancel(void) {
  strata_session *s = new_session(4096);
  strata_request *r = NULL;
  strata_request_params p;
  strata_event ev;
  test_tokens c;
  canceller can;
  pthread_t t;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_status status = STRATA_OK;
  bool finished = false;
  generate_cancel g;
  strata_status own = STRATA_OK;
  REQUIRE(s != NULL);

  /* submit + poll: cancel from another thread after the first token. The
   * scheduler stays at most 64 tokens ahead of the poller, far from the
   * 4096-token context, so the request must end CANCELLED. */
  p = greedy_params(0, NULL);
  CHECK_STATUS(strata_session_submit(s, kPrompt, PROMPT_LEN, &p, &r), STRATA_OK);
  REQUIRE(r != NULL);
  do {
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, -1), STRATA_OK);
  } while (ev.request != r);
  CHECK(ev.type == STRATA_EVENT_TOKEN);
  can.request = r;
  can.result = -1;
  REQUIRE(pthread_create(&t, NULL, cancel_thread, &can) == 0);
  pthread_join(t, NULL);
  CHECK_STATUS(can.result, STRATA_OK);
  memset(&c, 0, sizeof c);
  c.tokens[0] = ev.token;
  c.count = 1; /* the token polled above */
  ev = drain(r, &c);
  CHECK(c.numbering_errors == 0);
  CHECK(ev.type == STRATA_EVENT_FINISHED);
  CHECK(ev.finish_reason == STRATA_FINISH_CANCELLED);
  CHECK(ev.status == STRATA_ERR_CANCELLED);
  CHECK(c.count < 4096 - PROMPT_LEN);
  CHECK_STATUS(strata_request_get_status(r, &finished, &reason, &status), STRATA_OK);
  CHECK(finished && reason == STRATA_FINISH_CANCELLED && status == STRATA_ERR_CANCELLED);
  CHECK(strstr(strata_request_error_message(r), "cancel") != NULL);
  CHECK_STATUS(strata_request_cancel(r), STRATA_OK); /* after the fact: harmless */
  CHECK_STATUS(strata_request_destroy(r), STRATA_OK);

  /* The session is usable again, and generate can be cancelled from another thread. */
  CHECK_STATUS(strata_session_reset(s), STRATA_OK);
  memset(&g, 0, sizeof g);
  p = greedy_params(0, NULL);
  p.token_callback = cancel_from_thread_cb;
  p.user_data = &g;
  reason = STRATA_FINISH_NONE;
  CHECK_STATUS(strata_session_generate(s, kPrompt, PROMPT_LEN, &p, &reason), STRATA_ERR_CANCELLED);
  CHECK(reason == STRATA_FINISH_CANCELLED);
  CHECK(g.thread_ok);
  CHECK_STATUS(g.c.result, STRATA_OK);
  CHECK(g.tokens >= 2);
  /* generate's request handle is retired when generate returns. */
  CHECK_STATUS(strata_request_cancel(g.c.request), STRATA_ERR_MISUSE);

  /* The callback may not destroy the library's request. */
  p.token_callback = destroy_own_request_cb;
  p.user_data = &own;
  CHECK_STATUS(strata_session_generate(s, NULL, 0, &p, &reason), STRATA_OK);
  CHECK(own == STRATA_ERR_MISUSE);
  CHECK(reason == STRATA_FINISH_CALLBACK);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static void test_misuse(void) {
  strata_session *s = NULL, *dead = NULL;
  strata_request *r = NULL;
  strata_session_params sp;
  strata_request_params p;
  strata_model_info info;
  strata_model *m2 = NULL;
  size_t n = 0;
  strata_finish_reason reason;

  /* NULL handles. */
  CHECK_STATUS(strata_session_create(NULL, NULL, &s), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_create(g_model, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_append_tokens(NULL, kPrompt, 1), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_get_logits(NULL, NULL, 0, &n), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_reset(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_submit(NULL, kPrompt, 1, NULL, &r), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_generate(NULL, kPrompt, 1, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_destroy(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_request_cancel(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_request_destroy(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_request_get_status(NULL, NULL, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_destroy(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_engine_poll_event(NULL, NULL, 0), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strata_request_error_message(NULL) != NULL);

  /* Wrong struct_size on input params. */
  strata_session_params_init(&sp);
  sp.struct_size = 0;
  CHECK_STATUS(strata_session_create(g_model, &sp, &s), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  strata_session_params_init(&sp);
  sp.max_context_tokens = -5;
  CHECK_STATUS(strata_session_create(g_model, &sp, &s), STRATA_ERR_INVALID_ARGUMENT);
  sp.max_context_tokens = (int64_t)1 << 40;
  CHECK_STATUS(strata_session_create(g_model, &sp, &s), STRATA_ERR_OUT_OF_RANGE);
  s = new_session(64);
  REQUIRE(s != NULL);
  strata_request_params_init(&p);
  p.struct_size = sizeof(strata_request_params) / 2;
  CHECK_STATUS(strata_session_submit(s, kPrompt, PROMPT_LEN, &p, &r), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(r == NULL);
  CHECK_STATUS(strata_session_generate(s, kPrompt, PROMPT_LEN, &p, NULL), STRATA_ERR_INVALID_ARGUMENT);
  /* Empty prompt on an empty session; bad prompt ids. */
  CHECK_STATUS(strata_session_submit(s, NULL, 0, NULL, &r), STRATA_ERR_INVALID_ARGUMENT);
  {
    const int32_t bad[] = {1, 100000};
    CHECK_STATUS(strata_session_generate(s, bad, 2, NULL, NULL), STRATA_ERR_OUT_OF_RANGE);
    CHECK(strstr(strata_last_error_message(), "prompt_tokens[1]") != NULL);
  }
  CHECK_STATUS(strata_session_get_num_tokens(s, &n), STRATA_OK);
  CHECK(n == 0);

  /* A handle of the wrong type is misuse, not a crash. */
  CHECK_STATUS(strata_session_reset((strata_session *)(void *)g_model), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_model_get_info((const strata_model *)(void *)s, &info), STRATA_ERR_MISUSE);

  /* Use after destroy and double destroy. */
  dead = new_session(0);
  REQUIRE(dead != NULL);
  CHECK_STATUS(strata_session_destroy(dead), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(dead), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_append_tokens(dead, kPrompt, 1), STRATA_ERR_MISUSE);
  CHECK(strstr(strata_last_error_message(), "already destroyed") != NULL);
  CHECK_STATUS(strata_session_submit(dead, kPrompt, 1, NULL, &r), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_generate(dead, kPrompt, 1, NULL, &reason), STRATA_ERR_MISUSE);

  /* A session outlives its model handle. */
  CHECK_STATUS(test_load_model(g_engine, g_model_dir, &m2), STRATA_OK);
  REQUIRE(m2 != NULL);
  {
    strata_session *orphan = NULL;
    test_tokens c;
    strata_request_params gp;
    memset(&c, 0, sizeof c);
    gp = greedy_params(3, &c);
    CHECK_STATUS(strata_session_create(m2, NULL, &orphan), STRATA_OK);
    CHECK_STATUS(strata_model_destroy(m2), STRATA_OK);
    CHECK_STATUS(strata_model_destroy(m2), STRATA_ERR_MISUSE);
    info.struct_size = sizeof info;
    CHECK_STATUS(strata_model_get_info(m2, &info), STRATA_ERR_MISUSE);
    CHECK_STATUS(strata_session_create(m2, NULL, &dead), STRATA_ERR_MISUSE);
    CHECK(dead == NULL);
    CHECK_STATUS(strata_session_generate(orphan, kPrompt, PROMPT_LEN, &gp, NULL), STRATA_OK);
    CHECK(c.count == 3);
    CHECK_STATUS(strata_session_destroy(orphan), STRATA_OK);
  }
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static void test_teardown(void) {
  CHECK_STATUS(strata_model_destroy(g_model), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_model_load(g_engine, g_model_dir, NULL, &g_model), STRATA_ERR_MISUSE);
  CHECK(g_model == NULL);
}

int main(int argc, char **argv) {
  g_model_dir = test_model_dir(argc, argv);
  printf("model directory: %s\n", g_model_dir);
  test_version();
  test_engine_params();
  test_engine_create();
  if (g_engine != NULL) {
    test_model_load();
    if (g_model != NULL) {
      test_append_and_logits();
      test_greedy_generate();
      test_seeded_sampling();
      test_stop_rules();
      test_submit_poll();
      test_cancel();
      test_misuse();
      test_teardown();
    }
  }
  return test_report();
}
