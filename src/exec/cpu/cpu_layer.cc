// Dispatch from a layer description to its CPU module, and the shared matmul.
#include "exec/cpu/cpu_layer.h"

#include "base/thread_pool.h"

namespace strata::exec {

void Linear(const LayerRun& run, const float* x, int64_t num_tokens, const cpu::WeightMatrix& w,
            float* y) {
  cpu::MatMul(x, num_tokens, w, y, run.matmul_scratch, run.pool);
}

StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMixer(const MixerSpec& spec, const std::string& prefix,
                                                 int64_t hidden, WeightBinder& weights) {
  if (const auto* s = std::get_if<KdaSpec>(&spec)) return MakeCpuKdaLayer(*s, prefix, hidden, weights);
  if (const auto* s = std::get_if<GdnSpec>(&spec)) return MakeCpuGdnLayer(*s, prefix, hidden, weights);
  if (const auto* s = std::get_if<MlaSpec>(&spec)) return MakeCpuMlaLayer(*s, prefix, hidden, weights);
  return MakeCpuGqaLayer(std::get<GqaSpec>(spec), prefix, hidden, weights);
}

StatusOr<std::unique_ptr<CpuLayer>> MakeCpuFfn(const FfnSpec& spec, const std::string& prefix,
                                               int64_t hidden, WeightBinder& weights) {
  if (const auto* s = std::get_if<MlpSpec>(&spec)) return MakeCpuMlpLayer(*s, prefix, hidden, weights);
  return MakeCpuMoeLayer(std::get<MoeSpec>(spec), prefix, hidden, weights);
}

}  // namespace strata::exec
