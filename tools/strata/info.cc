// `strata info`: what a model directory holds, as the SDK sees it: architecture,
// per-layer kinds, parameter count and bytes, and the decode state it needs
// (growing per token, fixed per sequence), with totals at a few context sizes.
// `strata info --options [STR]`: the tuning registry's table, with the values
// STR gives over STRATA_OPTIONS (with --model, after the model's info).
#include <cstdio>
#include <map>

#include "base/tuning.h"
#include "internal.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata info --model DIR [--device cpu|cuda|auto] [--load-format auto|dummy] [--check-weights]\n"
    "                   [--options [STR]]\n"
    "       strata info --options [STR]\n"
    "\n"
    "  --model DIR          model directory (config.json + *.safetensors)\n"
    "  --device D           where to load it (default cpu); cuda/auto fall back to the CPU with a notice\n"
    "  --load-format F      auto (default) or dummy: config.json only, random weights\n"
    "  --check-weights      read every weight and fail, naming the tensor and element, on a NaN or infinity\n"
    "  --options [STR]      list the tuning options (name, type, default, current value with STR over\n"
    "                       STRATA_OPTIONS, rollback value, what it selects); STR also loads the model\n"
    "                       with them (docs/tuning.md)\n";

// The registry's table with the values the options in effect give.
int PrintOptionsTable(const std::string& cmd) {
  auto current = tuning::Resolve(OptionsFlag());
  if (!current.ok()) return Fail(cmd, current.status(), kExitUsage);
  const std::string env = tuning::EnvironmentOptions();
  std::printf("tuning options (%s: %s; --options: %s)\n%s", tuning::kEnvironmentVariable,
              env.empty() ? "unset" : env.c_str(), OptionsFlag().empty() ? "none" : OptionsFlag().c_str(),
              tuning::FormatTable(*current).c_str());
  return kExitOk;
}

}  // namespace

int RunInfo(int argc, char** argv) {
  const std::string cmd = "info";
  Flags flags(cmd, {"model", "device", "load-format"}, {"help", "check-weights"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  if (OptionsFlagGiven() && !flags.Has("model")) return PrintOptionsTable(cmd);
  auto dir = flags.Required("model");
  if (!dir.ok()) return Fail(cmd, dir.status(), kExitUsage);
  LoadOptions lo;
  lo.options = OptionsFlag();
  if (int rc = ParseDevice(cmd, flags.String("device", "cpu"), &lo.device); rc != kExitOk) return rc;
  if (int rc = ParseLoadFormat(cmd, flags.String("load-format", "auto"), &lo.load_format); rc != kExitOk) return rc;
  lo.check_weights = flags.Bool("check-weights");
  auto model = LoadModel(*dir, lo);
  if (!model.ok()) return Fail(cmd, model.status(), kExitFailure);
  const ModelInfo& info = (*model)->info();
  PrintPlacementNotice(cmd, info.notice);
  PrintTuningNotice(cmd, info.device, info.tuning);

  std::printf("model:          %s%s%s\n", dir->c_str(),
              lo.load_format == LoadFormat::kDummy ? " (dummy weights: random)" : "",
              lo.check_weights ? " (every weight finite)" : "");
  std::printf("architecture:   %s\n", info.architecture.c_str());
  std::printf("device:         %s\n", info.device.c_str());
  if (!info.notice.empty()) std::printf("notice:         %s\n", info.notice.c_str());
#if defined(STRATA_HAVE_CUDA)
  if (auto st = cuda_exec::GetCudaExecutorStats(**model); st.ok()) {
    std::printf("device memory:  weights %s, scratch %s, sequence slots %s (%lld), paged cache %s (%lld blocks of 64 tokens)\n",
                FormatBytes(static_cast<double>(st->weight_bytes)).c_str(),
                FormatBytes(static_cast<double>(st->scratch_bytes)).c_str(),
                FormatBytes(static_cast<double>(st->state_pool_bytes)).c_str(), static_cast<long long>(st->slots_total),
                FormatBytes(static_cast<double>(st->kv_pool_bytes)).c_str(), static_cast<long long>(st->kv_blocks_total));
    std::printf("cuda plan:      max batch %lld, max context %s tokens, prefill slice %lld tokens\n",
                static_cast<long long>(st->max_batch), FormatCount(st->max_context_tokens).c_str(),
                static_cast<long long>(st->prefill_slice_tokens));
  }
#endif
  std::printf("vocab / hidden: %d / %d\n", info.vocab_size, info.hidden_size);
  std::printf("max context:    %s tokens\n", FormatCount(info.max_context).c_str());
  std::printf("bos / eos ids:  %d / %d\n", info.bos_token_id, info.eos_token_id);
  std::map<std::string, int> kinds;
  for (const auto& k : info.layer_kinds) ++kinds[k];
  std::printf("layers:         %d (", info.num_layers);
  bool first = true;
  for (const auto& [k, n] : kinds) {
    std::printf("%s%d x %s", first ? "" : ", ", n, k.c_str());
    first = false;
  }
  std::printf(")\n");
  for (size_t i = 0; i < info.layer_kinds.size(); ++i) {
    std::printf("  layer %-3zu %s\n", i, info.layer_kinds[i].c_str());
  }
  std::printf("parameters:     %s stored elements, %s (%s bytes)\n", FormatCount(info.num_parameters).c_str(),
              FormatBytes(static_cast<double>(info.parameter_bytes)).c_str(),
              FormatCount(static_cast<int64_t>(info.parameter_bytes)).c_str());
  std::printf("decode state:   %s bytes per token (growing: attention caches)\n",
              FormatCount(static_cast<int64_t>(info.state_bytes_per_token)).c_str());
  std::printf("                %s bytes per sequence (fixed: recurrent states, conv tails) = %s\n",
              FormatCount(static_cast<int64_t>(info.state_bytes_per_sequence)).c_str(),
              FormatBytes(static_cast<double>(info.state_bytes_per_sequence)).c_str());
  for (int64_t tokens : {int64_t{4096}, int64_t{32768}, int64_t{131072}}) {
    const double total = static_cast<double>(info.state_bytes_per_sequence) +
                         static_cast<double>(info.state_bytes_per_token) * static_cast<double>(tokens);
    std::printf("  one sequence of %7s tokens: %s%s\n", FormatCount(tokens).c_str(), FormatBytes(total).c_str(),
                info.max_context > 0 && tokens > info.max_context ? " (beyond the model's max context)" : "");
  }
  if (!info.tuning.empty()) std::printf("tuning:         %s\n", info.tuning.c_str());
  if (OptionsFlagGiven()) {
    std::printf("\n");
    return PrintOptionsTable(cmd);
  }
  return kExitOk;
}

}  // namespace strata::cli
