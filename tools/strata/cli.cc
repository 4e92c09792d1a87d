// Flag parsing, error reporting and small helpers shared by the subcommands.
#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace strata::cli {

using absl::OkStatus;

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
    const std::string& text = it->second;
    const size_t digits = text.find_first_not_of("0123456789", text[0] == '-' || text[0] == '+' ? 1 : 0);
    if (digits == std::string::npos && text.size() > 1) {  // an integer beyond 64 bits
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", text, " is outside [", min, ", ", max, "]"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": expected an integer, got '", text, "'"));
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

int Fail(const std::string& command, const api::Error& error, int code) {
  return Fail(command, MessageOf(error), code);
}

int Fail(const std::string& command, const std::string& message, int code) {
  std::fprintf(stderr, "strata %s: error: %s\n", command.c_str(), message.c_str());
  return code;
}

int ExitCodeFor(const Status& status) {
  return (absl::IsInvalidArgument(status) || absl::IsOutOfRange(status)) ? kExitUsage : kExitFailure;
}

int ExitCodeFor(const api::Error& error) {
  const strata_status code = error.status() & 0xff;
  return (code == STRATA_ERR_INVALID_ARGUMENT || code == STRATA_ERR_OUT_OF_RANGE) ? kExitUsage : kExitFailure;
}

std::string MessageOf(const api::Error& error) {
  const std::string message = error.what();
  const size_t colon = message.find(": ");
  if (colon != std::string::npos && message.rfind("strata_", 0) == 0 &&
      message.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == colon) {
    return message.substr(colon + 2);
  }
  return message;
}

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: no such file"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a file"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  // Sized first: a file too large for memory fails here, at once.
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (in.bad() || static_cast<uintmax_t>(in.gcount()) != size) {
    return absl::DataLossError(absl::StrCat(path, ": read ", in.gcount(), " of ", size, " bytes"));
  }
  return text;
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

int ParseDevice(const std::string& command, const std::string& value, DeviceFlag* out) {
  if (value == "cpu") {
    *out = DeviceFlag::kCpu;
  } else if (value == "cuda") {
    *out = DeviceFlag::kCuda;
  } else if (value == "auto") {
    *out = DeviceFlag::kAuto;
  } else {
    return Fail(command, absl::StrCat("--device: expected cpu, cuda or auto, got '", value, "'"), kExitUsage);
  }
  return kExitOk;
}

int ParseLoadFormat(const std::string& command, const std::string& value, bool* dummy) {
  if (value != "auto" && value != "dummy") {
    return Fail(command, absl::StrCat("--load-format: expected auto or dummy, got '", value, "'"), kExitUsage);
  }
  *dummy = value == "dummy";
  return kExitOk;
}

void PrintPlacementNotice(const std::string& command, const std::string& notice) {
  if (!notice.empty()) std::fprintf(stderr, "strata %s: notice: %s\n", command.c_str(), notice.c_str());
}

void PrintTuningNotice(const std::string& command, const std::string& device, const std::string& tuning) {
  // `tuning` already holds what STRATA_OPTIONS set: the library reads it.
  if (!tuning.empty()) {
    std::fprintf(stderr, "strata %s: notice: tuning options in effect: %s\n", command.c_str(), tuning.c_str());
  } else if (!OptionsFlag().empty() && device == "cpu") {
    std::fprintf(stderr, "strata %s: notice: no tuning option applies on the CPU\n", command.c_str());
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
      return Fail(command, "--options needs a value: key=value,... (strata info --options lists the keys)",
                  kExitUsage);
    }
    state.given = true;
    state.value = value;
  }
  *argc = kept;
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

api::Model LoadModel(const std::string& command, const api::Engine& engine, const std::string& dir,
                     DeviceFlag device, api::ModelParams params) {
  if (OptionsFlagGiven()) params.Options(OptionsFlag().c_str());
  switch (device) {
    case DeviceFlag::kCpu: params.Device(STRATA_DEVICE_CPU, params.c.device_index); break;
    case DeviceFlag::kAuto: params.Device(STRATA_DEVICE_AUTO, params.c.device_index); break;
    case DeviceFlag::kCuda: {
      params.Device(STRATA_DEVICE_CUDA, params.c.device_index);
      std::string notice;
      try {
        return api::Model(engine, dir, params);
      } catch (const api::Error& e) {
        if ((e.status() & 0xff) != STRATA_ERR_UNAVAILABLE) throw;
        notice = MessageOf(e);
        // The strict load names the directory first; without it the notice
        // reads as the library's own fallback notices do.
        if (notice.rfind(dir + ": ", 0) == 0) notice.erase(0, dir.size() + 2);
        absl::StrAppend(&notice, "; running on the CPU");
      }
      params.Device(STRATA_DEVICE_CPU, params.c.device_index);
      try {
        api::Model model(engine, dir, params);
        PrintPlacementNotice(command, notice);
        PrintTuningNotice(command, model.Info().device, model.Info().tuning);
        return model;
      } catch (const api::Error& e) {
        // E.g. a 48B-shaped dummy model that fell back from the GPU: say both.
        throw api::Error(e.status(), absl::StrCat(notice, ", which failed: ", MessageOf(e)));
      }
    }
  }
  api::Model model(engine, dir, params);
  PrintPlacementNotice(command, model.Info().device_notice);
  PrintTuningNotice(command, model.Info().device, model.Info().tuning);
  return model;
}

Finished WaitForRequest(const api::Engine& engine, const api::Request& request,
                        const std::function<void(const strata_event&)>& on_event) {
  for (;;) {
    const std::optional<strata_event> ev = engine.Poll(-1);
    if (!ev || ev->request != request.get()) continue;
    if (ev->type != STRATA_EVENT_FINISHED) {
      on_event(*ev);
      continue;
    }
    Finished f;
    f.reason = ev->finish_reason;
    f.status = ev->status;
    f.generated_tokens = ev->num_generated_tokens;
    if (f.status != STRATA_OK) f.message = request.ErrorMessage();
    return f;
  }
}

}  // namespace strata::cli
