// `strata`: the command-line tool. Dispatches to one subcommand per file: on
// the C ABI, demo.cc (`run`; chat.cc is its chat mode), generate.cc,
// serve.cc (`generate --prompts-jsonl`, `bench serve`), tokenize.cc,
// detokenize.cc, template.cc; on the core (internal.h), bench.cc, info.cc,
// logits.cc, make_demo_model.cc. cli.h says why the tool has two parts, and
// what each exit code means.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "cli.h"
#include "strata/strata_version.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata <command> [flags]   (strata <command> --help for its flags)\n"
               "\n"
               "commands:\n"
               "  run              the embedded demo model: tokens/s and a chat turn; --model DIR: chat (REPL or --prompt)\n"
               "  make-demo-model  write the demo model (config.json + model.safetensors) to a directory\n"
               "  info             architecture, layers, parameter and state sizes of a model directory\n"
               "  logits           logits of every position of a token file (.npy) -> .npy\n"
               "  generate         generate tokens after a prompt (.npy), or for many prompts (--prompts-jsonl)\n"
               "  bench            prefill and decode throughput (CPU or --device cuda); `bench serve`: the serving engine\n"
               "  tokenize         token ids of each line of a JSONL file of strings\n"
               "  detokenize       text of each line of a JSONL file of id arrays\n"
               "  template         render a conversation (JSON) with the model's chat template\n"
               "  version          print the version\n"
               "\n"
               "commands that load a model (run, info, logits, generate, bench) take --options STR: tuning\n"
               "options for it, key=value,... over the environment variable STRATA_OPTIONS (docs/tuning.md);\n"
               "strata info --options lists them.\n");
}

// The command line's dispatch; any exception it lets through is main's.
int Dispatch(int argc, char** argv) {
  using namespace strata::cli;
  if (argc < 2) {
    PrintUsage(stderr);
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    PrintUsage(stdout);
    return kExitOk;
  }
  if (cmd == "version" || cmd == "--version") {
    std::printf("strata %s\n", STRATA_VERSION_STRING);
    return kExitOk;
  }
  const bool loads_model = cmd == "logits" || cmd == "generate" || cmd == "info" ||
                           cmd == "bench" || cmd == "run";
  if (int rc = TakeOptionsFlag(cmd, loads_model, &argc, argv); rc != kExitOk) return rc;
  if (cmd == "logits") return RunLogits(argc, argv);
  if (cmd == "generate") return RunGenerate(argc, argv);
  if (cmd == "info") return RunInfo(argc, argv);
  if (cmd == "bench") return RunBench(argc, argv);
  if (cmd == "make-demo-model") return RunMakeDemoModel(argc, argv);
  if (cmd == "run") return RunDemo(argc, argv);
  if (cmd == "tokenize") return RunTokenize(argc, argv);
  if (cmd == "detokenize") return RunDetokenize(argc, argv);
  if (cmd == "template") return RunTemplate(argc, argv);
  std::fprintf(stderr, "strata: unknown command '%s'\n\n", cmd.c_str());
  PrintUsage(stderr);
  return kExitUsage;
}

// "strata <command>" for messages; static so the terminate handler needs no allocation.
char g_prefix[96] = "strata";

// An exception that escaped a thread or a noexcept function ends here
// instead of in abort(): the same message and exit code as main's catch-all.
[[noreturn]] void OnTerminate() {
  const char* what = "std::terminate was called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "%s: error: out of memory\n", g_prefix);
      std::_Exit(strata::cli::kExitFailure);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s: internal error: %s\n", g_prefix, ex.what());
      std::_Exit(strata::cli::kExitInternal);
    } catch (...) {
      what = "unknown exception";
    }
  }
  std::fprintf(stderr, "%s: internal error: %s\n", g_prefix, what);
  std::_Exit(strata::cli::kExitInternal);
}

}  // namespace

// No exception leaves main: out of memory is a failure of the command (exit
// 1), anything else is a bug in Strata (exit 3), both named by the command.
int main(int argc, char** argv) {
  using strata::cli::kExitFailure;
  using strata::cli::kExitInternal;
  if (argc >= 2) std::snprintf(g_prefix, sizeof(g_prefix), "strata %s", argv[1]);
  std::set_terminate(OnTerminate);
  try {
    return Dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory while running the command\n", g_prefix);
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", g_prefix, e.what());
    return kExitInternal;
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: unknown exception\n", g_prefix);
    return kExitInternal;
  }
}
