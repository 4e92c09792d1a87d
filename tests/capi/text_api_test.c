/* The text and chat C ABI, written in C99 against strata.h only, with the demo
 * model (random weights) and the demo tokenizer that the capi_make_demo_model
 * fixture writes. Covers tokenizer handles (open, from a model, encode and
 * decode with count queries and small buffers), rendering a conversation JSON
 * through the chat template, conversations (messages,
 * tools, conversation JSON), chat requests through both layers (submit/poll
 * events and the blocking call with callbacks), and misuse of every new
 * function: NULL arguments, wrong struct_size, destroyed handles, tool results
 * for requests that are not chat requests, a model without tokenizer files.
 * The deterministic tool loop (a model that really calls tools) is tested in
 * tests/unit/chat_loop_test.cc with a scripted architecture.
 * Usage: capi_text_api_test [MODEL_DIR]. Prints "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"
#include "test_util.h"


static char g_model_dir[1024];
static char g_bare_dir[1100];
static char g_no_template_dir[1100];
static strata_engine *g_engine = NULL;
static strata_model *g_model = NULL;

static const char kText[] = "Hello <|im_start|>world, caf\xc3\xa9 \xf0\x9f\x98\x80!";

static void test_tokenizer(void) {
  strata_tokenizer *tok = NULL;
  strata_tokenizer *from_model = NULL;
  int32_t ids[256];
  int32_t ids2[256];
  size_t n = 0, n2 = 0, len = 0;
  char text[256];
  int32_t vocab = 0;
  const int32_t bad_id = 100000;

  CHECK_STATUS(strata_tokenizer_open(g_model_dir, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_open(NULL, &tok), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(tok == NULL);
  CHECK_STATUS(strata_tokenizer_open(g_bare_dir, &tok), STRATA_ERR_NOT_FOUND);
  CHECK(tok == NULL);
  CHECK(strstr(strata_last_error_message(), "tokenizer") != NULL);
  CHECK_STATUS(strata_tokenizer_open(g_model_dir, &tok), STRATA_OK);
  REQUIRE(tok != NULL);
  CHECK_STATUS(strata_tokenizer_get_vocab_size(tok, &vocab), STRATA_OK);
  CHECK(vocab == 512);
  CHECK_STATUS(strata_tokenizer_get_vocab_size(tok, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_get_vocab_size(NULL, &vocab), STRATA_ERR_INVALID_ARGUMENT);

  /* Count query, then encode; a special-token literal is one id. */
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, STRATA_NUL_TERMINATED, true, NULL, 0, &n), STRATA_OK);
  CHECK(n > 5 && n < 256);
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, STRATA_NUL_TERMINATED, true, ids, 1, &n2),
               STRATA_ERR_OUT_OF_RANGE);
  CHECK(n2 == n);
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, STRATA_NUL_TERMINATED, true, ids, 256, &n2), STRATA_OK);
  CHECK(n2 == n);
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, strlen(kText), false, ids2, 256, &n2), STRATA_OK);
  CHECK(n2 == n && memcmp(ids, ids2, n * sizeof(int32_t)) == 0); /* no BOS/EOS configured */
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, 5, false, ids2, 256, &n2), STRATA_OK);
  CHECK(n2 >= 1 && n2 <= 5); /* "Hello" only: explicit length */
  CHECK_STATUS(strata_tokenizer_encode(tok, NULL, 0, true, ids2, 256, &n2), STRATA_OK);
  CHECK(n2 == 0);
  CHECK_STATUS(strata_tokenizer_encode(tok, NULL, 3, true, ids2, 256, &n2), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, 3, true, ids2, 256, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_encode(NULL, kText, 3, true, ids2, 256, &n2), STRATA_ERR_INVALID_ARGUMENT);

  /* Decode round trip, length query, buffer without room for the NUL. */
  CHECK_STATUS(strata_tokenizer_decode(tok, ids, n, false, NULL, 0, &len), STRATA_OK);
  CHECK(len == strlen(kText));
  CHECK_STATUS(strata_tokenizer_decode(tok, ids, n, false, text, len, &len), STRATA_ERR_OUT_OF_RANGE);
  CHECK_STATUS(strata_tokenizer_decode(tok, ids, n, false, text, sizeof(text), &len), STRATA_OK);
  CHECK(len == strlen(kText) && strcmp(text, kText) == 0);
  CHECK_STATUS(strata_tokenizer_decode(tok, ids, n, true, text, sizeof(text), &len), STRATA_OK);
  CHECK(strstr(text, "<|im_start|>") == NULL && strstr(text, "world") != NULL);
  CHECK_STATUS(strata_tokenizer_decode(tok, &bad_id, 1, false, text, sizeof(text), &len), STRATA_ERR_OUT_OF_RANGE);
  CHECK_STATUS(strata_tokenizer_decode(tok, NULL, 2, false, text, sizeof(text), &len), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_decode(tok, ids, n, false, text, sizeof(text), NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_decode(tok, NULL, 0, false, text, sizeof(text), &len), STRATA_OK);
  CHECK(len == 0 && text[0] == '\0');

  /* The model's tokenizer is the same, and outlives the model handle's use. */
  CHECK_STATUS(strata_model_open_tokenizer(g_model, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_open_tokenizer(NULL, &from_model), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_model_open_tokenizer(g_model, &from_model), STRATA_OK);
  REQUIRE(from_model != NULL);
  CHECK_STATUS(strata_tokenizer_encode(from_model, kText, STRATA_NUL_TERMINATED, true, ids2, 256, &n2), STRATA_OK);
  CHECK(n2 == n && memcmp(ids, ids2, n * sizeof(int32_t)) == 0);
  CHECK_STATUS(strata_tokenizer_destroy(from_model), STRATA_OK);

  /* Destroyed and foreign handles. */
  CHECK_STATUS(strata_tokenizer_destroy(tok), STRATA_OK);
  CHECK_STATUS(strata_tokenizer_destroy(tok), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_tokenizer_encode(tok, kText, 3, true, ids2, 256, &n2), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_tokenizer_destroy(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_destroy((strata_tokenizer *)g_engine), STRATA_ERR_MISUSE);
}

static void test_render_chat(void) {
  static const char kConversation[] =
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
      "\"Hi\"}], \"add_generation_prompt\": true, \"enable_thinking\": false}";
  static const char kWant[] =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
      "<think>\n\n</think>\n\n";
  /* Tool schemas keep the caller's key order ("z" before "a"), as Python dicts do. */
  static const char kWithTools[] =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": [{\"type\": \"function\", "
      "\"function\": {\"name\": \"f\", \"parameters\": {\"zeta\": 1, \"alpha\": 2}}}]}";
  char text[2048], padded[sizeof(kConversation) + 8];
  size_t len = 0, len2 = 0;
  bool has = false;
  strata_tokenizer *tok = NULL, *plain = NULL;
  CHECK_STATUS(strata_tokenizer_open(g_model_dir, &tok), STRATA_OK);
  REQUIRE(tok != NULL);
  CHECK_STATUS(strata_tokenizer_has_chat_template(tok, &has), STRATA_OK);
  CHECK(has);
  CHECK_STATUS(strata_tokenizer_has_chat_template(tok, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_has_chat_template(NULL, &has), STRATA_ERR_INVALID_ARGUMENT);

  /* Length query, a buffer without room for the NUL, then the exact prompt. */
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kConversation, STRATA_NUL_TERMINATED, NULL, 0, &len), STRATA_OK);
  CHECK(len == strlen(kWant));
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kConversation, STRATA_NUL_TERMINATED, text, len, &len2),
               STRATA_ERR_OUT_OF_RANGE);
  CHECK(len2 == len);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kConversation, STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_OK);
  CHECK(strcmp(text, kWant) == 0);
  /* An explicit length: the bytes after it are not part of the JSON. */
  memcpy(padded, kConversation, sizeof(kConversation) - 1);
  memcpy(padded + sizeof(kConversation) - 1, "garbage", 8);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, padded, sizeof(kConversation) - 1, text, sizeof(text), &len),
               STRATA_OK);
  CHECK(strcmp(text, kWant) == 0);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kWithTools, STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_OK);
  CHECK(strstr(text, "zeta") != NULL && strstr(text, "alpha") != NULL && strstr(text, "zeta") < strstr(text, "alpha"));
  CHECK(strstr(text, "<|im_start|>assistant") == NULL); /* add_generation_prompt defaults to false */

  /* Malformed conversations and NULL arguments. */
  CHECK_STATUS(strata_tokenizer_render_chat(tok, "{\"messages\": [", STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "not valid JSON") != NULL);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, "[]", STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, "{\"tools\": []}", STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(strata_last_error_message(), "messages") != NULL);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, NULL, 0, text, sizeof(text), &len), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kConversation, STRATA_NUL_TERMINATED, text, sizeof(text), NULL),
               STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_tokenizer_render_chat(NULL, kConversation, STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_ERR_INVALID_ARGUMENT);

  /* A tokenizer without chat template can say so, and cannot render. */
  CHECK_STATUS(strata_tokenizer_open(g_no_template_dir, &plain), STRATA_OK);
  if (plain != NULL) {
    CHECK_STATUS(strata_tokenizer_has_chat_template(plain, &has), STRATA_OK);
    CHECK(!has);
    CHECK_STATUS(strata_tokenizer_render_chat(plain, kConversation, STRATA_NUL_TERMINATED, text, sizeof(text), &len),
                 STRATA_ERR_FAILED_PRECONDITION);
    CHECK(len == 0);
    CHECK_STATUS(strata_tokenizer_destroy(plain), STRATA_OK);
  }

  CHECK_STATUS(strata_tokenizer_destroy(tok), STRATA_OK);
  CHECK_STATUS(strata_tokenizer_has_chat_template(tok, &has), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_tokenizer_render_chat(tok, kConversation, STRATA_NUL_TERMINATED, text, sizeof(text), &len),
               STRATA_ERR_MISUSE);
}

static void test_model_without_tokenizer(void) {
  strata_model *bare = NULL;
  strata_session *s = NULL;
  strata_tokenizer *tok = NULL;
  strata_chat_message m;
  strata_request *req = NULL;
  size_t len = 0;
  CHECK_STATUS(test_load_model(g_engine, g_bare_dir, &bare), STRATA_OK);
  REQUIRE(bare != NULL);
  CHECK_STATUS(strata_model_open_tokenizer(bare, &tok), STRATA_ERR_NOT_FOUND);
  CHECK(tok == NULL);
  CHECK_STATUS(strata_session_create(bare, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  strata_chat_message_init(&m);
  m.content = "hi";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_FAILED_PRECONDITION);
  CHECK_STATUS(strata_session_submit_chat(s, NULL, NULL, &req), STRATA_ERR_FAILED_PRECONDITION);
  CHECK(req == NULL);
  CHECK_STATUS(strata_session_get_conversation(s, NULL, 0, &len), STRATA_ERR_FAILED_PRECONDITION);
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
  CHECK_STATUS(strata_model_destroy(bare), STRATA_OK);
}

static int32_t never_called(strata_request *request, const strata_event *call, void *user_data) {
  (void)request;
  (void)call;
  (void)user_data;
  return 0;
}

static void test_conversation(void) {
  strata_session *s = NULL;
  strata_chat_message m;
  strata_tool t;
  char json[4096];
  size_t len = 0;
  struct {
    strata_tool t;
    uint64_t newer_field;
  } bigger;

  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);

  CHECK_STATUS(strata_tool_init_sized(NULL, sizeof(strata_tool)), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_chat_message_init_sized(NULL, sizeof(strata_chat_message)), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_chat_params_init_sized(NULL, sizeof(strata_chat_params)), STRATA_ERR_INVALID_ARGUMENT);
  strata_tool_init(&t);
  CHECK(t.struct_size == sizeof(strata_tool) && t.name == NULL && t.callback == NULL);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_INVALID_ARGUMENT); /* no name */
  t.name = "get_weather";
  t.description = "Weather of a city";
  t.parameters_json = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}";
  t.callback = never_called;
  CHECK_STATUS(strata_session_add_tool(NULL, &t), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_add_tool(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  t.struct_size = 4;
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_INVALID_ARGUMENT);
  t.struct_size = sizeof(t);
  t.parameters_json = "{not json";
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_INVALID_ARGUMENT);
  t.parameters_json = "[1, 2]";
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_INVALID_ARGUMENT);
  t.parameters_json = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}";
  /* A bigger struct from a newer header is fine when its unknown tail is zero. */
  memset(&bigger, 0, sizeof(bigger));
  bigger.t = t;
  bigger.t.struct_size = sizeof(bigger);
  CHECK_STATUS(strata_session_add_tool(s, &bigger.t), STRATA_OK);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_ALREADY_EXISTS);
  CHECK_STATUS(strata_session_clear_tools(s), STRATA_OK);
  CHECK_STATUS(strata_session_clear_tools(NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_OK);

  strata_chat_message_init(&m);
  CHECK(m.struct_size == sizeof(m) && m.role == STRATA_ROLE_USER && m.content_len == STRATA_NUL_TERMINATED);
  m.role = STRATA_ROLE_SYSTEM;
  m.content = "You are terse.";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
  m.role = 42;
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT);
  m.role = STRATA_ROLE_USER;
  m.content = "Weather in Paris?xxxx";
  m.content_len = 17; /* explicit length: the x's are not part of it */
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
  m.content = NULL;
  m.content_len = 3;
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT);
  m.content_len = STRATA_NUL_TERMINATED;
  m.content = "\xff\xfe";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT); /* not UTF-8 */
  m.role = STRATA_ROLE_TOOL;
  m.content = "{}";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT); /* no id, no name */
  m.role = STRATA_ROLE_ASSISTANT;
  m.content = "";
  m.reasoning_content = "Paris, so call the tool.";
  m.tool_calls_json = "{\"not\": \"an array\"}";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT);
  m.tool_calls_json =
      "[{\"id\": \"call_9\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}}]";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
  strata_chat_message_init(&m);
  m.role = STRATA_ROLE_TOOL;
  m.tool_call_id = "call_9";
  m.name = "get_weather";
  m.content = "{\"sky\": \"clear\"}";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
  m.struct_size = 0;
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_add_message(s, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_add_message(NULL, &m), STRATA_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(strata_session_get_conversation(s, NULL, 0, &len), STRATA_OK);
  CHECK(len > 0 && len < sizeof(json));
  CHECK_STATUS(strata_session_get_conversation(s, json, len, &len), STRATA_ERR_OUT_OF_RANGE);
  CHECK_STATUS(strata_session_get_conversation(s, json, sizeof(json), &len), STRATA_OK);
  CHECK(strlen(json) == len);
  CHECK(strstr(json, "\"content\":\"Weather in Paris?\"") != NULL);
  CHECK(strstr(json, "\"reasoning_content\":\"Paris, so call the tool.\"") != NULL);
  CHECK(strstr(json, "\"tool_call_id\":\"call_9\"") != NULL);
  CHECK_STATUS(strata_session_get_conversation(s, json, sizeof(json), NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_get_conversation(NULL, json, sizeof(json), &len), STRATA_ERR_INVALID_ARGUMENT);

  /* Reset forgets the messages; the tools stay. */
  CHECK_STATUS(strata_session_reset(s), STRATA_OK);
  CHECK_STATUS(strata_session_get_conversation(s, json, sizeof(json), &len), STRATA_OK);
  CHECK(strcmp(json, "[]") == 0);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_ALREADY_EXISTS);

  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_add_tool(s, &t), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_clear_tools(s), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_get_conversation(s, json, sizeof(json), &len), STRATA_ERR_MISUSE);
}

typedef struct chat_seen {
  size_t text_events;
  size_t text_bytes;
  int bad_events; /* events with the wrong shape */
  int stop_after; /* return nonzero after this many TEXT events; 0: never */
} chat_seen;

static int on_event(strata_request *request, const strata_event *ev, void *user_data) {
  chat_seen *seen = (chat_seen *)user_data;
  if (request == NULL || ev->request != request || ev->type == STRATA_EVENT_FINISHED) seen->bad_events++;
  if (ev->type == STRATA_EVENT_TEXT) {
    if (ev->text == NULL || ev->text_len == 0 || ev->text[ev->text_len] != '\0') seen->bad_events++;
    seen->text_events++;
    seen->text_bytes += ev->text_len;
  }
  return seen->stop_after != 0 && (int)seen->text_events >= seen->stop_after;
}

static void test_chat(void) {
  strata_session *s = NULL;
  strata_chat_message m;
  strata_chat_params chat;
  strata_request_params params;
  strata_request *req = NULL;
  strata_event ev;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  chat_seen seen;
  size_t before = 0, after = 0;
  int finished = 0, events = 0;
  const char *stops[1] = {NULL};

  CHECK_STATUS(strata_session_create(g_model, NULL, &s), STRATA_OK);
  REQUIRE(s != NULL);
  strata_chat_params_init(&chat);
  CHECK(chat.struct_size == sizeof(chat) && chat.max_tool_rounds == 8 && chat.event_callback == NULL);
  strata_request_params_init(&params);
  params.max_tokens = 6;
  params.stop_at_eos = false; /* random weights: keep the length predictable */

  strata_chat_message_init(&m);
  m.content = "Hello there";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);

  /* Argument errors leave the session unchanged. */
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, NULL), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_session_submit_chat(NULL, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  chat.struct_size = 3;
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  strata_chat_params_init(&chat);
  chat.max_tool_rounds = -1;
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  strata_chat_params_init(&chat);
  chat.template_variables_json = "[1]";
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  chat.template_variables_json = "{oops";
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  strata_chat_params_init(&chat);
  chat.num_stop_strings = 1;
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  chat.stop_strings = stops;
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(req == NULL);
  CHECK_STATUS(strata_session_get_num_tokens(s, &before), STRATA_OK);
  CHECK(before == 0);

  /* Non-blocking: TEXT events (complete UTF-8), then FINISHED. */
  strata_chat_params_init(&chat);
  chat.template_variables_json = "{\"enable_thinking\": false}";
  CHECK_STATUS(strata_session_submit_chat(s, &params, &chat, &req), STRATA_OK);
  REQUIRE(req != NULL);
  CHECK_STATUS(strata_request_submit_tool_result(req, "call_0", "{}", 2), STRATA_ERR_NOT_FOUND);
  CHECK_STATUS(strata_request_submit_tool_result(req, NULL, "{}", 2), STRATA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(strata_request_submit_tool_result(NULL, "call_0", "{}", 2), STRATA_ERR_INVALID_ARGUMENT);
  ev.struct_size = sizeof(ev);
  while (!finished && events < 100) {
    CHECK_STATUS(strata_engine_poll_event(g_engine, &ev, 10000), STRATA_OK);
    events++;
    CHECK(ev.request == req);
    if (ev.type == STRATA_EVENT_TEXT) CHECK(ev.text != NULL && ev.text_len > 0 && ev.text[ev.text_len] == '\0');
    if (ev.type == STRATA_EVENT_FINISHED) {
      finished = 1;
      CHECK(ev.text == NULL && ev.tool_call_id == NULL && ev.tool_name == NULL);
    }
  }
  CHECK(finished);
  CHECK(ev.finish_reason == STRATA_FINISH_MAX_TOKENS || ev.finish_reason == STRATA_FINISH_STOP_TOKEN);
  CHECK(ev.status == STRATA_OK);
  CHECK(ev.num_generated_tokens <= 6);
  CHECK_STATUS(strata_request_destroy(req), STRATA_OK);
  CHECK_STATUS(strata_session_get_num_tokens(s, &after), STRATA_OK);
  CHECK(after > 6);

  /* Blocking, with an event callback that stops after the first text. */
  memset(&seen, 0, sizeof(seen));
  seen.stop_after = 1;
  strata_chat_params_init(&chat);
  chat.event_callback = on_event;
  chat.user_data = &seen;
  strata_chat_message_init(&m);
  m.content = "And again";
  CHECK_STATUS(strata_session_add_message(s, &m), STRATA_OK);
  params.max_tokens = 32;
  CHECK_STATUS(strata_session_chat(s, &params, &chat, &reason), STRATA_OK);
  CHECK(seen.bad_events == 0);
  CHECK(reason == STRATA_FINISH_CALLBACK || reason == STRATA_FINISH_MAX_TOKENS ||
        reason == STRATA_FINISH_STOP_TOKEN);
  if (reason == STRATA_FINISH_CALLBACK) CHECK(seen.text_events == 1);
  CHECK_STATUS(strata_session_chat(NULL, &params, &chat, &reason), STRATA_ERR_INVALID_ARGUMENT);
  CHECK(reason == STRATA_FINISH_NONE);

  /* Token-level requests are not chat requests. */
  {
    const int32_t prompt[] = {1, 2, 3};
    strata_request_params_init(&params);
    params.max_tokens = 2;
    CHECK_STATUS(strata_session_submit(s, prompt, 3, &params, &req), STRATA_OK);
    if (req != NULL) {
      CHECK_STATUS(strata_request_submit_tool_result(req, "call_0", "{}", 2), STRATA_ERR_FAILED_PRECONDITION);
      CHECK_STATUS(strata_request_destroy(req), STRATA_OK);
      CHECK_STATUS(strata_request_submit_tool_result(req, "call_0", "{}", 2), STRATA_ERR_MISUSE);
    }
  }
  CHECK_STATUS(strata_session_destroy(s), STRATA_OK);
  CHECK_STATUS(strata_session_submit_chat(s, NULL, NULL, &req), STRATA_ERR_MISUSE);
  CHECK_STATUS(strata_session_chat(s, NULL, NULL, NULL), STRATA_ERR_MISUSE);
}

int main(int argc, char **argv) {
  snprintf(g_model_dir, sizeof(g_model_dir), "%s", test_model_dir(argc, argv));
  snprintf(g_bare_dir, sizeof(g_bare_dir), "%s_no_tokenizer", g_model_dir);
  snprintf(g_no_template_dir, sizeof(g_no_template_dir), "%s_no_template", g_model_dir);
  printf("model directory: %s\n", g_model_dir);
  if (strata_engine_create(NULL, &g_engine) == STRATA_OK &&
      test_load_model(g_engine, g_model_dir, &g_model) == STRATA_OK) {
    test_tokenizer();
    test_render_chat();
    test_model_without_tokenizer();
    test_conversation();
    test_chat();
    CHECK_STATUS(strata_model_destroy(g_model), STRATA_OK);
    CHECK_STATUS(strata_engine_destroy(g_engine), STRATA_OK);
  } else {
    CHECK(!"engine or model failed");
  }
  return test_report();
}
