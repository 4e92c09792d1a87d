// The strata_hybrid architecture, Strata's own demo model, as a layer list:
// each decoder layer mixes with Kimi Delta Attention (linear, a fixed
// recurrent state per sequence) or DeepSeek Sparse Attention (MLA with a
// low-rank query and default RoPE whose keys the lightning indexer narrows to
// index_topk past tokens), then a dense SwiGLU or a sigmoid-routed,
// group-limited MoE with shared experts. The parity reference is
// tools/demo_model/strata_hybrid.py, which builds the layers from
// transformers' own KimiLinearDeltaAttention, DeepseekV32Attention and
// DeepseekV32MoE/MLP modules and writes the checkpoint names bound here
// (Moonshot's for KDA, DeepSeek's for DSA and the FFNs).
#include <cmath>

#include "exec/arch_spec.h"
#include "model/models/builtin.h"
#include "model/models/deepseek_v32_layers.h"
#include "model/models/strata_hybrid_config.h"

namespace strata {

StatusOr<exec::ArchSpec> DescribeStrataHybrid(const ConfigReader& config, const WeightStore*) {
  STRATA_ASSIGN_OR_RETURN(const StrataHybridConfig c, ParseStrataHybridConfig(config));
  exec::ArchSpec a = exec::SpecOf("strata_hybrid", c);
  const exec::KdaSpec kda{c.kda_heads, c.kda_head_dim, c.conv_kernel, a.norm_eps};
  exec::MlaSpec dsa = DeepseekDsaSpec(c);
  dsa.softmax_scale = 1.f / std::sqrt(static_cast<float>(c.qk_nope_dim + c.qk_rope_dim));
  dsa.rope.theta = c.rope_theta;
  dsa.rope.dim = c.qk_rope_dim;
  const exec::MoeSpec moe = DeepseekMoeSpec(c);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const size_t l = static_cast<size_t>(i);
    const exec::MixerSpec mixer = c.is_dsa[l] ? exec::MixerSpec(dsa) : exec::MixerSpec(kda);
    const exec::FfnSpec ffn =
        c.is_moe[l] ? exec::FfnSpec(moe) : exec::FfnSpec(exec::MlpSpec{c.intermediate_size});
    a.layers.push_back(exec::LayerAt(i, "self_attn.", mixer, "mlp.", ffn));
  }
  return a;
}

}  // namespace strata
