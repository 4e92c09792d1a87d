// The qwen3_next architecture (model-spec §4) as a layer list: Gated DeltaNet
// and gated full-attention mixers, then softmax-routed MoE with a
// sigmoid-gated shared expert or a dense SwiGLU; every decoder, final and q/k
// RMSNorm stores a zero-centred weight (scale 1 + w).
#include "exec/arch_spec.h"
#include "model/models/builtin.h"
#include "model/models/qwen3_next_config.h"

namespace strata {

StatusOr<exec::ArchSpec> DescribeQwen3Next(const ConfigReader& config, const WeightStore*) {
  STRATA_ASSIGN_OR_RETURN(const Qwen3NextConfig c, ParseQwen3NextConfig(config));
  exec::ArchSpec a = exec::SpecOf("qwen3_next", c);
  a.zero_centred_norms = true;
  // In field order: Hk, Hv, dk, dv, K, eps; H, Hkv, hd, rotary dim, θ, eps.
  const exec::GdnSpec gdn{c.linear_key_heads, c.linear_value_heads, c.linear_key_dim,
                          c.linear_value_dim, c.conv_kernel,        a.norm_eps};
  const exec::GqaSpec gqa{c.num_heads,  c.num_kv_heads, c.head_dim,
                          c.rotary_dim, c.rope_theta,   a.norm_eps};
  exec::MoeSpec moe =
      exec::RoutedMoeSpec(c.num_experts, c.experts_per_token, c.moe_intermediate_size,
                          c.shared_intermediate_size, c.norm_topk_prob);
  moe.softmax_routing = true;
  moe.shared_gate = true;
  moe.shared_prefix = "shared_expert.";
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const size_t l = static_cast<size_t>(i);
    const exec::FfnSpec ffn =
        c.is_moe[l] ? exec::FfnSpec(moe) : exec::FfnSpec(exec::MlpSpec{c.intermediate_size});
    a.layers.push_back(c.is_attention[l] ? exec::LayerAt(i, "self_attn.", gqa, "mlp.", ffn)
                                         : exec::LayerAt(i, "linear_attn.", gdn, "mlp.", ffn));
  }
  return a;
}

}  // namespace strata
