// The device-neutral description of an architecture: what each decoder layer
// mixes with and which feed-forward block follows, with their shapes and the
// checkpoint names their weights are bound by. An architecture adapter
// (src/model/models/<arch>.cc) builds one from its parsed config; an executor
// (src/exec/cpu/ today) turns it into layer modules for its device.
#ifndef STRATA_EXEC_ARCH_SPEC_H_
#define STRATA_EXEC_ARCH_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "backend/cpu/rope_yarn.h"
#include "model/fp8_weights.h"

namespace strata::exec {

// Kimi Delta Attention (model-spec §2.3): per-channel decay, q/k/v short convs,
// low-rank forget and output gates. Value heads have the key width.
struct KdaSpec {
  int64_t heads = 0;        // H
  int64_t head_dim = 0;     // dk = dv, also the rank of the f/g gates
  int64_t conv_kernel = 4;  // K
  float norm_eps = 1e-5f;   // the gated output RMSNorm

  bool operator==(const KdaSpec&) const = default;
};

// Gated DeltaNet (model-spec §4.3): one decay per value head, a fused
// q/k/v/z projection grouped per key head, one short conv over q ‖ k ‖ v.
struct GdnSpec {
  int64_t key_heads = 0;    // Hk
  int64_t value_heads = 0;  // Hv, a multiple of Hk
  int64_t key_dim = 0;      // dk
  int64_t value_dim = 0;    // dv
  int64_t conv_kernel = 4;  // K
  float norm_eps = 1e-6f;   // the gated output RMSNorm

  bool operator==(const GdnSpec&) const = default;
};

// DeepSeek Sparse Attention's lightning indexer: scores every cached key and
// keeps the top_k best per query for the MLA that follows.
struct IndexerSpec {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t top_k = 0;
  float norm_eps = 1e-6f;  // the key LayerNorm

  bool operator==(const IndexerSpec&) const = default;
};

// Multi-head latent attention (model-spec §2.4, §3.3); DSA when `indexer` is set.
struct MlaSpec {
  int64_t heads = 0;              // H
  int64_t q_lora_rank = 0;        // 0: q_proj from the hidden state; else q_a -> RMSNorm -> q_b
  int64_t kv_lora_rank = 0;       // r
  int64_t nope_dim = 0;           // dn
  int64_t rope_dim = 0;           // dr
  int64_t v_dim = 0;              // dv
  float softmax_scale = 0;        // 0: (dn + dr)^-1/2
  bool rotary = false;            // false: NoPE (Kimi), the rope part is not rotated
  cpu::RopeParams rope = {};      // with `rotary`: rope.dim == rope_dim, interleaved pairs
  float latent_norm_eps = 1e-6f;  // q_a_layernorm, kv_a_layernorm
  std::optional<IndexerSpec> indexer = std::nullopt;

  bool operator==(const MlaSpec&) const = default;
};

// Gated grouped-query attention (model-spec §4.4): q_proj rows per head are
// [query | output gate], per-head q/k RMSNorms, partial half-split rotary.
struct GqaSpec {
  int64_t heads = 0;     // H
  int64_t kv_heads = 0;  // Hkv, divides H
  int64_t head_dim = 0;  // hd
  int64_t rotary_dim = 0;
  double rope_theta = 10000.0;
  float norm_eps = 1e-6f;  // q_norm, k_norm

  bool operator==(const GqaSpec&) const = default;
};

struct MlpSpec {
  int64_t intermediate = 0;

  bool operator==(const MlpSpec&) const = default;
};

// Routed experts with optional shared experts (model-spec §2.5, §3.4, §4.5).
struct MoeSpec {
  bool softmax_routing = false;  // false: sigmoid scores (Kimi, DeepSeek)
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t intermediate = 0;         // per routed expert
  int64_t shared_intermediate = 0;  // all shared experts fused; 0: none
  bool score_bias = false;          // gate.e_score_correction_bias (selection only)
  bool shared_gate = false;         // a sigmoid gate on the shared expert's output
  bool renormalize = true;
  float routed_scaling = 1.f;
  int64_t groups = 1;  // group-limited selection: `topk_groups` of `groups`
  int64_t topk_groups = 1;
  // Checkpoint names under the FFN prefix.
  std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";
  std::string shared_prefix = "shared_experts.";

  bool operator==(const MoeSpec&) const = default;
};

using MixerSpec = std::variant<KdaSpec, GdnSpec, MlaSpec, GqaSpec>;
using FfnSpec = std::variant<MlpSpec, MoeSpec>;

struct LayerSpec {
  std::string prefix;        // e.g. "model.layers.3."; input_layernorm / post_attention_layernorm
  std::string mixer_prefix;  // full prefix of the mixer's tensors, e.g. "model.layers.3.self_attn."
  MixerSpec mixer;
  std::string ffn_prefix;  // full prefix of the FFN's tensors, e.g. "model.layers.3.mlp."
  FfnSpec ffn;
};

struct ArchSpec {
  std::string architecture;  // model_type
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  float norm_eps = 1e-6f;  // decoder and final RMSNorms
  // RMSNorm weights stored zero-centred (scale by 1 + w): Qwen3-Next.
  bool zero_centred_norms = false;
  bool tie_word_embeddings = false;
  // FP8 e4m3 matrices are dequantised with this scale block (DeepSeek);
  // unset: they are rejected like any other unsupported dtype.
  std::optional<Fp8BlockSize> fp8_block = std::nullopt;
  int64_t max_context = 0;
  int32_t bos_token_id = -1;
  int32_t eos_token_id = -1;
  std::vector<LayerSpec> layers = {};
};

// An ArchSpec with the fields every parsed config names alike filled in.
template <typename Config>
ArchSpec SpecOf(std::string architecture, const Config& c) {
  return {.architecture = std::move(architecture),
          .vocab_size = c.vocab_size,
          .hidden_size = c.hidden_size,
          .norm_eps = static_cast<float>(c.rms_norm_eps),
          .tie_word_embeddings = c.tie_word_embeddings,
          .max_context = c.max_context,
          .bos_token_id = c.bos_token_id,
          .eos_token_id = c.eos_token_id};
}

// Routed experts picking `top_k` of `experts` (sigmoid scores unless the
// caller selects softmax), with shared experts of `shared_intermediate` in all.
MoeSpec RoutedMoeSpec(int64_t experts, int64_t top_k, int64_t intermediate,
                      int64_t shared_intermediate, bool renormalize);

// The sigmoid-routed MoE of Kimi and DeepSeek: a selection bias, scaled
// routed weights, `num_shared` shared experts of the routed width fused.
MoeSpec SigmoidMoeSpec(int64_t experts, int64_t top_k, int64_t intermediate, int64_t num_shared,
                       bool renormalize, double routed_scaling);

// Decoder layer `i`: its mixer's tensors under "model.layers.<i>.<mixer_dir>",
// its FFN's under "model.layers.<i>.<ffn_dir>".
LayerSpec LayerAt(int64_t i, const std::string& mixer_dir, MixerSpec mixer,
                  const std::string& ffn_dir, FfnSpec ffn);

// "kda", "gdn", "mla", "dsa" or "attention", then "+dense" or "+moe": the
// ModelInfo::layer_kinds entry (the engine tells linear mixers by the prefix).
std::string LayerKind(const LayerSpec& layer);

// "model.layers.<i>.", the decoder layer prefix every supported checkpoint uses.
std::string LayerPrefix(int64_t layer);

}  // namespace strata::exec

#endif  // STRATA_EXEC_ARCH_SPEC_H_
