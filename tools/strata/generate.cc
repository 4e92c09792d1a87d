// `strata generate`: tokens after a prompt, through the C ABI (engine,
// session, sampler) as a host runs them. Prints the generated ids on stdout,
// one line; statistics go to stderr.
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli.h"

namespace strata::cli {
namespace {

constexpr char kHelp[] =
    "usage: strata generate --model DIR --tokens IN.npy --max-new K [sampling flags]\n"
    "\n"
    "  --model DIR               model directory\n"
    "  --tokens IN.npy           prompt ids, int32 or int64, shape [T]\n"
    "  --max-new K               tokens to generate (default 32)\n"
    "  --temperature T           0 = greedy (default 0)\n"
    "  --top-k K --top-p P --min-p P\n"
    "  --repetition-penalty R --presence-penalty P --frequency-penalty F\n"
    "  --seed S                  sampling seed (default 0)\n"
    "  --stop ID,ID,...          stop when one of these ids is generated (not printed)\n"
    "  --ignore-eos              do not stop at the model's EOS id\n"
    "  --threads N               compute threads (default: one per core)\n"
    "  --device cpu|cuda|auto    cpu (default); cuda/auto: the GPU when usable, else the CPU with a notice\n"
    "\n"
    "       strata generate --model DIR --prompts-jsonl IN.jsonl --max-new K [--concurrency C] ...\n"
    "  many prompts through the serving engine (strata generate --prompts-jsonl x --help)\n";

}  // namespace

int RunGenerate(int argc, char** argv) {
  // Many prompts at once go through the serving driver (serve.cc).
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--prompts-jsonl", 0) == 0) return RunGenerateBatch(argc, argv);
  }
  const std::string cmd = "generate";
  Flags flags(cmd,
              {"model", "tokens", "max-new", "temperature", "top-k", "top-p", "min-p", "repetition-penalty",
               "presence-penalty", "frequency-penalty", "seed", "stop", "threads", "device"},
              {"help", "ignore-eos"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  DeviceFlag device = DeviceFlag::kCpu;
  if (int rc = ParseDevice(cmd, flags.String("device", "cpu"), &device); rc != kExitOk) return rc;
  auto model_dir = flags.Required("model");
  if (!model_dir.ok()) return Fail(cmd, model_dir.status(), kExitUsage);
  auto tokens_path = flags.Required("tokens");
  if (!tokens_path.ok()) return Fail(cmd, tokens_path.status(), kExitUsage);

  const double kBig = std::numeric_limits<float>::max();
  auto max_new = flags.Int("max-new", 32, 1, 1 << 20);
  auto temperature = flags.Double("temperature", 0.0, 0.0, kBig);
  auto top_k = flags.Int("top-k", 0, 0, std::numeric_limits<int32_t>::max());
  auto top_p = flags.Double("top-p", 1.0, 0.0, 1.0);
  auto min_p = flags.Double("min-p", 0.0, 0.0, 1.0);
  auto rep = flags.Double("repetition-penalty", 1.0, 0.0, kBig);
  auto pres = flags.Double("presence-penalty", 0.0, -kBig, kBig);
  auto freq = flags.Double("frequency-penalty", 0.0, -kBig, kBig);
  auto seed = flags.Int("seed", 0, 0, std::numeric_limits<int64_t>::max());
  auto stop = flags.IntList("stop");
  auto threads = flags.Int("threads", 0, 0, 4096);
  for (const Status& s : {max_new.status(), temperature.status(), top_k.status(), top_p.status(),
                          min_p.status(), rep.status(), pres.status(), freq.status(), seed.status(),
                          stop.status(), threads.status()}) {
    if (!s.ok()) return Fail(cmd, s, kExitUsage);
  }
  // The library checks the sampling ranges at submit (exit 2 for a bad value).
  api::RequestParams params = api::RequestParams()
                                  .MaxTokens(static_cast<int32_t>(*max_new))
                                  .StopTokens(*stop)
                                  .StopAtEos(!flags.Bool("ignore-eos"))
                                  .Temperature(static_cast<float>(*temperature))
                                  .TopK(static_cast<int32_t>(*top_k))
                                  .TopP(static_cast<float>(*top_p))
                                  .MinP(static_cast<float>(*min_p))
                                  .Seed(static_cast<uint64_t>(*seed));
  params.c.repetition_penalty = static_cast<float>(*rep);
  params.c.presence_penalty = static_cast<float>(*pres);
  params.c.frequency_penalty = static_cast<float>(*freq);

  auto prompt = ReadTokenFile(*tokens_path);
  if (!prompt.ok()) return Fail(cmd, prompt.status(), kExitFailure);
  if (prompt->empty()) return Fail(cmd, absl::StrCat(*tokens_path, ": no tokens"), kExitFailure);

  try {
    const api::Engine engine(api::EngineParams().Threads(static_cast<int32_t>(*threads)));
    const api::Model model = LoadModel(cmd, engine, *model_dir, device, api::ModelParams());
    const int64_t max_context = model.Info().max_context_tokens;
    const int64_t context = static_cast<int64_t>(prompt->size()) + *max_new + 1;
    if (max_context > 0 && context > max_context) {
      return Fail(cmd,
                  absl::StrCat("prompt (", prompt->size(), ") + --max-new (", *max_new,
                               ") exceeds the model's context of ", max_context),
                  kExitUsage);
    }
    std::optional<api::Session> session;
    std::optional<api::Request> request;
    try {
      session.emplace(model, context);
    } catch (const api::Error& e) {
      return Fail(cmd, e, ExitCodeFor(e));
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      request.emplace(session->Submit(*prompt, params));
    } catch (const api::Error& e) {
      // OUT_OF_RANGE is about the ids (outside the vocabulary, no room left): name their file.
      const bool ids = (e.status() & 0xff) == STRATA_ERR_OUT_OF_RANGE;
      return Fail(cmd, ids ? absl::StrCat(*tokens_path, ": ", MessageOf(e)) : MessageOf(e), ExitCodeFor(e));
    }
    std::vector<int32_t> out;
    double first_token_s = 0;
    const Finished f = WaitForRequest(engine, *request, [&](const strata_event& ev) {
      if (ev.type != STRATA_EVENT_TOKEN) return;
      if (out.empty()) first_token_s = SecondsSince(t0);
      out.push_back(ev.token);
    });
    const double total_s = SecondsSince(t0);
    if (f.status != STRATA_OK) return Fail(cmd, f.message, kExitFailure);
    for (size_t i = 0; i < out.size(); ++i) std::printf(i ? " %d" : "%d", out[i]);
    std::printf("\n");
    const double decode_tps = out.size() > 1 ? (out.size() - 1) / (total_s - first_token_s) : 0.0;
    std::fprintf(stderr,
                 "%zu tokens, finish reason: %s; prompt %zu tokens + first token %.1f ms, decode %.1f tokens/s\n",
                 out.size(), strata_finish_reason_string(f.reason), prompt->size(), first_token_s * 1e3, decode_tps);
    return kExitOk;
  } catch (const api::Error& e) {
    // Creating the engine or loading the model.
    return Fail(cmd, e, kExitFailure);
  }
}

}  // namespace strata::cli
