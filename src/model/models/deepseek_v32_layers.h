// DeepSeek-V3.2's mixer and FFN descriptions and size fields, for any config
// that names their fields as DeepseekV32Config does: deepseek_v32 itself and strata_hybrid,
// which recombines them with Kimi's KDA.
#ifndef STRATA_MODEL_MODELS_DEEPSEEK_V32_LAYERS_H_
#define STRATA_MODEL_MODELS_DEEPSEEK_V32_LAYERS_H_

#include "exec/arch_spec.h"
#include "model/config_sizes.h"

namespace strata {

// DSA: MLA with a low-rank query and rotary keys, narrowed by the indexer.
// The caller sets the softmax scale and the rotary parameters.
template <typename Config>
exec::MlaSpec DeepseekDsaSpec(const Config& c) {
  exec::MlaSpec dsa{.heads = c.num_heads,
                    .q_lora_rank = c.q_lora_rank,
                    .kv_lora_rank = c.kv_lora_rank,
                    .nope_dim = c.qk_nope_dim,
                    .rope_dim = c.qk_rope_dim,
                    .v_dim = c.v_head_dim,
                    .rotary = true};
  dsa.indexer = exec::IndexerSpec{c.index_heads, c.index_head_dim, c.index_topk};
  return dsa;
}

// Sigmoid-routed MoE with group-limited selection and shared experts.
template <typename Config>
exec::MoeSpec DeepseekMoeSpec(const Config& c) {
  exec::MoeSpec moe =
      exec::SigmoidMoeSpec(c.num_experts, c.experts_per_token, c.moe_intermediate_size,
                           c.num_shared_experts, c.norm_topk_prob, c.routed_scaling_factor);
  moe.groups = c.n_group;
  moe.topk_groups = c.topk_group;
  return moe;
}

// DSA's fields for the size checks, under DeepSeek's spellings.
template <typename Config>
DecoderSizes::MlaFields DsaSizeFields(const Config& c) {
  return {.heads = {"num_attention_heads", c.num_heads},
          .q_rank = {"q_lora_rank", c.q_lora_rank},
          .kv_rank = {"kv_lora_rank", c.kv_lora_rank},
          .nope_dim = {"qk_nope_head_dim", c.qk_nope_dim},
          .rope_dim = {"qk_rope_head_dim", c.qk_rope_dim},
          .v_dim = {"v_head_dim", c.v_head_dim},
          .index_heads = {"index_n_heads", c.index_heads},
          .index_dim = {"index_head_dim", c.index_head_dim}};
}

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_DEEPSEEK_V32_LAYERS_H_
