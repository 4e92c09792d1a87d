/* The --device flag of the C samples and strata-agent: "auto" (the default:
 * the GPU when one is usable, else the CPU), "cpu" or "cuda" (the GPU or an
 * error), and the line saying where the model runs. Header-only C99 so each
 * sample stays one file to copy. */
#ifndef STRATA_SAMPLES_SAMPLE_DEVICE_H_
#define STRATA_SAMPLES_SAMPLE_DEVICE_H_

#include <stdio.h>
#include <string.h>

#include "strata/strata.h"

/* Removes "--device NAME" from argv (anywhere) and stores the device in *out
 * (AUTO when absent). Returns 0 for an unknown NAME or a missing one. */
static inline int sample_take_device_flag(int *argc, char **argv, strata_device *out) {
  static const char *const kNames[] = {"auto", "cpu", "cuda"};
  static const strata_device kDevices[] = {STRATA_DEVICE_AUTO, STRATA_DEVICE_CPU, STRATA_DEVICE_CUDA};
  int i, j, k;
  *out = STRATA_DEVICE_AUTO;
  for (i = 1; i < *argc; ++i) {
    if (strcmp(argv[i], "--device") != 0) continue;
    if (i + 1 >= *argc) return 0;
    for (k = 0; k < 3 && strcmp(argv[i + 1], kNames[k]) != 0; ++k) {
    }
    if (k == 3) return 0;
    *out = kDevices[k];
    for (j = i; j + 2 < *argc; ++j) argv[j] = argv[j + 2];
    *argc -= 2;
    --i;
  }
  return 1;
}

/* Loads `dir` on `device` and prints where it runs (and why, after a fallback) to `log`. */
static inline strata_status sample_load_model(strata_engine *engine, const char *dir, strata_device device, FILE *log,
                                       strata_model **out) {
  strata_model_params params;
  strata_model_info info;
  strata_status st;
  strata_model_params_init(&params);
  params.device = device;
  st = strata_model_load(engine, dir, &params, out);
  if (st != STRATA_OK) return st;
  info.struct_size = sizeof info;
  st = strata_model_get_info(*out, &info);
  if (st == STRATA_OK) {
    fprintf(log, "[device] %s%s%s%s\n", info.device, info.device_notice[0] != '\0' ? " (" : "", info.device_notice,
            info.device_notice[0] != '\0' ? ")" : "");
  }
  return st;
}

#endif /* STRATA_SAMPLES_SAMPLE_DEVICE_H_ */
