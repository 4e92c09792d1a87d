// `strata run`. Without --model it uses the embedded default: the trained
// strata-demo model committed in models/ (STRATA_DEFAULT_MODEL_DIR, a KDA +
// DSA hybrid trained by tools/demo_model). With --random (or --demo-dir, or
// when that directory is missing) it writes a small kimi_linear with RANDOM
// weights plus the demo tokenizer to the cache directory instead
// (WriteRandomDemoModel), and says so plainly. Either way it streams
// generated token ids from a fixed prompt through the engine, reports
// tokens/s, then runs one chat turn. With --model DIR whose directory has a
// tokenizer and chat template, `run` chats (chat.cc). Everything after
// writing the demo files goes through the C ABI (strata.hpp), as a host's
// code would.
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli.h"

namespace strata::cli {
namespace {

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
    "  --demo-dir DIR   where to write the random demo model (default: the user cache directory)\n"
    "  --load-session FILE  chat: continue the conversation saved in FILE (history, state, marks);\n"
    "                   --system is then not added again\n"
    "  --save-session FILE  chat: save the conversation to FILE when the chat ends\n"
    "  --kv-disk DIR    a disk tier under the prefix cache (shared by processes; see strata bench serve)\n"
    "  --kv-disk-bytes N  its capacity (default 8 GiB)\n";

}  // namespace

int RunDemo(int argc, char** argv) {
  const std::string cmd = "run";
  Flags flags(cmd,
              {"prompt-len", "max-new", "threads", "seed", "model", "demo-dir", "temperature", "sample-seed", "prompt",
               "system", "load-session", "save-session", "kv-disk", "kv-disk-bytes"},
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
    // Rewritten every time (a few MB, milliseconds): the cache never serves a
    // model from an older build.
    if (Status st = WriteRandomDemoModel(dir, static_cast<uint64_t>(*seed)); !st.ok()) {
      return Fail(cmd, absl::StrCat("writing the demo model to ", dir, ": ", st.message()), kExitFailure);
    }
    std::printf("NOTE: this demo model has RANDOM weights (seed %lld) (--random, or no embedded model).\n"
                "      The generated ids below are meaningless; they show the engine running, not language.\n",
                static_cast<long long>(*seed));
  }

  // A disk tier needs the prefix cache above it (off by default in the C ABI).
  std::string engine_options;
  api::EngineParams ep = api::EngineParams().Threads(static_cast<int32_t>(*threads));
  if (flags.Has("kv-disk")) {
    const std::string kv = flags.String("kv-disk", "");
    if (kv.empty() || kv.find_first_of(",=") != std::string::npos) {
      return Fail(cmd, "--kv-disk needs a directory whose path has no ',' or '='", kExitUsage);
    }
    auto bytes = flags.Int("kv-disk-bytes", int64_t{8} << 30, 1, std::numeric_limits<int64_t>::max());
    if (!bytes.ok()) return Fail(cmd, bytes.status(), kExitUsage);
    engine_options = absl::StrCat("kv.disk_dir=", kv, ",kv.disk_bytes=", *bytes);
    ep.PrefixCache(uint64_t{256} << 20, 64).Options(engine_options.c_str());
  }
  try {
    const api::Engine engine(ep);
    const auto load_t0 = std::chrono::steady_clock::now();
    const api::Model model = LoadModel(cmd, engine, dir, DeviceFlag::kCpu, api::ModelParams());
    const double load_s = SecondsSince(load_t0);
    const strata_model_info info = model.Info();
    std::printf("model: %s (%s, %d layers, %s parameters, %s) loaded in %.1f ms, %.0f threads\n", dir.c_str(),
                info.architecture, info.num_layers, FormatCount(info.num_parameters).c_str(),
                FormatBytes(static_cast<double>(info.parameter_bytes)).c_str(), load_s * 1e3,
                engine.Stat("engine.compute_threads").value_or(0));

    // Chat when the directory has a tokenizer and a chat template.
    bool can_chat = false;
    try {
      can_chat = model.OpenTokenizer().HasChatTemplate();
    } catch (const api::Error& e) {
      if ((e.status() & 0xff) != STRATA_ERR_NOT_FOUND) throw;  // present but broken
    }
    ChatCliOptions chat;
    chat.prompt = flags.String("prompt", "");
    chat.system = flags.String("system", "");
    chat.max_new_tokens = static_cast<int32_t>(*max_new);
    chat.temperature = static_cast<float>(*temperature);
    chat.seed = static_cast<uint64_t>(*sample_seed);
    if (flags.Bool("no-think")) chat.template_variables["enable_thinking"] = false;
    const std::string load_session = flags.String("load-session", "");
    const std::string save_session = flags.String("save-session", "");
    auto run_chat = [&]() -> int {
      std::optional<api::Session> session;
      try {
        if (load_session.empty()) {
          session.emplace(model);
        } else {
          session.emplace(api::Session::Load(model, load_session));
          chat.system.clear();  // the saved conversation has it
          std::printf("session: loaded %s (%zu tokens)\n", load_session.c_str(), session->NumTokens());
        }
      } catch (const api::Error& e) {
        return Fail(cmd, e, ExitCodeFor(e));
      }
      const int rc = RunChat(engine, *session, chat);
      if (rc != kExitOk || save_session.empty()) return rc;
      try {
        session->Save(save_session);
        std::printf("session: saved %s (%zu tokens)\n", save_session.c_str(), session->NumTokens());
      } catch (const api::Error& e) {
        return Fail(cmd, e, ExitCodeFor(e));
      }
      return kExitOk;
    };
    if (flags.Bool("tokens") && (flags.Has("load-session") || flags.Has("save-session"))) {
      return Fail(cmd, "--load-session and --save-session save chat sessions; --tokens does not chat", kExitUsage);
    }
    if (!demo && can_chat && !flags.Bool("tokens")) return run_chat();
    if (!can_chat && (flags.Has("prompt") || flags.Bool("interactive") || flags.Has("load-session") ||
                      flags.Has("save-session"))) {
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
    std::optional<api::Session> session;
    std::optional<api::Request> request;
    try {
      session.emplace(model, *prompt_len + *max_new + 1);
    } catch (const api::Error& e) {
      return Fail(cmd, e, ExitCodeFor(e));
    }
    const api::RequestParams params = api::RequestParams()
                                          .MaxTokens(static_cast<int32_t>(*max_new))
                                          .Temperature(static_cast<float>(*temperature))
                                          .Seed(static_cast<uint64_t>(*sample_seed));
    std::printf("prompt (%zu ids):", prompt.size());
    for (int32_t t : prompt) std::printf(" %d", t);
    std::printf("\ngenerated:");
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      request.emplace(session->Submit(prompt, params));
    } catch (const api::Error& e) {
      return Fail(cmd, e, ExitCodeFor(e));
    }
    int64_t n = 0;
    double first_s = 0;
    const Finished f = WaitForRequest(engine, *request, [&](const strata_event& ev) {
      if (ev.type != STRATA_EVENT_TOKEN) return;
      if (n++ == 0) first_s = SecondsSince(t0);
      std::printf(" %d", ev.token);
      std::fflush(stdout);  // stream each token as it arrives
    });
    const double total_s = SecondsSince(t0);
    std::printf("\n");
    if (f.status != STRATA_OK) return Fail(cmd, f.message, kExitFailure);
    std::printf("finish: %s after %lld tokens\n", strata_finish_reason_string(f.reason), static_cast<long long>(n));
    std::printf("prefill: %zu tokens + first token in %.2f ms (%.0f tokens/s)\n", prompt.size(), first_s * 1e3,
                prompt.size() / first_s);
    if (n > 1) {
      std::printf("decode:  %lld tokens in %.2f ms = %.1f tokens/s\n", static_cast<long long>(n - 1),
                  (total_s - first_s) * 1e3, (n - 1) / (total_s - first_s));
    }
    if (demo && can_chat && !flags.Bool("tokens")) {
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
  } catch (const api::Error& e) {
    // Creating the engine, loading the model, opening its tokenizer.
    return Fail(cmd, e, kExitFailure);
  }
}

}  // namespace strata::cli
