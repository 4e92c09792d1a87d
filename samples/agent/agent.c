/* strata-agent: a small agent on the Strata C ABI.
 *
 *   strata-agent [--model DIR] [--sandbox DIR] [--max-tokens N] --question TEXT
 *   strata-agent [--model DIR] [--sandbox DIR]          (interactive chat)
 *
 * It loads a model directory (config.json, weights, tokenizer and chat
 * template; default: the STRATA_AGENT_MODEL environment variable, else the
 * embedded trained strata-demo model), registers
 * five host tools as callbacks (calculator, convert_units, lookup_element,
 * list_files and read_file inside the sandbox directory, default "."), and
 * runs the blocking chat loop, strata_session_chat(): the model's text is
 * streamed as it is generated, every tool call is printed with its result
 * when it runs, and the final answer comes last. The tool schemas and result
 * texts are those the demo model was trained on (tools/demo_model/tools.py).
 *
 * Everything Strata-specific goes through <strata/strata.h>; the tools are
 * plain C in agent_tools.c. */
#include "agent.h"

#include <stdlib.h>
#include <string.h>
#include <strata/strata.h>

#include "agent_tools.h"
#include "../common/sample_device.h"

#define RESULT_CAP 16384

/* The build defines this as the repository's models/strata-demo (the trained
 * demo model, committed); an installed copy lives under share/strata. */
#ifndef STRATA_AGENT_DEFAULT_MODEL
#define STRATA_AGENT_DEFAULT_MODEL "models/strata-demo"
#endif

static const char kSystemPrompt[] =
    "You are the Strata demo assistant. Use the tools for arithmetic, unit conversions, chemical "
    "elements and files; answer from their results.";

typedef struct {
  FILE *out;
  const char *sandbox;
  int at_line_start; /* whether the last byte written to out ended a line */
} Agent;

typedef int (*ToolFn)(Agent *agent, const char *args, char *result, size_t cap);

static int run_calculator(Agent *a, const char *args, char *r, size_t cap) {
  char expr[1024];
  (void)a;
  if (agent_json_get(args, "expression", expr, sizeof(expr)) != 1) {
    snprintf(r, cap, "error: expression must be a string");
    return 1;
  }
  return agent_calculate(expr, r, cap);
}

static int run_convert(Agent *a, const char *args, char *r, size_t cap) {
  char value[64], from[32], to[32];
  char *end;
  double v;
  (void)a;
  if (agent_json_get(args, "value", value, sizeof(value)) != 2 || (v = strtod(value, &end), *end != '\0')) {
    snprintf(r, cap, "error: value must be a number");
    return 1;
  }
  if (agent_json_get(args, "from_unit", from, sizeof(from)) != 1) from[0] = '\0';
  if (agent_json_get(args, "to_unit", to, sizeof(to)) != 1) to[0] = '\0';
  return agent_convert_units(v, from, to, r, cap);
}

static int run_lookup(Agent *a, const char *args, char *r, size_t cap) {
  char name[128];
  (void)a;
  if (agent_json_get(args, "name", name, sizeof(name)) != 1) name[0] = '\0';
  return agent_lookup_element(name, r, cap);
}

static int run_list(Agent *a, const char *args, char *r, size_t cap) {
  char path[1024];
  if (agent_json_get(args, "path", path, sizeof(path)) != 1) snprintf(path, sizeof(path), ".");
  return agent_list_files(a->sandbox, path, r, cap);
}

static int run_read(Agent *a, const char *args, char *r, size_t cap) {
  char path[1024];
  if (agent_json_get(args, "path", path, sizeof(path)) != 1) path[0] = '\0';
  return agent_read_file(a->sandbox, path, r, cap);
}

/* Name, description and JSON schema exactly as tools/demo_model/tools.py
 * SCHEMAS lists them (key order included: the template prints them). */
typedef struct {
  const char *name, *description, *schema;
  ToolFn fn;
} ToolDef;

static const ToolDef kTools[] = {
    {"calculator", "Evaluate an arithmetic expression with + - * / and parentheses.",
     "{\"type\": \"object\", \"properties\": {\"expression\": {\"type\": \"string\", "
     "\"description\": \"for example (2 + 3) * 4.5\"}}, \"required\": [\"expression\"]}",
     run_calculator},
    {"convert_units", "Convert a value between units of length, mass, volume or temperature.",
     "{\"type\": \"object\", \"properties\": {\"value\": {\"type\": \"number\"}, \"from_unit\": "
     "{\"type\": \"string\"}, \"to_unit\": {\"type\": \"string\"}}, \"required\": [\"value\", "
     "\"from_unit\", \"to_unit\"]}",
     run_convert},
    {"lookup_element", "Look up a chemical element by name or symbol.",
     "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}, \"required\": "
     "[\"name\"]}",
     run_lookup},
    {"list_files", "List the files in a directory of the sandbox.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", \"description\": "
     "\"directory, . for the top\"}}, \"required\": [\"path\"]}",
     run_list},
    {"read_file", "Read a text file of the sandbox.",
     "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, \"required\": "
     "[\"path\"]}",
     run_read},
};
#define NUM_TOOLS (sizeof(kTools) / sizeof(kTools[0]))

typedef struct {
  Agent *agent;
  const ToolDef *def;
} ToolBinding;

static void write_out(Agent *a, const char *text, size_t len) {
  if (len == 0) return;
  fwrite(text, 1, len, a->out);
  a->at_line_start = text[len - 1] == '\n';
  fflush(a->out);
}

static void end_line(Agent *a) {
  if (!a->at_line_start) write_out(a, "\n", 1);
}

/* Runs on the thread that called strata_session_chat(). */
static int32_t on_tool(strata_request *request, const strata_event *call, void *user_data) {
  ToolBinding *b = (ToolBinding *)user_data;
  char *result = (char *)malloc(RESULT_CAP);
  int code;
  strata_status st;
  if (result == NULL) return 1;
  code = b->def->fn(b->agent, call->tool_arguments, result, RESULT_CAP);
  end_line(b->agent);
  fprintf(b->agent->out, "[tool] %s %.*s -> %s\n", call->tool_name, (int)call->tool_arguments_len,
          call->tool_arguments, result);
  b->agent->at_line_start = 1;
  fflush(b->agent->out);
  /* Errors go back to the model as results too ("error: ..."), as in training. */
  st = strata_request_submit_tool_result(request, call->tool_call_id, result, STRATA_NUL_TERMINATED);
  free(result);
  (void)code;
  return st == STRATA_OK ? 0 : 1;
}

static int on_event(strata_request *request, const strata_event *ev, void *user_data) {
  Agent *a = (Agent *)user_data;
  (void)request;
  if (ev->type == STRATA_EVENT_TEXT) write_out(a, ev->text, ev->text_len);
  if (ev->type == STRATA_EVENT_TOOL_ERROR) {
    end_line(a);
    fprintf(a->out, "[tool error] %.*s\n", (int)ev->text_len, ev->text);
    a->at_line_start = 1;
  }
  return 0;
}

static int add_message(strata_session *s, strata_role role, const char *text) {
  strata_chat_message m;
  strata_chat_message_init(&m);
  m.role = role;
  m.content = text;
  return strata_session_add_message(s, &m) == STRATA_OK;
}

/* One user turn: the model answers, calling tools as it likes. */
static int ask(Agent *a, strata_session *s, const char *question, int32_t max_tokens, FILE *err) {
  strata_request_params params;
  strata_chat_params chat;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  if (!add_message(s, STRATA_ROLE_USER, question)) {
    fprintf(err, "strata-agent: %s\n", strata_last_error_message());
    return 0;
  }
  strata_request_params_init(&params); /* greedy */
  params.max_tokens = max_tokens;
  strata_chat_params_init(&chat);
  chat.event_callback = on_event;
  chat.user_data = a;
  chat.skip_special_tokens = true;
  if (strata_session_chat(s, &params, &chat, &reason) != STRATA_OK) {
    end_line(a);
    fprintf(err, "strata-agent: %s\n", strata_last_error_message());
    return 0;
  }
  end_line(a);
  if (reason == STRATA_FINISH_MAX_TOKENS) fprintf(err, "strata-agent: the answer hit --max-tokens\n");
  if (reason == STRATA_FINISH_TOOL_CALLS) fprintf(err, "strata-agent: too many tool rounds\n");
  return 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: strata-agent [--model DIR] [--device D] [--sandbox DIR] [--max-tokens N] [--question TEXT]\n"
          "  --model DIR      model directory (default: $STRATA_AGENT_MODEL, else the embedded\n"
          "                   strata-demo model: " STRATA_AGENT_DEFAULT_MODEL ")\n"
          "  --device D       auto (default: the GPU when usable, else the CPU), cpu or cuda\n"
          "  --sandbox DIR    the only directory list_files/read_file may read (default: .)\n"
          "  --max-tokens N   tokens per answer, tool rounds included (default: 512)\n"
          "  --question TEXT  answer once and exit; without it, an interactive chat\n");
}

int strata_agent_main(int argc, char **argv, FILE *in, FILE *out, FILE *err) {
  const char *model_dir = getenv("STRATA_AGENT_MODEL");
  const char *question = NULL;
  int32_t max_tokens = 512;
  Agent agent;
  ToolBinding bindings[NUM_TOOLS];
  strata_engine *engine = NULL;
  strata_model *model = NULL;
  strata_session *session = NULL;
  int ok = 0, i;
  size_t t;
  strata_device device;
  agent.out = out;
  if (!sample_take_device_flag(&argc, argv, &device)) {
    usage(err);
    return 2;
  }
  agent.sandbox = ".";
  agent.at_line_start = 1;
  for (i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(out);
      return 0;
    }
    if (val == NULL) {
      usage(err);
      return 2;
    }
    if (strcmp(arg, "--model") == 0) {
      model_dir = val;
    } else if (strcmp(arg, "--sandbox") == 0) {
      agent.sandbox = val;
    } else if (strcmp(arg, "--question") == 0) {
      question = val;
    } else if (strcmp(arg, "--max-tokens") == 0) {
      max_tokens = (int32_t)atoi(val);
    } else {
      usage(err);
      return 2;
    }
    ++i;
  }
  if (model_dir == NULL) model_dir = STRATA_AGENT_DEFAULT_MODEL;
  if (max_tokens <= 0) {
    usage(err);
    return 2;
  }
  if (strata_engine_create(NULL, &engine) != STRATA_OK ||
      sample_load_model(engine, model_dir, device, err, &model) != STRATA_OK ||
      strata_session_create(model, NULL, &session) != STRATA_OK) {
    fprintf(err, "strata-agent: %s\n", strata_last_error_message());
    goto done;
  }
  for (t = 0; t < NUM_TOOLS; ++t) {
    strata_tool tool;
    bindings[t].agent = &agent;
    bindings[t].def = &kTools[t];
    strata_tool_init(&tool);
    tool.name = kTools[t].name;
    tool.description = kTools[t].description;
    tool.parameters_json = kTools[t].schema;
    tool.callback = on_tool;
    tool.user_data = &bindings[t];
    if (strata_session_add_tool(session, &tool) != STRATA_OK) {
      fprintf(err, "strata-agent: %s\n", strata_last_error_message());
      goto done;
    }
  }
  if (!add_message(session, STRATA_ROLE_SYSTEM, kSystemPrompt)) {
    fprintf(err, "strata-agent: %s\n", strata_last_error_message());
    goto done;
  }
  if (question != NULL) {
    ok = ask(&agent, session, question, max_tokens, err);
  } else {
    char line[4096];
    ok = 1;
    for (;;) {
      size_t n;
      fprintf(out, "> ");
      fflush(out);
      if (fgets(line, sizeof(line), in) == NULL) break;
      n = strlen(line);
      while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
      if (n == 0) continue;
      if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) break;
      if (!ask(&agent, session, line, max_tokens, err)) {
        ok = 0;
        break;
      }
    }
    end_line(&agent);
  }

done:
  if (session != NULL) strata_session_destroy(session);
  if (model != NULL) strata_model_destroy(model);
  if (engine != NULL) strata_engine_destroy(engine);
  return ok ? 0 : 1;
}
