// The kimi_linear architecture (model-spec §2) as a layer list: each layer
// mixes with Kimi Delta Attention or NoPE MLA, then a dense SwiGLU or a
// sigmoid-routed MoE with shared experts. Weights keep the original checkpoint
// names (experts w1 / w3 / w2; the MoE under `block_sparse_moe.`).
#include "exec/arch_spec.h"
#include "model/models/builtin.h"
#include "model/models/kimi_linear_config.h"
#include "model/weight_store.h"

namespace strata {
namespace {

// The dense MLP's directory in `ws`: the published checkpoint names it
// `mlp.`, transformers' save_pretrained writes `block_sparse_moe.`.
std::string DenseMlpDir(const WeightStore& ws, int64_t layer) {
  const std::string p = exec::LayerPrefix(layer);
  return ws.Has(p + "mlp.gate_proj.weight") || !ws.Has(p + "block_sparse_moe.gate_proj.weight")
             ? "mlp."
             : "block_sparse_moe.";
}

}  // namespace

StatusOr<exec::ArchSpec> DescribeKimiLinear(const ConfigReader& config, const WeightStore* ws) {
  STRATA_ASSIGN_OR_RETURN(const KimiLinearConfig c, ParseKimiLinearConfig(config));
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
      const std::string dense = ws != nullptr ? DenseMlpDir(*ws, i) : "mlp.";
      a.layers.push_back(
          exec::LayerAt(i, "self_attn.", mixer, dense, exec::MlpSpec{c.intermediate_size}));
    }
  }
  return a;
}

}  // namespace strata
