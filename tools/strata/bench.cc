// `strata bench`: CPU prefill and decode throughput of a model (the demo model
// when no --model is given), as the median over repeats after one warm-up.
// For decode it also estimates the weight bytes one token reads (routed experts
// counted at top_k / num_experts, one embedding row) and compares bytes/time
// with this machine's measured copy bandwidth, since decode is memory-bound.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/thread_pool.h"
#include "cli.h"
#include "model/demo_model.h"
#include "model/model.h"
#include "model/weight_store.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata bench [--model DIR] [--prompt-len P] [--gen-len G] [--threads N] [--repeats R]\n"
    "\n"
    "  --model DIR      model directory (default: the demo model, random weights)\n"
    "  --prompt-len P   prefill length (default 128)\n"
    "  --gen-len G      single-token decode steps after the prefill (default 32)\n"
    "  --threads N      compute threads (default: one per core)\n"
    "  --repeats R      timed repeats after one warm-up; the median is reported (default 5)\n"
    "  --no-membw       skip the memory-bandwidth probe\n";

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

}  // namespace

int RunBench(int argc, char** argv) {
  const std::string cmd = "bench";
  Flags flags(cmd, {"model", "prompt-len", "gen-len", "threads", "repeats", "device"}, {"help", "no-membw"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  if (int rc = CheckDevice(cmd, flags.String("device", "cpu")); rc != kExitOk) return rc;
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
  LoadOptions lo;
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
