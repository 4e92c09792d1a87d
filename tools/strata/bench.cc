// `strata bench`: prefill and decode speed of a model (the demo model when no
// --model is given).
//
// Classic mode (CPU, no --batch/--context): CPU prefill and decode throughput
// as the median over repeats after one warm-up; for decode it also estimates
// the weight bytes one token reads (routed experts counted at top_k /
// num_experts, one embedding row) and compares bytes/time with this machine's
// measured copy bandwidth, since decode is memory-bound.
//
// Sweep mode (--device cuda/auto, or --batch/--context given): prefill time
// per prompt length against FLOPs / bf16 peak, and batched decode time per
// (batch, context) against the bytes a step must move / HBM bandwidth (the
// cost model of exec/cost_model.h, any built-in architecture). With
// --load-format dummy (or --preset kimi-linear-48b-a3b) no checkpoint is
// needed; --fill-context sets each state's length with random cache contents
// instead of running prefill (a benchmark-only shortcut).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "internal.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata bench [--model DIR | --preset kimi-linear-48b-a3b] [--device cpu|cuda|auto]\n"
    "                    [--load-format auto|dummy] [--prompt-len P[,P..]] [--gen-len G]\n"
    "                    [--batch B[,B..]] [--context C[,C..]] [--fill-context] [--threads N] [--repeats R]\n"
    "                    [--batch-invariant]\n"
    "\n"
    "  --model DIR        model directory (default: the demo model, random weights)\n"
    "  --preset NAME      kimi-linear-48b-a3b: that model's config.json with dummy weights (no download)\n"
    "  --device D         cpu (default), cuda or auto (the GPU when usable, else the CPU with a notice)\n"
    "  --load-format F    auto (the checkpoint) or dummy (config.json only, random weights)\n"
    "  --prompt-len P     prefill length(s) (default 128; in sweep mode: the --context values)\n"
    "  --gen-len G        timed decode steps (default 32)\n"
    "  --batch B,..       sweep: sequences decoded together (default 1)\n"
    "  --context C,..     sweep: tokens already in each sequence when decode is timed\n"
    "  --fill-context     sweep: set each state's length with random cache contents instead of running\n"
    "                     prefill (BENCHMARK-ONLY shortcut; the decode cost is the same)\n"
    "  --batch-invariant  GPU: the batch- and chunk-invariant kernels (to measure what they cost)\n"
    "  --bandwidth-gbs X  HBM bandwidth the decode limit is computed with (default 4270, H200 copy)\n"
    "  --peak-tflops X    bf16 peak the prefill limit is computed with (default 686, H200 matmul)\n"
    "  --threads N        compute threads (default: one per core)\n"
    "  --repeats R        timed repeats after one warm-up; the median is reported (default 5; sweep: 3)\n"
    "  --no-membw         skip the memory-bandwidth probe (classic mode)\n"
    "\n"
    "Sweep mode runs when --device is cuda/auto or --batch/--context is given. Decode is reported as\n"
    "ms per step and per token, with the bytes a step must move (non-expert weights, the expected\n"
    "distinct experts of the batch, lm_head, recurrent states and latent caches) over the bandwidth\n"
    "as its limit; prefill as ms with FLOPs over the bf16 peak as its limit.\n";

// Weight bytes one decode token reads: everything except the routed experts
// (top_k of num_experts per layer are used) and the embedding (one row).
StatusOr<double> ActiveBytesPerToken(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::Open(dir));
  std::ifstream f(dir + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  double expert_fraction = 1.0;
  if (!cfg.is_discarded()) {
    const auto get = [&](std::initializer_list<const char*> keys) -> double {
      for (const char* k : keys) {
        if (cfg.contains(k) && cfg[k].is_number()) return cfg[k].get<double>();
      }
      return 0;
    };
    const double e = get({"num_experts", "n_routed_experts", "num_local_experts"});
    const double k = get({"num_experts_per_token", "num_experts_per_tok"});
    if (e > 0 && k > 0) expert_fraction = k / e;
  }
  double bytes = 0;
  for (const std::string& name : store->Names()) {
    STRATA_ASSIGN_OR_RETURN(TensorView t, store->Get(name));
    double b = static_cast<double>(t.bytes);
    if (name.find(".experts.") != std::string::npos) {
      b *= expert_fraction;
    } else if (name.find("embed_tokens") != std::string::npos && t.rank() == 2) {
      b /= static_cast<double>(t.dim(0));
    }
    bytes += b;
  }
  return bytes;
}

// Copy bandwidth (bytes read + written per second) with `pool`'s threads, best
// of a few copies of a buffer well beyond the caches.
double CopyBandwidth(ThreadPool* pool) {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool->ParallelFor(static_cast<int64_t>(n), int64_t{1} << 22, [&](int64_t lo, int64_t hi) {
      std::memcpy(b.data() + lo, a.data() + lo, static_cast<size_t>(hi - lo));
    });
    const double s = SecondsSince(t0);
    best = std::max(best, 2.0 * static_cast<double>(n) / s);
    a[static_cast<size_t>(rep)] = b[static_cast<size_t>(n - 1 - rep)];  // keep the copies observable
  }
  return best;
}

// Sweep-mode settings.
struct Sweep {
  std::vector<int64_t> prefill;   // prompt lengths timed from an empty state
  std::vector<int64_t> contexts;  // cached tokens when decode is timed
  std::vector<int64_t> batches;
  int64_t gen = 32;
  int64_t repeats = 3;
  bool fill = false;
  double bandwidth = 4270e9;  // bytes/s
  double peak = 686e12;       // FLOP/s
};

// Decode steps before timing: the first step of a new shape runs eagerly and
// the second captures its CUDA graph.
constexpr int64_t kWarmSteps = 2;

int RunSweep(const std::string& cmd, const std::string& dir, LoadOptions lo, const Sweep& sw) {
  // The cost model needs the layer list (a built-in architecture).
  std::optional<exec::ArchSpec> spec;
  if (auto described = DescribeConfigFile(dir + "/config.json"); described.ok()) spec = *described;
  int64_t max_ctx = 1;
  for (int64_t p : sw.prefill) max_ctx = std::max(max_ctx, p + 1);
  for (int64_t c : sw.contexts) max_ctx = std::max(max_ctx, c + kWarmSteps + sw.gen + 1);
  int64_t max_batch = 1;
  for (int64_t b : sw.batches) max_batch = std::max(max_batch, b);
  lo.max_batch = max_batch;
  lo.max_sequences = max_batch;
  lo.max_context_tokens = max_ctx;

  const auto t_load = std::chrono::steady_clock::now();
  auto loaded = LoadModel(dir, lo);
  if (!loaded.ok()) return Fail(cmd, loaded.status(), kExitFailure);
  const double load_s = SecondsSince(t_load);
  const Model& model = **loaded;
  const ModelInfo& info = model.info();
  PrintPlacementNotice(cmd, info.notice);
  PrintTuningNotice(cmd, info.device, info.tuning);
  const int64_t V = info.vocab_size;
  std::printf("model: %s%s (%s, %d layers, %s parameters, %s of weights)\n", dir.c_str(),
              lo.load_format == LoadFormat::kDummy ? " [dummy weights]" : "", info.architecture.c_str(),
              info.num_layers, FormatCount(info.num_parameters).c_str(),
              FormatBytes(static_cast<double>(info.parameter_bytes)).c_str());
  std::printf("device: %s; loaded in %.1f s\n", info.device.c_str(), load_s);
#if defined(STRATA_HAVE_CUDA)
  if (auto st = cuda_exec::GetCudaExecutorStats(model); st.ok()) {
    std::printf("cuda plan: max batch %lld, max context %s, paged cache %s (%s tokens), scratch %s\n",
                static_cast<long long>(st->max_batch), FormatCount(st->max_context_tokens).c_str(),
                FormatBytes(static_cast<double>(st->kv_pool_bytes)).c_str(),
                FormatCount(st->kv_blocks_total * 64).c_str(), FormatBytes(static_cast<double>(st->scratch_bytes)).c_str());
  }
#endif
  std::printf("limits: decode bytes / %.0f GB/s, prefill FLOPs / %.0f TFLOP/s%s\n",
              sw.bandwidth / 1e9, sw.peak / 1e12,
              spec ? "" : " (not a built-in architecture: limits not computed)");

  // --- prefill ---------------------------------------------------------------
  if (!sw.prefill.empty()) {
    std::printf("\nprefill (median of %lld after one warm-up)\n", static_cast<long long>(sw.repeats));
    std::printf("  %8s %10s %12s %9s %10s %8s\n", "tokens", "ms", "tokens/s", "TFLOP/s", "limit ms", "of limit");
  }
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t P : sw.prefill) {
    std::vector<int32_t> prompt(static_cast<size_t>(P));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 3) % V);
    std::vector<double> times;
    Status failed;
    for (int64_t rep = 0; rep <= sw.repeats && failed.ok(); ++rep) {
      auto state = model.NewState(P + 1);
      if (!state.ok()) {
        failed = state.status();
        break;
      }
      const auto t0 = std::chrono::steady_clock::now();
      failed = model.Forward(prompt, **state, logits.data(), /*all_logits=*/false);
      if (rep > 0) times.push_back(SecondsSince(t0));
    }
    if (!failed.ok()) {
      std::printf("  %8lld skipped: %s\n", static_cast<long long>(P), std::string(failed.message()).c_str());
      continue;
    }
    const double s = Median(times);
    const double flops = spec ? exec::PrefillFlops(*spec, P).value_or(0) : 0;
    const double limit_s = flops / sw.peak;
    std::printf("  %8lld %10.2f %12.0f %9.1f %10.2f %7.1f%%\n", static_cast<long long>(P), s * 1e3,
                static_cast<double>(P) / s, flops / s / 1e12, limit_s * 1e3, 100.0 * limit_s / s);
  }

  // --- decode ------------------------------------------------------------------
  if (!sw.contexts.empty()) {
    std::printf("\ndecode (%lld timed steps after %lld warm-up; greedy sampling %s; contexts %s)\n",
                static_cast<long long>(sw.gen), static_cast<long long>(kWarmSteps),
                info.device == "cpu" ? "on the CPU" : "on the device",
                sw.fill ? "filled with random cache contents (--fill-context)" : "built by prefill");
    std::printf("  %6s %8s %10s %10s %11s %10s %10s %8s\n", "batch", "context", "ms/step", "ms/token", "tokens/s",
                "GB/step", "limit ms", "of limit");
  }
  for (int64_t C : sw.contexts) {
    for (int64_t B : sw.batches) {
      std::vector<std::unique_ptr<SequenceState>> owned;
      Status failed;
      for (int64_t b = 0; b < B && failed.ok(); ++b) {
        auto st = model.NewState(C + kWarmSteps + sw.gen + 1);
        if (!st.ok()) {
          failed = st.status();
          break;
        }
        if (C > 0) {
          if (sw.fill) {
            failed = model.FillContextForBenchmark(**st, C, static_cast<uint64_t>(b + 1));
          } else {
            std::vector<int32_t> prompt(static_cast<size_t>(C));
            for (size_t i = 0; i < prompt.size(); ++i) {
              prompt[i] = static_cast<int32_t>((i * 7919 + 3 + static_cast<size_t>(b) * 13) % V);
            }
            failed = model.Forward(prompt, **st, nullptr, false);
          }
        }
        owned.push_back(std::move(*st));
      }
      std::vector<SequenceState*> states;
      for (auto& st : owned) states.push_back(st.get());
      std::vector<int32_t> tokens(static_cast<size_t>(B)), next(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) tokens[static_cast<size_t>(b)] = static_cast<int32_t>((b * 131 + 17) % V);
      const std::vector<DecodeSampling> greedy(static_cast<size_t>(B));
      double total = 0;
      for (int64_t step = 0; step < kWarmSteps + sw.gen && failed.ok(); ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        failed = model.DecodeBatchSample(tokens, states, greedy, next.data());
        if (step >= kWarmSteps) total += SecondsSince(t0);
        tokens = next;
      }
      if (!failed.ok()) {
        std::printf("  %6lld %8lld skipped: %s\n", static_cast<long long>(B), static_cast<long long>(C),
                    std::string(failed.message()).c_str());
        continue;
      }
      const double step_s = total / static_cast<double>(sw.gen);
      // The context grows during the timed steps; charge the middle one.
      const double bytes = spec ? exec::DecodeStepBytes(*spec, B, C + kWarmSteps + sw.gen / 2)
                                      .value_or(exec::DecodeBytes{})
                                      .Total()
                                : 0;
      const double limit_s = bytes / sw.bandwidth;
      std::printf("  %6lld %8lld %10.3f %10.4f %11.1f %10.2f %10.3f %7.1f%%\n", static_cast<long long>(B),
                  static_cast<long long>(C), step_s * 1e3, step_s * 1e3 / static_cast<double>(B),
                  static_cast<double>(B) / step_s, bytes / 1e9, limit_s * 1e3, 100.0 * limit_s / step_s);
    }
  }
#if defined(STRATA_HAVE_CUDA)
  if (auto st = cuda_exec::GetCudaExecutorStats(model); st.ok()) {
    std::printf("\ncuda graphs: %lld captured, %lld steps replayed, %lld steps eager%s%s\n",
                static_cast<long long>(st->graph_captures), static_cast<long long>(st->graph_launches),
                static_cast<long long>(st->eager_steps), st->graph_error.empty() ? "" : "; disabled: ",
                st->graph_error.c_str());
  }
#endif
  return kExitOk;
}

std::vector<int64_t> ToInt64(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

}  // namespace

int RunBench(int argc, char** argv) {
  if (argc > 2 && std::string(argv[2]) == "serve") return RunBenchServe(argc, argv);
  const std::string cmd = "bench";
  Flags flags(cmd,
              {"model", "preset", "prompt-len", "gen-len", "threads", "repeats", "device", "load-format", "batch",
               "context", "bandwidth-gbs", "peak-tflops"},
              {"help", "no-membw", "fill-context", "batch-invariant"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  LoadOptions lo;
  lo.options = OptionsFlag();
  if (int rc = ParseDevice(cmd, flags.String("device", "cpu"), &lo.device); rc != kExitOk) return rc;
  if (int rc = ParseLoadFormat(cmd, flags.String("load-format", "auto"), &lo.load_format); rc != kExitOk) {
    return rc;
  }
  lo.batch_invariant = flags.Bool("batch-invariant");
  const bool sweep = lo.device != Device::kCpu || flags.Has("batch") || flags.Has("context");
  if (flags.Has("model") && flags.Has("preset")) {
    return Fail(cmd, "--model and --preset are exclusive", kExitUsage);
  }
  if (sweep) {
    Sweep sw;
    auto prompts = flags.IntList("prompt-len");
    auto contexts = flags.IntList("context");
    auto batches = flags.IntList("batch");
    auto G = flags.Int("gen-len", 32, 1, 1 << 20);
    auto repeats = flags.Int("repeats", 3, 1, 1000);
    auto bw = flags.Double("bandwidth-gbs", 4270, 1e-3, 1e7);
    auto peak = flags.Double("peak-tflops", 686, 1e-6, 1e6);
    for (const Status& s : {prompts.status(), contexts.status(), batches.status(), G.status(), repeats.status(),
                            bw.status(), peak.status()}) {
      if (!s.ok()) return Fail(cmd, s, kExitUsage);
    }
    sw.contexts = ToInt64(*contexts);
    sw.batches = batches->empty() ? std::vector<int64_t>{1} : ToInt64(*batches);
    sw.prefill = flags.Has("prompt-len") ? ToInt64(*prompts) : sw.contexts;
    if (sw.prefill.empty() && sw.contexts.empty()) sw.prefill = {128}, sw.contexts = {128};
    for (int64_t v : sw.prefill) {
      if (v < 1) return Fail(cmd, "--prompt-len: lengths must be >= 1", kExitUsage);
    }
    for (int64_t v : sw.contexts) {
      if (v < 0) return Fail(cmd, "--context: lengths must be >= 0", kExitUsage);
    }
    for (int64_t v : sw.batches) {
      if (v < 1) return Fail(cmd, "--batch: sizes must be >= 1", kExitUsage);
    }
    sw.gen = *G;
    sw.repeats = *repeats;
    sw.fill = flags.Bool("fill-context");
    sw.bandwidth = *bw * 1e9;
    sw.peak = *peak * 1e12;
    std::string dir = flags.String("model", "");
    if (flags.Has("preset")) {
      auto preset = WriteBenchPreset(flags.String("preset", ""));
      if (!preset.ok()) return Fail(cmd, preset.status(), ExitCodeFor(preset.status()));
      dir = *preset;
      lo.load_format = LoadFormat::kDummy;
    }
    if (dir.empty()) {
      dir = DefaultDemoDir();
      if (Status st = WriteDemoKimiLinearModel(dir, DemoModelOptions{}); !st.ok()) {
        return Fail(cmd, absl::StrCat("writing the demo model to ", dir, ": ", st.message()), kExitFailure);
      }
    }
    auto threads = flags.Int("threads", 0, 0, 4096);
    if (!threads.ok()) return Fail(cmd, threads.status(), kExitUsage);
    ThreadPool pool(static_cast<int>(*threads));
    lo.pool = &pool;
    return RunSweep(cmd, dir, lo, sw);
  }
  if (flags.Has("preset") || flags.Bool("fill-context")) {
    return Fail(cmd, "--preset and --fill-context need sweep mode (--device cuda/auto or --batch/--context)",
                kExitUsage);
  }
  auto P = flags.Int("prompt-len", 128, 1, 1 << 20);
  auto G = flags.Int("gen-len", 32, 1, 1 << 20);
  auto threads = flags.Int("threads", 0, 0, 4096);
  auto repeats = flags.Int("repeats", 5, 1, 1000);
  for (const Status& s : {P.status(), G.status(), threads.status(), repeats.status()}) {
    if (!s.ok()) return Fail(cmd, s, kExitUsage);
  }
  std::string dir = flags.String("model", "");
  if (dir.empty()) {
    dir = DefaultDemoDir();
    if (Status st = WriteDemoKimiLinearModel(dir, DemoModelOptions{}); !st.ok()) {
      return Fail(cmd, absl::StrCat("writing the demo model to ", dir, ": ", st.message()), kExitFailure);
    }
    std::printf("model: built-in demo model (RANDOM weights) at %s\n", dir.c_str());
  }

  ThreadPool pool(static_cast<int>(*threads));
  lo.pool = &pool;
  auto model = LoadModel(dir, lo);
  if (!model.ok()) return Fail(cmd, model.status(), kExitFailure);
  const ModelInfo& info = (*model)->info();
  const int64_t vocab = info.vocab_size;
  if (info.max_context > 0 && *P + *G > info.max_context) {
    return Fail(cmd, absl::StrCat("--prompt-len + --gen-len exceeds the model's context of ", info.max_context),
                kExitUsage);
  }
  std::vector<int32_t> prompt(static_cast<size_t>(*P));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 3) % vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));

  std::vector<double> prefill_tps, decode_tps;
  for (int64_t rep = 0; rep <= *repeats; ++rep) {  // rep 0 is the warm-up
    auto state = (*model)->NewState(*P + *G + 1);
    if (!state.ok()) return Fail(cmd, state.status(), kExitFailure);
    auto t0 = std::chrono::steady_clock::now();
    Status st = (*model)->Forward(prompt, **state, logits.data(), /*all_logits=*/false);
    const double prefill_s = SecondsSince(t0);
    if (!st.ok()) return Fail(cmd, st, kExitFailure);
    t0 = std::chrono::steady_clock::now();
    for (int64_t g = 0; g < *G && st.ok(); ++g) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      st = (*model)->Forward(std::span(&next, 1), **state, logits.data(), false);
    }
    const double decode_s = SecondsSince(t0);
    if (!st.ok()) return Fail(cmd, st, kExitFailure);
    if (rep == 0) continue;
    prefill_tps.push_back(static_cast<double>(*P) / prefill_s);
    decode_tps.push_back(static_cast<double>(*G) / decode_s);
  }
  const auto minmax_p = std::minmax_element(prefill_tps.begin(), prefill_tps.end());
  const auto minmax_d = std::minmax_element(decode_tps.begin(), decode_tps.end());
  std::printf("model: %s (%s, %d layers, %s parameters, %s)\n", dir.c_str(), info.architecture.c_str(),
              info.num_layers, FormatCount(info.num_parameters).c_str(),
              FormatBytes(static_cast<double>(info.parameter_bytes)).c_str());
  std::printf("threads: %d, prompt %lld, decode %lld steps, median of %lld repeats\n", pool.num_threads(),
              static_cast<long long>(*P), static_cast<long long>(*G), static_cast<long long>(*repeats));
  std::printf("prefill: %.1f tokens/s (min %.1f, max %.1f)\n", Median(prefill_tps), *minmax_p.first,
              *minmax_p.second);
  std::printf("decode:  %.1f tokens/s (min %.1f, max %.1f)\n", Median(decode_tps), *minmax_d.first,
              *minmax_d.second);
  auto active = ActiveBytesPerToken(dir);
  if (active.ok()) {
    const double moved = *active * Median(decode_tps);
    std::printf("decode weight reads: ~%s per token -> %.2f GB/s\n", FormatBytes(*active).c_str(), moved / 1e9);
    if (!flags.Bool("no-membw")) {
      const double bw = CopyBandwidth(&pool);
      std::printf("memory copy bandwidth (read+write, %d threads): %.2f GB/s; decode reads at %.1f%% of it\n",
                  pool.num_threads(), bw / 1e9, 100.0 * moved / bw);
    }
  } else {
    std::printf("decode weight reads: unknown (%s)\n", std::string(active.status().message()).c_str());
  }
  return kExitOk;
}

}  // namespace strata::cli
