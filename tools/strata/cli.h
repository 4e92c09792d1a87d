// Shared pieces of the `strata` command-line tool: flag parsing with errors
// that name the flag, exit codes, and helpers used by several subcommands.
// Each subcommand lives in its own file and is declared here.
//
// The tool is built from two parts (tools/CMakeLists.txt), so that it runs
// on libstrata the way a host program does:
// - The commands a host would write (run, generate, bench serve, tokenize,
//   detokenize, template) use the public API only (strata.h through the
//   strata.hpp wrapper). Their sources are compiled without src/ on the
//   include path: a core header there does not compile.
// - Kernel benchmarks and model-directory tools (bench, info, logits,
//   make-demo-model) use the C++ core through internal.h, which lists what
//   they touch and why.
// This header is shared by both and includes no core header. The ABI part
// calls the internal part only through the file helpers at the end.
#ifndef STRATA_TOOLS_STRATA_CLI_H_
#define STRATA_TOOLS_STRATA_CLI_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/strata.hpp"

namespace strata::cli {

namespace api = ::strata::api;
using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

// Exit codes: 0 success; 1 the work failed (unreadable model, bad file
// contents, model error, out of memory); 2 the command line is wrong or asks
// for something this build cannot do (unknown flag, bad value); 3 a bug in
// Strata: an exception no command handled reached main (main.cc prints
// "strata <command>: internal error: <what>").
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;

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
int Fail(const std::string& command, const api::Error& error, int code);
int Fail(const std::string& command, const std::string& message, int code);
// kExitUsage for bad input from the command line (InvalidArgument /
// OutOfRange, STRATA_ERR_INVALID_ARGUMENT / _OUT_OF_RANGE), kExitFailure otherwise.
int ExitCodeFor(const Status& status);
int ExitCodeFor(const api::Error& error);
// The library's message without the "strata_<function>: " it starts with:
// the CLI's messages name the command instead, as they did before the ABI.
std::string MessageOf(const api::Error& error);

// The whole of a regular file given on the command line: NotFound when it
// does not exist, InvalidArgument when it is a directory or not a regular file
// (a FIFO is refused, never waited on), errors naming the path. A failed
// allocation throws rather than cutting the text short.
StatusOr<std::string> ReadTextFile(const std::string& path);

// "1.23 MiB"-style size.
std::string FormatBytes(double bytes);
// "1,234,567".
std::string FormatCount(int64_t n);

// Where `strata run` and `strata bench` keep the demo model when no --model is
// given: $XDG_CACHE_HOME/strata/demo-model, else $HOME/.cache/strata/demo-model,
// else ./build/demo-model.
std::string DefaultDemoDir();

// --device: cpu, cuda or auto. cuda and auto load on the GPU when one is
// usable and otherwise fall back to the CPU with a notice, never an error;
// the notice of cuda says "CUDA requested", that of auto "device auto".
// Other values print a kExitUsage error. Returns kExitOk when valid.
enum class DeviceFlag { kCpu, kCuda, kAuto };
int ParseDevice(const std::string& command, const std::string& value, DeviceFlag* out);
// --load-format: auto (the safetensors) or dummy (config.json only, random weights).
int ParseLoadFormat(const std::string& command, const std::string& value, bool* dummy);
// Prints "strata <command>: notice: <notice>" to stderr unless it is empty
// (the model runs somewhere other than requested, e.g. CUDA asked for, no GPU).
void PrintPlacementNotice(const std::string& command, const std::string& notice);
// Prints the tuning notice of a loaded model: the options it runs with that
// differ from the defaults (`tuning`, strata_model_info::tuning, which
// includes STRATA_OPTIONS), or that none applies on the CPU when --options
// asked for some. `device` is strata_model_info::device.
void PrintTuningNotice(const std::string& command, const std::string& device, const std::string& tuning);

// --options STR, a flag of every command that loads a model: tuning registry
// values for it ("key=value,...", strata_model_params::options;
// docs/tuning.md). main() takes it out of argv (argv[2..]) before the command
// parses its own flags. The library checks the value at load (a bad key fails
// the load naming it). `info` also takes it without a value (list the
// entries). Returns kExitOk or the exit code of the error it printed.
int TakeOptionsFlag(const std::string& command, bool loads_model, int* argc, char** argv);
bool OptionsFlagGiven();
const std::string& OptionsFlag();  // "" when not given

double SecondsSince(std::chrono::steady_clock::time_point t0);
double Median(std::vector<double> v);

// --- the ABI commands' shared steps (cli.cc) ---------------------------------

// Loads `dir` on `device`, `params` giving the rest of the plan, and prints
// the placement notice. The ABI's STRATA_DEVICE_CUDA is strict, the CLI's
// --device cuda is not: cuda asks strictly and, when the GPU cannot take the
// model (STRATA_ERR_UNAVAILABLE), loads on the CPU with the library's reason
// as the notice. auto is STRATA_DEVICE_AUTO, whose notice the library writes.
// Throws api::Error.
api::Model LoadModel(const std::string& command, const api::Engine& engine, const std::string& dir,
                     DeviceFlag device, api::ModelParams params);

// How a request ended: its FINISHED event, with the failure message.
struct Finished {
  strata_finish_reason reason = STRATA_FINISH_NONE;
  strata_status status = STRATA_OK;
  std::string message;  // strata_request_error_message() when status is not STRATA_OK
  uint32_t generated_tokens = 0;
};
// Polls `engine` until `request` finishes, passing every other event of it to
// `on_event` (the commands that use it run one request at a time).
Finished WaitForRequest(const api::Engine& engine, const api::Request& request,
                        const std::function<void(const strata_event&)>& on_event);

// What `strata run` passes to its chat mode.
struct ChatCliOptions {
  std::string prompt;  // non-empty: one turn with this user message, then exit
  std::string system;  // optional system message
  int32_t max_new_tokens = 256;
  float temperature = 0.0f;
  uint64_t seed = 0;
  nlohmann::ordered_json template_variables = nlohmann::ordered_json::object();
};
// Chat on `session` (a model with tokenizer and chat template): one-shot or the stdin REPL.
int RunChat(const api::Engine& engine, api::Session& session, const ChatCliOptions& options);

// --- subcommands: each returns the process exit code ------------------------

// The C ABI part.
int RunGenerate(int argc, char** argv);
int RunDemo(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunDetokenize(int argc, char** argv);
int RunTemplate(int argc, char** argv);
// serve.cc: `strata generate --prompts-jsonl` and `strata bench serve`.
int RunGenerateBatch(int argc, char** argv);
int RunBenchServe(int argc, char** argv);
// The internal part (internal.h).
int RunLogits(int argc, char** argv);
int RunInfo(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunMakeDemoModel(int argc, char** argv);

// --- files in the core's formats, for the ABI commands (files.cc) -----------
// The ABI offers inference, not file formats; these few come from the
// internal part rather than a second implementation here.

// The ids of a token file (.npy, int32 or int64).
StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path);
// Writes the random-weight kimi_linear demo model and the demo tokenizer to `dir`.
Status WriteRandomDemoModel(const std::string& dir, uint64_t seed);
// Writes a --preset's config.json (dummy weights need nothing else) and returns its directory.
StatusOr<std::string> WriteBenchPreset(const std::string& name);

}  // namespace strata::cli

#endif  // STRATA_TOOLS_STRATA_CLI_H_
