// The oracle shared by the config.json fuzzer and its corpus replay: bytes as
// a model's config.json, read by ConfigReader and then by every
// architecture's parser (whatever model_type says, so that each parser sees
// every input). Any status is fine as long as it names the file; an accepted
// config must be self-consistent (a per-layer list of num_hidden_layers
// entries, divisibility the executors rely on) and its derived sizes must be
// computable. A crash, UB, a hang or an allocation without bound is caught by
// the sanitizers and libFuzzer themselves.
#ifndef STRATA_TESTS_FUZZ_CONFIG_CHECK_H_
#define STRATA_TESTS_FUZZ_CONFIG_CHECK_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "model/config_reader.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/qwen3_next_config.h"
#include "model/models/strata_hybrid_config.h"

namespace strata::fuzz {

struct ConfigResult {
  bool read = false;  // ConfigReader accepted the text
  int accepted = 0;   // architecture parsers that accepted it
  std::string violation;
};

constexpr char kConfigLabel[] = "config.json";

inline std::string ConfigErrorViolation(const Status& s, const char* stage) {
  if (s.message().rfind(std::string(kConfigLabel) + ": ", 0) != 0) {
    return std::string(stage) + " error does not name the file: " + s.ToString();
  }
  if (s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kUnimplemented) {
    return std::string(stage) +
           " error is neither InvalidArgument nor Unimplemented: " + s.ToString();
  }
  return "";
}

// The typed getters on every top-level key: they must agree with each other.
inline std::string CheckGetters(const ConfigReader& c) {
  for (const auto& [key, value] : c.json().items()) {
    (void)c.GetString(key);
    (void)c.GetBoolOr(key, false);
    (void)c.GetIntList(key);
    (void)c.GetDoubleOr(key, 0.0);
    StatusOr<int64_t> i = c.GetInt(key);
    StatusOr<int64_t> p = c.GetPositiveInt(key);
    if (p.ok() && (!i.ok() || *i != *p || *p <= 0))
      return "GetPositiveInt and GetInt disagree on " + key;
    if (i.ok() && !c.GetDouble(key).ok()) return "an integer that is not a number: " + key;
    if (StatusOr<ConfigReader> o = c.GetObject(key); o.ok()) {
      if (!o->json().is_object()) return "GetObject gave a non-object for " + key;
      for (const auto& [inner, v] : o->json().items()) (void)o->GetInt(inner);
    }
  }
  return "";
}

inline std::string LayerListViolation(size_t size, int64_t num_layers) {
  if (num_layers <= 0) return "accepted num_hidden_layers <= 0";
  if (static_cast<int64_t>(size) != num_layers)
    return "a per-layer list does not have num_hidden_layers entries";
  return "";
}

inline std::string CheckQwen3Next(const Qwen3NextConfig& q) {
  std::string v = LayerListViolation(q.is_attention.size(), q.num_layers);
  if (v.empty()) v = LayerListViolation(q.is_moe.size(), q.num_layers);
  if (!v.empty()) return v;
  const int64_t attn = q.NumAttentionLayers();
  if (attn < 0 || attn > q.num_layers || q.NumLinearLayers() != q.num_layers - attn) {
    return "layer counts do not add up";
  }
  if (q.NumLinearLayers() > 0) {
    if (q.linear_key_heads <= 0 || q.linear_value_heads % q.linear_key_heads != 0) {
      return "linear_num_value_heads is not a multiple of linear_num_key_heads";
    }
    (void)q.ConvChannels();
  }
  if (attn > 0) {
    if (q.num_kv_heads <= 0 || q.num_heads % q.num_kv_heads != 0)
      return "kv heads do not divide heads";
    if (q.rotary_dim < 2 || q.rotary_dim % 2 != 0 || q.rotary_dim > q.head_dim)
      return "bad rotary_dim";
    if (!(q.rope_theta > 0) || !std::isfinite(q.rope_theta)) return "bad rope_theta";
  }
  for (bool m : q.is_moe) {
    if (m && (q.experts_per_token <= 0 || q.experts_per_token > q.num_experts)) {
      return "num_experts_per_tok outside [1, num_experts]";
    }
  }
  return "";
}

inline std::string CheckKimiLinear(const KimiLinearConfig& k) {
  std::string v = LayerListViolation(k.is_mla.size(), k.num_layers);
  if (v.empty()) v = LayerListViolation(k.is_moe.size(), k.num_layers);
  if (!v.empty()) return v;
  const int64_t mla = k.NumMlaLayers();
  if (mla < 0 || mla > k.num_layers || k.NumKdaLayers() != k.num_layers - mla) {
    return "layer counts do not add up";
  }
  return "";
}

inline std::string CheckDeepseekV32(const DeepseekV32Config& d) {
  std::string v = LayerListViolation(d.is_moe.size(), d.num_layers);
  if (!v.empty()) return v;
  const int64_t moe = d.NumMoeLayers();
  if (moe < 0 || moe > d.num_layers) return "MoE layer count out of range";
  if (d.rope.dim != d.qk_rope_dim || d.qk_rope_dim % 2 != 0) return "rope dim inconsistent";
  if (!std::isfinite(d.softmax_scale) || !(d.softmax_scale > 0))
    return "softmax_scale not finite and positive";
  for (int64_t ctx : {int64_t{0}, int64_t{1}, d.max_context, std::numeric_limits<int64_t>::max()}) {
    const int64_t n = DsaAttendedTokens(d, ctx);
    if (n < 0 || n > d.index_topk) return "DsaAttendedTokens out of [0, index_topk]";
  }
  if (moe > 0 && (d.n_group < 1 || d.num_experts % d.n_group != 0))
    return "n_group does not divide experts";
  return "";
}

inline std::string CheckStrataHybrid(const StrataHybridConfig& h) {
  std::string v = LayerListViolation(h.is_dsa.size(), h.num_layers);
  if (v.empty()) v = LayerListViolation(h.is_moe.size(), h.num_layers);
  if (!v.empty()) return v;
  const int64_t dsa = h.NumDsaLayers();
  if (dsa < 0 || dsa > h.num_layers || h.NumKdaLayers() != h.num_layers - dsa) {
    return "layer counts do not add up";
  }
  return "";
}

// Runs one architecture parser; an acceptance is judged by `check`.
template <typename Config>
void RunArchitecture(const ConfigReader& reader, StatusOr<Config> (*parse)(const ConfigReader&),
                     std::string (*check)(const Config&), const char* name, ConfigResult* r) {
  if (!r->violation.empty()) return;
  StatusOr<Config> config = parse(reader);
  if (!config.ok()) {
    r->violation = ConfigErrorViolation(config.status(), name);
    return;
  }
  ++r->accepted;
  const std::string v = check(*config);
  if (!v.empty()) r->violation = std::string(name) + ": " + v;
}

inline ConfigResult CheckConfig(const uint8_t* data, size_t size) {
  ConfigResult r;
  const std::string text(reinterpret_cast<const char*>(data), size);
  StatusOr<ConfigReader> reader = ConfigReader::FromString(kConfigLabel, text);
  if (!reader.ok()) {
    if (reader.status().code() != absl::StatusCode::kInvalidArgument) {
      r.violation = "read error is not InvalidArgument: " + reader.status().ToString();
    } else {
      r.violation = ConfigErrorViolation(reader.status(), "read");
    }
    return r;
  }
  r.read = true;
  r.violation = CheckGetters(*reader);
  RunArchitecture<Qwen3NextConfig>(*reader, ParseQwen3NextConfig, CheckQwen3Next, "qwen3_next", &r);
  RunArchitecture<KimiLinearConfig>(*reader, ParseKimiLinearConfig, CheckKimiLinear, "kimi_linear",
                                    &r);
  RunArchitecture<DeepseekV32Config>(*reader, ParseDeepseekV32Config, CheckDeepseekV32,
                                     "deepseek_v32", &r);
  RunArchitecture<StrataHybridConfig>(*reader, ParseStrataHybridConfig, CheckStrataHybrid,
                                      "strata_hybrid", &r);
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_CONFIG_CHECK_H_
