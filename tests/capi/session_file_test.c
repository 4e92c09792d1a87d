/* Saved sessions through the C ABI, in C99 against strata.h only, with the
 * demo model: strata_session_save / strata_session_load and their buffer
 * forms. A chat conversation with a tool, a mark and a generated turn is
 * saved; the session loaded from the file (into a second model of the same
 * directory, on a second engine) and from the buffer continue exactly as
 * the original does (the same tokens, logits and conversation); its tool
 * gets its callback back; damaged, truncated and missing files are refused
 * with DATA_LOSS / NOT_FOUND and nothing is created; bad arguments are
 * INVALID_ARGUMENT. On the GPU (STRATA_TEST_DEVICE=cuda) saving is not
 * there yet, and the program checks that every entry says UNSUPPORTED. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static strata_engine *g_engine = NULL;
static strata_model *g_model = NULL;
static const char *g_dir = NULL;
static char g_path[512];

static int32_t never_called(strata_request *request, const strata_event *call, void *user_data) {
  (void)request;
  (void)call;
  (void)user_data;
  return 0;
}

static strata_tool weather_tool(void) {
  strata_tool t;
  strata_tool_init(&t);
  t.name = "get_weather";
  t.description = "Weather of a city";
  t.parameters_json = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}";
  t.callback = never_called;
  return t;
}

static void add_message(strata_session *s, strata_role role, const char *content) {
  strata_chat_message m;
  strata_chat_message_init(&m);
  m.role = role;
  m.content = content;
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
}

/* One greedy chat turn of 12 tokens. */
static void chat_turn(strata_session *s) {
  strata_request_params p = test_greedy_params(12);
  strata_chat_params c;
  strata_finish_reason why = STRATA_FINISH_NONE;
  strata_chat_params_init(&c);
  CHECK_STATUS(strata_session_chat(s, &p, &c, &why), STRATA_OK);
}

/* The conversation JSON (malloc'd) and the logits after the history. */
typedef struct outcome {
  char *conversation;
  float *logits;
  size_t vocab;
  size_t tokens;
} outcome;

static outcome observe(strata_session *s) {
  outcome o;
  size_t len = 0;
  memset(&o, 0, sizeof o);
  CHECK_STATUS(strata_session_get_conversation(s, NULL, 0, &len), STRATA_OK);
  o.conversation = (char *)calloc(len + 1, 1);
  CHECK_STATUS(strata_session_get_conversation(s, o.conversation, len + 1, &len), STRATA_OK);
  CHECK_STATUS(strata_session_get_logits(s, NULL, 0, &o.vocab), STRATA_OK);
  o.logits = (float *)calloc(o.vocab, sizeof(float));
  CHECK_STATUS(strata_session_get_logits(s, o.logits, o.vocab, &o.vocab), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &o.tokens), STRATA_OK);
  return o;
}

static int same(const outcome *a, const outcome *b) {
  return a->tokens == b->tokens && a->vocab == b->vocab && strcmp(a->conversation, b->conversation) == 0 &&
         memcmp(a->logits, b->logits, a->vocab * sizeof(float)) == 0;
}

static void release(outcome *o) {
  free(o->conversation);
  free(o->logits);
}

/* The next turn on `s`: a user message and a generated reply. */
static outcome next_turn(strata_session *s) {
  add_message(s, STRATA_ROLE_USER, "And in Rome?");
  chat_turn(s);
  return observe(s);
}

static void test_round_trip(void) {
  strata_session *s = NULL, *from_file = NULL, *from_buffer = NULL, *other_engine_s = NULL;
  strata_engine *other_engine = NULL;
  strata_model *other_model = NULL;
  strata_tool t = weather_tool();
  uint64_t mark = 0;
  size_t size = 0, size2 = 0;
  unsigned char *bytes = NULL;
  outcome want, want_again, got;

  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_OK);
  add_message(s, STRATA_ROLE_SYSTEM, "You are terse.");
  add_message(s, STRATA_ROLE_USER, "Weather in Paris?");
  chat_turn(s);
  CHECK_STATUS(strata_session_mark(s, &mark), STRATA_OK);

  CHECK_STATUS(strata_session_save(s, g_path), STRATA_OK);
  CHECK_STATUS(strata_session_save_to_buffer(s, NULL, 0, &size), STRATA_OK);
  CHECK(size > 56);
  bytes = (unsigned char *)malloc(size);
  REQUIRE(bytes != NULL);
  CHECK_STATUS(strata_session_save_to_buffer(s, bytes, size - 1, &size2), STRATA_ERR_OUT_OF_RANGE);
  CHECK(size2 == size);
  CHECK_STATUS(strata_session_save_to_buffer(s, bytes, size, &size2), STRATA_OK);
  CHECK(size2 == size);

  want = next_turn(s);
  /* Back to the mark and the turn again: the turn checkpoint is gone (it was
   * past the mark), so the history is evaluated from the start. */
  CHECK_STATUS(strata_session_rollback(s, mark), STRATA_OK);
  want_again = next_turn(s);

  CHECK_STATUS(strata_session_load(g_model, g_path, NULL, &from_file), STRATA_OK);
  REQUIRE(from_file != NULL);
  got = next_turn(from_file);
  CHECK(same(&got, &want));
  release(&got);

  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size, NULL, &from_buffer), STRATA_OK);
  REQUIRE(from_buffer != NULL);
  /* The mark survived: the loaded session rolls back and replays as the
   * original did. */
  got = next_turn(from_buffer);
  CHECK(same(&got, &want));
  release(&got);
  CHECK_STATUS(strata_session_rollback(from_buffer, mark), STRATA_OK);
  got = next_turn(from_buffer);
  CHECK(same(&got, &want_again));
  release(&got);

  /* Another engine and another load of the same directory: the same model. */
  CHECK_STATUS(strata_engine_create(NULL, &other_engine), STRATA_OK);
  REQUIRE(other_engine != NULL);
  CHECK_STATUS(test_load_model(other_engine, g_dir, &other_model), STRATA_OK);
  REQUIRE(other_model != NULL);
  CHECK_STATUS(strata_session_load(other_model, g_path, NULL, &other_engine_s), STRATA_OK);
  REQUIRE(other_engine_s != NULL);
  got = next_turn(other_engine_s);
  CHECK(same(&got, &want));
  release(&got);

  /* The tool came back without its callback: the same definition attaches
   * one, another definition under its name is refused. */
  CHECK_STATUS(strata_session_add_tool(from_file, &t), STRATA_OK);
  CHECK_STATUS(strata_session_add_tool(from_file, &t), STRATA_ERR_ALREADY_EXISTS);
  t.description = "Something else";
  CHECK_STATUS(strata_session_add_tool(from_buffer, &t), STRATA_ERR_ALREADY_EXISTS);

  /* A context too small for the saved history. */
  {
    strata_session_params sp;
    strata_session *small = NULL;
    strata_session_params_init(&sp);
    sp.max_context_tokens = 4;
    CHECK_STATUS(strata_session_load(g_model, g_path, &sp, &small), STRATA_ERR_OUT_OF_RANGE);
    CHECK(small == NULL);
  }

  release(&want);
  release(&want_again);
  free(bytes);
  CHECK_STATUS(strata_session_destroy(other_engine_s), STRATA_OK);
  CHECK_STATUS(strata_model_destroy(other_model), STRATA_OK);
  CHECK_STATUS(strata_engine_destroy(other_engine), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(from_buffer), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(from_file), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

static void test_refusals(void) {
  strata_session *s = NULL, *loaded = (strata_session *)&g_engine;
  size_t size = 0, at;
  unsigned char *bytes = NULL;
  const size_t offsets[] = {0, 9, 17, 30, 60, 200};
  size_t i;

  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  add_message(s, STRATA_ROLE_USER, "Hello");
  chat_turn(s);
  CHECK_STATUS(strata_session_save_to_buffer(s, NULL, 0, &size), STRATA_OK);
  bytes = (unsigned char *)malloc(size);
  REQUIRE(bytes != NULL);
  CHECK_STATUS(strata_session_save_to_buffer(s, bytes, size, &size), STRATA_OK);

  /* A flipped byte anywhere: the header's checks or the checksum refuse it. */
  for (i = 0; i < sizeof offsets / sizeof offsets[0]; ++i) {
    at = offsets[i] < size ? offsets[i] : size - 1;
    bytes[at] ^= 0x40;
    loaded = (strata_session *)&g_engine;
    CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size, NULL, &loaded),
                 (at >= 8 && at < 12) ? STRATA_ERR_FAILED_PRECONDITION : STRATA_ERR_DATA_LOSS);
    CHECK(loaded == NULL);
    bytes[at] ^= 0x40;
  }
  at = size - 1;
  bytes[at] ^= 1;
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK(strstr(strata_last_error_message(), "SHA-256") != NULL);
  bytes[at] ^= 1;
  /* Truncated at several lengths, and empty. */
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size - 1, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, 56, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, 10, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, 0, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK(loaded == NULL);
  /* The intact bytes still load. */
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size, NULL, &loaded), STRATA_OK);
  CHECK_STATUS(strata_session_destroy(loaded), STRATA_OK);

  /* Files. */
  CHECK_STATUS(strata_session_load(g_model, "/nonexistent/session.bin", NULL, &loaded), STRATA_ERR_NOT_FOUND);
  CHECK(loaded == NULL);
  CHECK_STATUS(strata_session_save(s, "/nonexistent/dir/session.bin"), STRATA_ERR_NOT_FOUND);
  {
    FILE *f = fopen(g_path, "wb");
    REQUIRE(f != NULL);
    CHECK(fwrite(bytes, 1, size / 2, f) == size / 2);
    fclose(f);
  }
  CHECK_STATUS(strata_session_load(g_model, g_path, NULL, &loaded), STRATA_ERR_DATA_LOSS);
  CHECK(strstr(strata_last_error_message(), g_path) != NULL);

  /* Arguments. */
  CHECK_STATUS(strata_session_save(NULL, g_path), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_save(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_save_to_buffer(s, NULL, 0, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_save_to_buffer(s, NULL, 5, &size), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_load(NULL, g_path, NULL, &loaded), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_load(g_model, NULL, NULL, &loaded), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(loaded == NULL);
  CHECK_STATUS(strata_session_load(g_model, g_path, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, NULL, 4, NULL, &loaded), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, bytes, size, NULL, NULL), STRATA_ERR_INVALID_ARGUMENT);

  free(bytes);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

/* On the GPU sessions cannot be saved yet: every entry says so. */
static void test_gpu_unsupported(void) {
  strata_session *s = NULL, *loaded = NULL;
  size_t size = 0;
  const int32_t prompt[] = {1, 2, 3};
  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  CHECK_STATUS(strata_session_append_tokens(s, prompt, 3), STRATA_OK);
  CHECK_STATUS(strata_session_save(s, g_path), STRATA_ERR_UNSUPPORTED);
  CHECK(strstr(strata_last_error_message(), "cannot be saved") != NULL);
  CHECK_STATUS(strata_session_save_to_buffer(s, NULL, 0, &size), STRATA_ERR_UNSUPPORTED);
  CHECK_STATUS(strata_session_load_from_buffer(g_model, prompt, sizeof prompt, NULL, &loaded),
               STRATA_ERR_UNSUPPORTED);
  CHECK(loaded == NULL);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
}

int main(int argc, char **argv) {
  g_dir = test_model_dir(argc, argv);
  snprintf(g_path, sizeof g_path, "%s/strata_session_file_test_%ld.bin",
           getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp", (long)getpid());
  CHECK_STATUS(strata_engine_create(NULL, &g_engine), STRATA_OK);
  if (g_engine != NULL && test_load_model(g_engine, g_dir, &g_model) == STRATA_OK) {
    if (test_on_gpu()) {
      test_gpu_unsupported();
    } else {
      test_round_trip();
      test_refusals();
    }
    CHECK_STATUS(strata_model_destroy(g_model), STRATA_OK);
  } else {
    CHECK(!"the demo model did not load");
  }
  CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_OK);
  remove(g_path);
  return test_report();
}
