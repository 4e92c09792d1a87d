// `strata make-demo-model` and `strata run`. Without --model, `run` uses the
// embedded default: the trained strata-demo model committed in models/
// (STRATA_DEFAULT_MODEL_DIR, a KDA + DSA hybrid trained by tools/demo_model).
// With --random (or --demo-dir, or when that directory is missing) it writes
// a small kimi_linear with RANDOM weights (WriteDemoKimiLinearModel) plus the
// demo tokenizer to the cache directory instead, and says so plainly. Either
// way it streams generated token ids from a fixed prompt through the engine,
// reports tokens/s, then runs one chat turn. With --model DIR whose directory
// has a tokenizer and chat template, `run` chats (chat.cc).
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/session.h"
#include "model/demo_model.h"
#include "model/model.h"
#include "text/demo_tokenizer.h"
#include "text/text_model.h"

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

constexpr char kRunHelp[] =
    "usage: strata run [--model DIR] [--prompt TEXT] [--system TEXT] [--max-new N] [--threads N] ...\n"
    "\n"
    "Without --model: runs the embedded strata-demo model (trained by the project, in\n"
    "models/strata-demo): generates token ids, reports prefill and decode tokens/s, then runs\n"
    "one chat turn. --random uses a random-weight kimi_linear demo model instead.\n"
    "With --model DIR whose directory has a tokenizer and a chat template: chats, streaming\n"
    "the reply. --prompt TEXT runs one turn; otherwise each stdin line is a user message\n"
    "(/reset starts over, /quit or end of input ends). Other directories: token ids as the demo.\n"
    "  --prompt TEXT    one chat turn with this user message, then exit\n"
    "  --system TEXT    a system message first\n"
    "  --no-think       render the template with enable_thinking=false\n"
    "  --interactive    demo: chat on stdin after the token-id run\n"
    "  --tokens         token-id generation even when the directory can chat\n"
    "  --prompt-len N   token-id mode: fixed prompt length (default 16)\n"
    "  --max-new N      tokens to generate (default 48; chat with --model: 256)\n"
    "  --temperature T  0 = greedy (default); --sample-seed S for sampling\n"
    "  --threads N      compute threads (default: one per core)\n"
    "  --seed S         random demo weight seed (default 1234)\n"
    "  --model DIR      use this model directory instead of the demo model\n"
    "  --random         the random-weight demo model instead of the embedded trained one\n"
    "  --demo-dir DIR   where to write the random demo model (default: the user cache directory)\n";

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

int RunDemo(int argc, char** argv) {
  const std::string cmd = "run";
  Flags flags(cmd,
              {"prompt-len", "max-new", "threads", "seed", "model", "demo-dir", "temperature", "sample-seed", "prompt",
               "system"},
              {"help", "interactive", "tokens", "no-think", "random"});
  if (Status st = flags.Parse(argc, argv, 2); !st.ok()) return Fail(cmd, st, kExitUsage);
  if (flags.Bool("help")) {
    std::fputs(kRunHelp, stdout);
    return kExitOk;
  }
  auto prompt_len = flags.Int("prompt-len", 16, 1, 1 << 20);
  const bool demo = !flags.Has("model");
  auto max_new = flags.Int("max-new", demo || flags.Bool("tokens") ? 48 : 256, 1, 1 << 20);
  auto threads = flags.Int("threads", 0, 0, 4096);
  auto seed = flags.Int("seed", 1234, 0, std::numeric_limits<int64_t>::max());
  auto temperature = flags.Double("temperature", 0.0, 0.0, 1e6);
  auto sample_seed = flags.Int("sample-seed", 0, 0, std::numeric_limits<int64_t>::max());
  for (const Status& s : {prompt_len.status(), max_new.status(), threads.status(), seed.status(),
                          temperature.status(), sample_seed.status()}) {
    if (!s.ok()) return Fail(cmd, s, kExitUsage);
  }

  std::string dir = flags.String("model", "");
  const std::string embedded = STRATA_DEFAULT_MODEL_DIR;
  const bool use_embedded = demo && !flags.Bool("random") && !flags.Has("demo-dir") &&
                            std::filesystem::exists(std::filesystem::path(embedded) / "config.json");
  if (use_embedded) {
    dir = embedded;
    std::printf("The embedded default model: strata-demo, an 11 M-parameter KDA + DSA hybrid trained by the\n"
                "project for tool use (models/strata-demo; tools/demo_model/README.md). The ids below come\n"
                "from a fixed synthetic prompt; the chat turn after them is real text.\n");
  } else if (demo) {
    dir = flags.String("demo-dir", DefaultDemoDir());
    DemoModelOptions o;
    o.seed = static_cast<uint64_t>(*seed);
    // Rewritten every time (a few MB, milliseconds): the cache never serves a
    // model from an older build.
    Status st = WriteDemoKimiLinearModel(dir, o);
    if (st.ok()) st = WriteDemoTokenizer(dir);
    if (!st.ok()) {
      return Fail(cmd, absl::StrCat("writing the demo model to ", dir, ": ", st.message()), kExitFailure);
    }
    std::printf("NOTE: this demo model has RANDOM weights (seed %lld) (--random, or no embedded model).\n"
                "      The generated ids below are meaningless; they show the engine running, not language.\n",
                static_cast<long long>(*seed));
  }

  EngineOptions eo;
  eo.num_threads = static_cast<int>(*threads);
  auto engine = Engine::Create(eo);
  if (!engine.ok()) return Fail(cmd, engine.status(), kExitFailure);
  LoadOptions lo;
  lo.pool = (*engine)->pool();
  lo.options = OptionsFlag();
  const auto load_t0 = std::chrono::steady_clock::now();
  auto loaded = LoadModel(dir, lo);
  if (!loaded.ok()) return Fail(cmd, loaded.status(), kExitFailure);
  const double load_s = SecondsSince(load_t0);
  std::shared_ptr<const Model> model(std::move(*loaded));
  const ModelInfo& info = model->info();
  std::printf("model: %s (%s, %d layers, %s parameters, %s) loaded in %.1f ms, %d threads\n", dir.c_str(),
              info.architecture.c_str(), info.num_layers, FormatCount(info.num_parameters).c_str(),
              FormatBytes(static_cast<double>(info.parameter_bytes)).c_str(), load_s * 1e3,
              (*engine)->pool()->num_threads());

  // Chat when the directory has a tokenizer and a chat template.
  std::shared_ptr<const TextModel> text;
  if (TextModel::DirectoryHasTokenizer(dir)) {
    auto loaded_text = TextModel::FromDirectory(dir);
    if (!loaded_text.ok()) return Fail(cmd, loaded_text.status(), kExitFailure);
    if ((*loaded_text)->chat_template() != nullptr) text = *std::move(loaded_text);
  }
  ChatCliOptions chat;
  chat.prompt = flags.String("prompt", "");
  chat.system = flags.String("system", "");
  chat.max_new_tokens = static_cast<int32_t>(*max_new);
  chat.temperature = static_cast<float>(*temperature);
  chat.seed = static_cast<uint64_t>(*sample_seed);
  if (flags.Bool("no-think")) chat.template_variables["enable_thinking"] = false;
  auto run_chat = [&]() -> int {
    SessionOptions so;
    so.text = text;
    auto session = Session::Create(engine->get(), model, so);
    if (!session.ok()) return Fail(cmd, session.status(), ExitCodeFor(session.status()));
    return RunChat(**engine, **session, chat);
  };
  if (!demo && text != nullptr && !flags.Bool("tokens")) return run_chat();
  if (text == nullptr && (flags.Has("prompt") || flags.Bool("interactive"))) {
    return Fail(cmd, absl::StrCat(dir, " has no tokenizer and chat template: cannot chat"), kExitUsage);
  }

  // A fixed prompt: BOS (when the model has one) then a deterministic id pattern.
  std::vector<int32_t> prompt;
  const int32_t vocab = info.vocab_size;
  for (int64_t i = 0; i < *prompt_len; ++i) {
    if (i == 0 && info.bos_token_id >= 0) {
      prompt.push_back(info.bos_token_id);
    } else {
      prompt.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
    }
  }
  SessionOptions so;
  so.max_context_tokens = *prompt_len + *max_new + 1;
  auto session = Session::Create(engine->get(), model, so);
  if (!session.ok()) return Fail(cmd, session.status(), ExitCodeFor(session.status()));
  GenerationParams gp;
  gp.max_tokens = static_cast<int32_t>(*max_new);
  gp.sampling.temperature = static_cast<float>(*temperature);
  gp.sampling.seed = static_cast<uint64_t>(*sample_seed);

  std::printf("prompt (%zu ids):", prompt.size());
  for (int32_t t : prompt) std::printf(" %d", t);
  std::printf("\ngenerated:");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  auto request = (*engine)->Submit(**session, prompt, gp);
  if (!request.ok()) return Fail(cmd, request.status(), ExitCodeFor(request.status()));
  int64_t n = 0;
  double first_s = 0;
  FinishReason reason = FinishReason::kNone;
  Status st = (*engine)->RunToCompletion(
      **request,
      [&](int32_t tok) {
        if (n++ == 0) first_s = SecondsSince(t0);
        std::printf(" %d", tok);
        std::fflush(stdout);  // stream each token as it arrives
        return true;
      },
      &reason);
  const double total_s = SecondsSince(t0);
  std::printf("\n");
  if (!st.ok()) return Fail(cmd, st, kExitFailure);
  std::printf("finish: %s after %lld tokens\n", FinishReasonName(reason), static_cast<long long>(n));
  std::printf("prefill: %zu tokens + first token in %.2f ms (%.0f tokens/s)\n", prompt.size(), first_s * 1e3,
              prompt.size() / first_s);
  if (n > 1) {
    std::printf("decode:  %lld tokens in %.2f ms = %.1f tokens/s\n", static_cast<long long>(n - 1),
                (total_s - first_s) * 1e3, (n - 1) / (total_s - first_s));
  }
  if (demo && text != nullptr && !flags.Bool("tokens")) {
    // Both demo models have a tokenizer and chat template: show a chat turn
    // too. With random weights the text is gibberish, but it streams through
    // the template, the detokenizer and the tool-call parser. (`strata run`
    // registers no tools; strata-agent is the tool-calling demo.)
    std::printf(use_embedded ? "\nchat:\n" : "\nchat (random weights: the reply is gibberish):\n");
    if (chat.prompt.empty() && !flags.Bool("interactive")) {
      chat.prompt = use_embedded ? "Hi! Who are you?" : "Hello! What can you do?";
    }
    return run_chat();
  }
  return kExitOk;
}

}  // namespace strata::cli
