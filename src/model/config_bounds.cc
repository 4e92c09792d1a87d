// The table of config.json integer bounds (see config_bounds.h). The
// comments give the largest published value each bound has to admit, so a
// bound can be judged without looking the models up again.
#include "model/config_bounds.h"

namespace strata {
namespace {

constexpr int64_t k1K = int64_t{1} << 10;
constexpr int64_t k4K = int64_t{1} << 12;
constexpr int64_t k64K = int64_t{1} << 16;
constexpr int64_t k128K = int64_t{1} << 17;
constexpr int64_t k1M = int64_t{1} << 20;
constexpr int64_t k1G = int64_t{1} << 30;

constexpr ConfigIntBound kBounds[] = {
    // Vocabulary: 129,280 (DeepSeek-V3.2), 151,936 (Qwen3-Next), 163,840 (Kimi).
    {"vocab_size", limits::kMaxVocabSize},
    // Width of the residual stream: 7,168 (DeepSeek-V3.2), 16,384 (the widest dense models).
    {"hidden_size", k128K},
    // Depth: 61 (DeepSeek-V3.2), 48 (Qwen3-Next), 27 (Kimi-Linear 48B); the deepest published are
    // near 128.
    {"num_hidden_layers", k4K},
    // Context: 1,048,576 (Kimi-Linear's model_max_length), 262,144 (Qwen3-Next).
    {"max_position_embeddings", k1G},
    {"model_max_length", k1G},
    {"original_max_position_embeddings", k1G},
    {"index_topk", k1G},
    // Heads: 128 (DeepSeek-V3.2), 64 (the lightning indexer), 32 (Kimi KDA and Qwen3-Next GDN).
    {"num_attention_heads", k4K},
    {"num_key_value_heads", k4K},
    {"num_heads", k4K},
    {"linear_num_heads", k4K},
    {"linear_num_key_heads", k4K},
    {"linear_num_value_heads", k4K},
    {"index_n_heads", k4K},
    // Per-head widths: 128-256 (attention), 192 (MLA q/k), 128 (KDA and GDN).
    {"head_dim", k4K},
    {"linear_head_dim", k4K},
    {"linear_key_head_dim", k4K},
    {"linear_value_head_dim", k4K},
    {"qk_nope_head_dim", k4K},
    {"qk_rope_head_dim", k4K},
    {"v_head_dim", k4K},
    {"index_head_dim", k4K},
    // MLA latents: 512 (kv), 1,536 (q).
    {"kv_lora_rank", k64K},
    {"q_lora_rank", k64K},
    // FFN widths: 18,432 (DeepSeek-V3.2 dense), 53,248 (the widest dense models), 2,048 per expert.
    {"intermediate_size", k1M},
    {"dense_ffn_hidden", k1M},
    {"moe_intermediate_size", k1M},
    {"shared_expert_intermediate_size", k1M},
    // Experts: 256 (DeepSeek-V3.2, Kimi), 512 (Qwen3-Next); 8-10 routed per token, 1 shared.
    {"num_experts", k64K},
    {"n_routed_experts", k64K},
    {"num_local_experts", k64K},
    {"num_experts_per_tok", k64K},
    {"num_experts_per_token", k64K},
    {"n_shared_experts", k1K},
    {"num_shared_experts", k1K},
    {"n_group", k64K},
    {"num_expert_group", k64K},
    {"topk_group", k64K},
    // Short convolutions: 4 everywhere.
    {"short_conv_kernel_size", k1K},
    {"linear_conv_kernel_dim", k1K},
    // FP8 blocks: [128, 128].
    {"weight_block_size", k64K},
};

}  // namespace

int64_t ConfigIntMax(std::string_view field) {
  for (const ConfigIntBound& b : kBounds) {
    if (b.field == field) return b.max;
  }
  return kConfigIntMax;
}

std::span<const ConfigIntBound> ConfigIntBounds() { return kBounds; }

}  // namespace strata
