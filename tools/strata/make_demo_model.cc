// `strata make-demo-model`: a kimi_linear model directory with RANDOM weights
// (config.json + model.safetensors) of any size, from the core's demo-model
// writer, so the SDK can be tried and tested without a checkpoint.
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "internal.h"

namespace strata::cli {
namespace {

constexpr char kMakeHelp[] =
    "usage: strata make-demo-model --out DIR [--seed S] [size flags]\n"
    "\n"
    "Writes a kimi_linear model with RANDOM weights (config.json + model.safetensors).\n"
    "  --out DIR          directory to create/overwrite\n"
    "  --seed S           weight seed (default 1234)\n"
    "  --vocab N --hidden N --layers N --kda-heads N --kda-head-dim N --mla-heads N\n"
    "  --experts N --top-k N   sizes (defaults: the built-in demo model: 512, 128, 4, 4, 32, 4, 6, 2)\n"
    "  --dtype bf16|f16|f32    stored weight type (default bf16)\n";

// Parses the size flags shared by make-demo-model into `o`.
Status ReadDemoOptions(const Flags& flags, DemoModelOptions* o) {
  struct IntFlag {
    const char* name;
    int32_t* field;
    int64_t max;
  };
  const IntFlag ints[] = {{"vocab", &o->vocab_size, 1 << 22},     {"hidden", &o->hidden_size, 16384},
                          {"layers", &o->num_layers, 512},        {"kda-heads", &o->kda_heads, 1024},
                          {"kda-head-dim", &o->kda_head_dim, 1024}, {"mla-heads", &o->mla_heads, 1024},
                          {"experts", &o->num_experts, 4096},     {"top-k", &o->experts_per_token, 4096}};
  for (const IntFlag& f : ints) {
    STRATA_ASSIGN_OR_RETURN(int64_t v, flags.Int(f.name, *f.field, 1, f.max));
    *f.field = static_cast<int32_t>(v);
  }
  STRATA_ASSIGN_OR_RETURN(int64_t seed, flags.Int("seed", static_cast<int64_t>(o->seed), 0,
                                                  std::numeric_limits<int64_t>::max()));
  o->seed = static_cast<uint64_t>(seed);
  const std::string dtype = flags.String("dtype", "bf16");
  if (dtype == "bf16") {
    o->weight_dtype = DType::kBF16;
  } else if (dtype == "f16") {
    o->weight_dtype = DType::kF16;
  } else if (dtype == "f32") {
    o->weight_dtype = DType::kF32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: expected bf16, f16 or f32, got '", dtype, "'"));
  }
  return OkStatus();
}

}  // namespace

int RunMakeDemoModel(int argc, char** argv) {
  const std::string cmd = "make-demo-model";
  Flags flags(cmd,
              {"out", "seed", "vocab", "hidden", "layers", "kda-heads", "kda-head-dim", "mla-heads", "experts",
               "top-k", "dtype"},
              {"help"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kMakeHelp, stdout);
    return kExitOk;
  }
  auto out = flags.Required("out");
  if (!out.ok()) return Fail(cmd, out.status(), kExitUsage);
  DemoModelOptions o;
  if (Status st = ReadDemoOptions(flags, &o); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (Status st = WriteDemoKimiLinearModel(*out, o); !st.ok()) return Fail(cmd, st, ExitCodeFor(st));
  std::printf("wrote a kimi_linear model with RANDOM weights (seed %llu) to %s\n",
              static_cast<unsigned long long>(o.seed), out->c_str());
  return kExitOk;
}

}  // namespace strata::cli
