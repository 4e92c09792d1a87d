// The strata_hybrid config.json: Strata's own small hybrid architecture (the
// demo model). A per-layer list picks, for each decoder layer, a KDA linear
// attention mixer (Kimi-Linear's) or a DSA mixer (DeepSeek-V3.2's MLA with a
// low-rank query, default RoPE and the lightning indexer's top-k selection),
// and a second list picks a dense SwiGLU or a sigmoid-routed, group-limited
// MoE feed-forward block. The reference definition is
// tools/demo_model/strata_hybrid.py; every key below is written by it.
#ifndef STRATA_MODEL_MODELS_STRATA_HYBRID_CONFIG_H_
#define STRATA_MODEL_MODELS_STRATA_HYBRID_CONFIG_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/config_fields.h"
#include "model/config_reader.h"

namespace strata {

struct StrataHybridConfig : DecoderConfig {
  // Per layer: DSA (true) or KDA; MoE (true) or dense SwiGLU.
  std::vector<bool> is_dsa;
  std::vector<bool> is_moe;

  // KDA: heads of width dk (= dv = rank of the f/g gates), short conv kernel.
  int64_t kda_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t conv_kernel = 4;

  // DSA: MLA with q_a -> RMSNorm -> q_b, latent kv, interleaved RoPE.
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  double rope_theta = 10000.0;
  int64_t index_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  // FFN.
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t num_shared_experts = 0;
  int64_t n_group = 2;  // CONFIG_KEYS default
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;

  int64_t NumDsaLayers() const;
  int64_t NumKdaLayers() const { return num_layers - NumDsaLayers(); }
};

// Parses the reader's JSON (the whole config.json).
StatusOr<StrataHybridConfig> ParseStrataHybridConfig(const ConfigReader& config);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_STRATA_HYBRID_CONFIG_H_
