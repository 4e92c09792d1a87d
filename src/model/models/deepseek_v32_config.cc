// deepseek_v32 config.json parsing. Defaults are those of transformers 5.17's
// DeepseekV32Config (the parity reference) for everything but the model's
// dimensions, which are required.
#include "model/models/deepseek_v32_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>

#include "base/input_limits.h"
#include "model/config_checks.h"
#include "model/config_fields.h"
#include "model/config_sizes.h"
#include "model/models/deepseek_v32_layers.h"

namespace strata {
namespace {

// Python's `d.get(key) or fallback`: absent, null or zero give the fallback.
StatusOr<double> DoubleOrIfFalsy(const ConfigReader& c, const std::string& key, double fallback) {
  STRATA_ASSIGN_OR_RETURN(double v, c.GetDoubleOr(key, fallback));
  return v == 0.0 ? fallback : v;
}

// rope_parameters (transformers 5.x) or the legacy rope_theta + rope_scaling.
Status ParseRope(const ConfigReader& c, DeepseekV32Config& k) {
  cpu::RopeParams& p = k.rope;
  p.dim = k.qk_rope_dim;
  STRATA_ASSIGN_OR_RETURN(double top_theta, c.GetDoubleOr("rope_theta", 10000.0));
  std::optional<ConfigReader> rope;
  // transformers takes rope_scaling over rope_parameters when a file has both
  // (save_pretrained writes only rope_parameters); differing ones are refused
  // rather than one of them silently dropped.
  for (const char* name : {"rope_scaling", "rope_parameters"}) {
    if (!c.Has(name)) continue;
    if (!c.json().at(name).is_object()) return c.FieldError(name, "expected an object or null");
    STRATA_ASSIGN_OR_RETURN(ConfigReader obj, c.GetObject(name));
    if (rope) {
      if (obj.json() != rope->json()) return c.FieldError(name, "contradicts rope_scaling");
      continue;
    }
    rope = std::move(obj);
  }
  p.theta = top_theta;
  if (!rope) {
    p.type = cpu::RopeType::kDefault;
  } else {
    const ConfigReader& r = *rope;
    std::string type = "default";
    if (r.Has("rope_type")) {
      STRATA_ASSIGN_OR_RETURN(type, r.GetString("rope_type"));
    } else if (r.Has("type")) {
      STRATA_ASSIGN_OR_RETURN(type, r.GetString("type"));
    }
    STRATA_ASSIGN_OR_RETURN(p.theta, r.GetDoubleOr("rope_theta", top_theta));
    STRATA_ASSIGN_OR_RETURN(double partial, r.GetDoubleOr("partial_rotary_factor", 1.0));
    if (partial != 1.0) {
      return UnsupportedField(r, "partial_rotary_factor",
                              "must be 1 (DeepSeek rotates all of "
                              "qk_rope_head_dim)");
    }
    if (type == "default") {
      p.type = cpu::RopeType::kDefault;
    } else if (type == "yarn") {
      p.type = cpu::RopeType::kYarn;
      STRATA_ASSIGN_OR_RETURN(p.factor, r.GetDouble("factor"));
      if (!(p.factor > 0)) return r.FieldError("factor", "must be > 0");
      // transformers: a top-level original_max_position_embeddings replaces
      // the nested one, and max_position_embeddings stands in for both.
      STRATA_ASSIGN_OR_RETURN(int64_t max_pos,
                              ReadContextLength(c, "max_position_embeddings", 163840));
      STRATA_ASSIGN_OR_RETURN(
          p.original_max_position,
          r.GetDoubleOr("original_max_position_embeddings", static_cast<double>(max_pos)));
      if (c.Has("original_max_position_embeddings")) {
        STRATA_ASSIGN_OR_RETURN(double top, c.GetDouble("original_max_position_embeddings"));
        if (r.Has("original_max_position_embeddings") && top != p.original_max_position) {
          return r.FieldError(
              "original_max_position_embeddings",
              absl::StrCat(p.original_max_position, " contradicts the top-level value ", top));
        }
        p.original_max_position = top;
      }
      if (!(p.original_max_position > 0)) {
        return r.FieldError("original_max_position_embeddings", "must be > 0");
      }
      STRATA_ASSIGN_OR_RETURN(p.beta_fast, DoubleOrIfFalsy(r, "beta_fast", 32.0));
      STRATA_ASSIGN_OR_RETURN(p.beta_slow, DoubleOrIfFalsy(r, "beta_slow", 1.0));
      // YaRN's correction range takes log(original_max_position / beta).
      if (!(p.beta_fast > 0)) return r.FieldError("beta_fast", "must be > 0");
      if (!(p.beta_slow > 0)) return r.FieldError("beta_slow", "must be > 0");
      STRATA_ASSIGN_OR_RETURN(p.mscale, r.GetDoubleOr("mscale", 0.0));
      STRATA_ASSIGN_OR_RETURN(p.mscale_all_dim, r.GetDoubleOr("mscale_all_dim", 0.0));
      STRATA_ASSIGN_OR_RETURN(p.attention_factor, r.GetDoubleOr("attention_factor", 0.0));
      STRATA_ASSIGN_OR_RETURN(p.truncate, r.GetBoolOr("truncate", true));
    } else {
      return UnsupportedField(r, r.Has("rope_type") ? "rope_type" : "type",
                              absl::StrCat("'", type, "' (supported: default, yarn)"));
    }
  }
  if (!(p.theta > 1.0)) return c.FieldError("rope_theta", "must be > 1");
  // transformers' yarn_apply_mscale: the softmax scale of the main attention
  // carries mscale(s, mscale_all_dim)² whenever the rope is not the default
  // one and mscale_all_dim is set (the cos/sin factor is separate).
  k.softmax_scale = 1.0 / std::sqrt(static_cast<double>(k.qk_nope_dim + k.qk_rope_dim));
  if (p.type == cpu::RopeType::kYarn && p.mscale_all_dim != 0.0) {
    const double m = cpu::YarnGetMscale(p.factor, p.mscale_all_dim);
    k.softmax_scale *= m * m;
  }
  return OkStatus();
}

Status ParseMlpKinds(const ConfigReader& c, DeepseekV32Config& k) {
  const int64_t L = k.num_layers;
  // No contradiction check against first_k_dense_replace: it is a
  // DeepseekV32Config field that save_pretrained always writes (3 unless
  // set) and that only derives mlp_layer_types when the list is absent.
  STRATA_ASSIGN_OR_RETURN(k.is_moe, ReadMoeLayers(c, L, 3, /*list_must_match_count=*/false));
  if (c.Has("layer_types")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> types, PerLayerStrings(c, "layer_types", L));
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "deepseek_sparse_attention") {
        return UnsupportedField(c, absl::StrCat("layer_types[", i, "]"),
                                absl::StrCat("'", types[i], "' (only deepseek_sparse_attention)"));
      }
    }
  }
  return OkStatus();
}

Status ParseQuantization(const ConfigReader& c, DeepseekV32Config& k) {
  if (!c.Has("quantization_config")) return OkStatus();
  STRATA_ASSIGN_OR_RETURN(ConfigReader q, c.GetObject("quantization_config"));
  STRATA_ASSIGN_OR_RETURN(std::string method, q.GetString("quant_method"));
  if (method != "fp8") {
    return UnsupportedField(q, "quant_method", absl::StrCat("'", method, "' (only fp8)"));
  }
  if (q.Has("fmt")) {
    STRATA_ASSIGN_OR_RETURN(std::string fmt, q.GetString("fmt"));
    if (fmt != "e4m3") return UnsupportedField(q, "fmt", absl::StrCat("'", fmt, "' (only e4m3)"));
  }
  if (q.Has("weight_block_size")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> block, q.GetIntList("weight_block_size"));
    if (block.size() != 2 || block[0] < 1 || block[1] < 1) {
      return q.FieldError("weight_block_size", "expected two positive integers [rows, cols]");
    }
    k.fp8_block = {block[0], block[1]};
  }
  // activation_scheme "dynamic" only says how an FP8 GEMM would quantise its
  // input; the CPU dequantises weights and computes in fp32, like the
  // reference loaded from the dequantised weights.
  k.fp8 = true;
  return OkStatus();
}

// What the shapes add up to (weights, decode state), refused before dummy
// weights or states are sized from them.
Status CheckSizes(const ConfigReader& c, const DeepseekV32Config& k) {
  const std::string experts = c.Has("n_routed_experts")    ? "n_routed_experts"
                              : c.Has("num_local_experts") ? "num_local_experts"
                                                           : "num_experts";
  const int64_t moe_layers = k.NumMoeLayers();
  // FP8 checkpoints store a scale tensor beside each matrix.
  DecoderSizes sizes(c, k.vocab_size, k.hidden_size, k.tie_word_embeddings, k.num_layers, 48);
  sizes.Mla(k.num_layers, DsaSizeFields(k));
  sizes.DenseMlp(k.num_layers - moe_layers, {"intermediate_size", k.intermediate_size});
  sizes.Moe(moe_layers, {experts, k.num_experts},
            {"moe_intermediate_size", k.moe_intermediate_size},
            {"n_shared_experts", k.num_shared_experts}, /*shared_is_width=*/false, 6);
  return sizes.Check();
}

}  // namespace

int64_t DsaAttendedTokens(const DeepseekV32Config& config, int64_t context) {
  return std::min(std::max<int64_t>(context, 0), config.index_topk);
}

int64_t DeepseekV32Config::NumMoeLayers() const {
  int64_t n = 0;
  for (bool m : is_moe) n += m;
  return n;
}

StatusOr<DeepseekV32Config> ParseDeepseekV32Config(const ConfigReader& c) {
  DeepseekV32Config k;
  // DeepseekV32Config's defaults: bos 0, eos 1.
  STRATA_RETURN_IF_ERROR(ReadDecoderConfig(
      c, {.max_position_embeddings = 163840, .token_ids = {.bos = 0, .eos = 1, .pad = -1}}, k));
  STRATA_ASSIGN_OR_RETURN(std::string act, c.Has("hidden_act") ? c.GetString("hidden_act")
                                                               : StatusOr<std::string>("silu"));
  if (act != "silu")
    return UnsupportedField(c, "hidden_act", absl::StrCat("'", act, "' (only silu)"));
  STRATA_ASSIGN_OR_RETURN(bool attention_bias, c.GetBoolOr("attention_bias", false));
  if (attention_bias) return UnsupportedField(c, "attention_bias", "must be false");
  STRATA_ASSIGN_OR_RETURN(bool mlp_bias, c.GetBoolOr("mlp_bias", false));
  if (mlp_bias) return UnsupportedField(c, "mlp_bias", "must be false");
  if (c.Has("scoring_func")) {
    STRATA_ASSIGN_OR_RETURN(std::string f, c.GetString("scoring_func"));
    if (f != "sigmoid")
      return UnsupportedField(c, "scoring_func", absl::StrCat("'", f, "' (only sigmoid)"));
  }
  if (c.Has("topk_method")) {
    STRATA_ASSIGN_OR_RETURN(std::string m, c.GetString("topk_method"));
    if (m != "noaux_tc") {
      return UnsupportedField(c, "topk_method", absl::StrCat("'", m, "' (only noaux_tc)"));
    }
  }

  // MLA geometry.
  STRATA_ASSIGN_OR_RETURN(k.num_heads, c.GetPositiveInt("num_attention_heads"));
  STRATA_ASSIGN_OR_RETURN(int64_t kv_heads, c.GetIntOr("num_key_value_heads", k.num_heads));
  if (kv_heads != k.num_heads) {
    return UnsupportedField(c, "num_key_value_heads",
                            absl::StrCat(kv_heads, " differs from num_attention_heads (",
                                         k.num_heads, "); MLA expands one latent per head"));
  }
  if (!c.Has("q_lora_rank")) {
    return UnsupportedField(c, "q_lora_rank",
                            "required: the lightning indexer reads the low-rank query latent");
  }
  STRATA_ASSIGN_OR_RETURN(k.q_lora_rank, c.GetPositiveInt("q_lora_rank"));
  STRATA_ASSIGN_OR_RETURN(k.kv_lora_rank, c.GetPositiveInt("kv_lora_rank"));
  STRATA_ASSIGN_OR_RETURN(k.qk_nope_dim, c.GetPositiveInt("qk_nope_head_dim"));
  STRATA_ASSIGN_OR_RETURN(k.qk_rope_dim, c.GetPositiveInt("qk_rope_head_dim"));
  if (k.qk_rope_dim % 2 != 0 || k.qk_rope_dim > 512) {
    return c.FieldError("qk_rope_head_dim", absl::StrCat("must be even and <= 512, got ",
                                                         k.qk_rope_dim));
  }
  STRATA_ASSIGN_OR_RETURN(k.v_head_dim, c.GetPositiveInt("v_head_dim"));
  STRATA_RETURN_IF_ERROR(ParseRope(c, k));

  // Indexer.
  STRATA_ASSIGN_OR_RETURN(k.index_heads, c.GetIntOr("index_n_heads", 64));
  if (k.index_heads < 1) return c.FieldError("index_n_heads", "must be >= 1");
  STRATA_ASSIGN_OR_RETURN(k.index_head_dim, c.GetIntOr("index_head_dim", 128));
  if (k.index_head_dim < k.qk_rope_dim) {
    return c.FieldError("index_head_dim",
                        absl::StrCat(k.index_head_dim, " is smaller than qk_rope_head_dim (",
                                     k.qk_rope_dim, "), the indexer's rotated part"));
  }
  STRATA_ASSIGN_OR_RETURN(k.index_topk, c.GetIntOr("index_topk", 2048));
  if (k.index_topk < 1) return c.FieldError("index_topk", "must be >= 1");

  // FFN.
  STRATA_RETURN_IF_ERROR(ParseMlpKinds(c, k));
  bool any_dense = false;
  for (bool m : k.is_moe) any_dense |= !m;
  if (any_dense) {
    STRATA_ASSIGN_OR_RETURN(k.intermediate_size, c.GetPositiveInt("intermediate_size"));
  }
  if (k.NumMoeLayers() > 0) {
    STRATA_ASSIGN_OR_RETURN(k.moe_intermediate_size, c.GetPositiveInt("moe_intermediate_size"));
    STRATA_ASSIGN_OR_RETURN(
        k.num_experts,
        RequiredAliasedPositiveInt(c, {"n_routed_experts", "num_local_experts", "num_experts"}));
    STRATA_ASSIGN_OR_RETURN(k.experts_per_token,
                            RequiredAliasedPositiveInt(c, {"num_experts_per_tok"}));
    STRATA_ASSIGN_OR_RETURN(k.num_shared_experts, c.GetIntOr("n_shared_experts", 1));
    if (k.num_shared_experts < 0) return c.FieldError("n_shared_experts", "must be >= 0");
    STRATA_ASSIGN_OR_RETURN(k.n_group, c.GetIntOr("n_group", 8));
    STRATA_ASSIGN_OR_RETURN(k.topk_group, c.GetIntOr("topk_group", 4));
    if (k.n_group < 1 || k.n_group > 64 || k.num_experts % k.n_group != 0) {
      return c.FieldError("n_group", absl::StrCat("must be in [1, 64] and divide n_routed_experts (",
                                                  k.num_experts, "), got ", k.n_group));
    }
    const int64_t per_group = k.num_experts / k.n_group;
    if (per_group < 2) {
      // The group score is the sum of each group's two best experts.
      return c.FieldError("n_group", absl::StrCat("leaves ", per_group,
                                                  " expert per group; at least 2 are needed"));
    }
    if (k.topk_group < 1 || k.topk_group > k.n_group) {
      return c.FieldError("topk_group", absl::StrCat("must be in [1, n_group = ", k.n_group,
                                                     "], got ", k.topk_group));
    }
    if (k.experts_per_token > k.topk_group * per_group) {
      return c.FieldError("num_experts_per_tok",
                          absl::StrCat(k.experts_per_token, " exceeds the ", k.topk_group * per_group,
                                       " experts of the topk_group best groups"));
    }
    STRATA_ASSIGN_OR_RETURN(k.norm_topk_prob, c.GetBoolOr("norm_topk_prob", true));
    STRATA_ASSIGN_OR_RETURN(k.routed_scaling_factor, c.GetDoubleOr("routed_scaling_factor", 2.5));
  }
  STRATA_RETURN_IF_ERROR(ParseQuantization(c, k));
  STRATA_RETURN_IF_ERROR(CheckSizes(c, k));
  return k;
}

}  // namespace strata
