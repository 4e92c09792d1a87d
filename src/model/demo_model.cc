// Writes the random demo kimi_linear model. Weights are scaled so activations
// stay O(1) through every layer (each matrix ~ N(0, 1/fan_in), norms near 1)
// and so the recurrent state has a long memory (decay rates in the range a
// trained model uses), which makes every layer and the carried state matter.
#include "model/demo_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/file_error.h"
#include "model/safetensors_writer.h"

namespace strata {
namespace {

class DemoWriter {
 public:
  DemoWriter(uint64_t seed, DType dtype) : rng_(seed), dtype_(dtype) {}

  // N(0, 1/fan_in): a linear layer that keeps the activation scale.
  void Linear(const std::string& name, int64_t out, int64_t in, float gain = 1.f) {
    Normal(name, {out, in}, gain / std::sqrt(static_cast<float>(in)), 0.f, dtype_);
  }
  void Normal(const std::string& name, std::vector<int64_t> shape, float stddev, float mean,
              DType dtype) {
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> v(static_cast<size_t>(Count(shape)));
    for (float& x : v) x = dist(rng_);
    writer_.AddF32(name, dtype, std::move(shape), v);
  }
  void Values(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    writer_.AddF32(name, DType::kF32, std::move(shape), v);
  }
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  Status Write(const std::string& path) const { return writer_.WriteFile(path); }

 private:
  static int64_t Count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  std::mt19937_64 rng_;
  DType dtype_;
  SafetensorsWriter writer_;
};

}  // namespace

Status WriteDemoKimiLinearModel(const std::string& dir, const DemoModelOptions& o) {
  if (o.num_layers < 2) {
    return absl::InvalidArgumentError(
        "demo model: num_layers must be >= 2 (a KDA and an MLA layer)");
  }
  if (o.vocab_size <= 0 || o.hidden_size <= 0 || o.kda_heads <= 0 || o.kda_head_dim <= 0 ||
      o.mla_heads <= 0 || o.num_experts <= 0 || o.experts_per_token <= 0 ||
      o.experts_per_token > o.num_experts) {
    return absl::InvalidArgumentError(
        "demo model: sizes must be positive and experts_per_token <= num_experts");
  }
  if (o.weight_dtype != DType::kF32 && o.weight_dtype != DType::kF16 &&
      o.weight_dtype != DType::kBF16) {
    return absl::InvalidArgumentError("demo model: weight_dtype must be F32, F16 or BF16");
  }
  const int64_t V = o.vocab_size, D = o.hidden_size, L = o.num_layers;
  const int64_t H = o.kda_heads, dk = o.kda_head_dim, K = 4;
  const int64_t Hm = o.mla_heads, dn = 32, dr = 16, dv = 32, r = 64;
  const int64_t I_dense = 2 * D, I = D / 2 > 0 ? D / 2 : 1, E = o.num_experts;
  const int64_t n_shared = 1;

  // Layer kinds: every 4th layer from the third is MLA (KDA, KDA, MLA, KDA, ...);
  // a two-layer model makes its second layer MLA so both mixers are present.
  std::vector<bool> is_mla(static_cast<size_t>(L), false);
  for (int64_t i = 0; i < L; ++i)
    is_mla[static_cast<size_t>(i)] = (i % 4 == 2) || (L == 2 && i == 1);
  nlohmann::json kda_ids = nlohmann::json::array(), mla_ids = nlohmann::json::array();
  for (int64_t i = 0; i < L; ++i)
    (is_mla[static_cast<size_t>(i)] ? mla_ids : kda_ids).push_back(i + 1);

  nlohmann::json cfg = {
      {"architectures", {"KimiLinearForCausalLM"}},
      {"model_type", "kimi_linear"},
      {"vocab_size", V},
      {"hidden_size", D},
      {"num_hidden_layers", L},
      {"num_attention_heads", Hm},
      {"num_key_value_heads", Hm},
      {"head_dim", dr},
      {"kv_lora_rank", r},
      {"q_lora_rank", nullptr},
      {"qk_nope_head_dim", dn},
      {"qk_rope_head_dim", dr},
      {"v_head_dim", dv},
      {"mla_use_nope", true},
      {"hidden_act", "silu"},
      {"intermediate_size", I_dense},
      {"moe_intermediate_size", I},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"num_experts", E},
      {"num_experts_per_token", o.experts_per_token},
      {"num_shared_experts", n_shared},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", 2.446},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"rms_norm_eps", 1e-5},
      {"model_max_length", 8192},
      {"tie_word_embeddings", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"pad_token_id", 0},
      {"torch_dtype", std::string(o.weight_dtype == DType::kBF16  ? "bfloat16"
                                  : o.weight_dtype == DType::kF16 ? "float16"
                                                                  : "float32")},
      {"linear_attn_config",
       {{"kda_layers", kda_ids},
        {"full_attn_layers", mla_ids},
        {"num_heads", H},
        {"head_dim", dk},
        {"short_conv_kernel_size", K}}},
  };

  DemoWriter w(o.seed, o.weight_dtype);
  const DType wd = o.weight_dtype;
  w.Normal("model.embed_tokens.weight", {V, D}, 1.f, 0.f, wd);
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    w.Normal(p + "input_layernorm.weight", {D}, 0.1f, 1.f, wd);
    w.Normal(p + "post_attention_layernorm.weight", {D}, 0.1f, 1.f, wd);
    if (is_mla[static_cast<size_t>(i)]) {
      w.Linear(a + "q_proj.weight", Hm * (dn + dr), D, 2.f);  // sharper attention
      w.Linear(a + "kv_a_proj_with_mqa.weight", r + dr, D);
      w.Normal(a + "kv_a_layernorm.weight", {r}, 0.1f, 1.f, wd);
      w.Linear(a + "kv_b_proj.weight", Hm * (dn + dv), r);
      w.Linear(a + "o_proj.weight", D, Hm * dv);
    } else {
      w.Linear(a + "q_proj.weight", H * dk, D);
      w.Linear(a + "k_proj.weight", H * dk, D);
      w.Linear(a + "v_proj.weight", H * dk, D);
      for (const char* c : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
        w.Normal(a + c + ".weight", {H * dk, 1, K}, 0.5f, 0.f, wd);
      }
      w.Linear(a + "f_a_proj.weight", dk, D);
      w.Linear(a + "f_b_proj.weight", H * dk, dk, 0.5f);
      w.Linear(a + "b_proj.weight", H, D);
      // A = U(1, 16) as in the reference init; dt_bias = softplus⁻¹(dt) with dt
      // log-uniform in [1e-3, 1e-1], so per-token decay spans short to long memory.
      std::vector<float> a_log(static_cast<size_t>(H)), dt_bias(static_cast<size_t>(H * dk));
      for (float& x : a_log) x = std::log(w.Uniform(1.f, 16.f));
      for (float& x : dt_bias) {
        const float dt = std::exp(w.Uniform(std::log(1e-3f), std::log(1e-1f)));
        x = dt + std::log(-std::expm1(-dt));  // inverse softplus
      }
      w.Values(a + "A_log", {1, 1, H, 1}, a_log);
      w.Values(a + "dt_bias", {H * dk}, dt_bias);
      w.Linear(a + "g_a_proj.weight", dk, D);
      w.Linear(a + "g_b_proj.weight", H * dk, dk);
      w.Normal(a + "o_norm.weight", {dk}, 0.1f, 1.f, wd);
      w.Linear(a + "o_proj.weight", D, H * dk);
    }
    if (i == 0) {
      w.Linear(p + "mlp.gate_proj.weight", I_dense, D);
      w.Linear(p + "mlp.up_proj.weight", I_dense, D);
      w.Linear(p + "mlp.down_proj.weight", D, I_dense);
    } else {
      const std::string m = p + "block_sparse_moe.";
      w.Linear(m + "gate.weight", E, D, 2.f);
      w.Normal(m + "gate.e_score_correction_bias", {E}, 0.05f, 0.f, DType::kF32);
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        w.Linear(x + "w1.weight", I, D);
        w.Linear(x + "w3.weight", I, D);
        w.Linear(x + "w2.weight", D, I);
      }
      w.Linear(m + "shared_experts.gate_proj.weight", I * n_shared, D);
      w.Linear(m + "shared_experts.up_proj.weight", I * n_shared, D);
      w.Linear(m + "shared_experts.down_proj.weight", D, I * n_shared);
    }
  }
  w.Normal("model.norm.weight", {D}, 0.1f, 1.f, wd);
  w.Linear("lm_head.weight", V, D);

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return FileError(dir + ": cannot create directory", ec);
  STRATA_RETURN_IF_ERROR(w.Write((std::filesystem::path(dir) / "model.safetensors").string()));
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  std::ofstream f(config_path, std::ios::trunc);
  f << cfg.dump(2) << "\n";
  f.close();
  if (!f) return FileErrorFromErrno(config_path + ": write failed");
  return OkStatus();
}

}  // namespace strata
