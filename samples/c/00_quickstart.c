/* 00_quickstart: the C quick start of README.md, kept here so CI compiles it.
 *   sample_00_quickstart MODEL_DIR [--device auto|cpu|cuda] */
#include <stdio.h>
#include <strata/strata.h>

#include "../common/sample_device.h"

/* Runs on the calling thread for each generated token; return 0 to continue. */
static int on_token(strata_request *req, int32_t token, void *user_data) {
  (void)req; (void)user_data;
  printf("%d ", (int)token);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  strata_engine *engine = NULL;
  strata_model *model = NULL;
  strata_session *session = NULL;
  strata_device device;
  if (!sample_take_device_flag(&argc, argv, &device) || argc < 2) return 2;
  if (strata_engine_create(NULL, &engine) != STRATA_OK) return 1;
  /* AUTO: the GPU when usable, else the CPU; prints where it runs. */
  if (sample_load_model(engine, argv[1], device, stderr, &model) != STRATA_OK) {
    fprintf(stderr, "%s\n", strata_last_error_message()); /* names the file/field/tensor */
    strata_engine_destroy(engine);
    return 1;
  }
  strata_session_create(model, NULL, &session);

  const int32_t prompt[] = {1, 2, 3, 4};
  strata_request_params params;
  strata_request_params_init(&params); /* greedy, stop at EOS */
  params.max_tokens = 16;
  params.token_callback = on_token;
  strata_finish_reason reason;
  strata_status st = strata_session_generate(session, prompt, 4, &params, &reason);

  strata_session_destroy(session);
  strata_model_destroy(model);
  strata_engine_destroy(engine);
  return st == STRATA_OK ? 0 : 1;
}
