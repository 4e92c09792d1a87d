// The one door from tools/strata into the C++ core (src/). Only the internal
// part of the tool includes it (bench.cc, info.cc, logits.cc,
// make_demo_model.cc, files.cc: the strata_cli_internal library of
// tools/CMakeLists.txt); the ABI commands are compiled without src/ on their
// include path, so they cannot.
//
// What the internal part touches, and why the C ABI is not enough:
// - model/model.h: LoadModel and Model::NewState / Forward /
//   DecodeBatchSample / FillContextForBenchmark. `strata bench` times bare
//   prefill calls and batched decode steps of B states without the
//   scheduler (and with --fill-context, states of a given length without
//   prefill); `strata logits` writes the logits of every position of one
//   prefill call; `strata info` prints ModelInfo::layer_kinds. The ABI runs
//   models only through sessions and returns the last position's logits.
// - model/models/builtin.h and exec/cost_model.h: the bench's cost model
//   (FLOPs and bytes a step must move) from the model's layer list.
// - model/weight_store.h: the weight bytes one decode token reads, per tensor.
// - exec/cuda/cuda_executor.h (CUDA builds): the GPU executor's plan (pools,
//   scratch) and CUDA-graph counters.
// - base/thread_pool.h: the bench's threads and its copy-bandwidth probe.
// - base/npy.h: .npy token and logit files (logits; `strata generate`'s
//   --tokens through files.cc).
// - model/demo_model.h, text/demo_tokenizer.h: writing demo models
//   (make-demo-model, `strata run --random`, the bench's default model);
//   base/file_error.h for the errors of writing them (files.cc).
// All of it is internal interface: it changes without notice, and this code
// changes with it. Anything a host could want belongs in strata.h instead.
#ifndef STRATA_TOOLS_STRATA_INTERNAL_H_
#define STRATA_TOOLS_STRATA_INTERNAL_H_

#include <string>

#include "base/file_error.h"
#include "base/npy.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "cli.h"
#include "exec/cost_model.h"
#include "model/config_reader.h"
#include "model/demo_model.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/weight_store.h"
#include "text/demo_tokenizer.h"
#if defined(STRATA_HAVE_CUDA)
#include "exec/cuda/cuda_executor.h"
#endif

namespace strata::cli {

// models/presets/kimi-linear-48b-a3b/config.json, compiled in
// (tools/CMakeLists.txt): the --preset of bench and serve.
extern const char kKimiLinear48BConfigJson[];

// --device and --load-format for LoadOptions. The core's Device::kCuda
// already is the CLI's non-strict cuda (LoadOptions::require_device false).
inline int ParseDevice(const std::string& command, const std::string& value, Device* out) {
  DeviceFlag flag = DeviceFlag::kCpu;
  if (int rc = ParseDevice(command, value, &flag); rc != kExitOk) return rc;
  *out = flag == DeviceFlag::kCpu ? Device::kCpu : flag == DeviceFlag::kCuda ? Device::kCuda : Device::kAuto;
  return kExitOk;
}

inline int ParseLoadFormat(const std::string& command, const std::string& value, LoadFormat* out) {
  bool dummy = false;
  if (int rc = ParseLoadFormat(command, value, &dummy); rc != kExitOk) return rc;
  *out = dummy ? LoadFormat::kDummy : LoadFormat::kAuto;
  return kExitOk;
}

}  // namespace strata::cli

#endif  // STRATA_TOOLS_STRATA_INTERNAL_H_
