// deepseek_v32 end to end on small random checkpoints written by the test:
// loading through LoadModel, ModelInfo, prefill vs continuation vs decode
// consistency with a sparse indexer (index_topk far below the context), clones,
// FP8 block-scaled checkpoints equal to their dequantised copy, argument
// errors, and config / checkpoint errors naming the field or tensor at fault.
// Parity with transformers is tests/model/dsv32_parity_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "loader_test_util.h"
#include "model/model.h"
#include "model/safetensors_writer.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTestDir;
namespace fs = std::filesystem;

nlohmann::json TinyConfig() {
  return nlohmann::json{
      {"model_type", "deepseek_v32"}, {"vocab_size", 97}, {"hidden_size", 40},
      {"intermediate_size", 56}, {"moe_intermediate_size", 16}, {"num_hidden_layers", 3},
      {"num_attention_heads", 3}, {"num_key_value_heads", 3}, {"n_shared_experts", 1},
      {"n_routed_experts", 8}, {"routed_scaling_factor", 2.5}, {"kv_lora_rank", 24},
      {"q_lora_rank", 20}, {"qk_rope_head_dim", 8}, {"v_head_dim", 12}, {"qk_nope_head_dim", 12},
      {"n_group", 4}, {"topk_group", 2}, {"num_experts_per_tok", 2}, {"first_k_dense_replace", 1},
      {"norm_topk_prob", true}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 4096},
      {"rope_theta", 10000.0},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 64},
                        {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
      {"index_n_heads", 5}, {"index_head_dim", 16}, {"index_topk", 6},
      {"bos_token_id", 0}, {"eos_token_id", 1}, {"tie_word_embeddings", false}};
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  bool fp8_eligible = false;  // a matrix the published checkpoint stores in FP8
  bool is_norm = false;
};

std::vector<Tensor> TensorList(const nlohmann::json& c) {
  const int64_t V = c["vocab_size"], D = c["hidden_size"], L = c["num_hidden_layers"];
  const int64_t H = c["num_attention_heads"], qr = c["q_lora_rank"], r = c["kv_lora_rank"];
  const int64_t dn = c["qk_nope_head_dim"], dr = c["qk_rope_head_dim"], dv = c["v_head_dim"];
  const int64_t HI = c["index_n_heads"], dI = c["index_head_dim"], E = c["n_routed_experts"];
  const int64_t I = c["moe_intermediate_size"], Id = c["intermediate_size"];
  const int64_t dense = c["first_k_dense_replace"], shared = c["n_shared_experts"];
  std::vector<Tensor> t = {{"model.embed_tokens.weight", {V, D}},
                           {"lm_head.weight", {V, D}},
                           {"model.norm.weight", {D}, false, true}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string a = p + "self_attn.";
    t.push_back({p + "input_layernorm.weight", {D}, false, true});
    t.push_back({p + "post_attention_layernorm.weight", {D}, false, true});
    t.push_back({a + "q_a_proj.weight", {qr, D}, true});
    t.push_back({a + "q_a_layernorm.weight", {qr}, false, true});
    t.push_back({a + "q_b_proj.weight", {H * (dn + dr), qr}, true});
    t.push_back({a + "kv_a_proj_with_mqa.weight", {r + dr, D}, true});
    t.push_back({a + "kv_a_layernorm.weight", {r}, false, true});
    t.push_back({a + "kv_b_proj.weight", {H * (dn + dv), r}, true});
    t.push_back({a + "o_proj.weight", {D, H * dv}, true});
    t.push_back({a + "indexer.wq_b.weight", {HI * dI, qr}, true});
    t.push_back({a + "indexer.wk.weight", {dI, D}, true});
    t.push_back({a + "indexer.k_norm.weight", {dI}, false, true});
    t.push_back({a + "indexer.k_norm.bias", {dI}});
    t.push_back({a + "indexer.weights_proj.weight", {HI, D}});
    if (i < dense) {
      t.push_back({p + "mlp.gate_proj.weight", {Id, D}, true});
      t.push_back({p + "mlp.up_proj.weight", {Id, D}, true});
      t.push_back({p + "mlp.down_proj.weight", {D, Id}, true});
    } else {
      t.push_back({p + "mlp.gate.weight", {E, D}});
      t.push_back({p + "mlp.gate.e_score_correction_bias", {E}});
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        t.push_back({x + "gate_proj.weight", {I, D}, true});
        t.push_back({x + "up_proj.weight", {I, D}, true});
        t.push_back({x + "down_proj.weight", {D, I}, true});
      }
      t.push_back({p + "mlp.shared_experts.gate_proj.weight", {I * shared, D}, true});
      t.push_back({p + "mlp.shared_experts.up_proj.weight", {I * shared, D}, true});
      t.push_back({p + "mlp.shared_experts.down_proj.weight", {D, I * shared}, true});
    }
  }
  return t;
}

std::vector<float> RandomValues(const Tensor& t, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::mt19937_64 rng(seed);
  const float std = t.shape.size() == 2 && t.name.find("embed") == std::string::npos
                        ? 1.f / std::sqrt(static_cast<float>(t.shape[1]))
                        : (t.is_norm ? 0.1f : 1.f);
  std::normal_distribution<float> dist(t.is_norm ? 1.f : 0.f, std);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Writes config + weights. fp8: eligible matrices as F8_E4M3 with 16 x 16
// blocks (partial at the edges); `dequantised_copy` gets the same model with
// those matrices dequantised to F32.
void WriteModel(const std::string& dir, const nlohmann::json& config, bool fp8 = false,
                const std::string& dequantised_copy = "") {
  fs::create_directories(dir);
  nlohmann::json cfg = config;
  if (fp8) {
    cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"}, {"weight_block_size", {16, 16}}};
  }
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  SafetensorsWriter w, deq;
  uint64_t seed = 1;
  for (const Tensor& t : TensorList(config)) {
    std::vector<float> v = RandomValues(t, ++seed);
    if (!fp8 || !t.fp8_eligible) {
      w.AddF32(t.name, DType::kF32, t.shape, v);
      deq.AddF32(t.name, DType::kF32, t.shape, v);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1], B = 16;
    const int64_t gr = (rows + B - 1) / B, gc = (cols + B - 1) / B;
    std::vector<float> scale(static_cast<size_t>(gr * gc));
    std::vector<uint8_t> codes(v.size());
    std::vector<float> values(v.size());
    for (int64_t bi = 0; bi < gr; ++bi) {
      for (int64_t bj = 0; bj < gc; ++bj) {
        float amax = 1e-12f;
        for (int64_t i = bi * B; i < std::min(rows, (bi + 1) * B); ++i) {
          for (int64_t j = bj * B; j < std::min(cols, (bj + 1) * B); ++j) {
            amax = std::max(amax, std::abs(v[static_cast<size_t>(i * cols + j)]));
          }
        }
        const float s = amax / 448.f;
        scale[static_cast<size_t>(bi * gc + bj)] = s;
        for (int64_t i = bi * B; i < std::min(rows, (bi + 1) * B); ++i) {
          for (int64_t j = bj * B; j < std::min(cols, (bj + 1) * B); ++j) {
            const size_t k = static_cast<size_t>(i * cols + j);
            codes[k] = F32ToF8E4M3(v[k] / s);
            values[k] = F8E4M3ToF32(codes[k]) * s;
          }
        }
      }
    }
    w.Add(t.name, DType::kF8E4M3, t.shape, codes);
    w.AddF32(t.name + "_scale_inv", DType::kF32, {gr, gc}, scale);
    deq.AddF32(t.name, DType::kF32, t.shape, values);
  }
  ASSERT_TRUE(w.WriteFile(dir + "/model.safetensors").ok());
  if (!dequantised_copy.empty()) {
    fs::create_directories(dequantised_copy);
    std::ofstream(dequantised_copy + "/config.json") << config.dump(2);
    ASSERT_TRUE(deq.WriteFile(dequantised_copy + "/model.safetensors").ok());
  }
}

std::vector<int32_t> RandomTokens(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(2, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class DeepseekV32Test : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.File("tiny");
    WriteModel(model_dir_, TinyConfig());
  }
  std::unique_ptr<Model> Load(const std::string& dir) {
    auto m = LoadModel(dir);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  Status LoadError(const nlohmann::json& config) {
    const std::string dir = dir_.File("edited" + std::to_string(edits_++));
    fs::create_directories(dir);
    fs::copy_file(model_dir_ + "/model.safetensors", dir + "/model.safetensors");
    std::ofstream(dir + "/config.json") << config.dump(2);
    auto m = LoadModel(dir);
    return m.ok() ? OkStatus() : m.status();
  }
  // Logits of every position: `pieces` token counts fed one Forward each (the
  // rest as one last piece); pieces of 1 after the first are decode steps.
  std::vector<float> Run(const Model& m, const std::vector<int32_t>& tokens,
                         const std::vector<int64_t>& pieces) {
    const int64_t V = m.info().vocab_size, T = static_cast<int64_t>(tokens.size());
    auto st = m.NewState(T);
    EXPECT_TRUE(st.ok());
    std::vector<float> out(static_cast<size_t>(T * V));
    int64_t pos = 0;
    for (size_t i = 0; pos < T; ++i) {
      const int64_t n = i < pieces.size() ? std::min(pieces[i], T - pos) : T - pos;
      EXPECT_TRUE(m.Forward(std::span(tokens.data() + pos, static_cast<size_t>(n)), **st,
                            out.data() + pos * V, true)
                      .ok());
      pos += n;
    }
    return out;
  }

  ScopedTestDir dir_;
  std::string model_dir_;
  int edits_ = 0;
};

TEST_F(DeepseekV32Test, LoadsWithCorrectInfo) {
  auto m = Load(model_dir_);
  ASSERT_NE(m, nullptr);
  const ModelInfo& info = m->info();
  EXPECT_EQ(info.architecture, "deepseek_v32");
  EXPECT_EQ(info.num_layers, 3);
  EXPECT_EQ(info.layer_kinds, (std::vector<std::string>{"dsa+dense", "dsa+moe", "dsa+moe"}));
  EXPECT_EQ(info.vocab_size, 97);
  EXPECT_EQ(info.hidden_size, 40);
  // Per token and layer: the latent row (24 + 8) and the indexer key (16), fp32.
  EXPECT_EQ(info.state_bytes_per_token, 3u * (24 + 8 + 16) * 4);
  EXPECT_EQ(info.state_bytes_per_sequence, 0u);
  EXPECT_EQ(info.max_context, 4096);
}

TEST_F(DeepseekV32Test, DecodeAndContinuationsMatchOneForward) {
  auto m = Load(model_dir_);
  ASSERT_NE(m, nullptr);
  // 45 tokens, index_topk 6: every query past the sixth is sparse.
  const std::vector<int32_t> tokens = RandomTokens(45, 97, 3);
  const std::vector<float> full = Run(*m, tokens, {45});
  std::vector<int64_t> decode(45, 1);
  for (const std::vector<int64_t>& pieces :
       {decode, std::vector<int64_t>{5, 1, 1, 1}, std::vector<int64_t>{20, 3, 7}}) {
    EXPECT_LE(RelError(Run(*m, tokens, pieces), full), 1e-5) << "pieces " << pieces.size();
  }
  // The selection matters: dense attention gives other logits.
  nlohmann::json dense = TinyConfig();
  dense["index_topk"] = 1000;
  const std::string dir = dir_.File("dense");
  fs::create_directories(dir);
  fs::copy_file(model_dir_ + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << dense.dump(2);
  auto md = Load(dir);
  ASSERT_NE(md, nullptr);
  EXPECT_GT(RelError(Run(*md, tokens, {45}), full), 1e-3);
  // ... while on a context of at most index_topk tokens both are the same model.
  const std::vector<int32_t> short_tokens(tokens.begin(), tokens.begin() + 6);
  EXPECT_LE(RelError(Run(*md, short_tokens, {6}), Run(*m, short_tokens, {6})), 1e-6);
}

TEST_F(DeepseekV32Test, ClonesContinueIndependentlyAndResetStartsOver) {
  auto m = Load(model_dir_);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(30, 97, 5);
  const int64_t V = 97;
  auto st = m->NewState(40);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(m->Forward(std::span(tokens.data(), 20), **st, nullptr, false).ok());
  std::unique_ptr<SequenceState> clone = (*st)->Clone();
  std::vector<float> a(V), b(V);
  ASSERT_TRUE(m->Forward(std::span(tokens.data() + 20, 10), **st, a.data(), false).ok());
  ASSERT_TRUE(m->Forward(std::span(tokens.data() + 20, 10), *clone, b.data(), false).ok());
  EXPECT_EQ(a, b);
  (*st)->Reset();
  EXPECT_EQ((*st)->num_tokens(), 0);
  std::vector<float> c(V);
  ASSERT_TRUE(m->Forward(std::span(tokens.data(), 30), **st, c.data(), false).ok());
  EXPECT_LE(RelError(c, a), 1e-5);
}

// The engine's cost hook: every layer is MLA + DSA, so a step attends to the
// context while it fits in index_topk (6 here) and to index_topk keys after,
// whatever the dense-MLP first layers do.
TEST_F(DeepseekV32Test, EffectiveAttendedTokensIsTheContextCappedAtIndexTopk) {
  auto m = Load(model_dir_);
  ASSERT_NE(m, nullptr);
  auto st = m->NewState(40);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 1), 1);
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 6), 6);
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 30), 6);
  const std::vector<int32_t> tokens = RandomTokens(20, 97, 9);
  ASSERT_TRUE(m->Forward(std::span(tokens.data(), 4), **st, nullptr, false).ok());
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 1), 5);
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 2), 6);
  ASSERT_TRUE(m->Forward(std::span(tokens.data() + 4, 16), **st, nullptr, false).ok());
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 1), 6);
  // The dense default would have reported the whole context.
  EXPECT_EQ(m->Model::EffectiveAttendedTokens(**st, 1), 21);
  // A clone reports from its own length.
  std::unique_ptr<SequenceState> clone = (*st)->Clone();
  (*st)->Reset();
  EXPECT_EQ(m->EffectiveAttendedTokens(**st, 3), 3);
  EXPECT_EQ(m->EffectiveAttendedTokens(*clone, 3), 6);
}

TEST_F(DeepseekV32Test, Fp8CheckpointEqualsItsDequantisedCopy) {
  const std::string fp8 = dir_.File("fp8"), ref = dir_.File("fp8_ref");
  WriteModel(fp8, TinyConfig(), /*fp8=*/true, ref);
  auto a = Load(fp8);
  auto b = Load(ref);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(25, 97, 8);
  EXPECT_EQ(Run(*a, tokens, {25}), Run(*b, tokens, {25}));
  // The quantisation is real: the FP8 model is not the unquantised one.
  auto orig = Load(model_dir_);
  EXPECT_GT(RelError(Run(*a, tokens, {25}), Run(*orig, tokens, {25})), 1e-4);
}

TEST_F(DeepseekV32Test, ArgumentErrorsLeaveStateUnchanged) {
  auto m = Load(model_dir_);
  ASSERT_NE(m, nullptr);
  auto st = m->NewState(4);
  ASSERT_TRUE(st.ok());
  const std::vector<int32_t> bad = {3, 97};
  EXPECT_THAT(std::string(m->Forward(bad, **st, nullptr, false).message()), HasSubstr("token id 97"));
  const std::vector<int32_t> many = {3, 4, 5, 6, 7};
  EXPECT_TRUE(absl::IsOutOfRange(m->Forward(many, **st, nullptr, false)));
  EXPECT_EQ((*st)->num_tokens(), 0);
  EXPECT_FALSE(m->NewState(0).ok());
  EXPECT_FALSE(m->NewState(5000).ok());
}

TEST_F(DeepseekV32Test, ConfigErrorsNameTheField) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& c) { c["q_lora_rank"] = nullptr; }, "'q_lora_rank'"},
      {[](nlohmann::json& c) { c["n_group"] = 3; }, "'n_group'"},
      {[](nlohmann::json& c) { c["n_group"] = 8; }, "'n_group'"},  // one expert per group
      {[](nlohmann::json& c) { c["topk_group"] = 5; }, "'topk_group'"},
      {[](nlohmann::json& c) { c["num_experts_per_tok"] = 5; }, "'num_experts_per_tok'"},
      {[](nlohmann::json& c) { c["num_key_value_heads"] = 1; }, "'num_key_value_heads'"},
      {[](nlohmann::json& c) { c["qk_rope_head_dim"] = 7; }, "'qk_rope_head_dim'"},
      {[](nlohmann::json& c) { c["index_head_dim"] = 4; }, "'index_head_dim'"},
      {[](nlohmann::json& c) { c["index_topk"] = 0; }, "'index_topk'"},
      {[](nlohmann::json& c) { c["rope_scaling"]["type"] = "longrope"; }, "'rope_scaling.type'"},
      {[](nlohmann::json& c) { c["rope_scaling"].erase("factor"); }, "'rope_scaling.factor'"},
      {[](nlohmann::json& c) { c["scoring_func"] = "softmax"; }, "'scoring_func'"},
      {[](nlohmann::json& c) { c["attention_bias"] = true; }, "'attention_bias'"},
      {[](nlohmann::json& c) { c["hidden_act"] = "gelu"; }, "'hidden_act'"},
      {[](nlohmann::json& c) { c["mlp_layer_types"] = {"dense", "sparse"}; }, "'mlp_layer_types'"},
      {[](nlohmann::json& c) { c["layer_types"] = {"full_attention", "full_attention", "full_attention"}; },
       "'layer_types[0]'"},
      {[](nlohmann::json& c) { c["quantization_config"] = {{"quant_method", "awq"}}; },
       "'quantization_config.quant_method'"},
      {[](nlohmann::json& c) {
         c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128}}};
       },
       "'quantization_config.weight_block_size'"},
      {[](nlohmann::json& c) { c.erase("kv_lora_rank"); }, "'kv_lora_rank'"},
  };
  for (const Case& c : cases) {
    nlohmann::json cfg = TinyConfig();
    c.edit(cfg);
    const Status s = LoadError(cfg);
    EXPECT_FALSE(s.ok()) << c.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field)) << s;
  }
}

TEST_F(DeepseekV32Test, AcceptsTransformersRopeParametersSpelling) {
  // save_pretrained writes rope_parameters (with rope_type) instead of
  // rope_theta + rope_scaling; both spellings describe the same model.
  nlohmann::json cfg = TinyConfig();
  nlohmann::json rope = cfg["rope_scaling"];
  rope.erase("type");
  rope["rope_type"] = "yarn";
  rope["rope_theta"] = 10000.0;
  cfg.erase("rope_scaling");
  cfg.erase("rope_theta");
  cfg["rope_parameters"] = rope;
  cfg["layer_types"] = {"deepseek_sparse_attention", "deepseek_sparse_attention", "deepseek_sparse_attention"};
  cfg["mlp_layer_types"] = {"dense", "sparse", "sparse"};
  const std::string dir = dir_.File("saved");
  fs::create_directories(dir);
  fs::copy_file(model_dir_ + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  auto a = Load(model_dir_);
  auto b = Load(dir);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(20, 97, 4);
  EXPECT_EQ(Run(*a, tokens, {20}), Run(*b, tokens, {20}));
}

TEST_F(DeepseekV32Test, MissingAndMisshapenTensorsAreNamed) {
  const std::string dir = dir_.File("broken");
  nlohmann::json cfg = TinyConfig();
  cfg["index_head_dim"] = 24;  // the stored indexer tensors are 16 wide
  fs::create_directories(dir);
  fs::copy_file(model_dir_ + "/model.safetensors", dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("model.layers.0.self_attn.indexer.wq_b.weight"));

  const std::string dir2 = dir_.File("fp8_no_scale");
  WriteModel(dir2, TinyConfig(), /*fp8=*/true);
  // Drop one scale tensor by rewriting the file without it.
  {
    SafetensorsWriter w;
    // Re-create only what is needed to trigger the error at the first FP8 matrix.
    w.AddF32("model.embed_tokens.weight", DType::kF32, {97, 40}, std::vector<float>(97 * 40, 0.5f));
    w.AddF32("lm_head.weight", DType::kF32, {97, 40}, std::vector<float>(97 * 40, 0.5f));
    w.AddF32("model.norm.weight", DType::kF32, {40}, std::vector<float>(40, 1.f));
    w.AddF32("model.layers.0.input_layernorm.weight", DType::kF32, {40}, std::vector<float>(40, 1.f));
    w.AddF32("model.layers.0.post_attention_layernorm.weight", DType::kF32, {40}, std::vector<float>(40, 1.f));
    w.Add("model.layers.0.self_attn.q_a_proj.weight", DType::kF8E4M3, {20, 40}, std::vector<uint8_t>(800, 0x38));
    ASSERT_TRUE(w.WriteFile(dir2 + "/model.safetensors").ok());
  }
  auto m2 = LoadModel(dir2);
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(std::string(m2.status().message()),
              HasSubstr("model.layers.0.self_attn.q_a_proj.weight_scale_inv"));
}

}  // namespace
}  // namespace strata
