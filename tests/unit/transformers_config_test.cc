// Configs as transformers writes them (tests/data/configs, made by
// tools/reference/make_config_fixtures.py): every architecture's config.json
// in the forms transformers 5.17's save_pretrained, transformers 4.57 and the
// published checkpoints write parses, and to the values transformers 5.17
// reads out of the same file (expected.json, written by the script from the
// config object transformers built). Explicit contradictions of what
// transformers runs are refused naming the file and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/rope_yarn.h"
#include "loader_test_util.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/qwen3_next_config.h"
#include "model/models/strata_hybrid_config.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using testing_util::ScopedTestDir;

const std::string kConfigs = std::string(STRATA_TEST_DATA_DIR) + "/configs";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

void WriteJson(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

// The fixture directories whose name contains `part` (all for "").
std::vector<std::string> ConfigDirs(const std::string& part = "") {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kConfigs)) {
    const std::string name = e.path().filename().string();
    if (fs::exists(e.path() / "config.json") && name.find(part) != std::string::npos) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

// The parsed config as a JSON object keyed like expected.json. The lambdas
// take whichever config structs share the fields.
StatusOr<json> ParseToJson(const ConfigReader& r) {
  STRATA_ASSIGN_OR_RETURN(std::string model_type, r.GetString("model_type"));
  json a;
  auto common = [&a](const auto& k) {
    a["vocab_size"] = k.vocab_size;
    a["hidden_size"] = k.hidden_size;
    a["num_layers"] = k.num_layers;
    a["rms_norm_eps"] = k.rms_norm_eps;
    a["tie_word_embeddings"] = k.tie_word_embeddings;
    a["max_context"] = k.max_context;
    a["bos_token_id"] = k.bos_token_id;
    a["eos_token_id"] = k.eos_token_id;
    a["is_moe"] = k.is_moe;
    a["intermediate_size"] = k.intermediate_size;
    a["moe_intermediate_size"] = k.moe_intermediate_size;
    a["num_experts"] = k.num_experts;
    a["experts_per_token"] = k.experts_per_token;
  };
  auto kda = [&a](const auto& k) {
    a["kda_heads"] = k.kda_heads;
    a["kda_head_dim"] = k.kda_head_dim;
    a["conv_kernel"] = k.conv_kernel;
  };
  auto mla = [&a](const auto& k) {
    a["kv_lora_rank"] = k.kv_lora_rank;
    a["qk_nope_dim"] = k.qk_nope_dim;
    a["qk_rope_dim"] = k.qk_rope_dim;
    a["v_head_dim"] = k.v_head_dim;
  };
  // MLA with a low-rank query, the lightning indexer and group-limited MoE.
  auto dsa = [&a](const auto& k) {
    a["num_heads"] = k.num_heads;
    a["q_lora_rank"] = k.q_lora_rank;
    a["index_heads"] = k.index_heads;
    a["index_head_dim"] = k.index_head_dim;
    a["index_topk"] = k.index_topk;
    a["num_shared_experts"] = k.num_shared_experts;
    a["n_group"] = k.n_group;
    a["topk_group"] = k.topk_group;
    a["norm_topk_prob"] = k.norm_topk_prob;
    a["routed_scaling_factor"] = k.routed_scaling_factor;
  };
  if (model_type == "kimi_linear") {
    STRATA_ASSIGN_OR_RETURN(KimiLinearConfig k, ParseKimiLinearConfig(r));
    common(k);
    kda(k);
    mla(k);
    a["is_mla"] = k.is_mla;
    a["mla_heads"] = k.mla_heads;
    a["num_shared_experts"] = k.num_shared_experts;
    a["moe_renormalize"] = k.moe_renormalize;
    a["routed_scaling_factor"] = k.routed_scaling_factor;
  } else if (model_type == "deepseek_v32") {
    STRATA_ASSIGN_OR_RETURN(DeepseekV32Config k, ParseDeepseekV32Config(r));
    common(k);
    mla(k);
    dsa(k);
    a["rope_type"] = k.rope.type == cpu::RopeType::kYarn ? "yarn" : "default";
    a["rope_theta"] = k.rope.theta;
    a["softmax_scale"] = k.softmax_scale;
    if (k.rope.type == cpu::RopeType::kYarn) {
      a["rope_factor"] = k.rope.factor;
      a["rope_original_max_position"] = k.rope.original_max_position;
      a["rope_beta_fast"] = k.rope.beta_fast;
      a["rope_beta_slow"] = k.rope.beta_slow;
      a["rope_mscale"] = k.rope.mscale;
      a["rope_mscale_all_dim"] = k.rope.mscale_all_dim;
      a["rope_attention_factor"] = cpu::RopeAttentionFactor(k.rope);
    }
    a["fp8"] = k.fp8;
    if (k.fp8) a["fp8_block"] = {k.fp8_block.rows, k.fp8_block.cols};
  } else if (model_type == "qwen3_next") {
    STRATA_ASSIGN_OR_RETURN(Qwen3NextConfig k, ParseQwen3NextConfig(r));
    common(k);
    a["is_attention"] = k.is_attention;
    a["linear_key_heads"] = k.linear_key_heads;
    a["linear_value_heads"] = k.linear_value_heads;
    a["linear_key_dim"] = k.linear_key_dim;
    a["linear_value_dim"] = k.linear_value_dim;
    a["conv_kernel"] = k.conv_kernel;
    a["num_heads"] = k.num_heads;
    a["num_kv_heads"] = k.num_kv_heads;
    a["head_dim"] = k.head_dim;
    a["rotary_dim"] = k.rotary_dim;
    a["rope_theta"] = k.rope_theta;
    a["shared_intermediate_size"] = k.shared_intermediate_size;
    a["norm_topk_prob"] = k.norm_topk_prob;
  } else if (model_type == "strata_hybrid") {
    STRATA_ASSIGN_OR_RETURN(StrataHybridConfig k, ParseStrataHybridConfig(r));
    common(k);
    kda(k);
    mla(k);
    dsa(k);
    a["is_dsa"] = k.is_dsa;
    a["rope_theta"] = k.rope_theta;
  } else {
    return r.FieldError("model_type", "not an architecture this test knows");
  }
  return a;
}

// Every value of expected.json (but the bookkeeping keys) against the parsed
// one. A token id transformers leaves unset (null) is -1 in Strata.
void ExpectMatches(const json& want, const json& got) {
  for (const auto& [key, w] : want.items()) {
    if (key == "model_type" || key == "reference") continue;
    SCOPED_TRACE(key);
    ASSERT_TRUE(got.contains(key)) << "Strata does not report '" << key << "'";
    const json& g = got.at(key);
    if (w.is_null()) {
      EXPECT_EQ(g, -1);
    } else if (w.is_number_float() || g.is_number_float()) {
      ASSERT_TRUE(g.is_number()) << g;
      const double wd = w.get<double>(), gd = g.get<double>();
      EXPECT_NEAR(gd, wd, 1e-12 * std::max(1.0, std::abs(wd)));
    } else {
      EXPECT_EQ(g, w);
    }
  }
}

StatusOr<json> ParseFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader r, ConfigReader::FromFile(path));
  return ParseToJson(r);
}

StatusOr<json> ParseJson(const json& config) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader r,
                          ConfigReader::FromString("edited/config.json", config.dump()));
  return ParseToJson(r);
}

TEST(TransformersConfigs, EveryArchitectureHasEachForm) {
  const std::vector<std::string> dirs = ConfigDirs();
  const std::set<std::string> have(dirs.begin(), dirs.end());
  for (const char* arch : {"kimi_linear", "deepseek_v32", "qwen3_next"}) {
    for (const char* form : {"v5", "v5_derived", "legacy", "hub"}) {
      EXPECT_TRUE(have.count(absl::StrCat(arch, "_", form))) << arch << "_" << form;
    }
  }
  for (const char* name :
       {"qwen3_next_v4_57", "kimi_linear_from_kimi_a", "deepseek_v32_from_dsv32_a",
        "qwen3_next_from_qwen3next_a", "strata_hybrid_demo", "strata_hybrid_minimal"}) {
    EXPECT_TRUE(have.count(name)) << name;
  }
}

class TransformersConfigTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return kConfigs + "/" + GetParam(); }
};

TEST_P(TransformersConfigTest, ParsesToWhatTransformersReads) {
  const json want = ReadJson(Dir() + "/expected.json");
  StatusOr<json> got = ParseFile(Dir() + "/config.json");
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectMatches(want, *got);
}

// Config-only load through LoadModel: kimi_linear is the architecture with a
// host dummy-weights writer, so the whole path (config, tensor specs, the CPU
// executor) runs on a config with no checkpoint.
using KimiDummyLoadTest = TransformersConfigTest;

TEST_P(KimiDummyLoadTest, LoadsWithDummyWeights) {
  const json want = ReadJson(Dir() + "/expected.json");
  LoadOptions options;
  options.load_format = LoadFormat::kDummy;
  StatusOr<std::unique_ptr<Model>> model = LoadModel(Dir(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelInfo& info = (*model)->info();
  EXPECT_EQ(info.vocab_size, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(info.hidden_size, want["hidden_size"].get<int64_t>());
  EXPECT_EQ(info.max_context, want["max_context"].get<int64_t>());
  EXPECT_EQ(info.eos_token_id, want["eos_token_id"].get<int64_t>());
  std::vector<std::string> kinds;
  for (size_t i = 0; i < want["is_mla"].size(); ++i) {
    kinds.push_back(absl::StrCat(want["is_mla"][i].get<bool>() ? "mla" : "kda", "+",
                                 want["is_moe"][i].get<bool>() ? "moe" : "dense"));
  }
  EXPECT_EQ(info.layer_kinds, kinds);
  auto state = (*model)->NewState(8);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<float> logits(static_cast<size_t>(info.vocab_size));
  const std::vector<int32_t> tokens = {3, 4, 5};
  EXPECT_TRUE((*model)->Forward(tokens, **state, logits.data(), false).ok());
}

// transformers derives layer_types / mlp_layer_types from its defaults when
// they are absent; so does Strata, to the same lists.
using DerivedListsTest = TransformersConfigTest;

TEST_P(DerivedListsTest, MatchWhenAbsent) {
  const json want = ReadJson(Dir() + "/expected.json");
  json config = ReadJson(Dir() + "/config.json");
  config.erase("layer_types");
  config.erase("mlp_layer_types");
  StatusOr<json> got = ParseJson(config);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectMatches(want, *got);
}

INSTANTIATE_TEST_SUITE_P(All, TransformersConfigTest, ::testing::ValuesIn(ConfigDirs()), ParamName);
INSTANTIATE_TEST_SUITE_P(Kimi, KimiDummyLoadTest, ::testing::ValuesIn(ConfigDirs("kimi_linear_")),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(V5Derived, DerivedListsTest,
                         ::testing::ValuesIn(ConfigDirs("_v5_derived")), ParamName);

// A parity fixture's config saved again by transformers 5.17 describes the
// same model: the fixture's weights give bit-identical logits under it.
TEST(TransformersConfigs, ResavedFixtureConfigsRunTheFixtureIdentically) {
  ScopedTestDir scratch;
  for (const auto& [fixture, resaved] : std::vector<std::pair<std::string, std::string>>{
           {"kimi_a", "kimi_linear_from_kimi_a"},
           {"dsv32_a", "deepseek_v32_from_dsv32_a"},
           {"qwen3next_a", "qwen3_next_from_qwen3next_a"}}) {
    SCOPED_TRACE(resaved);
    const fs::path original = fs::path(STRATA_TEST_DATA_DIR) / fixture;
    const fs::path dir = fs::path(scratch.path()) / resaved;
    fs::create_directories(dir);
    fs::create_symlink(fs::absolute(original / "model.safetensors"), dir / "model.safetensors");
    fs::copy_file(fs::path(kConfigs) / resaved / "config.json", dir / "config.json");
    auto a = LoadModel(original.string());
    auto b = LoadModel(dir.string());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*a)->info().layer_kinds, (*b)->info().layer_kinds);
    const int32_t vocab = (*a)->info().vocab_size;
    std::mt19937 rng(7);
    std::vector<int32_t> tokens(24);
    for (int32_t& t : tokens) {
      t = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3));
    }
    std::vector<float> la(tokens.size() * static_cast<size_t>(vocab)), lb(la.size());
    auto sa = (*a)->NewState(32);
    auto sb = (*b)->NewState(32);
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_TRUE((*a)->Forward(tokens, **sa, la.data(), true).ok());
    ASSERT_TRUE((*b)->Forward(tokens, **sb, lb.data(), true).ok());
    EXPECT_EQ(la, lb);
  }
}

// ---------------------------------------------------------------------------
// Refusals: a value that asks for something transformers does not run.

struct Refusal {
  const char* dir;
  const char* field;  // the message names it: "<file>: field '<field>': ..."
  std::function<void(json&)> edit;
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.dir << ": " << r.field; }

class TransformersConfigRefusals : public ::testing::TestWithParam<Refusal> {};

TEST_P(TransformersConfigRefusals, NamesTheFileAndTheField) {
  const Refusal& r = GetParam();
  json config = ReadJson(kConfigs + "/" + r.dir + "/config.json");
  r.edit(config);
  StatusOr<json> got = ParseJson(config);
  ASSERT_FALSE(got.ok()) << r.dir << ": accepted";
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr(absl::StrCat("edited/config.json: field '", r.field, "': ")));
}

INSTANTIATE_TEST_SUITE_P(
    All, TransformersConfigRefusals,
    ::testing::Values(
        // KimiLinearConfig has no mla_use_nope and always runs NoPE MLA.
        Refusal{"kimi_linear_v5", "mla_use_nope", [](json& j) { j["mla_use_nope"] = false; }},
        Refusal{"kimi_linear_legacy", "mla_use_nope", [](json& j) { j["mla_use_nope"] = false; }},
        Refusal{"kimi_linear_hub", "mla_use_nope", [](json& j) { j["mla_use_nope"] = false; }},
        // transformers gives the MLA projections biases; Strata has none.
        Refusal{"kimi_linear_v5", "attention_bias", [](json& j) { j["attention_bias"] = true; }},
        // Moonshot's 1-based lists and transformers' layer_types disagree.
        Refusal{"kimi_linear_legacy", "layer_types",
                [](json& j) { std::swap(j["layer_types"][0], j["layer_types"][1]); }},
        // rope_scaling beside a different rope_parameters: transformers would
        // silently take rope_scaling.
        Refusal{"deepseek_v32_v5", "rope_parameters",
                [](json& j) {
                  j["rope_scaling"] = j["rope_parameters"];
                  j["rope_scaling"]["factor"] = 4.0;
                }},
        Refusal{"deepseek_v32_legacy", "rope_parameters.original_max_position_embeddings",
                [](json& j) { j["original_max_position_embeddings"] = 1024; }},
        Refusal{"deepseek_v32_v5", "scoring_func", [](json& j) { j["scoring_func"] = "softmax"; }},
        // save_pretrained never writes a top-level rope_theta beside
        // rope_parameters, so a different one is an edit that contradicts it.
        Refusal{"qwen3_next_v5", "rope_theta", [](json& j) { j["rope_theta"] = 5000.0; }},
        Refusal{"qwen3_next_v5", "rope_parameters.rope_type",
                [](json& j) { j["rope_parameters"]["rope_type"] = "linear"; }},
        Refusal{"strata_hybrid_demo", "layer_types[1]",
                [](json& j) { j["layer_types"][1] = "mla"; }}),
    [](const ::testing::TestParamInfo<Refusal>& p) {
      return absl::StrCat(p.param.dir, "_", p.index);
    });

// The message of a refused load names the config.json on disk, also through
// LoadModel (the dummy path needs no checkpoint).
TEST(TransformersConfigs, RefusedLoadNamesThePathAndField) {
  ScopedTestDir scratch;
  json config = ReadJson(kConfigs + "/kimi_linear_v5/config.json");
  config["mla_use_nope"] = false;
  WriteJson(scratch.File("config.json"), config);
  LoadOptions options;
  options.load_format = LoadFormat::kDummy;
  StatusOr<std::unique_ptr<Model>> model = LoadModel(scratch.path(), options);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr(scratch.File("config.json") + ": field 'mla_use_nope'"));
}

// What 5.17 writes but does not read must not be mistaken for a contradiction.
TEST(TransformersConfigs, FieldsTransformersWritesButIgnoresDoNotConflict) {
  // Qwen3NextConfig writes partial_rotary_factor 0.25 at the top level
  // whatever rope_parameters holds; rope_parameters' value is the one used.
  json qwen = ReadJson(kConfigs + "/qwen3_next_v5/config.json");
  ASSERT_NE(qwen["partial_rotary_factor"], qwen["rope_parameters"]["partial_rotary_factor"]);
  StatusOr<json> q = ParseJson(qwen);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ((*q)["rotary_dim"],
            static_cast<int64_t>(qwen["head_dim"].get<double>() *
                                 qwen["rope_parameters"]["partial_rotary_factor"].get<double>()));
  // DeepseekV32Config writes first_k_dense_replace (3 by default) beside an
  // mlp_layer_types it did not derive from it.
  json ds = ReadJson(kConfigs + "/deepseek_v32_v5/config.json");
  StatusOr<json> d = ParseJson(ds);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<bool> want;
  for (const auto& t : ds["mlp_layer_types"]) want.push_back(t == "sparse");
  EXPECT_EQ((*d)["is_moe"].get<std::vector<bool>>(), want);
  EXPECT_NE(ds["first_k_dense_replace"].get<int64_t>(),
            std::find(want.begin(), want.end(), true) - want.begin());
}

}  // namespace
}  // namespace strata
