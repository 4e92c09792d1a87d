// Shared pieces of the `strata` command-line tool: flag parsing with errors
// that name the flag, exit codes, and helpers used by several subcommands.
// Each subcommand lives in its own file and is declared here.
#ifndef STRATA_TOOLS_STRATA_CLI_H_
#define STRATA_TOOLS_STRATA_CLI_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/model.h"

namespace strata {
class Engine;
class Session;
}  // namespace strata

namespace strata::cli {

// Exit codes: 0 success; 1 the work failed (unreadable model, bad file
// contents, model error); 2 the command line is wrong or asks for something
// this build cannot do (unknown flag, bad value).
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// One subcommand's flags. `--name value` and `--name=value` are accepted;
// boolean flags take no value. Unknown flags and missing values are errors.
class Flags {
 public:
  Flags(std::string command, std::vector<std::string> value_flags, std::vector<std::string> bool_flags)
      : command_(std::move(command)),
        value_flags_(value_flags.begin(), value_flags.end()),
        bool_flags_(bool_flags.begin(), bool_flags.end()) {}

  // Parses argv[first..argc). InvalidArgument naming the offending argument.
  Status Parse(int argc, char** argv, int first);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  bool Bool(const std::string& name) const { return values_.count(name) > 0; }
  StatusOr<std::string> Required(const std::string& name) const;
  std::string String(const std::string& name, const std::string& fallback) const;
  // Integer / float values with a range check; errors name the flag and the text.
  StatusOr<int64_t> Int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  StatusOr<double> Double(const std::string& name, double fallback, double min, double max) const;
  // Comma-separated integers ("2,17,5").
  StatusOr<std::vector<int32_t>> IntList(const std::string& name) const;

  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::set<std::string> value_flags_;
  std::set<std::string> bool_flags_;
  std::map<std::string, std::string> values_;
};

// Prints "strata <command>: error: <message>" to stderr and returns `code`.
int Fail(const std::string& command, const Status& status, int code);
int Fail(const std::string& command, const std::string& message, int code);
// kExitUsage for InvalidArgument/OutOfRange statuses (bad input from the
// command line), kExitFailure otherwise.
int ExitCodeFor(const Status& status);

// "1.23 MiB"-style size.
std::string FormatBytes(double bytes);
// "1,234,567".
std::string FormatCount(int64_t n);

// Where `strata run` and `strata bench` keep the demo model when no --model is
// given: $XDG_CACHE_HOME/strata/demo-model, else $HOME/.cache/strata/demo-model,
// else ./build/demo-model.
std::string DefaultDemoDir();

// --device: cpu, cuda or auto. cuda/auto load on the GPU when one is usable
// and otherwise fall back to the CPU with a notice (never an error). Other
// values print a kExitUsage error. Returns kExitOk when `device` is valid.
int CheckDevice(const std::string& command, const std::string& device);
int ParseDevice(const std::string& command, const std::string& value, Device* out);
// --load-format: auto (the safetensors) or dummy (config.json only, random weights).
int ParseLoadFormat(const std::string& command, const std::string& value, LoadFormat* out);
// Prints "strata <command>: notice: ..." to stderr when the model runs
// somewhere other than requested (e.g. CUDA asked for, no GPU visible), and
// the tuning options it runs with when any differ from the defaults
// (STRATA_OPTIONS, --options).
void PrintPlacementNotice(const std::string& command, const ModelInfo& info);

// --options STR, a flag of every command that loads a model: tuning registry
// values for it ("key=value,...", LoadOptions::options; base/tuning.h,
// docs/tuning.md). main() takes it out of argv (argv[2..]) before the
// command parses its own flags, and checks it, with STRATA_OPTIONS under it:
// a bad value is a usage error. `info` also takes it without a value (list
// the entries). Returns kExitOk or the exit code of the error it printed.
int TakeOptionsFlag(const std::string& command, bool loads_model, int* argc, char** argv);
bool OptionsFlagGiven();
const std::string& OptionsFlag();  // "" when not given

double SecondsSince(std::chrono::steady_clock::time_point t0);
double Median(std::vector<double> v);

// What `strata run` passes to its chat mode.
struct ChatCliOptions {
  std::string prompt;  // non-empty: one turn with this user message, then exit
  std::string system;  // optional system message
  int32_t max_new_tokens = 256;
  float temperature = 0.0f;
  uint64_t seed = 0;
  nlohmann::ordered_json template_variables = nlohmann::ordered_json::object();
};
// Chat on `session` (which has a conversation): one-shot or the stdin REPL.
int RunChat(Engine& engine, Session& session, const ChatCliOptions& options);

// Subcommands: each returns the process exit code.
int RunLogits(int argc, char** argv);
int RunGenerate(int argc, char** argv);
int RunInfo(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunMakeDemoModel(int argc, char** argv);
int RunDemo(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunDetokenize(int argc, char** argv);
int RunTemplate(int argc, char** argv);
// serve.cc: `strata generate --prompts-jsonl` and `strata bench serve`.
int RunGenerateBatch(int argc, char** argv);
int RunBenchServe(int argc, char** argv);
// bench.cc: writes a --preset's config.json and returns its directory.
StatusOr<std::string> WriteBenchPreset(const std::string& name);

}  // namespace strata::cli

#endif  // STRATA_TOOLS_STRATA_CLI_H_
