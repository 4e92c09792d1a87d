// The kimi_linear architecture (model-spec §2) as a layer list: each layer
// mixes with Kimi Delta Attention or NoPE MLA, then a dense SwiGLU or a
// sigmoid-routed MoE with shared experts. Weights keep the original checkpoint
// names (experts w1 / w3 / w2; the MoE under `block_sparse_moe.`).
#include "exec/arch_spec.h"
#include "exec/cpu/cpu_executor.h"
#if defined(STRATA_HAVE_CUDA)
#include "exec/cuda/cuda_executor.h"
#include "model/models/kimi_linear_cuda.h"
#endif
#include "model/models/arch_descriptions.h"
#include "model/models/builtin.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/kimi_linear_weights.h"

namespace strata {

exec::ArchSpec DescribeKimiLinear(const KimiLinearConfig& c, const WeightStore* ws) {
  exec::ArchSpec a = exec::SpecOf("kimi_linear", c);
  const exec::KdaSpec kda{c.kda_heads, c.kda_head_dim, c.conv_kernel, a.norm_eps};
  const exec::MlaSpec mla{.heads = c.mla_heads,
                          .kv_lora_rank = c.kv_lora_rank,
                          .nope_dim = c.qk_nope_dim,
                          .rope_dim = c.qk_rope_dim,
                          .v_dim = c.v_head_dim};
  exec::MoeSpec moe =
      exec::SigmoidMoeSpec(c.num_experts, c.experts_per_token, c.moe_intermediate_size,
                           c.num_shared_experts, c.moe_renormalize, c.routed_scaling_factor);
  moe.expert_gate = "w1";
  moe.expert_up = "w3";
  moe.expert_down = "w2";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const size_t l = static_cast<size_t>(i);
    const exec::MixerSpec mixer = c.is_mla[l] ? exec::MixerSpec(mla) : exec::MixerSpec(kda);
    if (c.is_moe[l]) {
      a.layers.push_back(exec::LayerAt(i, "self_attn.", mixer, "block_sparse_moe.", moe));
    } else {
      // The dense MLP's prefix depends on the export (KimiDenseMlpPrefix).
      const std::string dense =
          ws != nullptr ? KimiDenseMlpPrefix(*ws, i).substr(KimiLayerPrefix(i).size()) : "mlp.";
      a.layers.push_back(
          exec::LayerAt(i, "self_attn.", mixer, dense, exec::MlpSpec{c.intermediate_size}));
    }
  }
  return a;
}

StatusOr<std::unique_ptr<Model>> CreateKimiLinearModel(std::shared_ptr<const WeightStore> weights,
                                                       const std::string& config_path,
                                                       const LoadOptions& options) {
  return exec::LoadCpuModel<KimiLinearConfig>(std::move(weights), config_path, options,
                                              ParseKimiLinearConfig, DescribeKimiLinear);
}

#if defined(STRATA_HAVE_CUDA)
StatusOr<std::unique_ptr<Model>> CreateKimiLinearCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  return cuda_exec::LoadCudaModel<KimiLinearConfig>(std::move(weights), config_path, options,
                                                    ParseKimiLinearConfig, DescribeKimiLinear);
}

StatusOr<KimiCudaStats> GetKimiCudaStats(const Model& model) {
  return cuda_exec::GetCudaLayerExecutorStats(model, "kimi_linear");
}
#endif

}  // namespace strata
