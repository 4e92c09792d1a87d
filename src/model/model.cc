// Architecture registry and the model-directory entry point.
#include "model/model.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include "model/config_reader.h"
#include "model/models/builtin.h"
#include "model/weight_store.h"

namespace strata {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, ModelFactory> factories;
};

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->factories["kimi_linear"] = CreateKimiLinearModel;
    return reg;
  }();
  return *r;
}

}  // namespace

bool RegisterModelArchitecture(const std::string& model_type, ModelFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[model_type] = std::move(factory);
  return true;
}

std::vector<std::string> RegisteredArchitectures() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, f] : r.factories) out.push_back(name);
  return out;
}

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": not a model directory"));
  }
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  STRATA_ASSIGN_OR_RETURN(ConfigReader config, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(std::string model_type, config.GetString("model_type"));
  ModelFactory factory;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(model_type);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& name : RegisteredArchitectures()) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    return config.FieldError("model_type", absl::StrCat("unsupported architecture '", model_type,
                                                        "' (supported: ", known, ")"));
  }
  // Weights take 90% of the progress bar; the adapter's own setup the rest.
  std::function<bool(float)> weight_progress;
  if (options.progress) {
    weight_progress = [&](float f) { return options.progress(0.9f * f); };
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store,
                          WeightStore::Open(model_dir, weight_progress));
  std::shared_ptr<const WeightStore> shared(std::move(store));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, factory(shared, config_path, options));
  if (options.progress && !options.progress(1.0f)) {
    return absl::CancelledError(absl::StrCat(model_dir, ": load cancelled by the progress callback"));
  }
  return model;
}

}  // namespace strata
