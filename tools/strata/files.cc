// The files in the core's formats that the ABI commands read or write
// (cli.h, "files in the core's formats"): token .npy files, the random demo
// model, bench presets. Part of the internal half of the tool.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "internal.h"

namespace strata::cli {

StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path) { return ReadNpyInt32(path); }

Status WriteRandomDemoModel(const std::string& dir, uint64_t seed) {
  DemoModelOptions o;
  o.seed = seed;
  STRATA_RETURN_IF_ERROR(WriteDemoKimiLinearModel(dir, o));
  return WriteDemoTokenizer(dir);
}

StatusOr<std::string> WriteBenchPreset(const std::string& name) {
  if (name != "kimi-linear-48b-a3b") {
    return absl::InvalidArgumentError(
        absl::StrCat("--preset: unknown preset '", name, "' (known: kimi-linear-48b-a3b)"));
  }
  // Next to the demo model in the cache directory.
  const std::string dir = (std::filesystem::path(DefaultDemoDir()).parent_path() / name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return FileError(absl::StrCat(dir, ": cannot create directory"), ec);
  std::ofstream f(dir + "/config.json", std::ios::trunc);
  f << kKimiLinear48BConfigJson;
  if (!f) return FileErrorFromErrno(absl::StrCat(dir, "/config.json: write failed"));
  return dir;
}

}  // namespace strata::cli
