// kimi_linear end to end on the demo model: loading through LoadModel,
// ModelInfo, prefill vs continuation vs single-token decode consistency,
// determinism, argument errors, and config / checkpoint errors naming the
// field or tensor at fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "loader_test_util.h"
#include "model/demo_model.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTestDir;
namespace fs = std::filesystem;

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

// Copies a checkpoint to `dst`, letting `edit` drop (return false) or change
// tensors on the way.
using TensorEdit = std::function<bool(std::string& name, std::vector<int64_t>& shape,
                                      std::vector<uint8_t>& bytes)>;
void RewriteCheckpoint(const std::string& src, const std::string& dst, const TensorEdit& edit) {
  fs::create_directories(dst);
  fs::copy_file(fs::path(src) / "config.json", fs::path(dst) / "config.json",
                fs::copy_options::overwrite_existing);
  auto store = WeightStore::Open(src);
  ASSERT_TRUE(store.ok()) << store.status();
  SafetensorsWriter writer;
  for (const std::string& name : (*store)->Names()) {
    auto v = (*store)->Get(name);
    ASSERT_TRUE(v.ok());
    std::vector<int64_t> shape = v->shape;
    const auto* p = static_cast<const uint8_t*>(v->data);
    std::vector<uint8_t> bytes(p, p + v->bytes);
    std::string out_name = name;
    if (!edit(out_name, shape, bytes)) continue;
    writer.Add(out_name, v->dtype, shape, std::move(bytes));
  }
  ASSERT_TRUE(writer.WriteFile((fs::path(dst) / "model.safetensors").string()).ok());
}

double RowRelError(const float* a, const float* b, int64_t n) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return err / std::max(scale, 1e-30);
}

class KimiLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.File("demo");
    ASSERT_TRUE(WriteDemoKimiLinearModel(model_dir_).ok());
  }
  std::unique_ptr<Model> Load(const std::string& dir) {
    auto m = LoadModel(dir);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // All-position logits of one forward over `tokens` from an empty state.
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
  // Writes the demo config edited by `edit` into a copy of the model.
  std::string WithConfig(const std::function<void(nlohmann::json&)>& edit) {
    const std::string dir = dir_.File("edited" + std::to_string(edits_++));
    fs::create_directories(dir);
    fs::copy_file(fs::path(model_dir_) / "model.safetensors", fs::path(dir) / "model.safetensors");
    nlohmann::json j = ReadJson(model_dir_ + "/config.json");
    edit(j);
    WriteJson(dir + "/config.json", j);
    return dir;
  }

  ScopedTestDir dir_;
  std::string model_dir_;
  int edits_ = 0;
};

TEST_F(KimiLinearTest, LoadsWithCorrectInfo) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const ModelInfo& info = model->info();
  EXPECT_EQ(info.architecture, "kimi_linear");
  EXPECT_EQ(info.num_layers, 4);
  EXPECT_THAT(info.layer_kinds,
              ::testing::ElementsAre("kda+dense", "kda+moe", "mla+moe", "kda+moe"));
  EXPECT_EQ(info.vocab_size, 512);
  EXPECT_EQ(info.hidden_size, 128);
  EXPECT_EQ(info.max_context, 8192);
  EXPECT_EQ(info.bos_token_id, 1);
  EXPECT_EQ(info.eos_token_id, 2);
  // One MLA layer caches r + dr = 64 + 16 fp32 values per token.
  EXPECT_EQ(info.state_bytes_per_token, 80u * 4u);
  // Three KDA layers: S [4, 32, 32] + three conv windows [3, 4·32], fp32.
  EXPECT_EQ(info.state_bytes_per_sequence, 3u * (4u * 32 * 32 + 3u * 3 * 128) * 4u);
  auto store = WeightStore::Open(model_dir_);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(info.num_parameters, (*store)->TotalElements());
  EXPECT_EQ(info.parameter_bytes, (*store)->TotalBytes());
  EXPECT_GT(info.num_parameters, 0);

  auto st = model->NewState(100);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*st)->num_tokens(), 0);
}

TEST_F(KimiLinearTest, DecodeAndContinuationMatchOneForward) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const int64_t T = 150, V = model->info().vocab_size;
  const auto tokens = RandomTokens(T, static_cast<int32_t>(V), 5);
  const auto full = FullLogits(*model, tokens);
  // The logits must depend on the context, all the way back to the first
  // token (else the state hand-off checks below would be vacuous).
  {
    std::vector<int32_t> alone = {tokens[T - 1]};
    const auto no_context = FullLogits(*model, alone);
    EXPECT_GT(RowRelError(no_context.data(), full.data() + (T - 1) * V, V), 1e-2);
    std::vector<int32_t> changed = tokens;
    changed[0] = changed[0] == 3 ? 4 : 3;
    const auto other = FullLogits(*model, changed);
    EXPECT_GT(RowRelError(other.data() + (T - 1) * V, full.data() + (T - 1) * V, V), 1e-2);
  }

  for (int64_t n : {1, 63, 64, 65, 149}) {
    SCOPED_TRACE("prefill " + std::to_string(n));
    auto st = model->NewState(T);
    ASSERT_TRUE(st.ok());
    std::vector<float> pre(static_cast<size_t>(n * V));
    ASSERT_TRUE(model->Forward(std::span(tokens.data(), n), **st, pre.data(), true).ok());
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_LE(RowRelError(pre.data() + t * V, full.data() + t * V, V), 1e-5)
          << "prefill row " << t;
    }
    std::vector<float> row(static_cast<size_t>(V));
    for (int64_t t = n; t < T; ++t) {
      ASSERT_TRUE(model->Forward(std::span(tokens.data() + t, 1), **st, row.data(), false).ok());
      ASSERT_LE(RowRelError(row.data(), full.data() + t * V, V), 1e-5) << "decode row " << t;
    }
    EXPECT_EQ((*st)->num_tokens(), T);
  }
  // Multi-token continuation (chunked KDA from a carried state, MLA prefill
  // against an existing cache), including a one-token first piece.
  for (int64_t n : {1, 40, 64, 100}) {
    SCOPED_TRACE("continuation after " + std::to_string(n));
    auto st = model->NewState(T);
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(model->Forward(std::span(tokens.data(), n), **st, nullptr, false).ok());
    std::vector<float> rest(static_cast<size_t>((T - n) * V));
    ASSERT_TRUE(model->Forward(std::span(tokens.data() + n, T - n), **st, rest.data(), true).ok());
    for (int64_t t = n; t < T; ++t) {
      ASSERT_LE(RowRelError(rest.data() + (t - n) * V, full.data() + t * V, V), 1e-5)
          << "row " << t;
    }
  }
}

TEST_F(KimiLinearTest, DeterministicAcrossStatesClonesAndThreads) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const int64_t V = model->info().vocab_size;
  const auto tokens = RandomTokens(90, static_cast<int32_t>(V), 9);
  const auto a = FullLogits(*model, tokens);
  const auto b = FullLogits(*model, tokens);
  EXPECT_EQ(a, b);

  // Clone mid-sequence: both copies continue identically; Reset starts over.
  auto st = model->NewState(200);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(model->Forward(std::span(tokens.data(), 50), **st, nullptr, false).ok());
  auto clone = (*st)->Clone();
  EXPECT_EQ(clone->num_tokens(), 50);
  std::vector<float> x(V), y(V);
  ASSERT_TRUE(model->Forward(std::span(tokens.data() + 50, 1), **st, x.data(), false).ok());
  ASSERT_TRUE(model->Forward(std::span(tokens.data() + 50, 1), *clone, y.data(), false).ok());
  EXPECT_EQ(x, y);
  EXPECT_LE(RowRelError(x.data(), a.data() + 50 * V, V), 1e-5);
  (*st)->Reset();
  EXPECT_EQ((*st)->num_tokens(), 0);
  std::vector<float> again(tokens.size() * V);
  ASSERT_TRUE(model->Forward(tokens, **st, again.data(), true).ok());
  EXPECT_EQ(again, a);

  // A different pool size gives the same logits up to rounding.
  ThreadPool pool(3);
  LoadOptions opts;
  opts.pool = &pool;
  auto m3 = LoadModel(model_dir_, opts);
  ASSERT_TRUE(m3.ok());
  const auto c = FullLogits(**m3, tokens);
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_LE(RowRelError(c.data() + t * V, a.data() + t * V, V), 1e-5);
  }
}

TEST_F(KimiLinearTest, ArgumentErrorsLeaveStateUnchanged) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const int64_t V = model->info().vocab_size;
  auto st = model->NewState(10);
  ASSERT_TRUE(st.ok());
  const std::vector<int32_t> ok_tokens = {5, 6, 7};
  ASSERT_TRUE(model->Forward(ok_tokens, **st, nullptr, false).ok());
  const std::vector<int32_t> bad = {8, static_cast<int32_t>(V)};
  Status s = model->Forward(bad, **st, nullptr, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token id"));
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(model->Forward(negative, **st, nullptr, false).ok());
  const std::vector<int32_t> too_many(8, 9);
  s = model->Forward(too_many, **st, nullptr, false);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("capacity"));
  EXPECT_EQ((*st)->num_tokens(), 3);
  // The state still continues exactly like an untouched one.
  std::vector<float> x(V), y(V);
  ASSERT_TRUE(model->Forward(std::vector<int32_t>{11}, **st, x.data(), false).ok());
  auto fresh = model->NewState(10);
  ASSERT_TRUE(model->Forward(ok_tokens, **fresh, nullptr, false).ok());
  ASSERT_TRUE(model->Forward(std::vector<int32_t>{11}, **fresh, y.data(), false).ok());
  EXPECT_EQ(x, y);
  EXPECT_FALSE(model->NewState(0).ok());
}

TEST_F(KimiLinearTest, UnknownModelTypeListsSupported) {
  const std::string dir = WithConfig([](nlohmann::json& j) { j["model_type"] = "llama_next"; });
  const Status s = LoadError(dir);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model_type"));
  EXPECT_THAT(s.message(), HasSubstr("llama_next"));
  EXPECT_THAT(s.message(), HasSubstr("kimi_linear"));
}

TEST_F(KimiLinearTest, ConfigErrorsNameTheField) {
  struct Case {
    const char* expect;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Case> cases = {
      {"hidden_size", [](nlohmann::json& j) { j.erase("hidden_size"); }},
      {"num_hidden_layers", [](nlohmann::json& j) { j["num_hidden_layers"] = -4; }},
      {"full_attn_layers",
       [](nlohmann::json& j) {
         j["linear_attn_config"]["full_attn_layers"] = {1, 3};
       }},
      {"is in neither",
       [](nlohmann::json& j) {
         j["linear_attn_config"]["kda_layers"] = {1, 2};
       }},
      {"out of range",
       [](nlohmann::json& j) { j["linear_attn_config"]["full_attn_layers"] = {5}; }},
      {"linear_attn_config.num_heads",
       [](nlohmann::json& j) { j["linear_attn_config"].erase("num_heads"); }},
      {"num_experts_per_token", [](nlohmann::json& j) { j["num_experts_per_token"] = 7; }},
      {"n_routed_experts", [](nlohmann::json& j) { j["n_routed_experts"] = 5; }},
      {"num_experts", [](nlohmann::json& j) { j.erase("num_experts"); }},
      {"mla_use_nope", [](nlohmann::json& j) { j["mla_use_nope"] = false; }},
      {"q_lora_rank", [](nlohmann::json& j) { j["q_lora_rank"] = 32; }},
      {"kv_lora_rank", [](nlohmann::json& j) { j.erase("kv_lora_rank"); }},
      {"layer_types",
       [](nlohmann::json& j) {
         j["layer_types"] = {"linear_attention", "full_attention", "linear_attention",
                             "linear_attention"};
       }},
      {"mlp_layer_types",
       [](nlohmann::json& j) {
         j["mlp_layer_types"] = {"dense", "dense", "sparse", "sparse"};
       }},
  };
  for (const Case& c : cases) {
    const Status s = LoadError(WithConfig(c.edit));
    EXPECT_FALSE(s.ok()) << c.expect;
    EXPECT_THAT(s.message(), HasSubstr(c.expect));
    EXPECT_THAT(s.message(), HasSubstr("config.json"));
  }
}

TEST_F(KimiLinearTest, AcceptsTransformersSavedConfig) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const auto tokens = RandomTokens(20, 512, 3);
  const auto want = FullLogits(*model, tokens);
  // What save_pretrained adds: alias spellings, derived lists, rope fields.
  const std::string dir = WithConfig([](nlohmann::json& j) {
    j["num_local_experts"] = j["num_experts"];
    j["n_routed_experts"] = j["num_experts"];
    j["num_experts_per_tok"] = j["num_experts_per_token"];
    j["n_shared_experts"] = j["num_shared_experts"];
    j["norm_topk_prob"] = true;
    j["n_group"] = 1;
    j["layer_types"] = {"linear_attention", "linear_attention", "full_attention",
                        "linear_attention"};
    j["mlp_layer_types"] = {"dense", "sparse", "sparse", "sparse"};
    j["rope_theta"] = 10000.0;
    j["rope_scaling"] = nullptr;
    j["dtype"] = "bfloat16";
    j["max_position_embeddings"] = 8192;
    j["use_cache"] = true;
  });
  auto m2 = Load(dir);
  ASSERT_NE(m2, nullptr);
  EXPECT_EQ(FullLogits(*m2, tokens), want);
}

TEST_F(KimiLinearTest, AcceptsDenseMlpUnderBlockSparseMoeName) {
  auto model = Load(model_dir_);
  ASSERT_NE(model, nullptr);
  const auto tokens = RandomTokens(20, 512, 4);
  const std::string dir = dir_.File("renamed");
  RewriteCheckpoint(model_dir_, dir,
                    [](std::string& name, std::vector<int64_t>&, std::vector<uint8_t>&) {
                      const std::string from = "model.layers.0.mlp.";
                      if (name.rfind(from, 0) == 0)
                        name = "model.layers.0.block_sparse_moe." + name.substr(from.size());
                      return true;
                    });
  auto m2 = Load(dir);
  ASSERT_NE(m2, nullptr);
  EXPECT_EQ(FullLogits(*m2, tokens), FullLogits(*model, tokens));
}

TEST_F(KimiLinearTest, MissingTensorIsNamed) {
  const std::string name = "model.layers.1.self_attn.f_b_proj.weight";
  const std::string dir = dir_.File("missing");
  RewriteCheckpoint(
      model_dir_, dir,
      [&](std::string& n, std::vector<int64_t>&, std::vector<uint8_t>&) { return n != name; });
  const Status s = LoadError(dir);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(name));
}

TEST_F(KimiLinearTest, WrongShapeIsNamed) {
  const std::string name = "model.layers.3.block_sparse_moe.experts.4.w2.weight";
  const std::string dir = dir_.File("shape");
  RewriteCheckpoint(model_dir_, dir,
                    [&](std::string& n, std::vector<int64_t>& shape, std::vector<uint8_t>&) {
                      if (n == name) std::swap(shape[0], shape[1]);
                      return true;
                    });
  const Status s = LoadError(dir);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(name));
  EXPECT_THAT(s.message(), HasSubstr("shape"));
}

TEST_F(KimiLinearTest, ProgressCanCancel) {
  LoadOptions opts;
  float last = 0.f;
  opts.progress = [&](float f) {
    last = f;
    return f < 0.92f;
  };
  auto m = LoadModel(model_dir_, opts);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
  EXPECT_GE(last, 0.92f);
  bool reached_end = false;
  opts.progress = [&](float f) {
    reached_end = reached_end || f >= 1.f;
    return true;
  };
  EXPECT_TRUE(LoadModel(model_dir_, opts).ok());
  EXPECT_TRUE(reached_end);
}

}  // namespace
}  // namespace strata
