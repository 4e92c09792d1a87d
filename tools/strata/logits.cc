// `strata logits`: the logits of every position of a token sequence, written
// as float32 [T, vocab] .npy. The first N tokens go through one Forward (the
// chunked prefill path), the rest one token per Forward (the decode path), so
// the same command checks both against a reference.
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "internal.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata logits --model DIR --tokens IN.npy --out OUT.npy [--prefill N] [--device cpu|cuda|auto]\n"
    "\n"
    "  --model DIR      model directory (config.json + *.safetensors)\n"
    "  --tokens IN.npy  token ids, int32 or int64, shape [T] (or [1, T])\n"
    "  --out OUT.npy    written: float32 [T, vocab], the logits after each position\n"
    "  --prefill N      tokens in the first (prefill) call; the rest are decoded one by one (default: all)\n"
    "  --device D       cpu (default), cuda or auto: the GPU when one is usable, else the CPU with a notice\n";

}  // namespace

int RunLogits(int argc, char** argv) {
  const std::string cmd = "logits";
  Flags flags(cmd, {"model", "tokens", "out", "prefill", "device"}, {"help"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  LoadOptions lo;
  lo.options = OptionsFlag();
  if (int rc = ParseDevice(cmd, flags.String("device", "cpu"), &lo.device); rc != kExitOk) return rc;
  auto model_dir = flags.Required("model");
  auto tokens_path = flags.Required("tokens");
  auto out_path = flags.Required("out");
  for (const auto* s : {&model_dir, &tokens_path, &out_path}) {
    if (!s->ok()) return Fail(cmd, s->status(), kExitUsage);
  }

  std::vector<int64_t> shape;
  auto tokens = ReadNpyInt32(*tokens_path, &shape);
  if (!tokens.ok()) return Fail(cmd, tokens.status(), kExitFailure);
  if (!(shape.size() == 1 || (shape.size() == 2 && shape[0] == 1))) {
    return Fail(cmd, absl::StrCat(*tokens_path, ": expected shape [T] or [1, T]"), kExitFailure);
  }
  const int64_t T = static_cast<int64_t>(tokens->size());
  if (T == 0) return Fail(cmd, absl::StrCat(*tokens_path, ": no tokens"), kExitFailure);
  auto prefill = flags.Int("prefill", T, 1, T);
  if (!prefill.ok()) return Fail(cmd, prefill.status(), kExitUsage);

  auto model = LoadModel(*model_dir, lo);
  if (!model.ok()) return Fail(cmd, model.status(), kExitFailure);
  PrintPlacementNotice(cmd, (*model)->info().notice);
  PrintTuningNotice(cmd, (*model)->info().device, (*model)->info().tuning);
  const int64_t vocab = (*model)->info().vocab_size;
  auto state = (*model)->NewState(T);
  if (!state.ok()) return Fail(cmd, state.status(), ExitCodeFor(state.status()));

  std::vector<float> logits(static_cast<size_t>(T * vocab));
  const int64_t n = *prefill;
  Status st = (*model)->Forward(std::span(tokens->data(), static_cast<size_t>(n)), **state,
                                logits.data(), /*all_logits=*/true);
  for (int64_t t = n; t < T && st.ok(); ++t) {
    st = (*model)->Forward(std::span(tokens->data() + t, 1), **state, logits.data() + t * vocab,
                           /*all_logits=*/false);
  }
  if (!st.ok()) return Fail(cmd, absl::StrCat(*tokens_path, ": ", st.message()), ExitCodeFor(st));

  const std::vector<int64_t> out_shape = {T, vocab};
  if (Status w = WriteNpyFloat32(*out_path, out_shape, logits); !w.ok()) return Fail(cmd, w, kExitFailure);
  std::printf("wrote %s: float32 [%lld, %lld] (prefill %lld, then %lld single-token steps) on %s\n",
              out_path->c_str(), static_cast<long long>(T), static_cast<long long>(vocab),
              static_cast<long long>(n), static_cast<long long>(T - n), (*model)->info().device.c_str());
  return kExitOk;
}

}  // namespace strata::cli
