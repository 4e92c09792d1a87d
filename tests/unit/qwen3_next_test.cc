// qwen3_next end to end on the committed fixture checkpoint
// tests/data/qwen3next_a (a small random model): loading through LoadModel,
// ModelInfo, both config spellings, prefill vs continuation vs single-token
// decode consistency, clones and thread counts, argument errors, and config /
// checkpoint errors naming the field or tensor at fault. Parity with
// transformers is tests/model/qwen3next_parity_test.cc.
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

#include "base/thread_pool.h"
#include "loader_test_util.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTestDir;
namespace fs = std::filesystem;

const std::string kFixture = std::string(STRATA_TEST_DATA_DIR) + "/qwen3next_a";

std::vector<int32_t> RandomTokens(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

void WriteJson(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path, std::ios::trunc);
  f << j.dump(2);
}

double RowRelError(const float* a, const float* b, int64_t n) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return err / std::max(scale, 1e-30);
}

class Qwen3NextTest : public ::testing::Test {
 protected:
  std::unique_ptr<Model> Load(const std::string& dir, const LoadOptions& options = {}) {
    auto m = LoadModel(dir, options);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::vector<float> FullLogits(const Model& m, const std::vector<int32_t>& tokens) {
    auto st = m.NewState(static_cast<int64_t>(tokens.size()) + 8);
    EXPECT_TRUE(st.ok());
    std::vector<float> out(tokens.size() * static_cast<size_t>(m.info().vocab_size));
    EXPECT_TRUE(m.Forward(tokens, **st, out.data(), true).ok());
    return out;
  }
  Status LoadError(const std::string& dir) {
    auto m = LoadModel(dir);
    return m.ok() ? OkStatus() : m.status();
  }
  // A copy of the fixture with its config edited by `edit`.
  std::string WithConfig(const std::function<void(nlohmann::json&)>& edit) {
    const std::string dir = dir_.File("edited" + std::to_string(edits_++));
    fs::create_directories(dir);
    fs::copy_file(kFixture + "/model.safetensors", fs::path(dir) / "model.safetensors");
    nlohmann::json j = ReadJson(kFixture + "/config.json");
    edit(j);
    WriteJson(dir + "/config.json", j);
    return dir;
  }
  // A copy of the fixture whose tensors pass through `edit` (false drops one).
  std::string WithTensors(
      const std::function<bool(std::string&, std::vector<int64_t>&, std::vector<uint8_t>&)>& edit) {
    const std::string dir = dir_.File("tensors" + std::to_string(edits_++));
    fs::create_directories(dir);
    fs::copy_file(kFixture + "/config.json", fs::path(dir) / "config.json");
    auto store = WeightStore::Open(kFixture);
    EXPECT_TRUE(store.ok()) << store.status();
    SafetensorsWriter writer;
    for (const std::string& name : (*store)->Names()) {
      auto v = (*store)->Get(name);
      EXPECT_TRUE(v.ok());
      std::vector<int64_t> shape = v->shape;
      const auto* p = static_cast<const uint8_t*>(v->data);
      std::vector<uint8_t> bytes(p, p + v->bytes);
      std::string out_name = name;
      if (!edit(out_name, shape, bytes)) continue;
      writer.Add(out_name, v->dtype, shape, std::move(bytes));
    }
    EXPECT_TRUE(writer.WriteFile((fs::path(dir) / "model.safetensors").string()).ok());
    return dir;
  }

  ScopedTestDir dir_;
  int edits_ = 0;
};

TEST_F(Qwen3NextTest, LoadsWithCorrectInfo) {
  auto model = Load(kFixture);
  ASSERT_NE(model, nullptr);
  const ModelInfo& info = model->info();
  EXPECT_EQ(info.architecture, "qwen3_next");
  EXPECT_EQ(info.device, "cpu");
  EXPECT_EQ(info.num_layers, 4);
  // full_attention_interval 2; mlp_only_layers [2].
  EXPECT_THAT(info.layer_kinds,
              ::testing::ElementsAre("gdn+moe", "attention+moe", "gdn+dense", "attention+moe"));
  EXPECT_EQ(info.vocab_size, 320);
  EXPECT_EQ(info.hidden_size, 96);
  EXPECT_EQ(info.max_context, 4096);
  EXPECT_EQ(info.bos_token_id, 1);
  EXPECT_EQ(info.eos_token_id, 2);
  // Two attention layers cache K and V: 2 · 3 KV heads · 32 fp32 values each.
  EXPECT_EQ(info.state_bytes_per_token, 2u * 2u * 3u * 32u * 4u);
  // Two GDN layers: S [6, 32, 32] and a conv window [3, 2·3·32 + 6·32], fp32.
  EXPECT_EQ(info.state_bytes_per_sequence, 2u * (6u * 32 * 32 + 3u * 384) * 4u);
  auto store = WeightStore::Open(kFixture);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(info.num_parameters, (*store)->TotalElements());
  EXPECT_EQ(info.parameter_bytes, (*store)->TotalBytes());
}

// The published spelling (full_attention_interval, top-level rope_theta and
// partial_rotary_factor) and transformers' save_pretrained spelling
// (layer_types, rope_parameters) describe the same model.
TEST_F(Qwen3NextTest, CheckpointAndSavedConfigSpellingsAgree) {
  auto model = Load(kFixture);
  ASSERT_NE(model, nullptr);
  const auto tokens = RandomTokens(70, 320, 3);
  const auto want = FullLogits(*model, tokens);
  const std::string dir = WithConfig([](nlohmann::json& j) {
    j.erase("full_attention_interval");
    j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
    j["rope_parameters"] = {{"rope_theta", j["rope_theta"]},
                            {"partial_rotary_factor", j["partial_rotary_factor"]},
                            {"rope_type", "default"}};
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j.erase("partial_rotary_factor");
    j["dtype"] = "bfloat16";
    j["transformers_version"] = "5.17.0";
  });
  auto saved = Load(dir);
  ASSERT_NE(saved, nullptr);
  EXPECT_EQ(FullLogits(*saved, tokens), want);
  // Changing the RoPE base changes the logits (the field is read).
  const std::string other = WithConfig([](nlohmann::json& j) { j["rope_theta"] = 500.0; });
  auto moved = Load(other);
  ASSERT_NE(moved, nullptr);
  EXPECT_GT(RowRelError(FullLogits(*moved, tokens).data() + 69 * 320, want.data() + 69 * 320, 320),
            1e-4);
}

TEST_F(Qwen3NextTest, DecodeAndContinuationMatchOneForward) {
  auto model = Load(kFixture);
  ASSERT_NE(model, nullptr);
  const int64_t T = 150, V = model->info().vocab_size;
  const auto tokens = RandomTokens(T, static_cast<int32_t>(V), 5);
  const auto full = FullLogits(*model, tokens);
  // The logits depend on the context all the way back to the first token.
  {
    std::vector<int32_t> changed = tokens;
    changed[0] = changed[0] == 3 ? 4 : 3;
    const auto other = FullLogits(*model, changed);
    EXPECT_GT(RowRelError(other.data() + (T - 1) * V, full.data() + (T - 1) * V, V), 1e-3);
  }
  for (int64_t n : {1, 63, 64, 65, 149}) {
    SCOPED_TRACE("prefill " + std::to_string(n));
    auto st = model->NewState(T);
    ASSERT_TRUE(st.ok());
    std::vector<float> pre(static_cast<size_t>(n * V));
    ASSERT_TRUE(model->Forward(std::span(tokens.data(), n), **st, pre.data(), true).ok());
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_LE(RowRelError(pre.data() + t * V, full.data() + t * V, V), 1e-5) << "row " << t;
    }
    std::vector<float> row(static_cast<size_t>(V));
    for (int64_t t = n; t < T; ++t) {
      ASSERT_TRUE(model->Forward(std::span(tokens.data() + t, 1), **st, row.data(), false).ok());
      ASSERT_LE(RowRelError(row.data(), full.data() + t * V, V), 1e-5) << "decode row " << t;
    }
    EXPECT_EQ((*st)->num_tokens(), T);
  }
}

TEST_F(Qwen3NextTest, DeterministicAcrossClonesResetsAndThreads) {
  auto model = Load(kFixture);
  ASSERT_NE(model, nullptr);
  const int64_t V = model->info().vocab_size;
  const auto tokens = RandomTokens(90, static_cast<int32_t>(V), 9);
  const auto a = FullLogits(*model, tokens);
  EXPECT_EQ(FullLogits(*model, tokens), a);
  auto st = model->NewState(200);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(model->Forward(std::span(tokens.data(), 50), **st, nullptr, false).ok());
  auto clone = (*st)->Clone();
  EXPECT_EQ(clone->num_tokens(), 50);
  std::vector<float> x(V), y(V);
  ASSERT_TRUE(model->Forward(std::span(tokens.data() + 50, 1), **st, x.data(), false).ok());
  ASSERT_TRUE(model->Forward(std::span(tokens.data() + 50, 1), *clone, y.data(), false).ok());
  EXPECT_EQ(x, y);
  (*st)->Reset();
  EXPECT_EQ((*st)->num_tokens(), 0);
  std::vector<float> again(tokens.size() * V);
  ASSERT_TRUE(model->Forward(tokens, **st, again.data(), true).ok());
  EXPECT_EQ(again, a);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    LoadOptions opts;
    opts.pool = &pool;
    auto m = Load(kFixture, opts);
    ASSERT_NE(m, nullptr);
    const auto c = FullLogits(*m, tokens);
    for (size_t t = 0; t < tokens.size(); ++t) {
      ASSERT_LE(RowRelError(c.data() + t * V, a.data() + t * V, V), 1e-5) << threads << " threads";
    }
  }
}

TEST_F(Qwen3NextTest, ArgumentErrorsLeaveStateUnchanged) {
  auto model = Load(kFixture);
  ASSERT_NE(model, nullptr);
  const int64_t V = model->info().vocab_size;
  auto st = model->NewState(10);
  ASSERT_TRUE(st.ok());
  const std::vector<int32_t> ok_tokens = {5, 6, 7};
  ASSERT_TRUE(model->Forward(ok_tokens, **st, nullptr, false).ok());
  Status s = model->Forward(std::vector<int32_t>{8, static_cast<int32_t>(V)}, **st, nullptr, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token id"));
  s = model->Forward(std::vector<int32_t>(8, 9), **st, nullptr, false);
  EXPECT_THAT(s.message(), HasSubstr("capacity"));
  EXPECT_EQ((*st)->num_tokens(), 3);
  std::vector<float> x(V), y(V);
  ASSERT_TRUE(model->Forward(std::vector<int32_t>{11}, **st, x.data(), false).ok());
  auto fresh = model->NewState(10);
  ASSERT_TRUE(model->Forward(ok_tokens, **fresh, nullptr, false).ok());
  ASSERT_TRUE(model->Forward(std::vector<int32_t>{11}, **fresh, y.data(), false).ok());
  EXPECT_EQ(x, y);
  EXPECT_FALSE(model->NewState(0).ok());
  EXPECT_FALSE(model->NewState(5000).ok());  // beyond max_position_embeddings
  // A state of another model instance is refused.
  auto other = Load(kFixture);
  auto foreign = other->NewState(10);
  ASSERT_TRUE(foreign.ok());
  EXPECT_FALSE(model->Forward(ok_tokens, **foreign, nullptr, false).ok());
}

TEST_F(Qwen3NextTest, UnknownModelTypeListsQwen3Next) {
  const Status s = LoadError(WithConfig([](nlohmann::json& j) { j["model_type"] = "qwen4"; }));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("qwen3_next"));
}

TEST_F(Qwen3NextTest, ConfigErrorsNameTheField) {
  struct Case {
    const char* expect;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      {"hidden_size", [](nlohmann::json& j) { j.erase("hidden_size"); }},
      {"num_hidden_layers", [](nlohmann::json& j) { j["num_hidden_layers"] = -4; }},
      {"linear_num_value_heads", [](nlohmann::json& j) { j["linear_num_value_heads"] = 4; }},
      {"linear_key_head_dim", [](nlohmann::json& j) { j.erase("linear_key_head_dim"); }},
      {"num_key_value_heads", [](nlohmann::json& j) { j["num_key_value_heads"] = 4; }},
      {"head_dim", [](nlohmann::json& j) { j.erase("head_dim"); }},
      {"full_attention_interval", [](nlohmann::json& j) { j["full_attention_interval"] = 0; }},
      {"layer_types", [](nlohmann::json& j) { j["layer_types"] = {"linear_attention"}; }},
      {"contradicts full_attention_interval",
       [](nlohmann::json& j) {
         j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention",
                             "full_attention"};
       }},
      {"layer_types[1]",
       [](nlohmann::json& j) {
         j.erase("full_attention_interval");
         j["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention",
                             "full_attention"};
       }},
      {"mlp_only_layers[0]", [](nlohmann::json& j) { j["mlp_only_layers"] = {7}; }},
      {"decoder_sparse_step", [](nlohmann::json& j) { j["decoder_sparse_step"] = 0; }},
      {"num_experts", [](nlohmann::json& j) { j.erase("num_experts"); }},
      {"num_experts_per_tok", [](nlohmann::json& j) { j["num_experts_per_tok"] = 9; }},
      {"shared_expert_intermediate_size",
       [](nlohmann::json& j) { j.erase("shared_expert_intermediate_size"); }},
      {"partial_rotary_factor", [](nlohmann::json& j) { j["partial_rotary_factor"] = 0.1; }},
      {"partial_rotary_factor", [](nlohmann::json& j) { j["partial_rotary_factor"] = 1.5; }},
      {"rope_parameters.rope_type",
       [](nlohmann::json& j) {
         j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       }},
      {"rope_theta",
       [](nlohmann::json& j) {
         j["rope_parameters"] = {{"rope_theta", 5.0}, {"rope_type", "default"}};
       }},
      {"hidden_act", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; }},
      {"attention_bias", [](nlohmann::json& j) { j["attention_bias"] = true; }},
      {"rms_norm_eps", [](nlohmann::json& j) { j["rms_norm_eps"] = 0; }},
  };
  for (const Case& c : cases) {
    const Status s = LoadError(WithConfig(c.edit));
    EXPECT_FALSE(s.ok()) << c.expect;
    EXPECT_THAT(s.message(), HasSubstr(c.expect));
    EXPECT_THAT(s.message(), HasSubstr("config.json"));
  }
}

TEST_F(Qwen3NextTest, MissingOrMisshapenTensorsAreNamed) {
  Status s =
      LoadError(WithTensors([](std::string& name, std::vector<int64_t>&, std::vector<uint8_t>&) {
        return name != "model.layers.2.linear_attn.in_proj_ba.weight";
      }));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model.layers.2.linear_attn.in_proj_ba.weight"));
  s = LoadError(WithTensors([](std::string& name, std::vector<int64_t>&, std::vector<uint8_t>&) {
    return name != "model.layers.3.mlp.experts.7.down_proj.weight";
  }));
  EXPECT_THAT(s.message(), HasSubstr("model.layers.3.mlp.experts.7.down_proj.weight"));
  s = LoadError(WithTensors([](std::string& name, std::vector<int64_t>&, std::vector<uint8_t>&) {
    return name != "model.layers.1.mlp.shared_expert_gate.weight";
  }));
  EXPECT_THAT(s.message(), HasSubstr("shared_expert_gate"));
  // q_norm stored as [2, 16] instead of [32].
  s = LoadError(
      WithTensors([](std::string& name, std::vector<int64_t>& shape, std::vector<uint8_t>&) {
        if (name == "model.layers.1.self_attn.q_norm.weight") shape = {2, 16};
        return true;
      }));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model.layers.1.self_attn.q_norm.weight"));
}

}  // namespace
}  // namespace strata
