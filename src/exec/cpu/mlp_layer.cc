// The dense SwiGLU feed-forward block on the CPU: down(silu(gate x) ⊙ up x).
#include "backend/cpu/moe.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class MlpLayer final : public CpuLayerOf<MlpLayer, MlpSpec> {
 public:
  using CpuLayerOf::CpuLayerOf;
  Status Bind(const std::string& m, WeightBinder& wb) {
    STRATA_ASSIGN_OR_RETURN(
        w_, wb.SwiGlu(m, "gate_proj", "up_proj", "down_proj", hidden_, s_.intermediate));
    return OkStatus();
  }
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override {
    cpu::SwiGlu(x, T, w_, out, Carve(*run.scratch, T, run.past, run.pool->num_threads()), run.pool);
    return OkStatus();
  }
  float* Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int threads) const {
    return a.Take<float>(cpu::SwiGluScratchFloats(T, hidden_, s_.intermediate, threads));
  }

 private:
  cpu::SwiGluWeights w_;
};

}  // namespace

LayerOrError MakeCpuLayer(const MlpSpec& spec, const LayerBind& bind) {
  return BindLayer<MlpLayer>(spec, bind);
}

}  // namespace strata::exec
