// Architecture registry and the model-directory entry point.
#include "model/model.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "base/catch_allocation.h"
#include "base/read_file.h"
#include "base/thread_pool.h"
#include "base/tuning.h"
#include "exec/cpu/cpu_executor.h"
#include "exec/cpu/dummy_checkpoint.h"
#if defined(STRATA_HAVE_CUDA)
#include "exec/cuda/cuda_executor.h"
#endif
#include "model/config_reader.h"
#include "model/models/builtin.h"
#include "model/weight_check.h"
#include "model/weight_store.h"
#include "model/weights_digest.h"

namespace strata {
namespace {

// An architecture the library builds for either executor from its layer
// list, or one a host registered with its own factory (CPU only).
struct Architecture {
  DescribeArchitecture describe = nullptr;
  ModelFactory factory;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Architecture> architectures;
};

Registry& GetRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->architectures["kimi_linear"].describe = DescribeKimiLinear;
    reg->architectures["deepseek_v32"].describe = DescribeDeepseekV32;
    reg->architectures["qwen3_next"].describe = DescribeQwen3Next;
    reg->architectures["strata_hybrid"].describe = DescribeStrataHybrid;
    return reg;
  }();
  return *r;
}

// What LoadModel returns for a model on the CPU: forwards everything to the
// executor it wraps and adds to its info what only the loader knows (the
// weights digest, and a notice when the model runs somewhere other than
// requested).
class LoadedModel final : public Model {
 public:
  LoadedModel(std::unique_ptr<Model> inner, std::string notice, std::string digest)
      : inner_(std::move(inner)), info_(inner_->info()) {
    info_.notice = std::move(notice);
    info_.weights_digest = std::move(digest);
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override {
    return inner_->NewState(max_tokens);
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override {
    return inner_->Forward(tokens, state, logits, all_logits);
  }
  Status DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                     float* logits) const override {
    return inner_->DecodeBatch(tokens, states, logits);
  }
  Status DecodeBatchSample(std::span<const int32_t> tokens,
                           std::span<SequenceState* const> states,
                           std::span<const DecodeSampling> sampling,
                           int32_t* out_tokens) const override {
    return inner_->DecodeBatchSample(tokens, states, sampling, out_tokens);
  }
  Status ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                       const DecodeSampling& sampling, int32_t* out_token,
                       float* logits) const override {
    return inner_->ForwardSample(tokens, state, sampling, out_token, logits);
  }
  Status DecodeAndPrefill(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                          std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                          const PrefillPart& prefill) const override {
    return inner_->DecodeAndPrefill(tokens, states, sampling, out_tokens, prefill);
  }
  StatusOr<std::unique_ptr<StateCheckpoint>> Checkpoint(const SequenceState& state) const override {
    return inner_->Checkpoint(state);
  }
  Status Restore(const StateCheckpoint& checkpoint,
                 std::unique_ptr<SequenceState>& state) const override {
    return inner_->Restore(checkpoint, state);
  }
  std::string SavedStateLayout() const override { return inner_->SavedStateLayout(); }
  StatusOr<std::vector<uint8_t>> SaveCheckpoint(const StateCheckpoint& checkpoint) const override {
    return inner_->SaveCheckpoint(checkpoint);
  }
  StatusOr<std::unique_ptr<StateCheckpoint>> LoadCheckpoint(std::span<const uint8_t> bytes,
                                                            int64_t max_tokens) const override {
    return inner_->LoadCheckpoint(bytes, max_tokens);
  }
  Status FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                 uint64_t seed) const override {
    return inner_->FillContextForBenchmark(state, num_tokens, seed);
  }
  int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const override {
    return inner_->EffectiveAttendedTokens(state, new_tokens);
  }

 private:
  std::unique_ptr<Model> inner_;
  ModelInfo info_;
};

// Device problems (as opposed to problems of the checkpoint or the caller)
// make LoadModel fall back to the CPU.
bool IsDeviceProblem(const Status& s) {
  return absl::IsUnavailable(s) || absl::IsResourceExhausted(s) || absl::IsUnimplemented(s) ||
         absl::IsFailedPrecondition(s) || absl::IsInternal(s);
}

// Writes host dummy weights for `spec` (of `config_path`) to a private
// temporary directory and opens them; the directory is removed at once (the
// mapping keeps the data alive until the store closes).
StatusOr<std::unique_ptr<WeightStore>> OpenHostDummyWeights(const exec::ArchSpec& spec,
                                                            const std::string& config_path,
                                                            uint64_t seed) {
  namespace fs = std::filesystem;
  // Host dummies are for small configs (tests, demos); a 48B-shaped model
  // belongs on the GPU, where its weights are made in place.
  constexpr uint64_t kMaxHostDummyBytes = uint64_t{4} << 30;
  static std::atomic<int> counter{0};
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) /
                       absl::StrCat("strata_dummy_", ::getpid(), "_", counter.fetch_add(1));
  Status written = exec::WriteDummyCheckpoint(spec, dir.string(), seed, kMaxHostDummyBytes);
  if (absl::IsResourceExhausted(written)) {
    written = Status(written.code(), absl::StrCat(config_path, ": ", written.message()));
  }
  StatusOr<std::unique_ptr<WeightStore>> store =
      written.ok() ? WeightStore::Open(dir.string()) : StatusOr<std::unique_ptr<WeightStore>>(written);
  fs::remove_all(dir, ec);
  return store;
}

}  // namespace

Status Model::DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                          float* logits) const {
  if (tokens.size() != states.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeBatch: ", tokens.size(), " tokens for ",
                                                   states.size(), " states"));
  }
  std::set<const SequenceState*> seen;
  for (size_t b = 0; b < states.size(); ++b) {
    if (states[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeBatch: states[", b, "] is null"));
    }
    if (!seen.insert(states[b]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("DecodeBatch: states[", b, "] appears twice in the batch"));
    }
  }
  const int64_t vocab = info().vocab_size;
  for (size_t b = 0; b < states.size(); ++b) {
    STRATA_RETURN_IF_ERROR(Forward(tokens.subspan(b, 1), *states[b],
                                   logits ? logits + static_cast<int64_t>(b) * vocab : nullptr,
                                   /*all_logits=*/false));
  }
  return OkStatus();
}

Status Model::DecodeBatchSample(std::span<const int32_t> tokens,
                                std::span<SequenceState* const> states,
                                std::span<const DecodeSampling> sampling,
                                int32_t* out_tokens) const {
  if (sampling.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeBatchSample: ", sampling.size(),
                                                   " sampling rows for ", tokens.size(), " tokens"));
  }
  if (out_tokens == nullptr) return absl::InvalidArgumentError("DecodeBatchSample: out_tokens is null");
  for (size_t b = 0; b < sampling.size(); ++b) {
    if (sampling[b].temperature != 0.f) {
      return absl::UnimplementedError(
          "DecodeBatchSample: only greedy rows are supported on this executor (use the engine's "
          "sampler on DecodeBatch logits)");
    }
  }
  const int64_t vocab = info().vocab_size;
  std::vector<float> logits(tokens.size() * static_cast<size_t>(vocab));
  STRATA_RETURN_IF_ERROR(DecodeBatch(tokens, states, logits.data()));
  for (size_t b = 0; b < tokens.size(); ++b) {
    const float* row = logits.data() + b * static_cast<size_t>(vocab);
    out_tokens[b] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  return OkStatus();
}

Status Model::ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                            const DecodeSampling& sampling, int32_t* out_token,
                            float* logits) const {
  if (out_token == nullptr) return absl::InvalidArgumentError("ForwardSample: out_token is null");
  if (sampling.temperature != 0.f) {
    return absl::UnimplementedError(
        "ForwardSample: only greedy selection is supported on this executor (use the engine's "
        "sampler on Forward logits)");
  }
  std::vector<float> own;
  if (logits == nullptr) {
    own.resize(static_cast<size_t>(info().vocab_size));
    logits = own.data();
  }
  STRATA_RETURN_IF_ERROR(Forward(tokens, state, logits, /*all_logits=*/false));
  *out_token = static_cast<int32_t>(std::max_element(logits, logits + info().vocab_size) - logits);
  return OkStatus();
}

Status Model::DecodeAndPrefill(std::span<const int32_t> tokens,
                               std::span<SequenceState* const> states,
                               std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                               const PrefillPart& prefill) const {
  if (prefill.state == nullptr) {
    return absl::InvalidArgumentError("DecodeAndPrefill: prefill.state is null");
  }
  for (SequenceState* s : states) {
    if (s == prefill.state) {
      return absl::InvalidArgumentError("DecodeAndPrefill: prefill.state is also a decode row");
    }
  }
  STRATA_RETURN_IF_ERROR(DecodeBatchSample(tokens, states, sampling, out_tokens));
  if (prefill.sampling != nullptr) {
    return ForwardSample(prefill.tokens, *prefill.state, *prefill.sampling, prefill.out_token,
                         prefill.logits);
  }
  return Forward(prefill.tokens, *prefill.state, prefill.logits, /*all_logits=*/false);
}

namespace {

// Model's default checkpoint: a clone of the state, restored by cloning it.
class ClonedCheckpoint final : public StateCheckpoint {
 public:
  ClonedCheckpoint(const Model* owner, std::unique_ptr<SequenceState> state)
      : owner_(owner), state_(std::move(state)) {}
  int64_t num_tokens() const override { return state_->num_tokens(); }
  Footprint footprint() const override { return state_->footprint(); }
  const Model* owner() const { return owner_; }
  const SequenceState& state() const { return *state_; }

 private:
  const Model* owner_;
  std::unique_ptr<SequenceState> state_;
};

}  // namespace

StatusOr<std::unique_ptr<StateCheckpoint>> Model::Checkpoint(const SequenceState& state) const {
  if (state.on_host()) {
    return absl::FailedPreconditionError(
        "Checkpoint: the state is on the host (move it back first)");
  }
  std::unique_ptr<SequenceState> copy = state.Clone();
  if (copy == nullptr) {
    return absl::ResourceExhaustedError("Checkpoint: no room for a copy of the state");
  }
  return std::unique_ptr<StateCheckpoint>(
      std::make_unique<ClonedCheckpoint>(this, std::move(copy)));
}

Status Model::Restore(const StateCheckpoint& checkpoint,
                      std::unique_ptr<SequenceState>& state) const {
  const auto* cp = dynamic_cast<const ClonedCheckpoint*>(&checkpoint);
  if (cp == nullptr || cp->owner() != this) {
    return absl::InvalidArgumentError("Restore: the checkpoint was made by another model");
  }
  std::unique_ptr<SequenceState> copy = cp->state().Clone();
  if (copy == nullptr) return absl::ResourceExhaustedError("Restore: no room for another state");
  state = std::move(copy);
  return OkStatus();
}

Status SequenceState::SaveContents(std::vector<uint8_t>*) const {
  return absl::UnimplementedError("this executor's states cannot be saved");
}

Status SequenceState::LoadContents(std::span<const uint8_t>) {
  return absl::UnimplementedError("this executor's states cannot be loaded");
}

StatusOr<std::vector<uint8_t>> Model::SaveCheckpoint(const StateCheckpoint& checkpoint) const {
  const auto* cp = dynamic_cast<const ClonedCheckpoint*>(&checkpoint);
  if (cp == nullptr || cp->owner() != this) {
    return absl::InvalidArgumentError("SaveCheckpoint: the checkpoint was made by another model");
  }
  std::vector<uint8_t> out;
  STRATA_RETURN_IF_ERROR(cp->state().SaveContents(&out));
  return out;
}

StatusOr<std::unique_ptr<StateCheckpoint>> Model::LoadCheckpoint(std::span<const uint8_t> bytes,
                                                                 int64_t max_tokens) const {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SequenceState> state, NewState(max_tokens));
  STRATA_RETURN_IF_ERROR(state->LoadContents(bytes));
  return std::unique_ptr<StateCheckpoint>(
      std::make_unique<ClonedCheckpoint>(this, std::move(state)));
}

Status Model::FillContextForBenchmark(SequenceState&, int64_t, uint64_t) const {
  return absl::UnimplementedError(
      absl::StrCat("FillContextForBenchmark: not supported on ", info().device));
}

StatusOr<exec::ArchSpec> DescribeConfigFile(const std::string& config_path) {
  STRATA_ASSIGN_OR_RETURN(const ConfigReader config, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(const std::string model_type, config.GetString("model_type"));
  Registry& r = GetRegistry();
  DescribeArchitecture describe = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (auto it = r.architectures.find(model_type); it != r.architectures.end()) {
      describe = it->second.describe;
    }
  }
  if (describe == nullptr) {
    return absl::NotFoundError(
        config.FieldError("model_type", absl::StrCat("no built-in '", model_type, "'")).message());
  }
  return describe(config, nullptr);
}

bool RegisterModelArchitecture(const std::string& model_type, ModelFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.architectures[model_type] = {.factory = std::move(factory)};
  return true;
}

std::vector<std::string> RegisteredArchitectures() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, a] : r.architectures) out.push_back(name);
  return out;
}

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": not a model directory"));
  }
  // Bad options fail every load, also where no entry applies (the CPU), so a
  // typo is never silently ignored.
  STRATA_RETURN_IF_ERROR(tuning::Resolve(options.options).status());
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  STRATA_ASSIGN_OR_RETURN(ConfigReader config,
                          CatchAllocation(absl::StrCat("reading ", config_path),
                                          [&] { return ConfigReader::FromFile(config_path); }));
  STRATA_ASSIGN_OR_RETURN(std::string model_type, config.GetString("model_type"));
  Architecture arch;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.architectures.find(model_type);
    if (it != r.architectures.end()) arch = it->second;
  }
  if (arch.describe == nullptr && !arch.factory) {
    std::string known;
    for (const auto& name : RegisteredArchitectures()) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    // A valid name this build does not know: UNSUPPORTED, as strata_model_load documents.
    return absl::UnimplementedError(
        config.FieldError("model_type", absl::StrCat("unsupported architecture '", model_type,
                                                     "' (supported: ", known, ")"))
            .message());
  }
  const bool dummy = options.load_format == LoadFormat::kDummy;
  std::shared_ptr<const WeightStore> shared;
  // The layer list, named after the weights it binds (null: dummy weights).
  auto describe = [&]() -> StatusOr<exec::ArchSpec> {
    return CatchAllocation(absl::StrCat("reading ", config_path),
                           [&] { return arch.describe(config, shared.get()); });
  };
  // Opens the checkpoint (or makes host dummy weights) once, for whichever
  // executor ends up using it. Weights take `share` of the progress bar.
  auto open_weights = [&](float share) -> Status {
    if (shared) return OkStatus();
    std::function<bool(float)> weight_progress;
    if (options.progress) {
      weight_progress = [&options, share](float f) { return options.progress(share * f); };
    }
    std::unique_ptr<WeightStore> store;
    if (dummy) {
      if (arch.describe == nullptr) {
        return absl::UnimplementedError(
            absl::StrCat("--load-format dummy is not supported for model_type '", model_type, "'"));
      }
      STRATA_ASSIGN_OR_RETURN(const exec::ArchSpec spec, describe());
      STRATA_ASSIGN_OR_RETURN(
          store, CatchAllocation(absl::StrCat("making the dummy weights of ", config_path), [&] {
            return OpenHostDummyWeights(spec, config_path, options.dummy_seed);
          }));
      if (weight_progress && !weight_progress(1.0f)) {
        return absl::CancelledError(absl::StrCat(model_dir, ": load cancelled by the progress callback"));
      }
    } else {
      STRATA_ASSIGN_OR_RETURN(
          store, CatchAllocation(absl::StrCat("opening the weights of ", model_dir),
                                 [&] { return WeightStore::Open(model_dir, weight_progress); }));
    }
    if (options.check_weights) {
      STRATA_RETURN_IF_ERROR(
          CheckWeightsFinite(*store, options.pool ? options.pool : ThreadPool::Default()));
    }
    shared = std::move(store);
    return OkStatus();
  };

  // The executor wrapped with the loader's additions to its info.
  auto Loaded = [&](std::unique_ptr<Model> model, std::string notice) -> StatusOr<std::unique_ptr<Model>> {
    STRATA_ASSIGN_OR_RETURN(const std::string config_bytes, ReadFileToString(config_path));
    STRATA_ASSIGN_OR_RETURN(
        std::string digest,
        CatchAllocation(absl::StrCat("digesting the weights of ", model_dir), [&] {
          return StatusOr<std::string>(
              WeightsDigest(config_bytes, dummy ? nullptr : shared.get(), options.dummy_seed));
        }));
    return std::unique_ptr<Model>(
        new LoadedModel(std::move(model), std::move(notice), std::move(digest)));
  };
  if (options.device_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadOptions.device_index must be >= 0, got ", options.device_index));
  }
  // Why the GPU cannot take the model; empty when it was not asked for.
  std::string unusable;
  if (options.device != Device::kCpu) {
#if defined(STRATA_HAVE_CUDA)
    if (arch.describe == nullptr) {
      unusable = absl::StrCat("model_type '", model_type, "' has no CUDA executor");
    } else {
      // The device copy is the slow part of a CUDA load; the mapping is quick.
      if (!dummy) STRATA_RETURN_IF_ERROR(open_weights(0.05f));
      STRATA_ASSIGN_OR_RETURN(exec::ArchSpec spec, describe());
      StatusOr<std::unique_ptr<Model>> gpu = CatchAllocation(
          absl::StrCat("building the ", model_type, " model of ", model_dir, " on CUDA"),
          [&] { return cuda_exec::CreateCudaLayerExecutor(std::move(spec), shared, options); });
      if (gpu.ok()) {
        if (options.progress && !options.progress(1.0f)) {
          return absl::CancelledError(
              absl::StrCat(model_dir, ": load cancelled by the progress callback"));
        }
        return std::move(*gpu);
      }
      if (!IsDeviceProblem(gpu.status())) return gpu.status();
      unusable = std::string(gpu.status().message());
    }
#else
    unusable = "this build of Strata has no CUDA backend (configured without STRATA_CUDA)";
#endif
  }
  std::string notice;
  if (!unusable.empty()) {
    if (options.require_device && options.device == Device::kCuda) {
      return absl::UnavailableError(absl::StrCat(model_dir, ": CUDA requested but ", unusable));
    }
    notice = absl::StrCat(options.device == Device::kCuda ? "CUDA requested but " : "device auto: ", unusable,
                          "; running on the CPU");
  }

  if (Status s = open_weights(0.9f); !s.ok()) {
    // E.g. a 48B-shaped dummy model that fell back from the GPU: say both.
    if (notice.empty()) return s;
    return Status(s.code(), absl::StrCat(notice, ", which failed: ", s.message()));
  }
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<Model> model,
      CatchAllocation(
          absl::StrCat("building the ", model_type, " model of ", model_dir, " on the CPU"),
          [&]() -> StatusOr<std::unique_ptr<Model>> {
            if (!arch.describe) {
              return arch.factory(shared, config_path, options);
            }
            STRATA_ASSIGN_OR_RETURN(exec::ArchSpec spec, describe());
            return exec::CreateCpuExecutor(std::move(spec), shared, options);
          }));
  if (options.progress && !options.progress(1.0f)) {
    return absl::CancelledError(absl::StrCat(model_dir, ": load cancelled by the progress callback"));
  }
  return Loaded(std::move(model), std::move(notice));
}

}  // namespace strata
