// kimi_linear config.json parsing. Where a key is absent we use the default of
// transformers' KimiLinearConfig (the parity reference), except for the
// dimensions, which are always required.
#include "model/models/kimi_linear_config.h"

#include <initializer_list>
#include <optional>
#include <set>

#include "base/input_limits.h"
#include "model/config_checks.h"
#include "model/config_fields.h"
#include "model/config_sizes.h"

namespace strata {
namespace {

// Fills k.is_mla from linear_attn_config's 1-based lists and/or layer_types.
Status ParseLayerKinds(const ConfigReader& c, const ConfigReader* la, KimiLinearConfig& k) {
  const int64_t L = k.num_layers;
  std::optional<std::vector<bool>> from_lists;
  if (la != nullptr && (la->Has("kda_layers") || la->Has("full_attn_layers"))) {
    std::vector<int> kind(static_cast<size_t>(L), -1);  // -1 unset, 0 KDA, 1 MLA
    for (const char* key : {"kda_layers", "full_attn_layers"}) {
      const int mark = std::string(key) == "full_attn_layers" ? 1 : 0;
      STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> ids, la->GetIntList(key));
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t id = ids[i];
        const std::string at = absl::StrCat(key, "[", i, "]");
        if (id < 1 || id > L) {
          return la->FieldError(
              at, absl::StrCat("layer id ", id, " out of range [1, ", L, "] (ids are 1-based)"));
        }
        int& slot = kind[static_cast<size_t>(id - 1)];
        if (slot == mark) return la->FieldError(at, absl::StrCat("layer ", id, " listed twice"));
        if (slot >= 0) {
          return la->FieldError(
              at, absl::StrCat("layer ", id, " is in both kda_layers and full_attn_layers"));
        }
        slot = mark;
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      if (kind[static_cast<size_t>(i)] < 0) {
        return la->FieldError(
            "kda_layers",
            absl::StrCat("layer ", i + 1, " is in neither kda_layers nor full_attn_layers"));
      }
    }
    from_lists.emplace();
    for (int v : kind) from_lists->push_back(v == 1);
  }
  std::optional<std::vector<bool>> from_types;
  if (c.Has("layer_types")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> types, PerLayerStrings(c, "layer_types", L));
    from_types.emplace();
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "full_attention" && types[i] != "linear_attention") {
        return c.FieldError(absl::StrCat("layer_types[", i, "]"),
                            absl::StrCat("unknown layer type '", types[i],
                                         "' (expected full_attention or linear_attention)"));
      }
      from_types->push_back(types[i] == "full_attention");
    }
  }
  if (from_lists && from_types && *from_lists != *from_types) {
    return c.FieldError("layer_types",
                        "contradicts linear_attn_config.kda_layers / full_attn_layers");
  }
  if (from_lists) {
    k.is_mla = *from_lists;
  } else if (from_types) {
    k.is_mla = *from_types;
  } else {
    // KimiLinearConfig's default pattern: full attention at layers 4, 8, ...
    // (0-based), KDA elsewhere.
    k.is_mla.clear();
    for (int64_t i = 0; i < L; ++i) k.is_mla.push_back(i > 0 && i % 4 == 0);
  }
  return OkStatus();
}

Status ParseMlpKinds(const ConfigReader& c, KimiLinearConfig& k) {
  STRATA_ASSIGN_OR_RETURN(k.is_moe,
                          ReadMoeLayers(c, k.num_layers, 1, /*list_must_match_count=*/true));
  return OkStatus();
}

// What the shapes add up to (the layer list's tensors, the decode
// state), refused before dummy weights or states are sized from them.
Status CheckSizes(const ConfigReader& c, bool nested_kda, const KimiLinearConfig& k) {
  const std::string kda = nested_kda ? "linear_attn_config." : "linear_";
  const std::string experts = c.Has("num_experts")        ? "num_experts"
                              : c.Has("n_routed_experts") ? "n_routed_experts"
                                                          : "num_local_experts";
  int64_t moe_layers = 0;
  for (bool m : k.is_moe) moe_layers += m;
  DecoderSizes sizes(c, k.vocab_size, k.hidden_size, k.tie_word_embeddings, k.num_layers, 24);
  sizes.Kda(
      k.NumKdaLayers(), {kda + "num_heads", k.kda_heads}, {kda + "head_dim", k.kda_head_dim},
      {nested_kda ? kda + "short_conv_kernel_size" : "linear_conv_kernel_dim", k.conv_kernel});
  sizes.Mla(k.NumMlaLayers(), {.heads = {"num_attention_heads", k.mla_heads},
                               .q_rank = {"", 0},
                               .kv_rank = {"kv_lora_rank", k.kv_lora_rank},
                               .nope_dim = {"qk_nope_head_dim", k.qk_nope_dim},
                               .rope_dim = {"qk_rope_head_dim", k.qk_rope_dim},
                               .v_dim = {"v_head_dim", k.v_head_dim}});
  sizes.DenseMlp(k.num_layers - moe_layers, {"intermediate_size", k.intermediate_size});
  sizes.Moe(moe_layers, {experts, k.num_experts},
            {"moe_intermediate_size", k.moe_intermediate_size},
            {"num_shared_experts", k.num_shared_experts}, /*shared_is_width=*/false, 3);
  return sizes.Check();
}

}  // namespace

int64_t KimiLinearConfig::NumMlaLayers() const {
  int64_t n = 0;
  for (bool m : is_mla) n += m;
  return n;
}

StatusOr<KimiLinearConfig> ParseKimiLinearConfig(const ConfigReader& c) {
  KimiLinearConfig k;
  STRATA_RETURN_IF_ERROR(ReadDecoderConfig(c, {.rms_norm_eps = 1e-5}, k));
  STRATA_ASSIGN_OR_RETURN(k.max_context, ReadContextLength(c, "model_max_length", k.max_context));

  // Variants this executor does not implement.
  if (c.Has("q_lora_rank")) {
    return UnsupportedField(c, "q_lora_rank",
                            "must be null: low-rank MLA queries are not supported");
  }
  STRATA_ASSIGN_OR_RETURN(std::string act, c.Has("hidden_act") ? c.GetString("hidden_act")
                                                               : StatusOr<std::string>("silu"));
  if (act != "silu")
    return UnsupportedField(c, "hidden_act", absl::StrCat("'", act, "' (only silu)"));
  if (c.Has("moe_router_activation_func")) {
    STRATA_ASSIGN_OR_RETURN(std::string f, c.GetString("moe_router_activation_func"));
    if (f != "sigmoid") {
      return UnsupportedField(c, "moe_router_activation_func",
                              absl::StrCat("'", f, "' (only sigmoid)"));
    }
  }
  // transformers adds biases to q/kv_a_proj and o_proj of the MLA layers.
  STRATA_ASSIGN_OR_RETURN(bool attention_bias, c.GetBoolOr("attention_bias", false));
  if (attention_bias) return UnsupportedField(c, "attention_bias", "must be false (no MLA biases)");
  STRATA_ASSIGN_OR_RETURN(bool out_gate, c.GetBoolOr("mla_use_output_gate", false));
  if (out_gate)
    return UnsupportedField(c, "mla_use_output_gate", "must be false (Kimi K3 variant)");
  STRATA_ASSIGN_OR_RETURN(int64_t attn_res, c.GetIntOr("attn_res_block_size", 0));
  if (attn_res != 0)
    return UnsupportedField(c, "attn_res_block_size", "must be 0 (Kimi K3 variant)");
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> groups,
                          AliasedInt(c, {"num_expert_group", "n_group"}));
  STRATA_ASSIGN_OR_RETURN(int64_t topk_group, c.GetIntOr("topk_group", groups.value_or(1)));
  if (groups && *groups < 1) {
    return c.FieldError(c.Has("num_expert_group") ? "num_expert_group" : "n_group",
                        absl::StrCat("must be >= 1, got ", *groups));
  }
  if (topk_group < 1)
    return c.FieldError("topk_group", absl::StrCat("must be >= 1, got ", topk_group));
  STRATA_RETURN_IF_ERROR(CheckAtMost(c, "topk_group", topk_group,
                                     c.Has("num_expert_group") ? "num_expert_group" : "n_group",
                                     groups.value_or(1)));
  if (groups.value_or(1) > 1 && topk_group < *groups) {
    return UnsupportedField(c, "topk_group",
                            "group-limited routing (topk_group < num_expert_group)");
  }

  // KDA geometry.
  std::optional<ConfigReader> la;
  if (c.Has("linear_attn_config")) {
    STRATA_ASSIGN_OR_RETURN(ConfigReader obj, c.GetObject("linear_attn_config"));
    la = std::move(obj);
  }
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> top_heads,
                          AliasedInt(c, {"linear_num_heads", "linear_num_key_heads"}));
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> top_dim,
                          AliasedInt(c, {"linear_head_dim", "linear_key_head_dim"}));
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, AliasedInt(c, {"linear_conv_kernel_dim"}));
  if (la) {
    STRATA_ASSIGN_OR_RETURN(k.kda_heads, la->GetPositiveInt("num_heads"));
    STRATA_ASSIGN_OR_RETURN(k.kda_head_dim, la->GetPositiveInt("head_dim"));
    STRATA_ASSIGN_OR_RETURN(k.conv_kernel,
                            la->GetIntOr("short_conv_kernel_size", top_k.value_or(4)));
    if (top_heads && *top_heads != k.kda_heads) {
      return c.FieldError("linear_num_heads", "contradicts linear_attn_config.num_heads");
    }
    if (top_dim && *top_dim != k.kda_head_dim) {
      return c.FieldError("linear_head_dim", "contradicts linear_attn_config.head_dim");
    }
    if (top_k && *top_k != k.conv_kernel) {
      return c.FieldError("linear_conv_kernel_dim",
                          "contradicts linear_attn_config.short_conv_kernel_size");
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(
        k.kda_heads, RequiredAliasedPositiveInt(c, {"linear_num_heads", "linear_num_key_heads"}));
    STRATA_ASSIGN_OR_RETURN(
        k.kda_head_dim, RequiredAliasedPositiveInt(c, {"linear_head_dim", "linear_key_head_dim"}));
    k.conv_kernel = top_k.value_or(4);
  }
  if (k.conv_kernel < 1) {
    return c.FieldError("linear_attn_config.short_conv_kernel_size", "must be >= 1");
  }
  STRATA_RETURN_IF_ERROR(ParseLayerKinds(c, la ? &*la : nullptr, k));
  STRATA_RETURN_IF_ERROR(ParseMlpKinds(c, k));

  // MLA geometry (only needed when a layer uses it).
  if (k.NumMlaLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(k.mla_heads, c.GetPositiveInt("num_attention_heads"));
    // MLA expands one latent per head; a key/value head count, where a
    // config states one, must at least group the heads evenly.
    if (c.Has("num_key_value_heads")) {
      STRATA_ASSIGN_OR_RETURN(int64_t kv_heads, c.GetPositiveInt("num_key_value_heads"));
      STRATA_RETURN_IF_ERROR(
          CheckDivides(c, "num_key_value_heads", kv_heads, "num_attention_heads", k.mla_heads));
    }
    STRATA_ASSIGN_OR_RETURN(k.kv_lora_rank, c.GetPositiveInt("kv_lora_rank"));
    STRATA_ASSIGN_OR_RETURN(k.qk_nope_dim, c.GetPositiveInt("qk_nope_head_dim"));
    STRATA_ASSIGN_OR_RETURN(k.qk_rope_dim, c.GetInt("qk_rope_head_dim"));
    if (k.qk_rope_dim < 0) return c.FieldError("qk_rope_head_dim", "must be >= 0");
    STRATA_ASSIGN_OR_RETURN(k.v_head_dim, c.GetPositiveInt("v_head_dim"));
    // transformers' KimiLinearConfig has no mla_use_nope: it always runs NoPE
    // MLA (the qk_rope_head_dim part of the keys is shared but not rotated),
    // so configs it saves omit the key. Moonshot's own code rotates that part
    // when the key is false, a different model that Strata does not run.
    STRATA_ASSIGN_OR_RETURN(bool nope, c.GetBoolOr("mla_use_nope", true));
    if (!nope) {
      return UnsupportedField(c, "mla_use_nope",
                              "must be true or absent: only NoPE MLA (Kimi Linear, as transformers "
                              "runs it) is supported");
    }
  }

  // FFN geometry.
  bool any_dense = false, any_moe = false;
  for (bool m : k.is_moe) (m ? any_moe : any_dense) = true;
  if (any_dense) {
    if (c.Has("dense_ffn_hidden")) {
      STRATA_ASSIGN_OR_RETURN(k.intermediate_size, c.GetPositiveInt("dense_ffn_hidden"));
    } else {
      STRATA_ASSIGN_OR_RETURN(k.intermediate_size, c.GetPositiveInt("intermediate_size"));
    }
  }
  if (any_moe) {
    STRATA_ASSIGN_OR_RETURN(k.moe_intermediate_size, c.GetPositiveInt("moe_intermediate_size"));
    STRATA_ASSIGN_OR_RETURN(
        k.num_experts,
        RequiredAliasedPositiveInt(c, {"num_experts", "n_routed_experts", "num_local_experts"}));
    STRATA_ASSIGN_OR_RETURN(
        k.experts_per_token,
        RequiredAliasedPositiveInt(c, {"num_experts_per_token", "num_experts_per_tok"}));
    if (k.experts_per_token > k.num_experts) {
      return c.FieldError(
          c.Has("num_experts_per_token") ? "num_experts_per_token" : "num_experts_per_tok",
          absl::StrCat(k.experts_per_token, " exceeds the number of experts (", k.num_experts,
                       ")"));
    }
    // transformers' default is one shared expert.
    STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> shared,
                            AliasedInt(c, {"num_shared_experts", "n_shared_experts"}));
    k.num_shared_experts = shared.value_or(1);
    if (k.num_shared_experts < 0) return c.FieldError("num_shared_experts", "must be >= 0");
    STRATA_ASSIGN_OR_RETURN(std::optional<bool> renorm,
                            AliasedBool(c, {"moe_renormalize", "norm_topk_prob"}));
    k.moe_renormalize = renorm.value_or(true);
    STRATA_ASSIGN_OR_RETURN(k.routed_scaling_factor, c.GetDoubleOr("routed_scaling_factor", 2.446));
  }
  STRATA_RETURN_IF_ERROR(CheckSizes(c, la.has_value(), k));
  return k;
}

}  // namespace strata
