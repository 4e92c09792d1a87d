// The feed-forward module's weights: what it reads from a checkpoint, by the
// names of its LayerSpec, and the dummy weights of a load without one.
#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exec/cuda/ffn_cuda.h"

namespace strata {
namespace cuda_exec {

void CarveFfnWeights(const exec::LayerSpec& layer, int64_t D, WeightCarver& c, FfnWeights& w) {
  const std::string& p = layer.ffn_prefix;
  if (const auto* mlp = std::get_if<exec::MlpSpec>(&layer.ffn)) {
    const int64_t I = mlp->intermediate;
    w.is_moe = false;
    w.gate_up =
        c.Matrix(2 * I, D, {p + "gate_proj.weight", p + "up_proj.weight"}, I % kFp8ScaleRows == 0);
    w.down = c.Matrix(D, I, {p + "down_proj.weight"});
    return;
  }
  const auto& moe = std::get<exec::MoeSpec>(layer.ffn);
  const int64_t E = moe.experts, I = moe.intermediate, Is = moe.shared_intermediate;
  w.is_moe = true;
  w.router = c.Matrix(E, D, {p + "gate.weight"});
  if (moe.score_bias) w.score_bias = c.Take<float>(E);
  // Both stacks decided on all 3·E names: the MoE kernels take one expert dtype.
  std::vector<std::string> experts;
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = absl::StrCat(p, "experts.", e, ".");
    for (const std::string* n : {&moe.expert_gate, &moe.expert_up, &moe.expert_down}) {
      experts.push_back(x + *n + ".weight");
    }
  }
  const bool rows_ok = I % kFp8ScaleRows == 0 && D % kFp8ScaleRows == 0;
  w.w13 = c.Matrix(E * 2 * I, D, experts, rows_ok, /*in_tile=*/false);
  w.w2 = c.Matrix(E * D, I, experts, rows_ok, /*in_tile=*/false);
  if (w.w13.is_fp8()) c.CountFp8ExpertLayer();
  if (Is > 0) {
    const std::string s = p + moe.shared_prefix;
    w.gate_up = c.Matrix(2 * Is, D, {s + "gate_proj.weight", s + "up_proj.weight"},
                         Is % kFp8ScaleRows == 0);
    w.down = c.Matrix(D, Is, {s + "down_proj.weight"});
  }
  if (moe.shared_gate) w.shared_gate = c.Take<bf16>(kSharedGateRows * D);
}

cuda::MoeShape MoeShapeOf(const exec::MoeSpec& moe, int64_t D) {
  cuda::MoeShape s;
  s.num_experts = moe.experts;
  s.hidden = D;
  s.inter = moe.intermediate;
  s.top_k = moe.top_k;
  s.renormalize = moe.renormalize;
  s.routed_scaling = moe.routed_scaling;
  s.num_groups = moe.groups;
  s.topk_groups = moe.topk_groups;
  s.softmax = moe.softmax_routing;
  return s;
}

StatusOr<FfnDims> FfnDimsOf(const exec::ArchSpec& spec) {
  FfnDims d;
  d.D = spec.hidden_size;
  const exec::MoeSpec* first = nullptr;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const exec::FfnSpec& ffn = spec.layers[i].ffn;
    if (const auto* mlp = std::get_if<exec::MlpSpec>(&ffn)) {
      d.dense_inter = std::max(d.dense_inter, mlp->intermediate);
      continue;
    }
    const auto& moe = std::get<exec::MoeSpec>(ffn);
    if (moe.groups > 32) {
      return absl::UnimplementedError(
          absl::StrCat("n_group ", moe.groups, " exceeds the CUDA router's 32 groups"));
    }
    if (first == nullptr) {
      first = &moe;
      d.moe = MoeShapeOf(moe, d.D);
      d.shared_inter = moe.shared_intermediate;
      d.shared_gate_rows = moe.shared_gate ? kSharedGateRows : 0;
    } else if (moe.experts != first->experts || moe.top_k != first->top_k ||
               moe.intermediate != first->intermediate ||
               moe.shared_intermediate != first->shared_intermediate ||
               moe.shared_gate != first->shared_gate) {
      return absl::UnimplementedError(
          absl::StrCat("layer ", i,
                       "'s experts differ in shape from the first MoE layer's (the GPU "
                       "executor runs one MoE shape per model)"));
    }
  }
  return d;
}

Status UploadFfnWeights(const exec::LayerSpec& layer, int64_t D, const FfnWeights& w,
                        const TensorSink& sink) {
  const std::string& p = layer.ffn_prefix;
  if (const auto* mlp = std::get_if<exec::MlpSpec>(&layer.ffn)) {
    const int64_t I = mlp->intermediate;
    STRATA_RETURN_IF_ERROR(sink.matrix(p + "gate_proj.weight", I, D, w.gate_up, 0));
    STRATA_RETURN_IF_ERROR(sink.matrix(p + "up_proj.weight", I, D, w.gate_up, I));
    return sink.matrix(p + "down_proj.weight", D, I, w.down, 0);
  }
  const auto& moe = std::get<exec::MoeSpec>(layer.ffn);
  const int64_t E = moe.experts, I = moe.intermediate, Is = moe.shared_intermediate;
  STRATA_RETURN_IF_ERROR(sink.matrix(p + "gate.weight", E, D, w.router, 0));
  if (moe.score_bias) {
    STRATA_RETURN_IF_ERROR(sink.vector(p + "gate.e_score_correction_bias", E, w.score_bias));
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = absl::StrCat(p, "experts.", e, ".");
    STRATA_RETURN_IF_ERROR(sink.matrix(x + moe.expert_gate + ".weight", I, D, w.w13, e * 2 * I));
    STRATA_RETURN_IF_ERROR(sink.matrix(x + moe.expert_up + ".weight", I, D, w.w13, e * 2 * I + I));
    STRATA_RETURN_IF_ERROR(sink.matrix(x + moe.expert_down + ".weight", D, I, w.w2, e * D));
  }
  if (Is > 0) {
    const std::string s = p + moe.shared_prefix;
    STRATA_RETURN_IF_ERROR(sink.matrix(s + "gate_proj.weight", Is, D, w.gate_up, 0));
    STRATA_RETURN_IF_ERROR(sink.matrix(s + "up_proj.weight", Is, D, w.gate_up, Is));
    STRATA_RETURN_IF_ERROR(sink.matrix(s + "down_proj.weight", D, Is, w.down, 0));
  }
  // Only row 0 of the padded gate is real; the others stay as carved (zero).
  if (moe.shared_gate) {
    STRATA_RETURN_IF_ERROR(
        sink.matrix(p + "shared_expert_gate.weight", 1, D, Mat{.bf = w.shared_gate}, 0));
  }
  return OkStatus();
}

Status FillDummyFfnWeights(const exec::LayerSpec& layer, int64_t D, const FfnWeights& w,
                           DummyFill& fill) {
  if (const auto* mlp = std::get_if<exec::MlpSpec>(&layer.ffn)) {
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.gate_up.bf, 2 * mlp->intermediate * D));
    return fill.Matrix(w.down.bf, D * mlp->intermediate);
  }
  const auto& moe = std::get<exec::MoeSpec>(layer.ffn);
  const int64_t E = moe.experts, I = moe.intermediate, Is = moe.shared_intermediate;
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.router.bf, E * D));
  if (moe.score_bias) STRATA_RETURN_IF_ERROR(fill.Uniform(w.score_bias, E, -0.01f, 0.01f));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.w13.bf, E * 2 * I * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.w2.bf, E * D * I));
  if (Is > 0) {
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.gate_up.bf, 2 * Is * D));
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.down.bf, D * Is));
  }
  if (moe.shared_gate) STRATA_RETURN_IF_ERROR(fill.Matrix(w.shared_gate, D));
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
