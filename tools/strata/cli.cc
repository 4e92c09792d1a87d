// Flag parsing, error reporting and small helpers shared by the subcommands.
#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/tuning.h"

namespace strata::cli {

Status Flags::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "' (flags start with --)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (bool_flags_.count(name)) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      values_[name] = "1";
      continue;
    }
    if (!value_flags_.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see strata ", command_, " --help)"));
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (values_.count(name)) return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    values_[name] = value;
  }
  return OkStatus();
}

StatusOr<std::string> Flags::Required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  }
  return it->second;
}

std::string Flags::String(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

StatusOr<int64_t> Flags::Int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected an integer, got '", it->second, "'"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": ", v, " is outside [", min, ", ", max, "]"));
  }
  return v;
}

StatusOr<double> Flags::Double(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double v;
  if (!absl::SimpleAtod(it->second, &v) || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected a number, got '", it->second, "'"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": ", v, " is outside [", min, ", ", max, "]"));
  }
  return v;
}

StatusOr<std::vector<int32_t>> Flags::IntList(const std::string& name) const {
  std::vector<int32_t> out;
  auto it = values_.find(name);
  if (it == values_.end()) return out;
  for (absl::string_view part : absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
    int32_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": expected comma-separated integers, got '", it->second, "'"));
    }
    out.push_back(v);
  }
  return out;
}

int Fail(const std::string& command, const Status& status, int code) {
  return Fail(command, std::string(status.message()), code);
}

int Fail(const std::string& command, const std::string& message, int code) {
  std::fprintf(stderr, "strata %s: error: %s\n", command.c_str(), message.c_str());
  return code;
}

int ExitCodeFor(const Status& status) {
  return (absl::IsInvalidArgument(status) || absl::IsOutOfRange(status)) ? kExitUsage : kExitFailure;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.2f %s", bytes, units[u]);
}

std::string FormatCount(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string DefaultDemoDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/strata/demo-model";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/strata/demo-model";
  }
  return "build/demo-model";
}

int CheckDevice(const std::string& command, const std::string& device) {
  Device d;
  return ParseDevice(command, device, &d);
}

int ParseDevice(const std::string& command, const std::string& value, Device* out) {
  if (value == "cpu") {
    *out = Device::kCpu;
  } else if (value == "cuda") {
    *out = Device::kCuda;
  } else if (value == "auto") {
    *out = Device::kAuto;
  } else {
    return Fail(command, absl::StrCat("--device: expected cpu, cuda or auto, got '", value, "'"), kExitUsage);
  }
  return kExitOk;
}

int ParseLoadFormat(const std::string& command, const std::string& value, LoadFormat* out) {
  if (value == "auto") {
    *out = LoadFormat::kAuto;
  } else if (value == "dummy") {
    *out = LoadFormat::kDummy;
  } else {
    return Fail(command, absl::StrCat("--load-format: expected auto or dummy, got '", value, "'"), kExitUsage);
  }
  return kExitOk;
}

void PrintPlacementNotice(const std::string& command, const ModelInfo& info) {
  if (!info.notice.empty()) std::fprintf(stderr, "strata %s: notice: %s\n", command.c_str(), info.notice.c_str());
  const std::string env = tuning::EnvironmentOptions();
  if (!env.empty()) {
    std::fprintf(stderr, "strata %s: notice: %s=%s is set (tuning options of every model loaded)\n",
                 command.c_str(), tuning::kEnvironmentVariable, env.c_str());
  }
  if (!info.tuning.empty()) {
    std::fprintf(stderr, "strata %s: notice: tuning options in effect: %s\n", command.c_str(),
                 info.tuning.c_str());
  } else if ((!env.empty() || !OptionsFlag().empty()) && info.device == "cpu") {
    std::fprintf(stderr, "strata %s: notice: no tuning option applies on the CPU\n",
                 command.c_str());
  }
}

namespace {

struct OptionsFlagState {
  bool given = false;
  std::string value;
};

OptionsFlagState& OptionsState() {
  static OptionsFlagState state;
  return state;
}

}  // namespace

int TakeOptionsFlag(const std::string& command, bool loads_model, int* argc, char** argv) {
  OptionsFlagState& state = OptionsState();
  int kept = 2;
  for (int i = 2; i < *argc; ++i) {
    const std::string arg = argv[i];
    bool has_value = false;
    std::string value;
    if (arg == "--options") {
      if (i + 1 < *argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        has_value = true;
        value = argv[++i];
      }
    } else if (arg.rfind("--options=", 0) == 0) {
      has_value = true;
      value = arg.substr(std::strlen("--options="));
    } else {
      argv[kept++] = argv[i];
      continue;
    }
    if (!loads_model) return Fail(command, "--options: this command loads no model", kExitUsage);
    if (state.given) return Fail(command, "--options given twice", kExitUsage);
    if (!has_value && command != "info") {
      return Fail(command,
                  "--options needs a value: key=value,... (strata info --options lists the keys)",
                  kExitUsage);
    }
    state.given = true;
    state.value = value;
  }
  *argc = kept;
  if (loads_model) {
    if (auto resolved = tuning::Resolve(state.value); !resolved.ok()) {
      return Fail(command, resolved.status(), kExitUsage);
    }
  }
  return kExitOk;
}

bool OptionsFlagGiven() { return OptionsState().given; }
const std::string& OptionsFlag() { return OptionsState().value; }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace strata::cli
