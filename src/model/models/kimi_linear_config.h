// The kimi_linear config.json, parsed and validated (model-spec §2.1). Accepts
// both the original checkpoint spelling and what transformers' save_pretrained
// writes (aliased keys, layer_types / mlp_layer_types lists, no mla_use_nope:
// transformers always runs NoPE MLA); contradictions and unsupported variants
// are errors that name the field.
#ifndef STRATA_MODEL_MODELS_KIMI_LINEAR_CONFIG_H_
#define STRATA_MODEL_MODELS_KIMI_LINEAR_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config_fields.h"
#include "model/config_reader.h"

namespace strata {

struct KimiLinearConfig : DecoderConfig {
  // Per layer (0-based): MLA (full attention) or KDA; MoE or dense MLP.
  std::vector<bool> is_mla;
  std::vector<bool> is_moe;

  // KDA (linear_attn_config).
  int64_t kda_heads = 0;     // H
  int64_t kda_head_dim = 0;  // dk = dv, also the rank of the f/g gates
  int64_t conv_kernel = 4;   // K

  // MLA (NoPE).
  int64_t mla_heads = 0;
  int64_t kv_lora_rank = 0;  // r
  int64_t qk_nope_dim = 0;   // dn
  int64_t qk_rope_dim = 0;   // dr (not rotated)
  int64_t v_head_dim = 0;    // dv

  // FFN.
  int64_t intermediate_size = 0;      // dense MLP
  int64_t moe_intermediate_size = 0;  // per expert
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t num_shared_experts = 0;
  bool moe_renormalize = true;
  double routed_scaling_factor = 1.0;

  int64_t NumMlaLayers() const;
  int64_t NumKdaLayers() const { return num_layers - NumMlaLayers(); }
};

// Parses the reader's JSON (the whole config.json).
StatusOr<KimiLinearConfig> ParseKimiLinearConfig(const ConfigReader& config);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_KIMI_LINEAR_CONFIG_H_
