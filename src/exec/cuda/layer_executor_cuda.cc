// The GPU layer-list executor's modules, weights and load (layer_executor.h).
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/moe.h"
#include "base/dtype.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/cuda_load_helpers.h"
#include "exec/cuda/cuda_mixer.h"
#include "exec/cuda/layer_executor.h"
#include "model/weight_store.h"

namespace strata::cuda_exec {
namespace {

// The module of one mixer kind (an MLA form without one is Unimplemented).
template <typename Spec>
StatusOr<std::unique_ptr<CudaMixer>> NewMixer(const Spec& spec, const MixerContext& ctx) {
  return StatusOr<std::unique_ptr<CudaMixer>>(MakeCudaMixer(spec, ctx));
}

}  // namespace

Status LayerExecutor::BuildMixers() {
  const MixerContext ctx{spec_.hidden_size, invariant_};
  std::vector<const exec::MixerSpec*> kinds;  // kinds[m]: module m's spec
  for (const exec::LayerSpec& layer : spec_.layers) {
    size_t m = 0;
    while (m < kinds.size() && !(*kinds[m] == layer.mixer)) ++m;
    if (m == kinds.size()) {
      STRATA_ASSIGN_OR_RETURN(
          std::unique_ptr<CudaMixer> mixer,
          std::visit([&](const auto& s) { return NewMixer(s, ctx); }, layer.mixer));
      mixers_.push_back(std::move(mixer));
      kinds.push_back(&layer.mixer);
    }
    members_.push_back({m, mixers_[m]->size()});
    mixers_[m]->AddMember(layer.mixer_prefix);
  }
  return OkStatus();
}

Status LayerExecutor::PlanFp8(const WeightStore* weights) {
  if (weights != nullptr && spec_.fp8_block.has_value()) {
    is_fp8_ = [weights](const std::string& name) {
      StatusOr<TensorView> t = weights->Get(name);
      return t.ok() && t->dtype == DType::kF8E4M3;
    };
  }
  Carver sizing(nullptr);
  WeightCarver c(sizing, is_fp8_, spec_.fp8_block);
  CarveWeights(c);
  fp8_ = c.fp8();
  if (invariant_ && fp8_.max_elems > 0) {
    // cuda::Fp8Gemm streams small row counts through its own FP8 GEMV and
    // dequantises for the bf16 GEMM above them: a row's bits depend on the
    // batch. (FP8 routed experts are fine: MoeForward has an invariant mode.)
    return absl::UnimplementedError(absl::StrCat(
        spec_.architecture,
        ": batch-invariant mode on the GPU needs bf16 dense weights; this checkpoint keeps FP8 "
        "dense matrices (cuda::Fp8Gemm has no invariant variant). Run without batch_invariant, "
        "or on the CPU (always invariant)"));
  }
  ffn_dims_.moe.fp8_experts = fp8_.expert_layers > 0;
  // Prefill products on FP8 weights dequantise row chunks into this tile; a
  // cap keeps it small next to the weights (the largest published FP8
  // matrix, o_proj [7168, 16384], then takes 4 chunks).
  fp8_tile_elems_ = std::min(fp8_.max_elems, kFp8TileMaxElems);
  return OkStatus();
}

void LayerExecutor::CarveWeights(WeightCarver& c) {
  const int64_t D = spec_.hidden_size, V = spec_.vocab_size;
  w_.embed = c.Take<bf16>(V * D);
  w_.lm_head = separate_lm_head_ ? c.Take<bf16>(V * D) : w_.embed;
  w_.final_norm = c.Take<float>(D);
  for (const auto& m : mixers_) m->CarveShared(c);
  w_.layers.assign(spec_.layers.size(), StackLayer{});
  for (size_t l = 0; l < spec_.layers.size(); ++l) {
    StackLayer& L = w_.layers[l];
    L.input_norm = c.Take<float>(D);
    L.post_norm = c.Take<float>(D);
    mixers_[members_[l].mixer]->CarveMember(members_[l].index, c);
    CarveFfnWeights(spec_.layers[l], D, c, L.ffn);
  }
}

void LayerExecutor::CarveScratch(Carver& c) {
  const SequencePlan& p = plan_;
  const int64_t D = spec_.hidden_size;
  CarveStepScratch(p, D, spec_.vocab_size, GateUpCols(ffn_dims_), ffn_dims_.moe.num_experts,
                   moe_ws_, c, s_);
  for (const auto& m : mixers_) m->CarveScratch(p, c);
  if (ffn_dims_.shared_gate_rows > 0) {
    s_.shared = c.Take<float>(p.rows * D);
    s_.sgate = c.Take<float>(p.rows * ffn_dims_.shared_gate_rows);
  }
  if (fp8_tile_elems_ > 0) s_.fp8_tile = c.Take<bf16>(fp8_tile_elems_);
}

Status LayerExecutor::Setup(std::shared_ptr<const WeightStore> weights, exec::ArchSpec spec,
                            const LoadOptions& options) {
  spec_ = std::move(spec);
  D_ = spec_.hidden_size;
  V_ = spec_.vocab_size;
  eps_ = spec_.norm_eps;
  STRATA_RETURN_IF_ERROR(ReadOptions(options));
  const tuning::Scope tuned(tuning_);
  STRATA_RETURN_IF_ERROR(BuildMixers());
  STRATA_ASSIGN_OR_RETURN(ffn_dims_, FfnDimsOf(spec_));
  int64_t slice = std::numeric_limits<int64_t>::max();
  for (const auto& m : mixers_) slice = std::min(slice, m->PreferredSlice());

  SequencePlan& p = plan_;
  STRATA_ASSIGN_OR_RETURN(const std::string dev_name,
                          BeginLoad(options, spec_.vocab_size, spec_.max_context, slice, p));
  for (const auto& m : mixers_) m->Plan(p);
  separate_lm_head_ =
      !spec_.tie_word_embeddings || (weights != nullptr && weights->Has("lm_head.weight"));
  STRATA_RETURN_IF_ERROR(PlanFp8(weights.get()));
  if (ffn_dims_.moe.num_experts > 0) {
    // FP8 experts add MoeForward's prefill dequantisation scratch.
    moe_ws_ = cuda::MoeWorkspaceBytes(ffn_dims_.moe, p.rows, invariant_);
  }

  STRATA_ASSIGN_OR_RETURN(const int64_t blocks,
                          AllocateMemory(dev_name, options.gpu_memory_fraction));
  const std::span<const StateRegion> slot_regions(layout_.slot_regions);
  const std::span<const StateRegion> block_regions(layout_.block_regions);
  size_t slot_at = 0, block_at = 0;
  for (const auto& m : mixers_) {
    const size_t ns = m->SlotArrays().size(), nb = m->BlockArrays().size();
    m->BindPools(slot_regions.subspan(slot_at, ns), block_regions.subspan(block_at, nb));
    slot_at += ns;
    block_at += nb;
  }

  fp8_tile_ = s_.fp8_tile;
  FfnBuffers b{.xn = s_.xn,
               .h = s_.h,
               .delta = s_.delta,
               .gu = s_.gu,
               .act = s_.act,
               .router_logits = s_.router_logits,
               .shared = s_.shared,
               .shared_gate = s_.sgate,
               .moe_ws = s_.moe_ws,
               .moe_ws_bytes = moe_ws_};
  ffn_ = CudaFfn(ffn_dims_, b, invariant_);
  mixer_frame_ = {s_.xn, s_.h, s_.step, s_.block_table, p.max_batch, p.max_blocks, p.max_ctx};
  // Pinned host memory: step inputs, block-table mirror, results, staging.
  STRATA_RETURN_IF_ERROR(InitRuntime(p.max_sequences, p.checkpoint_slots, blocks,
                                     options.cuda_graphs, kStagingBytes, &h_staging_));

  int64_t dummy_parameters = 0;
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(options.dummy_seed, &dummy_parameters));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(*weights, options));
  }
  const CudaOps ops = Ops();
  for (const auto& m : mixers_) STRATA_RETURN_IF_ERROR(m->Finalize(ops));
  STRATA_RETURN_IF_ERROR(Sync("deriving weights"));
  // From here on (the load-time check included) every GEMM is row-invariant.
  if (invariant_) blas_->set_batch_invariant(true);
  DescribeModel(dev_name, weights.get());
  if (weights == nullptr) info_.num_parameters = dummy_parameters;
  STRATA_RETURN_IF_ERROR(LoadTimeCheck(spec_.vocab_size));
  // The check's passes do not count in the statistics.
  for (const auto& m : mixers_) STRATA_RETURN_IF_ERROR(m->ClearCounters(stream_));
  return Sync("load-time check");
}

Status LayerExecutor::UploadWeights(const WeightStore& ws, const LoadOptions& options) {
  const int64_t D = spec_.hidden_size, V = spec_.vocab_size;
  Uploader up(stream_, h_staging_, kStagingBytes);
  STRATA_RETURN_IF_ERROR(up.Init());
  const TensorSink sink = up.Sink(ws, spec_.zero_centred_norms, spec_.fp8_block);
  STRATA_RETURN_IF_ERROR(sink.matrix("model.embed_tokens.weight", V, D, Mat{.bf = w_.embed}, 0));
  if (w_.lm_head != w_.embed) {
    STRATA_RETURN_IF_ERROR(sink.matrix("lm_head.weight", V, D, Mat{.bf = w_.lm_head}, 0));
  }
  STRATA_RETURN_IF_ERROR(sink.Norm("model.norm.weight", D, w_.final_norm));
  for (const auto& m : mixers_) STRATA_RETURN_IF_ERROR(m->UploadShared(sink));
  const int64_t L = static_cast<int64_t>(spec_.layers.size());
  for (int64_t i = 0; i < L; ++i) {
    const size_t l = static_cast<size_t>(i);
    const exec::LayerSpec& layer = spec_.layers[l];
    STRATA_RETURN_IF_ERROR(
        sink.Norm(layer.prefix + "input_layernorm.weight", D, w_.layers[l].input_norm));
    STRATA_RETURN_IF_ERROR(
        sink.Norm(layer.prefix + "post_attention_layernorm.weight", D, w_.layers[l].post_norm));
    STRATA_RETURN_IF_ERROR(mixers_[members_[l].mixer]->UploadMember(members_[l].index, sink));
    STRATA_RETURN_IF_ERROR(UploadFfnWeights(layer, D, w_.layers[l].ffn, sink));
    STRATA_RETURN_IF_ERROR(LayerLoaded(options, ws, i, L));
  }
  return up.Finish();
}

Status LayerExecutor::MakeDummyWeights(uint64_t seed, int64_t* parameters) {
  const int64_t D = spec_.hidden_size, V = spec_.vocab_size;
  DummyFill fill(seed, stream_);
  STRATA_RETURN_IF_ERROR(fill.Matrix(w_.embed, V * D));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(fill.Matrix(w_.lm_head, V * D));
  STRATA_RETURN_IF_ERROR(fill.Ones(w_.final_norm, D));
  for (const auto& m : mixers_) STRATA_RETURN_IF_ERROR(m->FillDummyShared(fill));
  for (size_t l = 0; l < spec_.layers.size(); ++l) {
    STRATA_RETURN_IF_ERROR(fill.Ones(w_.layers[l].input_norm, D));
    STRATA_RETURN_IF_ERROR(fill.Ones(w_.layers[l].post_norm, D));
    STRATA_RETURN_IF_ERROR(mixers_[members_[l].mixer]->FillDummyMember(members_[l].index, fill));
    STRATA_RETURN_IF_ERROR(FillDummyFfnWeights(spec_.layers[l], D, w_.layers[l].ffn, fill));
  }
  *parameters = fill.drawn();
  return Sync("dummy weights");
}

Status LayerExecutor::EnqueueMixer(size_t layer, int64_t row0, int64_t n,
                                   const CudaSequenceState* ps, int64_t past,
                                   const StepVariant& v) const {
  MixerPass pass;
  pass.n = n;
  pass.decode = ps == nullptr;
  if (ps != nullptr) {
    pass.slot = ps->slot_;
    pass.past = past;
  }
  pass.bound = v.bound;
  pass.sparse = v.sparse;
  const Member& m = members_[layer];
  if (row0 == 0) return mixers_[m.mixer]->Enqueue(Ops(), m.index, mixer_frame_, pass);
  MixerFrame f = mixer_frame_;
  f.xn += row0 * D_;
  f.h += row0 * D_;
  return mixers_[m.mixer]->Enqueue(Ops(), m.index, f, pass);
}

LayerExecutor::StepVariant LayerExecutor::DecodeVariant(int64_t max_len) const {
  StepVariant v;
  for (const auto& m : mixers_) {
    v.bound = std::max(v.bound, m->DecodeLengthBound(max_len, plan_.max_ctx));
    v.sparse = m->SparseDecode(max_len) || v.sparse;
  }
  return v;
}

int64_t LayerExecutor::EffectiveAttendedTokens(const SequenceState& state,
                                               int64_t new_tokens) const {
  const int64_t context = state.num_tokens() + new_tokens;
  int64_t attended = 0;
  for (const auto& m : mixers_) attended = std::max(attended, m->AttendedTokens(context));
  // Only linear mixers: nothing grows with the context; report it as dense.
  return attended > 0 ? attended : context;
}

StatusOr<std::unique_ptr<Model>> CreateCudaLayerExecutor(exec::ArchSpec spec,
                                                         std::shared_ptr<const WeightStore> weights,
                                                         const LoadOptions& options) {
  auto executor = std::make_unique<LayerExecutor>();
  STRATA_RETURN_IF_ERROR(executor->Setup(std::move(weights), std::move(spec), options));
  return std::unique_ptr<Model>(std::move(executor));
}

StatusOr<CudaExecutorStats> GetCudaExecutorStats(const Model& model) {
  const auto* m = dynamic_cast<const LayerExecutor*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a CUDA model");
  return m->Stats();
}

}  // namespace strata::cuda_exec
