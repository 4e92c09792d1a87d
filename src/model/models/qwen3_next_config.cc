// qwen3_next config.json parsing. Where a key is absent we use the default of
// transformers' Qwen3NextConfig (the parity reference), except for the
// dimensions, which are always required.
#include "model/models/qwen3_next_config.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "base/input_limits.h"
#include "model/config_checks.h"
#include "model/config_fields.h"
#include "model/config_sizes.h"

namespace strata {
namespace {

StatusOr<int64_t> AtLeast(const ConfigReader& c, const std::string& key, int64_t fallback,
                          int64_t min_value) {
  STRATA_ASSIGN_OR_RETURN(int64_t v, c.GetIntOr(key, fallback));
  if (v < min_value) {
    return c.FieldError(key, absl::StrCat("expected an integer >= ", min_value, ", got ", v));
  }
  return v;
}

// layer_types entries; transformers also maps the legacy names it still reads.
StatusOr<bool> IsFullAttention(const ConfigReader& c, const std::string& at, const std::string& t) {
  if (t == "full_attention" || t == "attention") return true;
  if (t == "linear_attention" || t == "mamba" || t == "conv") return false;
  return c.FieldError(at, absl::StrCat("unknown layer type '", t,
                                       "' (expected linear_attention or full_attention)"));
}

// q.is_attention from layer_types and/or full_attention_interval.
Status ParseLayerKinds(const ConfigReader& c, Qwen3NextConfig& q) {
  const int64_t L = q.num_layers;
  std::optional<int64_t> interval;
  if (c.Has("full_attention_interval")) {
    STRATA_ASSIGN_OR_RETURN(interval, AtLeast(c, "full_attention_interval", 4, 1));
  }
  std::vector<bool> by_interval;
  for (int64_t i = 0; i < L; ++i) by_interval.push_back((i + 1) % interval.value_or(4) == 0);
  if (!c.Has("layer_types")) {
    // transformers: full attention iff (i + 1) % interval == 0, interval 4 by default.
    q.is_attention = by_interval;
    return OkStatus();
  }
  const nlohmann::json& v = c.json().at("layer_types");
  if (!v.is_array()) return c.FieldError("layer_types", "expected a list of strings");
  if (static_cast<int64_t>(v.size()) != L) {
    return c.FieldError("layer_types",
                        absl::StrCat("has ", v.size(), " entries but num_hidden_layers is ", L));
  }
  q.is_attention.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = absl::StrCat("layer_types[", i, "]");
    if (!v[i].is_string()) return c.FieldError(at, "expected a string");
    STRATA_ASSIGN_OR_RETURN(bool full, IsFullAttention(c, at, v[i].get<std::string>()));
    q.is_attention.push_back(full);
  }
  // transformers ignores the interval when layer_types is given; a config
  // stating both differently is ambiguous, so say so.
  if (interval && q.is_attention != by_interval) {
    return c.FieldError("layer_types",
                        absl::StrCat("contradicts full_attention_interval (", *interval, ")"));
  }
  return OkStatus();
}

// MoE iff the layer is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
// (and there are experts at all), as Qwen3NextDecoderLayer decides.
Status ParseMlpKinds(const ConfigReader& c, Qwen3NextConfig& q) {
  const int64_t L = q.num_layers;
  STRATA_ASSIGN_OR_RETURN(int64_t step, AtLeast(c, "decoder_sparse_step", 1, 1));
  std::set<int64_t> dense_only;
  if (c.Has("mlp_only_layers")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> ids, c.GetIntList("mlp_only_layers"));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= L) {
        return c.FieldError(absl::StrCat("mlp_only_layers[", i, "]"),
                            absl::StrCat("layer index ", ids[i], " out of range [0, ", L,
                                         ") (indices are 0-based)"));
      }
      dense_only.insert(ids[i]);
    }
  }
  STRATA_ASSIGN_OR_RETURN(q.num_experts, c.GetInt("num_experts"));
  if (q.num_experts < 0) return c.FieldError("num_experts", "must be >= 0");
  q.is_moe.clear();
  for (int64_t i = 0; i < L; ++i) {
    q.is_moe.push_back(dense_only.count(i) == 0 && q.num_experts > 0 && (i + 1) % step == 0);
  }
  return OkStatus();
}

// rope_theta and partial_rotary_factor: in a rope_parameters object
// (transformers 5 save_pretrained) or at the top level (published configs).
Status ParseRope(const ConfigReader& c, Qwen3NextConfig& q) {
  std::optional<ConfigReader> rp;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!c.Has(key)) continue;
    STRATA_ASSIGN_OR_RETURN(ConfigReader obj, c.GetObject(key));
    // Per-layer-type dictionaries: the full-attention layers' entry applies.
    if (obj.Has("full_attention")) {
      STRATA_ASSIGN_OR_RETURN(obj, obj.GetObject("full_attention"));
    }
    if (rp) {
      return UnsupportedField(c, key, "both rope_parameters and rope_scaling are set");
    }
    rp = std::move(obj);
  }
  if (rp) {
    const char* type_key = rp->Has("rope_type") ? "rope_type" : "type";
    if (rp->Has(type_key)) {
      STRATA_ASSIGN_OR_RETURN(std::string type, rp->GetString(type_key));
      if (type != "default") {
        return UnsupportedField(*rp, type_key,
                                absl::StrCat("'", type, "' (only the default RoPE is supported)"));
      }
    }
  }
  // The top level is the published spelling, rope_parameters transformers
  // 5's; the nested value wins in transformers. `stale_top` marks a key that
  // 5.17 itself writes at the top level without reading it: Qwen3NextConfig
  // sets partial_rotary_factor = 0.25 for backward compatibility whatever
  // rope_parameters says, so only there may the two differ. Elsewhere (the
  // top-level rope_theta, which save_pretrained never writes) they must agree.
  auto number = [&](const char* key, double fallback, bool stale_top) -> StatusOr<double> {
    std::optional<double> nested, top;
    if (rp && rp->Has(key)) {
      STRATA_ASSIGN_OR_RETURN(nested, rp->GetDouble(key));
    }
    if (c.Has(key)) {
      STRATA_ASSIGN_OR_RETURN(top, c.GetDouble(key));
    }
    if (nested && top && *nested != *top && !stale_top) {
      return c.FieldError(
          key, absl::StrCat("contradicts rope_parameters.", key, " (", *top, " vs ", *nested, ")"));
    }
    return nested ? *nested : top.value_or(fallback);
  };
  STRATA_ASSIGN_OR_RETURN(q.rope_theta, number("rope_theta", 10000.0, /*stale_top=*/false));
  if (!(q.rope_theta > 0) || !std::isfinite(q.rope_theta)) {
    return c.FieldError("rope_theta", "must be a positive number");
  }
  // Qwen3NextConfig defaults partial_rotary_factor to 0.25.
  STRATA_ASSIGN_OR_RETURN(double factor, number("partial_rotary_factor", 0.25, /*stale_top=*/true));
  if (!(factor > 0 && factor <= 1)) {
    return c.FieldError("partial_rotary_factor", absl::StrCat("must be in (0, 1], got ", factor));
  }
  // transformers: dim = int(head_dim * partial_rotary_factor) (truncation).
  q.rotary_dim = static_cast<int64_t>(static_cast<double>(q.head_dim) * factor);
  if (q.rotary_dim < 2 || q.rotary_dim % 2 != 0) {
    return c.FieldError("partial_rotary_factor",
                        absl::StrCat("gives a rotary width of ", q.rotary_dim, " for head_dim ",
                                     q.head_dim, " (must be even and >= 2)"));
  }
  return OkStatus();
}

// What the shapes add up to (weights, decode state), refused before dummy
// weights or states are sized from them.
Status CheckSizes(const ConfigReader& c, const Qwen3NextConfig& q) {
  int64_t moe_layers = 0;
  for (bool m : q.is_moe) moe_layers += m;
  DecoderSizes sizes(c, q.vocab_size, q.hidden_size, q.tie_word_embeddings, q.num_layers, 24);
  sizes.Gqa(q.NumAttentionLayers(), {"num_attention_heads", q.num_heads},
            {"num_key_value_heads", q.num_kv_heads}, {"head_dim", q.head_dim});
  sizes.Gdn(q.NumLinearLayers(), {"linear_num_key_heads", q.linear_key_heads},
            {"linear_num_value_heads", q.linear_value_heads},
            {"linear_key_head_dim", q.linear_key_dim},
            {"linear_value_head_dim", q.linear_value_dim},
            {"linear_conv_kernel_dim", q.conv_kernel}, q.ConvChannels());
  sizes.DenseMlp(q.num_layers - moe_layers, {"intermediate_size", q.intermediate_size});
  sizes.Moe(moe_layers, {"num_experts", q.num_experts},
            {"moe_intermediate_size", q.moe_intermediate_size},
            {"shared_expert_intermediate_size", q.shared_intermediate_size},
            /*shared_is_width=*/true, 3);
  return sizes.Check();
}

}  // namespace

int64_t Qwen3NextConfig::NumAttentionLayers() const {
  int64_t n = 0;
  for (bool a : is_attention) n += a;
  return n;
}

StatusOr<Qwen3NextConfig> ParseQwen3NextConfig(const ConfigReader& c) {
  Qwen3NextConfig q;
  STRATA_RETURN_IF_ERROR(ReadDecoderConfig(c, {.rms_norm_eps = 1e-6}, q));

  // Variants this executor does not implement.
  STRATA_ASSIGN_OR_RETURN(std::string act, c.Has("hidden_act") ? c.GetString("hidden_act")
                                                               : StatusOr<std::string>("silu"));
  if (act != "silu")
    return UnsupportedField(c, "hidden_act", absl::StrCat("'", act, "' (only silu)"));
  STRATA_ASSIGN_OR_RETURN(bool bias, c.GetBoolOr("attention_bias", false));
  if (bias) return UnsupportedField(c, "attention_bias", "must be false (no attention biases)");

  STRATA_RETURN_IF_ERROR(ParseLayerKinds(c, q));
  STRATA_RETURN_IF_ERROR(ParseMlpKinds(c, q));

  // Gated DeltaNet geometry (only needed when a layer uses it).
  if (q.NumLinearLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(q.linear_key_heads, c.GetPositiveInt("linear_num_key_heads"));
    STRATA_ASSIGN_OR_RETURN(q.linear_value_heads, c.GetPositiveInt("linear_num_value_heads"));
    STRATA_ASSIGN_OR_RETURN(q.linear_key_dim, c.GetPositiveInt("linear_key_head_dim"));
    STRATA_ASSIGN_OR_RETURN(q.linear_value_dim, c.GetPositiveInt("linear_value_head_dim"));
    STRATA_ASSIGN_OR_RETURN(q.conv_kernel, AtLeast(c, "linear_conv_kernel_dim", 4, 1));
    if (q.linear_value_heads % q.linear_key_heads != 0) {
      return c.FieldError("linear_num_value_heads", absl::StrCat(q.linear_value_heads,
                                                                 " is not a multiple of "
                                                                 "linear_num_key_heads (",
                                                                 q.linear_key_heads, ")"));
    }
  }

  // Gated attention geometry.
  if (q.NumAttentionLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(q.num_heads, c.GetPositiveInt("num_attention_heads"));
    STRATA_ASSIGN_OR_RETURN(q.num_kv_heads, c.GetPositiveInt("num_key_value_heads"));
    STRATA_ASSIGN_OR_RETURN(q.head_dim, c.GetPositiveInt("head_dim"));
    STRATA_RETURN_IF_ERROR(
        CheckDivides(c, "num_key_value_heads", q.num_kv_heads, "num_attention_heads", q.num_heads));
    STRATA_RETURN_IF_ERROR(ParseRope(c, q));
  }

  // FFN geometry.
  bool any_dense = false, any_moe = false;
  for (bool m : q.is_moe) (m ? any_moe : any_dense) = true;
  if (any_dense) {
    STRATA_ASSIGN_OR_RETURN(q.intermediate_size, c.GetPositiveInt("intermediate_size"));
  }
  if (any_moe) {
    STRATA_ASSIGN_OR_RETURN(q.moe_intermediate_size, c.GetPositiveInt("moe_intermediate_size"));
    STRATA_ASSIGN_OR_RETURN(q.shared_intermediate_size,
                            c.GetPositiveInt("shared_expert_intermediate_size"));
    STRATA_ASSIGN_OR_RETURN(q.experts_per_token, c.GetPositiveInt("num_experts_per_tok"));
    if (q.experts_per_token > q.num_experts) {
      return c.FieldError("num_experts_per_tok",
                          absl::StrCat(q.experts_per_token, " exceeds the number of experts (",
                                       q.num_experts, ")"));
    }
    STRATA_ASSIGN_OR_RETURN(q.norm_topk_prob, c.GetBoolOr("norm_topk_prob", true));
  }
  STRATA_RETURN_IF_ERROR(CheckSizes(c, q));
  return q;
}

}  // namespace strata
