// The qwen3_next config.json, parsed and validated (model-spec §4.1). Accepts
// the published checkpoint spelling (full_attention_interval, top-level
// rope_theta / partial_rotary_factor) and what transformers' save_pretrained
// writes (layer_types, a rope_parameters object); contradictions and
// unsupported variants are errors that name the field.
#ifndef STRATA_MODEL_MODELS_QWEN3_NEXT_CONFIG_H_
#define STRATA_MODEL_MODELS_QWEN3_NEXT_CONFIG_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/config_fields.h"
#include "model/config_reader.h"

namespace strata {

struct Qwen3NextConfig : DecoderConfig {
  // Per layer (0-based): gated full attention or Gated DeltaNet; MoE or dense.
  std::vector<bool> is_attention;
  std::vector<bool> is_moe;

  // Gated DeltaNet.
  int64_t linear_key_heads = 0;    // Hk (q, k)
  int64_t linear_value_heads = 0;  // Hv, a multiple of Hk (GVA)
  int64_t linear_key_dim = 0;      // dk
  int64_t linear_value_dim = 0;    // dv
  int64_t conv_kernel = 4;         // K

  // Gated attention.
  int64_t num_heads = 0;     // H
  int64_t num_kv_heads = 0;  // Hkv, divides H
  int64_t head_dim = 0;      // hd
  int64_t rotary_dim = 0;    // int(hd · partial_rotary_factor), even
  double rope_theta = 10000.0;

  // FFN.
  int64_t intermediate_size = 0;         // dense layers
  int64_t moe_intermediate_size = 0;     // per routed expert
  int64_t shared_intermediate_size = 0;  // the shared expert
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  bool norm_topk_prob = true;

  int64_t NumAttentionLayers() const;
  int64_t NumLinearLayers() const { return num_layers - NumAttentionLayers(); }
  int64_t LinearKeyWidth() const { return linear_key_heads * linear_key_dim; }        // Hk·dk
  int64_t LinearValueWidth() const { return linear_value_heads * linear_value_dim; }  // Hv·dv
  // Channels of the short conv: q ‖ k ‖ v.
  int64_t ConvChannels() const { return 2 * LinearKeyWidth() + LinearValueWidth(); }
};

// Parses the reader's JSON (the whole config.json).
StatusOr<Qwen3NextConfig> ParseQwen3NextConfig(const ConfigReader& config);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_QWEN3_NEXT_CONFIG_H_
