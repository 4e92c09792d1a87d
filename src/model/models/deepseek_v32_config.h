// The deepseek_v32 config.json, parsed and validated (model-spec §3.1). Accepts
// the published checkpoint's spelling (rope_theta + legacy rope_scaling,
// quantization_config) and what transformers' save_pretrained writes
// (rope_parameters, layer_types / mlp_layer_types); values transformers
// defaults are defaulted the same way, model dimensions are required, and
// contradictions or unsupported variants are errors that name the field.
#ifndef STRATA_MODEL_MODELS_DEEPSEEK_V32_CONFIG_H_
#define STRATA_MODEL_MODELS_DEEPSEEK_V32_CONFIG_H_

#include <cstdint>
#include <vector>

#include "backend/cpu/rope_yarn.h"
#include "base/status.h"
#include "model/config_fields.h"
#include "model/config_reader.h"
#include "model/fp8_weights.h"

namespace strata {

struct DeepseekV32Config : DecoderConfig {
  // MLA with a low-rank query (q_a_proj -> q_a_layernorm -> q_b_proj).
  int64_t num_heads = 0;     // H
  int64_t q_lora_rank = 0;   // qr
  int64_t kv_lora_rank = 0;  // r
  int64_t qk_nope_dim = 0;   // dn
  int64_t qk_rope_dim = 0;   // dr (rotated, interleaved pairs)
  int64_t v_head_dim = 0;    // dv
  cpu::RopeParams rope;      // rope.dim == qk_rope_dim
  double softmax_scale = 0;  // (dn + dr)^-1/2 · mscale(s, mscale_all_dim)²

  // Lightning indexer.
  int64_t index_heads = 64;
  int64_t index_head_dim = 128;
  int64_t index_topk = 2048;

  // FFN: dense SwiGLU for the first layers, then MoE with shared experts.
  std::vector<bool> is_moe;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t num_shared_experts = 1;
  int64_t n_group = 8;
  int64_t topk_group = 4;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 2.5;

  // quantization_config (FP8 e4m3 with block scales): the block of one scale.
  bool fp8 = false;
  Fp8BlockSize fp8_block;

  int64_t NumMoeLayers() const;
};

// Model::EffectiveAttendedTokens for deepseek_v32 (CPU adapter and CUDA
// executor alike): every decoder layer is MLA + DSA (first_k_dense_replace
// only makes the MLP dense, not the attention), and a query attends to all of
// its causal keys while they number at most index_topk, to index_topk of them
// after. So the per-layer count at `context` tokens is min(context,
// index_topk), the same for every layer. The indexer's own scan of all keys
// is not included: per key it costs index_heads·index_head_dim products
// against num_heads·(2·kv_lora_rank + qk_rope_dim) for an attended latent
// (8192 vs 139264 at the published shapes).
int64_t DsaAttendedTokens(const DeepseekV32Config& config, int64_t context);

// Parses the reader's JSON (the whole config.json).
StatusOr<DeepseekV32Config> ParseDeepseekV32Config(const ConfigReader& config);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_DEEPSEEK_V32_CONFIG_H_
