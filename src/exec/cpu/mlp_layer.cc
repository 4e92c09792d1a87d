// The dense SwiGLU feed-forward block on the CPU: down(silu(gate x) ⊙ up x).
#include "backend/cpu/moe.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class MlpLayer final : public CarvingLayer<MlpLayer> {
 public:
  MlpLayer(const MlpSpec& spec, int64_t hidden) : s_(spec), hidden_(hidden) {}
  Status Bind(const std::string& m, WeightBinder& wb) {
    STRATA_ASSIGN_OR_RETURN(w_, wb.SwiGlu(m, "gate_proj", "up_proj", "down_proj", hidden_,
                                          s_.intermediate));
    return OkStatus();
  }
  float* Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int threads) const {
    return a.Take<float>(cpu::SwiGluScratchFloats(T, hidden_, s_.intermediate, threads));
  }
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override {
    cpu::SwiGlu(x, T, w_, out, Carve(*run.scratch, T, run.past, run.pool->num_threads()),
                run.pool);
    return OkStatus();
  }

 private:
  MlpSpec s_;
  int64_t hidden_;
  cpu::SwiGluWeights w_;
};

}  // namespace

StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMlpLayer(const MlpSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights) {
  auto layer = std::make_unique<MlpLayer>(spec, hidden);
  STRATA_RETURN_IF_ERROR(layer->Bind(prefix, weights));
  return std::unique_ptr<CpuLayer>(std::move(layer));
}

}  // namespace strata::exec
