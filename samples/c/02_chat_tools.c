/* 02_chat_tools: a chat turn with a host tool, both ways the C ABI offers.
 *   sample_02_chat_tools MODEL_DIR [--device auto|cpu|cuda] ["user message"]
 * MODEL_DIR needs a tokenizer and a chat template (tokenizer_config.json),
 * e.g. the embedded demo model (models/strata-demo, trained to call tools), or
 * the random-weight one `strata run --random` writes (the reply is gibberish
 * and it will rarely call the tool, but every path runs).
 *
 * Blocking: strata_session_chat() calls get_weather() on this thread when the
 * model calls the tool, and on_event() for every piece of text.
 * Non-blocking: strata_session_submit_chat() + strata_engine_poll_event();
 * tool calls arrive as events and are answered with
 * strata_request_submit_tool_result(). */
#include <stdio.h>
#include <string.h>
#include <strata/strata.h>

#include "../common/sample_device.h"

static const char kWeatherSchema[] =
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}";

/* Runs on the thread that called strata_session_chat(). */
static int32_t get_weather(strata_request *request, const strata_event *call, void *user_data) {
  (void)user_data;
  printf("\n[get_weather %.*s]\n", (int)call->tool_arguments_len, call->tool_arguments);
  return strata_request_submit_tool_result(request, call->tool_call_id, "{\"sky\": \"sunny\", \"temp_c\": 21}",
                                           STRATA_NUL_TERMINATED) == STRATA_OK ? 0 : 1;
}

/* Streams text; TEXT events are always complete UTF-8. */
static int on_event(strata_request *request, const strata_event *ev, void *user_data) {
  (void)request; (void)user_data;
  if (ev->type == STRATA_EVENT_TEXT) fwrite(ev->text, 1, ev->text_len, stdout);
  if (ev->type == STRATA_EVENT_TOOL_ERROR) printf("\n[tool error: %.*s]\n", (int)ev->text_len, ev->text);
  fflush(stdout);
  return 0;
}

static int add_user(strata_session *session, const char *text) {
  strata_chat_message m;
  strata_chat_message_init(&m);
  m.role = STRATA_ROLE_USER;
  m.content = text;
  return strata_session_add_message(session, &m) == STRATA_OK;
}

int main(int argc, char **argv) {
  strata_engine *engine = NULL;
  strata_model *model = NULL;
  strata_session *session = NULL;
  strata_tool tool;
  strata_request_params params;
  strata_chat_params chat;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_request *req = NULL;
  strata_event ev;
  int ok = 0;
  strata_device device;
  if (!sample_take_device_flag(&argc, argv, &device) || argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [--device auto|cpu|cuda] [QUESTION]\n", argv[0]);
    return 2;
  }
  if (strata_engine_create(NULL, &engine) != STRATA_OK) return 1;
  if (sample_load_model(engine, argv[1], device, stderr, &model) != STRATA_OK ||
      strata_session_create(model, NULL, &session) != STRATA_OK) {
    fprintf(stderr, "%s\n", strata_last_error_message());
    goto done;
  }
  strata_tool_init(&tool);
  tool.name = "get_weather";
  tool.description = "Current weather in a city";
  tool.parameters_json = kWeatherSchema;
  tool.callback = get_weather;
  strata_request_params_init(&params);
  params.max_tokens = 64;
  strata_chat_params_init(&chat);
  chat.event_callback = on_event;
  if (strata_session_add_tool(session, &tool) != STRATA_OK ||
      !add_user(session, argc > 2 ? argv[2] : "What is the weather in Paris?")) {
    fprintf(stderr, "%s\n", strata_last_error_message()); /* e.g. no tokenizer in MODEL_DIR */
    goto done;
  }

  /* 1. Blocking: callbacks on this thread. */
  printf("assistant: ");
  if (strata_session_chat(session, &params, &chat, &reason) != STRATA_OK) {
    fprintf(stderr, "\n%s\n", strata_last_error_message());
    goto done;
  }
  printf("\n(finish reason %d)\n", (int)reason);

  /* 2. Non-blocking: the next turn through events. */
  if (!add_user(session, "And tomorrow?") || strata_session_submit_chat(session, &params, NULL, &req) != STRATA_OK) {
    fprintf(stderr, "%s\n", strata_last_error_message());
    goto done;
  }
  printf("assistant: ");
  ev.struct_size = sizeof(ev);
  while (strata_engine_poll_event(engine, &ev, -1) == STRATA_OK && ev.type != STRATA_EVENT_FINISHED) {
    if (ev.type == STRATA_EVENT_TEXT) fwrite(ev.text, 1, ev.text_len, stdout);
    if (ev.type == STRATA_EVENT_TOOL_CALL) {
      printf("\n[%s %.*s]\n", ev.tool_name, (int)ev.tool_arguments_len, ev.tool_arguments);
      strata_request_submit_tool_result(req, ev.tool_call_id, "{\"sky\": \"rain\"}", STRATA_NUL_TERMINATED);
    }
    fflush(stdout);
  }
  printf("\n(finish reason %d, status %s)\n", (int)ev.finish_reason, strata_status_string(ev.status));
  strata_request_destroy(req);
  ok = 1;

done:
  if (session != NULL) strata_session_destroy(session);
  if (model != NULL) strata_model_destroy(model);
  strata_engine_destroy(engine);
  return ok ? 0 : 1;
}
