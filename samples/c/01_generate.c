/* 01_generate: load a model directory, generate greedily from the BOS token
 * (or token ids given on the command line) and stream the token ids as they
 * come: token ids in and out (02_chat_tools shows text, through the model's
 * tokenizer and chat template).
 *
 *   sample_01_generate MODEL_DIR [--device auto|cpu|cuda] [MAX_TOKENS [TOKEN_ID...]]
 */
#include <stdio.h>
#include <stdlib.h>

#include "../common/sample_device.h"
#include "strata/strata.h"

/* Runs on this thread, once per generated token; returning 0 continues. */
static int print_token(strata_request *request, int32_t token, void *user_data) {
  int *count = (int *)user_data;
  (void)request;
  printf("%s%d", *count == 0 ? "" : " ", (int)token);
  fflush(stdout);
  ++*count;
  return 0;
}

/* Prints the failing call, its status and the library's explanation. */
static int fail(const char *what, strata_status status) {
  fprintf(stderr, "%s failed: %s: %s\n", what, strata_status_string(status), strata_last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  strata_engine *engine = NULL;
  strata_model *model = NULL;
  strata_session *session = NULL;
  strata_model_info info;
  strata_request_params params;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_status st;
  int32_t prompt[64];
  size_t num_prompt = 0;
  int count = 0, i, rc = 1;
  strata_device device;

  if (!sample_take_device_flag(&argc, argv, &device) || argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [--device auto|cpu|cuda] [MAX_TOKENS [TOKEN_ID...]]\n", argv[0]);
    return 2;
  }
  /* The library must speak the ABI this program was compiled against. */
  if (strata_abi_version() != STRATA_ABI_VERSION) {
    fprintf(stderr, "libstrata ABI %u, expected %u\n", (unsigned)strata_abi_version(), (unsigned)STRATA_ABI_VERSION);
    return 1;
  }
  printf("strata %s\n", strata_version_string());

  if ((st = strata_engine_create(NULL, &engine)) != STRATA_OK) return fail("strata_engine_create", st);
  if ((st = sample_load_model(engine, argv[1], device, stdout, &model)) != STRATA_OK) {
    fail("strata_model_load", st);
    goto done;
  }
  info.struct_size = sizeof info;
  if ((st = strata_model_get_info(model, &info)) != STRATA_OK) {
    fail("strata_model_get_info", st);
    goto done;
  }
  printf("model: %s, %d layers, %lld parameters, vocabulary %d\n", info.architecture, (int)info.num_layers,
         (long long)info.num_parameters, (int)info.vocab_size);

  if ((st = strata_session_create(model, NULL, &session)) != STRATA_OK) {
    fail("strata_session_create", st);
    goto done;
  }
  for (i = 3; i < argc && num_prompt < sizeof prompt / sizeof prompt[0]; ++i) {
    prompt[num_prompt++] = (int32_t)strtol(argv[i], NULL, 10);
  }
  if (num_prompt == 0) prompt[num_prompt++] = info.bos_token_id >= 0 ? info.bos_token_id : 0;

  strata_request_params_init(&params); /* greedy (temperature 0), stop at EOS */
  params.max_tokens = argc > 2 ? atoi(argv[2]) : 32;
  params.token_callback = print_token;
  params.user_data = &count;
  st = strata_session_generate(session, prompt, num_prompt, &params, &reason);
  printf("\n");
  if (st != STRATA_OK) {
    fail("strata_session_generate", st);
    goto done;
  }
  printf("%d tokens, finish reason %d\n", count, (int)reason);
  rc = 0;

done:
  /* Reverse order of creation; NULL handles are skipped. */
  if (session != NULL) strata_session_destroy(session);
  if (model != NULL) strata_model_destroy(model);
  strata_engine_destroy(engine);
  return rc;
}
