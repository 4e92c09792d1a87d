// `strata generate --prompts-jsonl` and `strata bench serve`: many requests
// through the serving engine at once (continuous batching, chunked prefill,
// prefix cache), from one closed-loop driver that keeps --concurrency
// requests in flight. generate prints the ids; bench serve reports
// throughput, TTFT/TPOT percentiles and the prefix-cache hit rate, in-process
// (like `vllm bench serve` without the HTTP server). Both drive the C ABI
// (strata.hpp) as a serving host does: sessions, submit, one event loop, and
// strata_engine_get_metrics / strata_engine_get_stat for the counters.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli.h"
#include "jsonl.h"

namespace strata::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Outcome {
  std::vector<int32_t> tokens;
  Clock::time_point submitted, first_token, last_token;
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_status status = STRATA_OK;
  std::string message;  // why it failed
};

// Keeps up to `concurrency` requests in flight, each on a fresh session of
// `max_context` tokens (one size for all, so prefix-cache entries are shared),
// until every prompt is done. Throws api::Error when a submit fails.
void RunClosedLoop(const api::Engine& engine, const api::Model& model,
                   const std::vector<std::vector<int32_t>>& prompts, const api::RequestParams& params,
                   bool seed_per_request, int64_t concurrency, int64_t max_context, std::vector<Outcome>* out) {
  out->assign(prompts.size(), Outcome{});
  struct Live {
    size_t index;
    api::Session session;
    api::Request request;  // released before its session
  };
  std::unordered_map<const strata_request*, Live> live;
  size_t next = 0, done = 0;
  auto submit_next = [&]() {
    const size_t i = next++;
    api::Session session(model, max_context);
    api::RequestParams p = params;
    if (seed_per_request) p.c.seed += i;
    (*out)[i].submitted = Clock::now();
    try {
      api::Request request = session.Submit(prompts[i], p);
      const strata_request* key = request.get();
      live.emplace(key, Live{i, std::move(session), std::move(request)});
    } catch (const api::Error& e) {
      throw api::Error(e.status(), absl::StrCat("prompt ", i + 1, ": ", MessageOf(e)));
    }
  };
  while (next < prompts.size() && static_cast<int64_t>(live.size()) < concurrency) submit_next();
  while (done < prompts.size()) {
    const std::optional<strata_event> ev = engine.Poll(-1);
    if (!ev) continue;
    auto it = live.find(ev->request);
    if (it == live.end()) continue;
    Outcome& o = (*out)[it->second.index];
    if (ev->type == STRATA_EVENT_TOKEN) {
      const auto now = Clock::now();
      if (o.tokens.empty()) o.first_token = now;
      o.last_token = now;
      o.tokens.push_back(ev->token);
      continue;
    }
    if (ev->type != STRATA_EVENT_FINISHED) continue;
    o.reason = ev->finish_reason;
    o.status = ev->status;
    if (o.status != STRATA_OK) o.message = it->second.request.ErrorMessage();
    live.erase(it);  // the session goes with it
    ++done;
    if (next < prompts.size()) submit_next();
  }
}

// Flags shared by both commands: model placement, engine and sampling.
const std::vector<std::string> kCommonValueFlags = {
    "model", "preset", "device", "load-format", "threads", "concurrency", "prefill-chunk", "prefill-while-decoding",
    "max-batch", "max-sequences", "memory-budget", "prefix-cache-bytes", "prefix-block", "temperature", "top-k",
    "top-p", "seed", "kv-disk", "kv-disk-bytes", "kv-disk-policy", "stats-json"};
const std::vector<std::string> kCommonBoolFlags = {"help", "no-prefix-cache", "verbose", "host-sampling",
                                                   "batch-invariant"};

constexpr char kCommonHelp[] =
    "  --model DIR               model directory (or --preset kimi-linear-48b-a3b: dummy weights, no download)\n"
    "  --device cpu|cuda|auto    cpu (default); cuda/auto: the GPU when usable, else the CPU with a notice\n"
    "  --load-format auto|dummy  the checkpoint (default) or config.json with random weights\n"
    "  --concurrency C           requests kept in flight (default 8)\n"
    "  --prefill-chunk N         prompt tokens per scheduler iteration, all requests together\n"
    "                            (default: 512 on the CPU, 8192 on a GPU)\n"
    "  --prefill-while-decoding N  the prefill budget of an iteration that also decodes: bounds the decode\n"
    "                            stall (TPOT) (default: the chunk on the CPU, 2048 on a GPU; at most the chunk)\n"
    "  --max-batch B             most rows of one decode step (default: --concurrency)\n"
    "  --max-sequences S         GPU state pool: live sessions (default 2 x concurrency + 8), and\n"
    "                            as many checkpoint slots for prefix-cache entries\n"
    "  --memory-budget BYTES     state + prefix-cache bytes the scheduler keeps resident (default: unlimited)\n"
    "  --no-prefix-cache         turn the prefix cache off\n"
    "  --prefix-cache-bytes N    prefix-cache capacity (default 256 MiB)\n"
    "  --prefix-block N          prefix-cache block size in tokens (default 64)\n"
    "  --kv-disk DIR             a disk tier under the prefix cache: entries are written to DIR and\n"
    "                            prompts the cache misses are looked up there (shared by processes)\n"
    "  --kv-disk-bytes N         the disk tier's capacity (default 8 GiB)\n"
    "  --kv-disk-policy P        all (default: every cache entry goes down) or reused (marks and\n"
    "                            entries a later request hit)\n"
    "  --stats-json FILE         at exit, every statistic of the engine as JSON, nested at the dots\n"
    "                            (e.g. kv_tiers.disk.hit_tokens)\n"
    "  --temperature T           0 = greedy (default 0); --top-k K --top-p P --seed S\n"
    "  --threads N               compute threads (default: one per core)\n"
    "  --host-sampling           copy every decode row's logits to the host sampler even where the\n"
    "                            device could sample (A/B against device sampling)\n"
    "  --batch-invariant         GPU: batch- and chunk-invariant kernels, so greedy output is the same\n"
    "                            alone or batched, for any prefill chunk, with or without the prefix\n"
    "                            cache (slower; the CPU always is)\n"
    "  --verbose                 also print where the scheduler's time went (phases per iteration)\n";

// --stats-json FILE: every named statistic (strata_engine_list_stats),
// nested at the dots of its name.
int WriteStatsJson(const std::string& cmd, const api::Engine& engine, const std::string& path) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  try {
    for (size_t i = 0;; ++i) {
      const char* name = nullptr;
      if (strata_engine_list_stats(engine.get(), i, &name) != STRATA_OK || name == nullptr) break;
      nlohmann::ordered_json* at = &j;
      for (absl::string_view part : absl::StrSplit(name, '.')) {
        if (!at->is_object() && !at->is_null()) break;
        at = &(*at)[std::string(part)];
      }
      if (at->is_null()) *at = engine.Stat(name).value_or(0.0);
    }
  } catch (const api::Error& e) {
    return Fail(cmd, e, ExitCodeFor(e));
  }
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return Fail(cmd, absl::StrCat("--stats-json: cannot write ", path), kExitFailure);
  return kExitOk;
}

struct Setup {
  std::string options;  // strata_engine_params.options
  std::optional<api::Engine> engine;
  std::optional<api::Model> model;  // after the engine: released before it
  api::RequestParams params;
  int64_t concurrency = 8;
};

// Parses the common flags, creates the engine and loads the model. Returns
// an exit code (kExitOk on success).
int SetUp(const std::string& cmd, const Flags& flags, int64_t max_context, Setup* s,
          int64_t concurrency_override = 0) {
  DeviceFlag device = DeviceFlag::kCpu;
  if (int rc = ParseDevice(cmd, flags.String("device", "cpu"), &device); rc != kExitOk) return rc;
  api::ModelParams mp;
  bool dummy = false;
  if (int rc = ParseLoadFormat(cmd, flags.String("load-format", "auto"), &dummy); rc != kExitOk) return rc;
  if (flags.Has("model") == flags.Has("preset")) return Fail(cmd, "give one of --model and --preset", kExitUsage);
  std::string dir = flags.String("model", "");
  if (flags.Has("preset")) {
    auto preset = WriteBenchPreset(flags.String("preset", ""));
    if (!preset.ok()) return Fail(cmd, preset.status(), ExitCodeFor(preset.status()));
    dir = *preset;
    dummy = true;
  }
  const double kBig = std::numeric_limits<float>::max();
  StatusOr<int64_t> concurrency =
      concurrency_override > 0 ? StatusOr<int64_t>(concurrency_override) : flags.Int("concurrency", 8, 1, 4096);
  // Absent: the engine picks by device (strata_engine_params.options).
  auto chunk = flags.Int("prefill-chunk", 0, 1, int64_t{1} << 30);
  auto while_decoding = flags.Int("prefill-while-decoding", 0, 1, int64_t{1} << 30);
  auto threads = flags.Int("threads", 0, 0, 4096);
  auto budget = flags.Int("memory-budget", 0, 0, std::numeric_limits<int64_t>::max());
  auto cache = flags.Int("prefix-cache-bytes", int64_t{256} << 20, 0, std::numeric_limits<int64_t>::max());
  auto block = flags.Int("prefix-block", 64, 1, 1 << 20);
  if (!block.ok()) return Fail(cmd, block.status(), kExitUsage);
  auto temperature = flags.Double("temperature", 0.0, 0.0, kBig);
  auto top_k = flags.Int("top-k", 0, 0, std::numeric_limits<int32_t>::max());
  auto top_p = flags.Double("top-p", 1.0, 0.0, 1.0);
  auto seed = flags.Int("seed", 0, 0, std::numeric_limits<int64_t>::max());
  for (const Status& st : {concurrency.status(), chunk.status(), while_decoding.status(), threads.status(),
                           budget.status(), cache.status(), temperature.status(), top_k.status(), top_p.status(),
                           seed.status()}) {
    if (!st.ok()) return Fail(cmd, st, kExitUsage);
  }
  auto max_batch = flags.Int("max-batch", *concurrency, 1, 4096);
  if (!max_batch.ok()) return Fail(cmd, max_batch.status(), kExitUsage);
  auto max_sequences = flags.Int("max-sequences", 2 * *concurrency + 8, 1, 1 << 20);
  if (!max_sequences.ok()) return Fail(cmd, max_sequences.status(), kExitUsage);
  s->concurrency = *concurrency;
  // The library checks the sampling ranges at the first submit (exit 2 for a bad value).
  s->params.Temperature(static_cast<float>(*temperature))
      .TopK(static_cast<int32_t>(*top_k))
      .TopP(static_cast<float>(*top_p))
      .Seed(static_cast<uint64_t>(*seed));

  // Scheduler knobs that are not part of the stable struct go in the options string.
  std::vector<std::string> options;
  if (*chunk > 0) options.push_back(absl::StrCat("scheduler.prefill_chunk_tokens=", *chunk));
  if (*while_decoding > 0) options.push_back(absl::StrCat("scheduler.prefill_tokens_while_decoding=", *while_decoding));
  if (flags.Bool("host-sampling")) options.push_back("sampling.on_device=0");
  if (flags.Has("kv-disk")) {
    const std::string dir = flags.String("kv-disk", "");
    if (dir.empty() || dir.find_first_of(",=") != std::string::npos) {
      return Fail(cmd, "--kv-disk needs a directory whose path has no ',' or '='", kExitUsage);
    }
    options.push_back(absl::StrCat("kv.disk_dir=", dir));
  }
  if (flags.Has("kv-disk-policy")) {
    options.push_back(absl::StrCat("kv.disk_policy=", flags.String("kv-disk-policy", "")));
  }
  if (flags.Has("kv-disk-bytes")) {
    auto bytes = flags.Int("kv-disk-bytes", 0, 1, std::numeric_limits<int64_t>::max());
    if (!bytes.ok()) return Fail(cmd, bytes.status(), kExitUsage);
    options.push_back(absl::StrCat("kv.disk_bytes=", *bytes));
  }
  s->options = absl::StrJoin(options, ",");
  api::EngineParams ep = api::EngineParams()
                             .Threads(static_cast<int32_t>(*threads))
                             .MaxBatch(static_cast<int32_t>(*max_batch))
                             .MemoryBudget(static_cast<uint64_t>(*budget))
                             .PrefixCache(flags.Bool("no-prefix-cache") ? 0 : static_cast<uint64_t>(*cache),
                                          static_cast<int32_t>(*block))
                             .Options(s->options.c_str());
  try {
    s->engine.emplace(ep);
  } catch (const api::Error& e) {
    return Fail(cmd, e, kExitUsage);
  }
  // GPU pools are sized at load: a state per live session, and as many
  // checkpoint slots for the prefix cache's entries (LoadOptions::max_checkpoints).
  mp.MaxBatch(*max_batch)
      .MaxSequences(*max_sequences)
      .MaxContext(max_context)
      .BatchInvariant(flags.Bool("batch-invariant"))
      .DummyWeights(dummy);
  try {
    s->model.emplace(LoadModel(cmd, *s->engine, dir, device, mp));
  } catch (const api::Error& e) {
    return Fail(cmd, e, kExitFailure);
  }
  const int64_t model_context = s->model->Info().max_context_tokens;
  if (model_context > 0 && max_context > model_context) {
    return Fail(cmd,
                absl::StrCat("prompt + generated tokens (", max_context, ") exceed the model's context of ",
                             model_context),
                kExitUsage);
  }
  return kExitOk;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

constexpr char kGenerateHelp[] =
    "usage: strata generate --model DIR --prompts-jsonl IN.jsonl --max-new K [flags]\n"
    "\n"
    "Each input line is a JSON array of token ids; prints one JSON array of generated ids per input\n"
    "line, in input order (statistics on stderr). Requests run concurrently through the serving\n"
    "engine; greedy output does not depend on --concurrency, --prefill-chunk or the prefix cache\n"
    "(on a GPU only with --batch-invariant).\n"
    "With --temperature > 0, request i (from 0) samples with seed S + i.\n"
    "\n"
    "  --prompts-jsonl FILE      the prompts\n"
    "  --max-new K               tokens to generate per prompt (default 32)\n"
    "  --ignore-eos              do not stop at the model's EOS id\n";

}  // namespace

int RunGenerateBatch(int argc, char** argv) {
  const std::string cmd = "generate";
  std::vector<std::string> values = kCommonValueFlags, bools = kCommonBoolFlags;
  values.insert(values.end(), {"prompts-jsonl", "max-new"});
  bools.push_back("ignore-eos");
  Flags flags(cmd, values, bools);
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kGenerateHelp, stdout);
    std::fputs(kCommonHelp, stdout);
    return kExitOk;
  }
  auto path = flags.Required("prompts-jsonl");
  if (!path.ok()) return Fail(cmd, path.status(), kExitUsage);
  auto max_new = flags.Int("max-new", 32, 1, 1 << 20);
  if (!max_new.ok()) return Fail(cmd, max_new.status(), kExitUsage);
  std::vector<std::vector<int32_t>> prompts;
  Status read = ForEachJsonLine(*path, [&](const nlohmann::json& v, const std::string& where) -> Status {
    if (!v.is_array() || v.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected a non-empty JSON array of token ids"));
    }
    std::vector<int32_t> p;
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": not a token id: ", x.dump()));
      }
      p.push_back(x.get<int32_t>());
    }
    prompts.push_back(std::move(p));
    return absl::OkStatus();
  });
  // The file or its contents, not the command line (cli.h's exit codes).
  if (!read.ok()) return Fail(cmd, read, kExitFailure);
  if (prompts.empty()) return Fail(cmd, absl::StrCat(*path, ": no prompts"), kExitFailure);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t max_context = static_cast<int64_t>(longest) + *max_new + 1;

  Setup s;
  if (int rc = SetUp(cmd, flags, max_context, &s); rc != kExitOk) return rc;
  s.params.MaxTokens(static_cast<int32_t>(*max_new)).StopAtEos(!flags.Bool("ignore-eos"));
  std::vector<Outcome> out;
  const auto t0 = Clock::now();
  try {
    RunClosedLoop(*s.engine, *s.model, prompts, s.params, /*seed_per_request=*/true, s.concurrency, max_context,
                  &out);
  } catch (const api::Error& e) {
    return Fail(cmd, e, ExitCodeFor(e));
  }
  const double wall = SecondsSince(t0);
  int failures = 0;
  int64_t generated = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    std::printf("%s\n", nlohmann::json(out[i].tokens).dump().c_str());
    generated += static_cast<int64_t>(out[i].tokens.size());
    if (out[i].status != STRATA_OK) {
      ++failures;
      std::fprintf(stderr, "strata generate: line %zu: %s\n", i + 1, out[i].message.c_str());
    }
  }
  const strata_metrics m = s.engine->Metrics();
  std::fprintf(stderr,
               "%zu prompts, %lld tokens generated in %.2f s (%.1f tokens/s); prefix cache hit %lld of %lld tokens; "
               "%lld preemptions\n",
               out.size(), static_cast<long long>(generated), wall, generated / std::max(wall, 1e-9),
               static_cast<long long>(m.prefix_hit_tokens), static_cast<long long>(m.prefix_lookup_tokens),
               static_cast<long long>(m.preemptions));
  if (flags.Has("stats-json")) {
    if (int rc = WriteStatsJson(cmd, *s.engine, flags.String("stats-json", "")); rc != kExitOk) return rc;
  }
  return failures == 0 ? kExitOk : kExitFailure;
}

// The engine counters a bench-serve run reports: the stable metrics plus the
// diagnostics that are named statistics (strata_engine_get_stat).
constexpr const char* kPhases[] = {"schedule", "prefill", "decode", "sample", "emit"};
constexpr const char* kDiskStats[] = {"hit_tokens", "rejected_objects", "errors", "objects_written",
                                      "bytes_written", "bytes_read"};
struct Counters {
  strata_metrics m;
  double slot_evictions, device_rows, host_rows, iterations;
  double disk[std::size(kDiskStats)];
  double phase_ms[std::size(kPhases)];
};

Counters ReadCounters(const api::Engine& engine) {
  auto stat = [&](const std::string& name) { return engine.Stat(name.c_str()).value_or(0.0); };
  Counters c;
  c.m = engine.Metrics();
  c.slot_evictions = stat("prefix_cache.slot_evictions");
  c.device_rows = stat("sampling.device_rows");
  c.host_rows = stat("sampling.host_rows");
  c.iterations = stat("scheduler.iterations");
  for (size_t i = 0; i < std::size(kDiskStats); ++i) c.disk[i] = stat(absl::StrCat("kv_tiers.disk.", kDiskStats[i]));
  for (size_t i = 0; i < std::size(kPhases); ++i) c.phase_ms[i] = stat(absl::StrCat("scheduler.", kPhases[i], "_ms"));
  return c;
}

// One bench-serve run on an already loaded model: R requests of L tokens
// (the first P shared), M generated each, C in flight. Engine counters are
// reported as the difference from before the run, so runs of a sweep share
// one engine and one model load. Throws api::Error when a submit fails.
nlohmann::ordered_json BenchServeOnce(Setup& s, int64_t L, int64_t M, int64_t R, int64_t P, int64_t C,
                                      int64_t max_context) {
  api::RequestParams params = s.params;
  params.MaxTokens(static_cast<int32_t>(M)).StopAtEos(false);
  const Counters before = ReadCounters(*s.engine);
  const strata_model_info info = s.model->Info();
  const int32_t vocab = info.vocab_size;
  std::mt19937_64 rng(params.c.seed + 12345 + static_cast<uint64_t>(L * 131 + M * 7 + C));
  auto random_id = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  std::vector<int32_t> prefix(static_cast<size_t>(P));
  for (auto& t : prefix) t = random_id();
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(R));
  for (auto& p : prompts) {
    p = prefix;
    while (static_cast<int64_t>(p.size()) < L) p.push_back(random_id());
  }
  std::vector<Outcome> out;
  const auto t0 = Clock::now();
  RunClosedLoop(*s.engine, *s.model, prompts, params, /*seed_per_request=*/true, C, max_context, &out);
  const double wall = SecondsSince(t0);
  std::vector<double> ttft, tpot, e2e;
  int64_t generated = 0, failed = 0;
  for (const Outcome& o : out) {
    if (o.status != STRATA_OK) ++failed;
    generated += static_cast<int64_t>(o.tokens.size());
    if (o.tokens.empty()) continue;
    ttft.push_back(std::chrono::duration<double, std::milli>(o.first_token - o.submitted).count());
    e2e.push_back(std::chrono::duration<double, std::milli>(o.last_token - o.submitted).count());
    if (o.tokens.size() > 1) {
      tpot.push_back(std::chrono::duration<double, std::milli>(o.last_token - o.first_token).count() /
                     static_cast<double>(o.tokens.size() - 1));
    }
  }
  const Counters after = ReadCounters(*s.engine);
  // Counts are exact in a double up to 2^53.
  auto delta = [](double a, double b) { return static_cast<int64_t>(a - b); };
  const int64_t lookup = after.m.prefix_lookup_tokens - before.m.prefix_lookup_tokens;
  const int64_t hits = after.m.prefix_hit_tokens - before.m.prefix_hit_tokens;
  const int64_t steps_i = after.m.decode_steps - before.m.decode_steps;
  const int64_t iters_i = delta(after.iterations, before.iterations);
  const double hit = lookup > 0 ? static_cast<double>(hits) / static_cast<double>(lookup) : 0.0;
  auto pct = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return nlohmann::ordered_json{{"mean", v.empty() ? 0.0 : sum / static_cast<double>(v.size())},
                                  {"p50", Percentile(v, 0.5)},
                                  {"p90", Percentile(v, 0.9)},
                                  {"p99", Percentile(v, 0.99)}};
  };
  nlohmann::ordered_json j;
  j["model"] = info.architecture;
  j["device"] = info.device;
  j["input_len"] = L;
  j["output_len"] = M;
  j["shared_prefix"] = P;
  j["requests"] = R;
  j["concurrency"] = C;
  j["failed"] = failed;
  j["duration_s"] = wall;
  j["request_throughput"] = static_cast<double>(R) / wall;
  j["output_tokens_per_s"] = static_cast<double>(generated) / wall;
  j["total_tokens_per_s"] = static_cast<double>(generated + R * L) / wall;
  j["ttft_ms"] = pct(ttft);
  j["tpot_ms"] = pct(tpot);
  j["e2e_ms"] = pct(e2e);
  j["prefix_cache_hit_rate"] = hit;
  j["prefix_hit_tokens"] = hits;
  j["prefix_lookup_tokens"] = lookup;
  j["prefill_tokens"] = after.m.prefill_tokens - before.m.prefill_tokens;
  j["mean_decode_batch"] =
      steps_i > 0 ? static_cast<double>(after.m.decode_rows - before.m.decode_rows) / steps_i : 0.0;
  j["preemptions"] = after.m.preemptions - before.m.preemptions;
  j["prefix_cache_slot_evictions"] = delta(after.slot_evictions, before.slot_evictions);
  j["device_sampled_rows"] = delta(after.device_rows, before.device_rows);
  j["host_sampled_rows"] = delta(after.host_rows, before.host_rows);
  nlohmann::ordered_json disk;
  for (size_t i = 0; i < std::size(kDiskStats); ++i) disk[kDiskStats[i]] = delta(after.disk[i], before.disk[i]);
  j["kv_tiers"]["disk"] = disk;
  // Where the scheduler thread's time went; per decode step it compares
  // with the raw DecodeBatch step of `strata bench` at the same batch.
  const double steps = static_cast<double>(std::max<int64_t>(1, steps_i));
  const double iters = static_cast<double>(std::max<int64_t>(1, iters_i));
  nlohmann::ordered_json phases;
  phases["iterations"] = iters_i;
  phases["decode_steps"] = steps_i;
  for (size_t i = 0; i < std::size(kPhases); ++i) {
    const double total = after.phase_ms[i] - before.phase_ms[i];
    phases[kPhases[i]] = nlohmann::ordered_json{
        {"total_ms", total}, {"per_iteration_ms", total / iters}, {"per_decode_step_ms", total / steps}};
  }
  j["phases"] = phases;
  return j;
}

void PrintBenchServe(const nlohmann::ordered_json& j, bool verbose) {
  std::printf("model %s on %s; %lld requests, input %lld (shared prefix %lld), output %lld, concurrency %lld\n",
              j["model"].get<std::string>().c_str(), j["device"].get<std::string>().c_str(),
              static_cast<long long>(j["requests"].get<int64_t>()), static_cast<long long>(j["input_len"].get<int64_t>()),
              static_cast<long long>(j["shared_prefix"].get<int64_t>()),
              static_cast<long long>(j["output_len"].get<int64_t>()),
              static_cast<long long>(j["concurrency"].get<int64_t>()));
  std::printf("duration            %10.2f s   (%lld failed)\n", j["duration_s"].get<double>(),
              static_cast<long long>(j["failed"].get<int64_t>()));
  std::printf("request throughput  %10.2f req/s\n", j["request_throughput"].get<double>());
  std::printf("output tokens/s     %10.1f\n", j["output_tokens_per_s"].get<double>());
  std::printf("total tokens/s      %10.1f\n", j["total_tokens_per_s"].get<double>());
  for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms"}) {
    std::printf("%-8s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f ms\n", k, j[k]["mean"].get<double>(),
                j[k]["p50"].get<double>(), j[k]["p90"].get<double>(), j[k]["p99"].get<double>());
  }
  std::printf("prefix cache hit    %10.1f %% of prompt tokens (%lld of %lld)\n",
              100.0 * j["prefix_cache_hit_rate"].get<double>(),
              static_cast<long long>(j["prefix_hit_tokens"].get<int64_t>()),
              static_cast<long long>(j["prefix_lookup_tokens"].get<int64_t>()));
  std::printf("mean decode batch   %10.2f rows; %lld preemptions\n", j["mean_decode_batch"].get<double>(),
              static_cast<long long>(j["preemptions"].get<int64_t>()));
  if (!verbose) return;
  const auto& phases = j["phases"];
  std::printf("decode rows sampled %10lld on the device, %lld on the host; %lld cache evictions for state slots\n",
              static_cast<long long>(j["device_sampled_rows"].get<int64_t>()),
              static_cast<long long>(j["host_sampled_rows"].get<int64_t>()),
              static_cast<long long>(j["prefix_cache_slot_evictions"].get<int64_t>()));
  std::printf("scheduler phases over %lld iterations, %lld decode steps:\n",
              static_cast<long long>(phases["iterations"].get<int64_t>()),
              static_cast<long long>(phases["decode_steps"].get<int64_t>()));
  for (const char* k : {"schedule", "prefill", "decode", "sample", "emit"}) {
    std::printf("  %-9s total %10.1f ms  per iteration %8.3f ms  per decode step %8.3f ms\n", k,
                phases[k]["total_ms"].get<double>(), phases[k]["per_iteration_ms"].get<double>(),
                phases[k]["per_decode_step_ms"].get<double>());
  }
}

int RunBenchServe(int argc, char** argv) {
  const std::string cmd = "bench serve";
  std::vector<std::string> values = kCommonValueFlags, bools = kCommonBoolFlags;
  values.insert(values.end(), {"input-len", "output-len", "requests", "shared-prefix"});
  bools.push_back("json");
  Flags flags(cmd, values, bools);
  if (Status st = flags.Parse(argc, argv, 3); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(
        "usage: strata bench serve --model DIR --input-len L --output-len M --requests R --concurrency C\n"
        "                          [--shared-prefix P] [--json] [flags]\n"
        "\n"
        "In-process serving benchmark: R requests of L random prompt tokens (the first P shared by all)\n"
        "and exactly M generated tokens, C kept in flight. Reports request and token throughput, TTFT,\n"
        "TPOT and end-to-end latency percentiles, the prefix-cache hit rate and the engine's metrics.\n"
        "\n"
        "  --input-len L --output-len M --requests R (defaults 512, 128, 64)\n"
        "  --shared-prefix P         leading prompt tokens identical in every request (default 0)\n"
        "  --json                    one JSON object per run on stdout instead of the table\n"
        "\n"
        "Sweep: --concurrency, --input-len and --output-len also take comma-separated lists; every\n"
        "(input-len, output-len) pair (the two lists zipped) runs at every concurrency on one model\n"
        "load and one engine, with R = --requests when given, else the concurrency (one wave).\n",
        stdout);
    std::fputs(kCommonHelp, stdout);
    return kExitOk;
  }
  auto list = [&](const char* name, int64_t fallback, int64_t lo, int64_t hi) -> StatusOr<std::vector<int64_t>> {
    if (!flags.Has(name)) return std::vector<int64_t>{fallback};
    StatusOr<std::vector<int32_t>> v = flags.IntList(name);
    if (!v.ok()) return v.status();
    if (v->empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    std::vector<int64_t> r;
    for (int32_t x : *v) {
      if (x < lo || x > hi) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " value ", x, " is outside [", lo, ", ", hi, "]"));
      }
      r.push_back(x);
    }
    return r;
  };
  auto Ls = list("input-len", 512, 1, int64_t{1} << 24);
  auto Ms = list("output-len", 128, 1, int64_t{1} << 24);
  auto Cs = list("concurrency", 8, 1, 4096);
  auto R = flags.Int("requests", 64, 1, int64_t{1} << 24);
  auto P = flags.Int("shared-prefix", 0, 0, int64_t{1} << 24);
  for (const Status& st : {Ls.status(), Ms.status(), Cs.status(), R.status(), P.status()}) {
    if (!st.ok()) return Fail(cmd, st, kExitUsage);
  }
  if (Ls->size() != Ms->size()) {
    return Fail(cmd, "--input-len and --output-len must list the same number of values", kExitUsage);
  }
  int64_t max_context = 0;
  for (size_t i = 0; i < Ls->size(); ++i) {
    if (*P > (*Ls)[i]) return Fail(cmd, "--shared-prefix must not exceed --input-len", kExitUsage);
    max_context = std::max(max_context, (*Ls)[i] + (*Ms)[i] + 1);
  }
  const int64_t max_c = *std::max_element(Cs->begin(), Cs->end());
  const bool sweep = Ls->size() > 1 || Cs->size() > 1;
  Setup s;
  if (int rc = SetUp(cmd, flags, max_context, &s, max_c); rc != kExitOk) return rc;

  int64_t failed_total = 0;
  std::vector<nlohmann::ordered_json> runs;
  for (size_t i = 0; i < Ls->size(); ++i) {
    for (int64_t C : *Cs) {
      const int64_t requests = sweep && !flags.Has("requests") ? C : *R;
      nlohmann::ordered_json j;
      try {
        j = BenchServeOnce(s, (*Ls)[i], (*Ms)[i], requests, *P, C, max_context);
      } catch (const api::Error& e) {
        return Fail(cmd, e, ExitCodeFor(e));
      }
      failed_total += j["failed"].get<int64_t>();
      if (flags.Bool("json")) {
        std::printf("%s\n", j.dump().c_str());
      } else {
        if (!runs.empty()) std::printf("\n");
        PrintBenchServe(j, flags.Bool("verbose"));
      }
      std::fflush(stdout);
      runs.push_back(std::move(j));
    }
  }
  if (sweep && !flags.Bool("json")) {
    std::printf("\n%8s %8s %6s %8s %12s %10s %10s %10s %10s %8s\n", "input", "output", "conc", "failed",
                "out tok/s", "TPOT p50", "TPOT p99", "TTFT p50", "TTFT p99", "batch");
    for (const auto& j : runs) {
      std::printf("%8lld %8lld %6lld %8lld %12.1f %10.2f %10.2f %10.1f %10.1f %8.2f\n",
                  static_cast<long long>(j["input_len"].get<int64_t>()),
                  static_cast<long long>(j["output_len"].get<int64_t>()),
                  static_cast<long long>(j["concurrency"].get<int64_t>()),
                  static_cast<long long>(j["failed"].get<int64_t>()), j["output_tokens_per_s"].get<double>(),
                  j["tpot_ms"]["p50"].get<double>(), j["tpot_ms"]["p99"].get<double>(),
                  j["ttft_ms"]["p50"].get<double>(), j["ttft_ms"]["p99"].get<double>(),
                  j["mean_decode_batch"].get<double>());
    }
  }
  if (flags.Has("stats-json")) {
    if (int rc = WriteStatsJson(cmd, *s.engine, flags.String("stats-json", "")); rc != kExitOk) return rc;
  }
  return failed_total == 0 ? kExitOk : kExitFailure;
}

}  // namespace strata::cli
