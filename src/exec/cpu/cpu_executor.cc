// The CPU executor over a layer list.
#include "exec/cpu/cpu_executor.h"

#include <algorithm>
#include <deque>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/norm.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/cpu_state.h"
#include "exec/cpu/weight_binder.h"
#include "memory/host_block_pool.h"
#include "model/forward_checks.h"
#include "model/weight_store.h"

namespace strata::exec {
namespace {

using cpu::WeightMatrix;

// Longest slice of tokens pushed through all layers at once. Longer prompts
// run as consecutive continuations (identical math), which bounds scratch.
constexpr int64_t kMaxSliceTokens = 512;

struct DecoderLayer {
  std::vector<float> input_norm, post_norm;
  std::unique_ptr<CpuLayer> mixer, ffn;
  size_t first_region = 0;  // the mixer's regions in the state layout
  size_t num_regions = 0;
};

class CpuExecutor final : public Model {
 public:
  CpuExecutor(ArchSpec spec, std::shared_ptr<const WeightStore> weights, ThreadPool* pool)
      : spec_(std::move(spec)), store_(std::move(weights)), pool_(pool) {}
  Status Bind(const LoadOptions& options);
  // Binds every layer through `wb` (without a store: ListTensors).
  Status BindWith(WeightBinder& wb, const LoadOptions& options);

  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;
  int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const override;
  std::string SavedStateLayout() const override { return layout_->Describe(); }

 private:
  void FillInfo();
  Status ForwardSlice(const int32_t* tokens, int64_t T, CpuSequenceState& st, float* logits,
                      bool all_logits) const;

  ArchSpec spec_;
  std::shared_ptr<const WeightStore> store_;
  ThreadPool* pool_;
  ModelInfo info_;
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<DecoderLayer> layers_;
  std::vector<StateRegion> regions_;
  std::unique_ptr<CpuStateLayout> layout_;
  std::shared_ptr<HostBlockPool> blocks_;  // null without per-token regions
  std::set<int64_t> matrix_cols_;
  std::deque<std::vector<float>> dequantized_;  // FP8 matrices as fp32
};

Status CpuExecutor::Bind(const LoadOptions& options) {
  WeightBinder wb(*store_, spec_.fp8_block, spec_.zero_centred_norms, &dequantized_);
  STRATA_RETURN_IF_ERROR(BindWith(wb, options));
  layout_ = std::make_unique<CpuStateLayout>(regions_);
  if (layout_->block_floats > 0) blocks_ = std::make_shared<HostBlockPool>(layout_->block_floats);
  FillInfo();
  return OkStatus();
}

Status CpuExecutor::BindWith(WeightBinder& wb, const LoadOptions& options) {
  const int64_t D = spec_.hidden_size, V = spec_.vocab_size;
  STRATA_ASSIGN_OR_RETURN(embed_, wb.Matrix("model.embed_tokens.weight", V, D));
  if (spec_.tie_word_embeddings && (store_ == nullptr || !store_->Has("lm_head.weight"))) {
    lm_head_ = embed_;
  } else {
    STRATA_ASSIGN_OR_RETURN(lm_head_, wb.Matrix("lm_head.weight", V, D));
  }
  STRATA_ASSIGN_OR_RETURN(final_norm_, wb.NormWeight("model.norm.weight", D));
  const size_t L = spec_.layers.size();
  layers_.resize(L);
  for (size_t i = 0; i < L; ++i) {
    const LayerSpec& ls = spec_.layers[i];
    DecoderLayer& dl = layers_[i];
    STRATA_ASSIGN_OR_RETURN(dl.input_norm, wb.NormWeight(ls.prefix + "input_layernorm.weight", D));
    STRATA_ASSIGN_OR_RETURN(dl.post_norm,
                            wb.NormWeight(ls.prefix + "post_attention_layernorm.weight", D));
    STRATA_ASSIGN_OR_RETURN(dl.mixer, MakeCpuLayer(ls.mixer, {ls.mixer_prefix, D, &wb}));
    STRATA_ASSIGN_OR_RETURN(dl.ffn, MakeCpuLayer(ls.ffn, {ls.ffn_prefix, D, &wb}));
    const std::vector<StateRegion> regions = dl.mixer->StateRegions();
    dl.first_region = regions_.size();
    dl.num_regions = regions.size();
    regions_.insert(regions_.end(), regions.begin(), regions.end());
    if (options.progress) {
      // LoadModel gives the weight store 90%; binding is the last 10% but one.
      const float f = 0.9f + 0.09f * static_cast<float>(i + 1) / static_cast<float>(L);
      if (!options.progress(f)) {
        return absl::CancelledError(
            absl::StrCat(store_->dir(), ": load cancelled by the progress callback"));
      }
    }
  }
  matrix_cols_ = wb.matrix_cols();
  return OkStatus();
}

void CpuExecutor::FillInfo() {
  ModelInfo& info = info_;
  info.architecture = spec_.architecture;
  info.device = "cpu";
  info.num_layers = static_cast<int32_t>(spec_.layers.size());
  for (const LayerSpec& l : spec_.layers) info.layer_kinds.push_back(LayerKind(l));
  info.num_parameters = store_->TotalElements();
  info.parameter_bytes = store_->TotalBytes();
  info.vocab_size = static_cast<int32_t>(spec_.vocab_size);
  info.hidden_size = static_cast<int32_t>(spec_.hidden_size);
  info.max_context = spec_.max_context;
  for (const StateRegion& r : regions_) {
    const uint64_t bytes = static_cast<uint64_t>(r.floats) * sizeof(float);
    (r.per_token ? info.state_bytes_per_token : info.state_bytes_per_sequence) += bytes;
  }
  info.bos_token_id = spec_.bos_token_id;
  info.eos_token_id = spec_.eos_token_id;
}

StatusOr<std::unique_ptr<SequenceState>> CpuExecutor::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (info_.max_context > 0 && max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("NewState: max_tokens ", max_tokens,
                                                   " exceeds the model's context of ",
                                                   info_.max_context));
  }
  return std::unique_ptr<SequenceState>(
      std::make_unique<CpuSequenceState>(this, layout_.get(), blocks_, max_tokens));
}

int64_t CpuExecutor::EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const {
  const int64_t context = state.num_tokens() + new_tokens;
  int64_t attended = 0;
  for (const DecoderLayer& l : layers_) {
    attended = std::max(attended, l.mixer->AttendedTokens(context));
  }
  // Only linear mixers: nothing grows with the context; report it as dense.
  return attended > 0 ? attended : context;
}

Status CpuExecutor::ForwardSlice(const int32_t* tokens, int64_t T, CpuSequenceState& st,
                                 float* logits, bool all_logits) const {
  const int64_t D = spec_.hidden_size, past = st.num_tokens();
  const int threads = pool_->num_threads();
  st.ReserveRows(past + T);
  const std::vector<RegionView> regions = st.Views();
  const size_t td = static_cast<size_t>(T * D);
  size_t mm_floats = 1;
  for (int64_t cols : matrix_cols_) {
    mm_floats = std::max(mm_floats, cpu::MatMulScratchFloats(T, cols, threads));
  }
  // Plan: the residual stream, the normed input and the block output, the
  // shared matmul tiles, then the largest module's own scratch (modules run
  // one at a time and share it).
  ScratchArena plan;
  plan.Take<float>(td);
  plan.Take<float>(td);
  plan.Take<float>(td);
  plan.Take<float>(mm_floats);
  const size_t own = plan.used();
  size_t modules = 0;
  for (const DecoderLayer& l : layers_) {
    modules = std::max(
        {modules, l.mixer->ScratchBytes(T, past, threads), l.ffn->ScratchBytes(T, past, threads)});
  }
  uint8_t* base = static_cast<uint8_t*>(st.Scratch(own + modules));
  ScratchArena arena(base, own);
  float* h = arena.Take<float>(td);
  float* xn = arena.Take<float>(td);
  float* mix = arena.Take<float>(td);
  LayerRun run;
  run.pool = pool_;
  run.matmul_scratch = arena.Take<float>(mm_floats);
  run.past = past;

  const float eps = spec_.norm_eps;
  for (int64_t t = 0; t < T; ++t) cpu::RowToF32(embed_, tokens[t], h + t * D);
  for (const DecoderLayer& layer : layers_) {
    cpu::RmsNorm(h, T, D, layer.input_norm.data(), eps, xn, pool_);
    ScratchArena mixer_scratch(base + own, modules);
    run.scratch = &mixer_scratch;
    run.state = std::span(regions).subspan(layer.first_region, layer.num_regions);
    STRATA_RETURN_IF_ERROR(layer.mixer->Run(run, xn, T, mix));
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
    cpu::RmsNorm(h, T, D, layer.post_norm.data(), eps, xn, pool_);
    ScratchArena ffn_scratch(base + own, modules);
    run.scratch = &ffn_scratch;
    run.state = {};
    STRATA_RETURN_IF_ERROR(layer.ffn->Run(run, xn, T, mix));
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
  }
  st.Advance(T);
  if (logits == nullptr) return OkStatus();
  if (all_logits) {
    cpu::RmsNorm(h, T, D, final_norm_.data(), eps, xn, pool_);
    Linear(run, xn, T, lm_head_, logits);
  } else {
    cpu::RmsNorm(h + (T - 1) * D, 1, D, final_norm_.data(), eps, xn, pool_);
    Linear(run, xn, 1, lm_head_, logits);
  }
  return OkStatus();
}

Status CpuExecutor::Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                            bool all_logits) const {
  auto* st = dynamic_cast<CpuSequenceState*>(&state);
  if (st == nullptr || st->owner() != this) {
    return absl::InvalidArgumentError(
        "Forward: the state was not created by this model's NewState");
  }
  STRATA_RETURN_IF_ERROR(
      CheckForwardTokens(tokens, spec_.vocab_size, st->num_tokens(), st->max_tokens()));
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t V = spec_.vocab_size;
  for (int64_t begin = 0; begin < T; begin += kMaxSliceTokens) {
    const int64_t n = std::min(kMaxSliceTokens, T - begin);
    const bool last = begin + n == T;
    float* slice_logits = nullptr;
    if (logits != nullptr && all_logits) slice_logits = logits + begin * V;
    if (logits != nullptr && !all_logits && last) slice_logits = logits;
    STRATA_RETURN_IF_ERROR(ForwardSlice(tokens.data() + begin, n, *st, slice_logits, all_logits));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateCpuExecutor(ArchSpec spec,
                                                   std::shared_ptr<const WeightStore> weights,
                                                   const LoadOptions& options) {
  ThreadPool* pool = options.pool ? options.pool : ThreadPool::Default();
  auto model = std::make_unique<CpuExecutor>(std::move(spec), std::move(weights), pool);
  STRATA_RETURN_IF_ERROR(model->Bind(options));
  return std::unique_ptr<Model>(std::move(model));
}

StatusOr<std::vector<BoundTensor>> ListTensors(const ArchSpec& spec) {
  std::vector<BoundTensor> listed;
  WeightBinder wb(&listed);
  CpuExecutor lister(spec, nullptr, nullptr);
  STRATA_RETURN_IF_ERROR(lister.BindWith(wb, {}));
  return listed;
}

}  // namespace strata::exec
