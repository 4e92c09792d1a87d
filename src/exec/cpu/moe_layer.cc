// The mixture-of-experts feed-forward block on the CPU (model-spec §2.5, §3.4,
// §4.5): a router (sigmoid scores with a selection bias and optionally
// group-limited choice, or softmax), top-k SwiGLU experts, and shared experts
// always applied (optionally behind a sigmoid gate).
#include "absl/strings/str_cat.h"
#include "backend/cpu/moe.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class MoeLayer final : public CpuLayerOf<MoeLayer, MoeSpec> {
 public:
  using CpuLayerOf::CpuLayerOf;
  Status Bind(const std::string& m, WeightBinder& wb);
  void* Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int threads) const {
    return a.TakeBytes(cpu::MoeScratchBytes(T, hidden_, w_, threads));
  }
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override {
    cpu::Moe(x, T, w_, out, Carve(*run.scratch, T, run.past, run.pool->num_threads()), run.pool);
    return OkStatus();
  }

 private:
  cpu::MoeWeights w_;
  std::vector<float> score_bias_;  // [E]
};

}  // namespace

LayerOrError MakeCpuLayer(const MoeSpec& spec, const LayerBind& bind) {
  return BindLayer<MoeLayer>(spec, bind);
}

Status MoeLayer::Bind(const std::string& m, WeightBinder& wb) {
  const int64_t E = s_.experts, D = hidden_;
  w_.routing = s_.softmax_routing ? cpu::MoeRouting::kSoftmax : cpu::MoeRouting::kSigmoid;
  STRATA_ASSIGN_OR_RETURN(w_.router, wb.Matrix(m + "gate.weight", E, D));
  if (s_.score_bias) {
    STRATA_ASSIGN_OR_RETURN(score_bias_, wb.Vector(m + "gate.e_score_correction_bias", {E}));
    w_.score_bias = score_bias_.data();
  }
  for (int64_t e = 0; e < E; ++e) {
    STRATA_ASSIGN_OR_RETURN(cpu::SwiGluWeights expert,
                            wb.SwiGlu(absl::StrCat(m, "experts.", e, "."), s_.expert_gate,
                                      s_.expert_up, s_.expert_down, D, s_.intermediate));
    w_.experts.push_back(expert);
  }
  if (s_.shared_intermediate > 0) {
    w_.has_shared = true;
    STRATA_ASSIGN_OR_RETURN(w_.shared, wb.SwiGlu(m + s_.shared_prefix, "gate_proj", "up_proj",
                                                 "down_proj", D, s_.shared_intermediate));
  }
  if (s_.shared_gate) {
    STRATA_ASSIGN_OR_RETURN(w_.shared_gate, wb.Matrix(m + "shared_expert_gate.weight", 1, D));
  }
  w_.top_k = s_.top_k;
  w_.renormalize = s_.renormalize;
  w_.routed_scaling = s_.routed_scaling;
  w_.num_groups = s_.groups;
  w_.topk_groups = s_.topk_groups;
  return OkStatus();
}

}  // namespace strata::exec
