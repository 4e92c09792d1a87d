// The kimi_linear tensor list, name aliases, host dummy weights and cost model.
#include "model/models/kimi_linear_weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/dtype.h"
#include "base/file_error.h"
#include "base/splitmix64.h"
#include "model/config_reader.h"
#include "model/models/builtin.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata {
namespace {

// Uniform in [0, 1).
float Unit(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

}  // namespace

int64_t KimiTensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string KimiLayerPrefix(int64_t layer) { return absl::StrCat("model.layers.", layer, "."); }

std::vector<KimiTensorSpec> KimiLinearTensorSpecs(const KimiLinearConfig& c) {
  std::vector<KimiTensorSpec> out;
  const int64_t V = c.vocab_size, D = c.hidden_size;
  auto add = [&](std::string name, std::vector<int64_t> shape, KimiTensorKind kind, int64_t layer,
                 bool expert = false) {
    out.push_back(KimiTensorSpec{std::move(name), std::move(shape), kind, layer, expert});
  };
  using K = KimiTensorKind;
  add("model.embed_tokens.weight", {V, D}, K::kEmbedding, -1);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, D}, K::kMatrix, -1);
  add("model.norm.weight", {D}, K::kNorm, -1);
  const int64_t H = c.kda_heads, dk = c.kda_head_dim, Kc = c.conv_kernel, C = H * dk;
  const int64_t Hm = c.mla_heads, qd = c.qk_nope_dim + c.qk_rope_dim;
  const int64_t cd = c.kv_lora_rank + c.qk_rope_dim;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = KimiLayerPrefix(i);
    const std::string a = p + "self_attn.";
    add(p + "input_layernorm.weight", {D}, K::kNorm, i);
    add(p + "post_attention_layernorm.weight", {D}, K::kNorm, i);
    if (c.is_mla[static_cast<size_t>(i)]) {
      add(a + "q_proj.weight", {Hm * qd, D}, K::kMatrix, i);
      add(a + "kv_a_proj_with_mqa.weight", {cd, D}, K::kMatrix, i);
      add(a + "kv_a_layernorm.weight", {c.kv_lora_rank}, K::kNorm, i);
      add(a + "kv_b_proj.weight", {Hm * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank},
          K::kMatrix, i);
      add(a + "o_proj.weight", {D, Hm * c.v_head_dim}, K::kMatrix, i);
    } else {
      add(a + "q_proj.weight", {C, D}, K::kMatrix, i);
      add(a + "k_proj.weight", {C, D}, K::kMatrix, i);
      add(a + "v_proj.weight", {C, D}, K::kMatrix, i);
      add(a + "q_conv1d.weight", {C, 1, Kc}, K::kConv, i);
      add(a + "k_conv1d.weight", {C, 1, Kc}, K::kConv, i);
      add(a + "v_conv1d.weight", {C, 1, Kc}, K::kConv, i);
      add(a + "f_a_proj.weight", {dk, D}, K::kMatrix, i);
      add(a + "f_b_proj.weight", {C, dk}, K::kMatrix, i);
      add(a + "b_proj.weight", {H, D}, K::kMatrix, i);
      add(a + "A_log", {1, 1, H, 1}, K::kALog, i);
      add(a + "dt_bias", {C}, K::kDtBias, i);
      add(a + "g_a_proj.weight", {dk, D}, K::kMatrix, i);
      add(a + "g_b_proj.weight", {C, dk}, K::kMatrix, i);
      add(a + "o_norm.weight", {dk}, K::kNorm, i);
      add(a + "o_proj.weight", {D, C}, K::kMatrix, i);
    }
    if (!c.is_moe[static_cast<size_t>(i)]) {
      const int64_t I = c.intermediate_size;
      add(p + "mlp.gate_proj.weight", {I, D}, K::kMatrix, i);
      add(p + "mlp.up_proj.weight", {I, D}, K::kMatrix, i);
      add(p + "mlp.down_proj.weight", {D, I}, K::kMatrix, i);
    } else {
      const std::string m = p + "block_sparse_moe.";
      const int64_t E = c.num_experts, I = c.moe_intermediate_size;
      add(m + "gate.weight", {E, D}, K::kMatrix, i);
      add(m + "gate.e_score_correction_bias", {E}, K::kScoreBias, i);
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        add(x + "w1.weight", {I, D}, K::kMatrix, i, true);
        add(x + "w3.weight", {I, D}, K::kMatrix, i, true);
        add(x + "w2.weight", {D, I}, K::kMatrix, i, true);
      }
      if (c.num_shared_experts > 0) {
        const int64_t Is = I * c.num_shared_experts;
        add(m + "shared_experts.gate_proj.weight", {Is, D}, K::kMatrix, i);
        add(m + "shared_experts.up_proj.weight", {Is, D}, K::kMatrix, i);
        add(m + "shared_experts.down_proj.weight", {D, Is}, K::kMatrix, i);
      }
    }
  }
  return out;
}

std::string KimiDenseMlpPrefix(const WeightStore& ws, int64_t layer) {
  const std::string p = KimiLayerPrefix(layer);
  return ws.Has(p + "mlp.gate_proj.weight") || !ws.Has(p + "block_sparse_moe.gate_proj.weight")
             ? p + "mlp."
             : p + "block_sparse_moe.";
}

Status WriteKimiLinearDummyWeights(const KimiLinearConfig& config, const std::string& dir,
                                   uint64_t seed, uint64_t max_bytes) {
  const std::vector<KimiTensorSpec> specs = KimiLinearTensorSpecs(config);
  uint64_t bytes = 0;
  for (const auto& t : specs) {
    bytes += static_cast<uint64_t>(t.NumElements()) *
             (t.kind == KimiTensorKind::kMatrix || t.kind == KimiTensorKind::kEmbedding ? 2 : 4);
  }
  if (bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "dummy weights on the CPU are limited to ", max_bytes >> 20, " MiB; this config needs ",
        bytes >> 20, " MiB (use --device cuda for large dummy models)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return FileError(absl::StrCat(dir, ": cannot create directory"), ec);
  SafetensorsWriter w;
  uint64_t index = 0;
  for (const auto& t : specs) {
    // A counter-based stream: each value depends only on (seed, tensor
    // index, element), not on the order the tensors are made in.
    const uint64_t base = SplitMix64(seed ^ SplitMix64(++index));
    const size_t n = static_cast<size_t>(t.NumElements());
    auto uniform = [&](size_t i, float lo, float hi) {
      return lo + (hi - lo) * Unit(SplitMix64(base + static_cast<uint64_t>(i)));
    };
    if (t.kind == KimiTensorKind::kMatrix || t.kind == KimiTensorKind::kEmbedding) {
      std::vector<uint8_t> raw(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBf16(uniform(i, -0.02f, 0.02f));
        std::memcpy(raw.data() + 2 * i, &h, 2);
      }
      w.Add(t.name, DType::kBF16, t.shape, std::move(raw));
      continue;
    }
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      switch (t.kind) {
        case KimiTensorKind::kNorm: v[i] = 1.f; break;
        case KimiTensorKind::kConv: v[i] = uniform(i, -0.5f, 0.5f); break;
        case KimiTensorKind::kALog: v[i] = std::log(uniform(i, 1.f, 16.f)); break;
        case KimiTensorKind::kDtBias: {
          const float dt = uniform(i, 0.001f, 0.1f);
          v[i] = std::log(std::expm1(dt));  // softplus(v) = dt
          break;
        }
        case KimiTensorKind::kScoreBias: v[i] = uniform(i, -0.01f, 0.01f); break;
        default: v[i] = 0.f; break;
      }
    }
    w.AddF32(t.name, DType::kF32, t.shape, v);
  }
  w.SetMetadata("format", "pt");
  w.SetMetadata("strata_dummy", "random weights (--load-format dummy)");
  return w.WriteFile((std::filesystem::path(dir) / "model.safetensors").string());
}

Status WriteKimiLinearDummyCheckpoint(const std::string& config_path, const std::string& dir,
                                      uint64_t seed) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(KimiLinearConfig config, ParseKimiLinearConfig(reader));
  // Host dummies are for small configs (tests, demos); a 48B-shaped model
  // belongs on the GPU, where its weights are made in place.
  constexpr uint64_t kMaxHostDummyBytes = uint64_t{4} << 30;
  Status s = WriteKimiLinearDummyWeights(config, dir, seed, kMaxHostDummyBytes);
  if (absl::IsResourceExhausted(s)) {
    return Status(s.code(), absl::StrCat(config_path, ": ", s.message()));  // whose shapes
  }
  return s;
}

std::string KimiLinear48BConfigJson() {
  return R"({
  "architectures": ["KimiLinearForCausalLM"],
  "model_type": "kimi_linear",
  "vocab_size": 163840,
  "hidden_size": 2304,
  "num_hidden_layers": 27,
  "linear_attn_config": {
    "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
    "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
    "num_heads": 32,
    "head_dim": 128,
    "short_conv_kernel_size": 4
  },
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "q_lora_rank": null,
  "kv_lora_rank": 512,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "v_head_dim": 128,
  "mla_use_nope": true,
  "hidden_act": "silu",
  "intermediate_size": 9216,
  "first_k_dense_replace": 1,
  "moe_layer_freq": 1,
  "num_experts": 256,
  "num_experts_per_token": 8,
  "moe_intermediate_size": 1024,
  "num_shared_experts": 1,
  "moe_router_activation_func": "sigmoid",
  "moe_renormalize": true,
  "routed_scaling_factor": 2.446,
  "use_grouped_topk": true,
  "num_expert_group": 1,
  "topk_group": 1,
  "rms_norm_eps": 1e-5,
  "model_max_length": 1048576,
  "tie_word_embeddings": false,
  "bos_token_id": 163584,
  "eos_token_id": 163586,
  "pad_token_id": 163839,
  "num_nextn_predict_layers": 0,
  "torch_dtype": "bfloat16"
}
)";
}

// ---------------------------------------------------------------------------
// Cost model

KimiParamCounts CountKimiParams(const KimiLinearConfig& c) {
  KimiParamCounts p;
  for (const KimiTensorSpec& t : KimiLinearTensorSpecs(c)) {
    const double n = static_cast<double>(t.NumElements());
    if (t.is_expert) continue;
    if (t.kind == KimiTensorKind::kEmbedding) {
      p.embedding = n;
    } else if (t.name == "lm_head.weight") {
      p.lm_head = n;
    } else {
      p.dense_path += n;
    }
  }
  if (c.tie_word_embeddings) p.lm_head = p.embedding;
  p.per_expert = 3.0 * static_cast<double>(c.moe_intermediate_size * c.hidden_size);
  for (bool m : c.is_moe) p.moe_layers += m;
  p.experts = c.num_experts;
  p.top_k = c.experts_per_token;
  return p;
}

double ExpectedDistinctExperts(int64_t experts, int64_t top_k, int64_t batch) {
  if (experts <= 0 || top_k <= 0 || batch <= 0) return 0;
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(batch)));
}

KimiDecodeBytes KimiLinearDecodeBytes(const KimiLinearConfig& c, int64_t batch, int64_t context) {
  const KimiParamCounts p = CountKimiParams(c);
  const double b = static_cast<double>(batch);
  const double D = static_cast<double>(c.hidden_size);
  KimiDecodeBytes out;
  // Embedding rows: at most one per sequence.
  out.weights = 2.0 * (p.dense_path + p.lm_head + b * D);
  out.experts = 2.0 * static_cast<double>(p.moe_layers) *
                ExpectedDistinctExperts(p.experts, p.top_k, batch) * p.per_expert;
  const double H = static_cast<double>(c.kda_heads), dk = static_cast<double>(c.kda_head_dim);
  const double kda_state = H * dk * dk + 3.0 * H * dk * static_cast<double>(c.conv_kernel - 1);
  const double cd = static_cast<double>(c.kv_lora_rank + c.qk_rope_dim);
  const double per_seq = 2.0 * 4.0 * kda_state * static_cast<double>(c.NumKdaLayers()) +
                         2.0 * cd * (static_cast<double>(context) + 2.0) *
                             static_cast<double>(c.NumMlaLayers());
  out.state = b * per_seq;
  return out;
}

double KimiLinearPrefillFlops(const KimiLinearConfig& c, int64_t tokens) {
  const KimiParamCounts p = CountKimiParams(c);
  const double T = static_cast<double>(tokens);
  // Norm weights are in dense_path but cost no multiply-adds worth counting.
  double flops =
      2.0 * T * (p.dense_path + static_cast<double>(p.top_k * p.moe_layers) * p.per_expert);
  flops += 2.0 * p.lm_head;  // the last position's logits
  const double Hm = static_cast<double>(c.mla_heads);
  const double qd = static_cast<double>(c.qk_nope_dim + c.qk_rope_dim);
  const double dv = static_cast<double>(c.v_head_dim);
  // kv_b's expansion of every cached latent is 2·T·|kv_b| FLOPs, already in
  // dense_path; attention itself is quadratic.
  const double mla = 2.0 * Hm * (T * (T + 1.0) / 2.0) * (qd + dv);
  flops += mla * static_cast<double>(c.NumMlaLayers());
  // Chunked KDA, per 64-token chunk and head (multiply-adds): the decayed
  // key-key and query-key matrices, the triangular inverse, the WY factors,
  // and three chunk-by-state products.
  const double dk = static_cast<double>(c.kda_head_dim), C = 64.0;
  const double chunks = std::ceil(T / C);
  const double macs = C * C * (3.0 * dk + 2.0 * dk) + C * C * C / 3.0 + 3.0 * C * dk * dk;
  flops += 2.0 * macs * chunks * static_cast<double>(c.kda_heads) *
           static_cast<double>(c.NumKdaLayers());
  return flops;
}

}  // namespace strata
