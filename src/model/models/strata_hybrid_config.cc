// strata_hybrid config.json parsing. A key that is absent takes the default
// of CONFIG_KEYS in tools/demo_model/strata_hybrid_config.py, whose
// load_config is the reference reader (only the size of the model and its
// per-layer lists are required there); contradictions are errors that name
// the field.
#include "model/models/strata_hybrid_config.h"

#include <string>

#include "base/input_limits.h"
#include "model/config_checks.h"
#include "model/config_sizes.h"
#include "model/models/deepseek_v32_layers.h"

namespace strata {
namespace {

// A list of strings, one per layer, each one of {a, b}; true where it is `b`.
Status KindList(const ConfigReader& c, const std::string& key, int64_t layers, const char* a,
                const char* b, std::vector<bool>& out) {
  if (!c.Has(key)) return c.FieldError(key, "required but missing");
  const nlohmann::json& v = c.json().at(key);
  if (!v.is_array()) return c.FieldError(key, "expected a list of strings");
  if (static_cast<int64_t>(v.size()) != layers) {
    return c.FieldError(key, absl::StrCat("has ", v.size(), " entries but num_hidden_layers is ",
                                          layers));
  }
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string s = v[i].is_string() ? v[i].get<std::string>() : std::string();
    if (s != a && s != b) {
      return c.FieldError(absl::StrCat(key, "[", i, "]"),
                          absl::StrCat("expected '", a, "' or '", b, "'"));
    }
    out.push_back(s == b);
  }
  return OkStatus();
}

StatusOr<int64_t> PositiveIntOr(const ConfigReader& c, const std::string& key, int64_t fallback) {
  if (!c.Has(key)) return fallback;
  return c.GetPositiveInt(key);
}

// What the shapes add up to (weights, decode state), refused before weights
// or states are sized from them.
Status CheckSizes(const ConfigReader& c, const StrataHybridConfig& k) {
  int64_t moe_layers = 0;
  for (bool m : k.is_moe) moe_layers += m;
  DecoderSizes sizes(c, k.vocab_size, k.hidden_size, k.tie_word_embeddings, k.num_layers, 32);
  sizes.Kda(k.NumKdaLayers(), {"linear_num_heads", k.kda_heads},
            {"linear_head_dim", k.kda_head_dim}, {"linear_conv_kernel_dim", k.conv_kernel});
  sizes.Mla(k.NumDsaLayers(), DsaSizeFields(k));
  sizes.DenseMlp(k.num_layers - moe_layers, {"intermediate_size", k.intermediate_size});
  sizes.Moe(moe_layers, {"n_routed_experts", k.num_experts},
            {"moe_intermediate_size", k.moe_intermediate_size},
            {"n_shared_experts", k.num_shared_experts}, /*shared_is_width=*/false, 3);
  return sizes.Check();
}

}  // namespace

int64_t StrataHybridConfig::NumDsaLayers() const {
  int64_t n = 0;
  for (bool d : is_dsa) n += d;
  return n;
}

StatusOr<StrataHybridConfig> ParseStrataHybridConfig(const ConfigReader& c) {
  StrataHybridConfig k;
  STRATA_RETURN_IF_ERROR(ReadDecoderConfig(c, {.max_position_embeddings = 4096}, k));
  STRATA_RETURN_IF_ERROR(KindList(c, "layer_types", k.num_layers, "kda", "dsa", k.is_dsa));
  STRATA_RETURN_IF_ERROR(KindList(c, "mlp_layer_types", k.num_layers, "dense", "moe", k.is_moe));

  if (k.NumKdaLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(k.kda_heads, PositiveIntOr(c, "linear_num_heads", 2));
    STRATA_ASSIGN_OR_RETURN(k.kda_head_dim, PositiveIntOr(c, "linear_head_dim", 32));
    STRATA_ASSIGN_OR_RETURN(k.conv_kernel, c.GetIntOr("linear_conv_kernel_dim", 4));
    if (k.conv_kernel < 2) return c.FieldError("linear_conv_kernel_dim", "must be >= 2");
  }
  if (k.NumDsaLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(k.num_heads, PositiveIntOr(c, "num_attention_heads", 2));
    STRATA_ASSIGN_OR_RETURN(k.q_lora_rank, PositiveIntOr(c, "q_lora_rank", 48));
    STRATA_ASSIGN_OR_RETURN(k.kv_lora_rank, PositiveIntOr(c, "kv_lora_rank", 32));
    STRATA_ASSIGN_OR_RETURN(k.qk_nope_dim, PositiveIntOr(c, "qk_nope_head_dim", 16));
    STRATA_ASSIGN_OR_RETURN(k.qk_rope_dim, PositiveIntOr(c, "qk_rope_head_dim", 16));
    if (k.qk_rope_dim % 2 != 0) return c.FieldError("qk_rope_head_dim", "must be even");
    STRATA_ASSIGN_OR_RETURN(k.v_head_dim, PositiveIntOr(c, "v_head_dim", 16));
    STRATA_ASSIGN_OR_RETURN(k.rope_theta, c.GetDoubleOr("rope_theta", 10000.0));
    if (!(k.rope_theta > 1.0)) return c.FieldError("rope_theta", "must be > 1");
    STRATA_ASSIGN_OR_RETURN(k.index_heads, PositiveIntOr(c, "index_n_heads", 2));
    STRATA_ASSIGN_OR_RETURN(k.index_head_dim, PositiveIntOr(c, "index_head_dim", 32));
    if (k.index_head_dim < k.qk_rope_dim) {
      return c.FieldError("index_head_dim", "is smaller than qk_rope_head_dim, its rotated part");
    }
    STRATA_ASSIGN_OR_RETURN(k.index_topk, PositiveIntOr(c, "index_topk", 64));
  }
  bool any_dense = false;
  for (bool m : k.is_moe) any_dense |= !m;
  if (any_dense) {
    STRATA_ASSIGN_OR_RETURN(k.intermediate_size, PositiveIntOr(c, "intermediate_size", 256));
  }
  bool any_moe = false;
  for (bool m : k.is_moe) any_moe |= m;
  if (any_moe) {
    STRATA_ASSIGN_OR_RETURN(k.moe_intermediate_size, PositiveIntOr(c, "moe_intermediate_size", 64));
    STRATA_ASSIGN_OR_RETURN(k.num_experts, PositiveIntOr(c, "n_routed_experts", 8));
    STRATA_ASSIGN_OR_RETURN(k.experts_per_token, PositiveIntOr(c, "num_experts_per_tok", 2));
    STRATA_ASSIGN_OR_RETURN(k.num_shared_experts, c.GetIntOr("n_shared_experts", 1));
    if (k.num_shared_experts < 0) return c.FieldError("n_shared_experts", "must be >= 0");
    STRATA_ASSIGN_OR_RETURN(k.n_group, c.GetIntOr("n_group", 2));
    STRATA_ASSIGN_OR_RETURN(k.topk_group, c.GetIntOr("topk_group", 1));
    if (k.n_group < 1 || k.num_experts % k.n_group != 0 || k.num_experts / k.n_group < 2) {
      return c.FieldError("n_group", "must divide n_routed_experts into groups of at least 2");
    }
    if (k.topk_group < 1 || k.topk_group > k.n_group) {
      return c.FieldError("topk_group", "must be in [1, n_group]");
    }
    if (k.experts_per_token > k.topk_group * (k.num_experts / k.n_group)) {
      return c.FieldError("num_experts_per_tok", "exceeds the experts of the topk_group groups");
    }
    STRATA_ASSIGN_OR_RETURN(k.norm_topk_prob, c.GetBoolOr("norm_topk_prob", true));
    STRATA_ASSIGN_OR_RETURN(k.routed_scaling_factor, c.GetDoubleOr("routed_scaling_factor", 1.0));
  }
  STRATA_RETURN_IF_ERROR(CheckSizes(c, k));
  return k;
}

}  // namespace strata
