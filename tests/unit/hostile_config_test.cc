// Hostile config.json values (issue 27): integers beyond their sane bound,
// products no host can allocate, special token ids outside the vocabulary,
// impossible or contradictory values and duplicate keys are refused as
// InvalidArgument naming the file and the field, by every architecture's
// parser and through LoadModel, and no exception escapes. The configs are the
// small fixtures of tests/data with one field changed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "loader_test_util.h"
#include "model/config_bounds.h"
#include "model/config_reader.h"
#include "model/config_sizes.h"
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
using testing_util::WriteText;

constexpr char kLabel[] = "/models/hostile/config.json";
constexpr int64_t k2e31 = int64_t{1} << 31;
constexpr int64_t k2e40 = int64_t{1} << 40;
constexpr int64_t k2e62 = int64_t{1} << 62;

json Fixture(const std::string& name) {
  std::ifstream f(std::string(STRATA_TEST_DATA_DIR) + "/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

using Parser = std::function<Status(const ConfigReader&)>;

template <class F>
Parser Wrap(F f) {
  return [f](const ConfigReader& c) { return f(c).status(); };
}

struct Arch {
  std::string fixture;
  Parser parse;
};

const Arch kKimi{"kimi_c", Wrap(ParseKimiLinearConfig)};
const Arch kDeepseek{"dsv32_c", Wrap(ParseDeepseekV32Config)};
const Arch kQwen{"qwen3next_c", Wrap(ParseQwen3NextConfig)};
const Arch kHybrid{"strata_hybrid_a", Wrap(ParseStrataHybridConfig)};

// Parses `text` as config.json and then with the architecture's parser; the
// status, with any escaping exception turned into a test failure.
Status ParseText(const Arch& arch, const std::string& text) {
  Status out;
  EXPECT_NO_THROW({
    StatusOr<ConfigReader> r = ConfigReader::FromString(kLabel, text);
    out = r.ok() ? arch.parse(*r) : r.status();
  });
  return out;
}

// The fixture with `edit` applied.
Status ParseEdited(const Arch& arch, const std::function<void(json&)>& edit) {
  json j = Fixture(arch.fixture);
  edit(j);
  return ParseText(arch, j.dump(2));
}

std::string Field(const std::string& field, const std::string& what) {
  return absl::StrCat(kLabel, ": field '", field, "': ", what);
}

std::string OutOfInt32(int64_t v) {
  return absl::StrCat(v, " is outside the supported range [-2147483648, 2147483647]");
}

void ExpectInvalid(const Status& s, const std::string& message) {
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(std::string(s.message()), message);
}

TEST(HostileConfig, TheUnmodifiedFixturesParse) {
  for (const Arch* a : {&kKimi, &kDeepseek, &kQwen, &kHybrid}) {
    EXPECT_TRUE(ParseEdited(*a, [](json&) {}).ok()) << a->fixture;
  }
}

// ---- (a) integers within sane bounds ----

TEST(HostileConfig, HugeLayerCountsAreRefusedByEveryParser) {
  for (const Arch* a : {&kKimi, &kDeepseek, &kQwen, &kHybrid}) {
    for (int64_t v : {k2e31, k2e40, k2e62}) {
      SCOPED_TRACE(absl::StrCat(a->fixture, " num_hidden_layers = ", v));
      ExpectInvalid(ParseEdited(*a, [v](json& j) { j["num_hidden_layers"] = v; }),
                    Field("num_hidden_layers", OutOfInt32(v)));
    }
    ExpectInvalid(ParseEdited(*a, [](json& j) { j["num_hidden_layers"] = 5000; }),
                  Field("num_hidden_layers", "5000 exceeds the largest supported value, 4096"));
  }
}

TEST(HostileConfig, HugeHeadDimensionsAreRefusedByEveryParser) {
  struct Case {
    const Arch* arch;
    std::string field;  // as the message names it
    std::function<void(json&, int64_t)> set;
  };
  const Case cases[] = {
      {&kKimi, "linear_attn_config.head_dim",
       [](json& j, int64_t v) { j["linear_attn_config"]["head_dim"] = v; }},
      {&kDeepseek, "v_head_dim", [](json& j, int64_t v) { j["v_head_dim"] = v; }},
      {&kQwen, "head_dim", [](json& j, int64_t v) { j["head_dim"] = v; }},
      {&kHybrid, "linear_head_dim", [](json& j, int64_t v) { j["linear_head_dim"] = v; }},
  };
  for (const Case& c : cases) {
    for (int64_t v : {k2e31, k2e40, k2e62}) {
      SCOPED_TRACE(absl::StrCat(c.arch->fixture, " ", c.field, " = ", v));
      ExpectInvalid(ParseEdited(*c.arch, [&](json& j) { c.set(j, v); }),
                    Field(c.field, OutOfInt32(v)));
    }
    ExpectInvalid(ParseEdited(*c.arch, [&](json& j) { c.set(j, 8192); }),
                  Field(c.field, "8192 exceeds the largest supported value, 4096"));
  }
}

TEST(HostileConfig, TheBoundsAdmitTheLargestPublishedShapes) {
  // DeepSeek-V3.2 (671B), Kimi-Linear 48B, Qwen3-Next 80B and a 1M context.
  const std::pair<const char*, int64_t> real[] = {
      {"vocab_size", 163840},
      {"hidden_size", 7168},
      {"num_hidden_layers", 61},
      {"n_routed_experts", 256},
      {"num_experts", 512},
      {"moe_intermediate_size", 2048},
      {"intermediate_size", 18432},
      {"num_attention_heads", 128},
      {"kv_lora_rank", 512},
      {"q_lora_rank", 1536},
      {"qk_nope_head_dim", 128},
      {"qk_rope_head_dim", 64},
      {"index_topk", 2048},
      {"model_max_length", 1048576},
      {"max_position_embeddings", int64_t{1} << 30},
  };
  for (const auto& [field, value] : real) EXPECT_LE(value, ConfigIntMax(field)) << field;
  EXPECT_EQ(ConfigIntMax("some_unknown_integer"), kConfigIntMax);
}

TEST(HostileConfig, IntegerListEntriesAreBoundedToo) {
  ExpectInvalid(ParseEdited(kQwen,
                            [](json& j) {
                              j["mlp_only_layers"] = {0, k2e40};
                            }),
                Field("mlp_only_layers[1]", OutOfInt32(k2e40)));
  ExpectInvalid(ParseEdited(kDeepseek,
                            [](json& j) {
                              j["quantization_config"] = {{"quant_method", "fp8"},
                                                          {"weight_block_size", {128, 1 << 20}}};
                            }),
                Field("quantization_config.weight_block_size[1]",
                      "1048576 exceeds the largest supported value, 65536"));
}

TEST(HostileConfig, NumbersBeyondDoubleAreRefusedAtTheirByte) {
  // JSON has no NaN or infinity; 1e999 does not fit a double and is refused
  // as it is parsed (GetDouble also refuses a non-finite value).
  const std::string text = R"({"model_type": "qwen3_next", "rms_norm_eps": 1e999})";
  Status s = ParseText(kQwen, text);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(kLabel, ": invalid JSON at byte ")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("number overflow parsing '1e999'"));
}

TEST(HostileConfig, ProductsTooLargeToAllocateNameTheirFields) {
  // Each field within its bound; their product is not.
  Status s = ParseEdited(kKimi, [](json& j) {
    j["num_hidden_layers"] = 4096;
    j["first_k_dense_replace"] = 0;
    j.erase("linear_attn_config");
    j["linear_num_heads"] = 4;
    j["linear_head_dim"] = 16;
    j["hidden_size"] = 65536;
    for (const char* k : {"num_experts", "n_routed_experts", "num_local_experts"}) j[k] = 60000;
    j["moe_intermediate_size"] = 65536;
  });
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat(kLabel,
                         ": fields 'num_hidden_layers' x 'num_experts' x 'moe_intermediate_size' x "
                         "'hidden_size' (4096 x 60000 x 65536 x 65536 x 3) make the parameters "
                         "total at least 3.2e+18, more than the supported 8.8e+12"));

  // The recurrent state of one sequence: 4096 layers of 4096 heads of 4096².
  s = ParseEdited(kQwen, [](json& j) {
    j["num_hidden_layers"] = 4096;
    j["full_attention_interval"] = 4096;
    j["num_experts"] = 0;
    j["hidden_size"] = 16;
    j["linear_num_key_heads"] = 1;
    j["linear_num_value_heads"] = 4096;
    j["linear_key_head_dim"] = 4096;
    j["linear_value_head_dim"] = 4096;
  });
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("fields 'num_hidden_layers' x 'linear_num_value_heads' x "
                        "'linear_key_head_dim' x 'linear_value_head_dim'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bytes of one sequence's recurrent state"));
}

TEST(HostileConfig, SizeTotalsSaturateInsteadOfWrapping) {
  const ConfigReader c = *ConfigReader::FromString(kLabel, "{}");
  ConfigSizeTotal t(c, "parameters", kMaxConfigParameters);
  t.Add({{"a", k2e62}, {"b", k2e62}});  // 2^124 wraps to 0 in 64 bits
  t.Add({{"c", 0}, {"d", k2e62}});
  EXPECT_EQ(t.total(), UINT64_MAX);
  ExpectInvalid(t.Check(), absl::StrCat(kLabel, ": fields 'a' x 'b' (", k2e62, " x ", k2e62,
                                        ") make the parameters total at least 2^64, more than "
                                        "the supported 8.8e+12"));
  ConfigSizeTotal small(c, "tensors", 10);
  small.Add({{"x", 2}, {"", 5}});
  EXPECT_TRUE(small.Check().ok());
  small.Add({{"y", 1}});
  EXPECT_EQ(small.Check().message(),
            absl::StrCat(kLabel,
                         ": fields 'x' (2 x 5) make the tensors total at least 11, more "
                         "than the supported 10"));
}

// ---- (b) special token ids ----

TEST(HostileConfig, SpecialTokenIdsOutsideTheVocabularyAreRefused) {
  const std::string range = "[0, 256) (vocab_size); -1 means none";
  for (const Arch* a : {&kKimi, &kDeepseek, &kQwen}) {
    SCOPED_TRACE(a->fixture);
    ExpectInvalid(ParseEdited(*a, [](json& j) { j["eos_token_id"] = k2e40; }),
                  Field("eos_token_id", OutOfInt32(k2e40)));
    ExpectInvalid(ParseEdited(*a, [](json& j) { j["eos_token_id"] = 256; }),
                  Field("eos_token_id", "token id 256 is outside the vocabulary " + range));
    ExpectInvalid(ParseEdited(*a, [](json& j) { j["bos_token_id"] = -2; }),
                  Field("bos_token_id", "token id -2 is outside the vocabulary " + range));
    ExpectInvalid(ParseEdited(*a, [](json& j) { j["pad_token_id"] = 1000; }),
                  Field("pad_token_id", "token id 1000 is outside the vocabulary " + range));
    ExpectInvalid(ParseEdited(*a,
                              [](json& j) {
                                j["eos_token_id"] = {2, 300};
                              }),
                  Field("eos_token_id[1]", "token id 300 is outside the vocabulary " + range));
    ExpectInvalid(ParseEdited(*a,
                              [](json& j) {
                                j["eos_token_id"] = {2, k2e40};
                              }),
                  Field("eos_token_id[1]", OutOfInt32(k2e40)));
    // -1, null and absent mean none; a list's first entry is the eos.
    EXPECT_TRUE(ParseEdited(*a, [](json& j) { j["eos_token_id"] = -1; }).ok());
    EXPECT_TRUE(ParseEdited(*a, [](json& j) { j["pad_token_id"] = nullptr; }).ok());
    EXPECT_TRUE(ParseEdited(*a, [](json& j) { j["eos_token_id"] = {5, 7}; }).ok());
  }
  json j = Fixture("kimi_c");
  j["eos_token_id"] = {5, 7};
  StatusOr<KimiLinearConfig> k = ParseKimiLinearConfig(*ConfigReader::FromString(kLabel, j.dump()));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->eos_token_id, 5);
  // The hybrid's parser takes its ids as the others do.
  ExpectInvalid(ParseEdited(kHybrid, [](json& j) { j["eos_token_id"] = 384; }),
                Field("eos_token_id",
                      "token id 384 is outside the vocabulary [0, 384) "
                      "(vocab_size); -1 means none"));
}

TEST(HostileConfig, ADefaultIdOutsideATinyVocabularyIsRefusedToo) {
  // DeepseekV32Config's default eos is 1; a vocabulary of one token lacks it.
  ExpectInvalid(ParseEdited(kDeepseek,
                            [](json& j) {
                              j["vocab_size"] = 1;
                              j.erase("eos_token_id");
                              j.erase("pad_token_id");
                            }),
                Field("eos_token_id",
                      "absent, so the default token id 1 is outside the "
                      "vocabulary [0, 1) (vocab_size); -1 means none"));
}

// ---- (c) impossible and contradictory values ----

struct Impossible {
  const Arch* arch;
  std::function<void(json&)> edit;
  std::string message;  // after "<label>: field "
};

TEST(HostileConfig, ImpossibleValuesAreRefusedNamingTheField) {
  const Impossible cases[] = {
      // Context lengths.
      {&kKimi, [](json& j) { j["max_position_embeddings"] = 0; },
       "'max_position_embeddings': must be a positive token count, got 0"},
      {&kKimi, [](json& j) { j["model_max_length"] = -5; },
       "'model_max_length': must be a positive token count, got -5"},
      {&kDeepseek, [](json& j) { j["max_position_embeddings"] = -1; },
       "'max_position_embeddings': must be a positive token count, got -1"},
      {&kQwen, [](json& j) { j["max_position_embeddings"] = 0; },
       "'max_position_embeddings': must be a positive token count, got 0"},
      {&kHybrid, [](json& j) { j["max_position_embeddings"] = 0; },
       "'max_position_embeddings': must be a positive token count, got 0"},
      // RoPE.
      {&kDeepseek, [](json& j) { j["rope_theta"] = 0; }, "'rope_theta': must be > 1"},
      {&kQwen, [](json& j) { j["rope_theta"] = -10000.0; },
       "'rope_theta': must be a positive number"},
      {&kHybrid, [](json& j) { j["rope_theta"] = 0.5; }, "'rope_theta': must be > 1"},
      {&kQwen, [](json& j) { j["partial_rotary_factor"] = 1.5; },
       "'partial_rotary_factor': must be in (0, 1], got 1.5"},
      {&kQwen, [](json& j) { j["partial_rotary_factor"] = 0; },
       "'partial_rotary_factor': must be in (0, 1], got 0"},
      {&kDeepseek,
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", -32.0}};
       },
       "'rope_scaling.beta_fast': must be > 0"},
      {&kDeepseek,
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.0}};
       },
       "'rope_scaling.factor': must be > 0"},
      // Norms.
      {&kKimi, [](json& j) { j["rms_norm_eps"] = 0; }, "'rms_norm_eps': must be > 0"},
      {&kDeepseek, [](json& j) { j["rms_norm_eps"] = -1e-6; }, "'rms_norm_eps': must be > 0"},
      {&kQwen, [](json& j) { j["rms_norm_eps"] = 0; }, "'rms_norm_eps': must be > 0"},
      {&kHybrid, [](json& j) { j["rms_norm_eps"] = 0; }, "'rms_norm_eps': must be > 0"},
      // Heads.
      {&kQwen, [](json& j) { j["num_key_value_heads"] = 2; },
       "'num_key_value_heads': 2 does not divide num_attention_heads (3)"},
      {&kKimi, [](json& j) { j["num_key_value_heads"] = 3; },
       "'num_key_value_heads': 3 does not divide num_attention_heads (2)"},
      {&kQwen,
       [](json& j) {
         j["linear_num_value_heads"] = 2;
         j["linear_num_key_heads"] = 3;
       },
       "'linear_num_value_heads': 2 is not a multiple of linear_num_key_heads (3)"},
      // Routing.
      {&kDeepseek, [](json& j) { j["topk_group"] = 3; },
       "'topk_group': must be in [1, n_group = 2], got 3"},
      {&kKimi, [](json& j) { j["topk_group"] = 2; },
       "'topk_group': 2 exceeds num_expert_group (1)"},
      {&kKimi, [](json& j) { j["topk_group"] = 0; }, "'topk_group': must be >= 1, got 0"},
      {&kHybrid, [](json& j) { j["topk_group"] = 5; }, "'topk_group': must be in [1, n_group]"},
      {&kQwen, [](json& j) { j["num_experts_per_tok"] = 7; },
       "'num_experts_per_tok': 7 exceeds the number of experts (6)"},
      {&kKimi,
       [](json& j) {
         j["num_experts_per_token"] = 8;
         j["num_experts_per_tok"] = 8;
       },
       "'num_experts_per_token': 8 exceeds the number of experts (7)"},
      {&kDeepseek, [](json& j) { j["num_experts_per_tok"] = 4; },
       "'num_experts_per_tok': 4 exceeds the 3 experts of the topk_group best groups"},
      {&kHybrid, [](json& j) { j["num_experts_per_tok"] = 9; },
       "'num_experts_per_tok': exceeds the experts of the topk_group groups"},
  };
  for (const Impossible& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.arch->fixture, ": ", c.message));
    ExpectInvalid(ParseEdited(*c.arch, c.edit), absl::StrCat(kLabel, ": field ", c.message));
  }
}

// ---- (d) duplicate keys ----

TEST(HostileConfig, DuplicateKeysAreRefusedWithTheKeyAndItsByteOffset) {
  const std::string text =
      R"({"model_type": "kimi_linear", "hidden_size": 64, "hidden_size": 4096})";
  Status s = ParseText(kKimi, text);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat(kLabel, ": duplicate key 'hidden_size' at byte ",
                                      text.rfind("\"hidden_size\"")));

  const std::string nested =
      "{\"rope_scaling\": {\"factor\": 4,\n  \"type\": \"yarn\", \"factor\": 8}, \"factor\": 1}";
  s = ParseText(kDeepseek, nested);
  EXPECT_EQ(s.message(), absl::StrCat(kLabel, ": duplicate key 'rope_scaling.factor' at byte ",
                                      nested.find("\"factor\": 8")));
  // The same key in different objects is not a duplicate.
  EXPECT_TRUE(ConfigReader::FromString(kLabel, R"({"a": {"x": 1}, "b": {"x": 2}, "x": 3})").ok());
}

// ---- Through LoadModel: the file is named and nothing throws ----

class HostileLoad : public ::testing::Test {
 protected:
  // A model directory with `config` and, unless empty, `weights_from`'s
  // safetensors linked in.
  std::string Dir(const json& config, const std::string& weights_from = "") {
    WriteText(dir_.File("config.json"), config.dump(2));
    if (!weights_from.empty()) {
      fs::create_symlink(fs::path(STRATA_TEST_DATA_DIR) / weights_from / "model.safetensors",
                         dir_.File("model.safetensors"));
    }
    return dir_.path();
  }
  Status Load(const std::string& dir, LoadFormat format) {
    LoadOptions options;
    options.load_format = format;
    Status out;
    EXPECT_NO_THROW({
      auto m = LoadModel(dir, options);
      out = m.status();
    });
    return out;
  }
  ScopedTestDir dir_;
};

TEST_F(HostileLoad, DummyWeightsAreNeverSizedFromAHostileConfig) {
  for (int64_t v : {k2e31, k2e40, k2e62}) {
    json j = Fixture("kimi_c");
    j["num_hidden_layers"] = v;
    const std::string dir = Dir(j);
    ExpectInvalid(
        Load(dir, LoadFormat::kDummy),
        absl::StrCat(dir_.File("config.json"), ": field 'num_hidden_layers': ", OutOfInt32(v)));
    j = Fixture("kimi_c");
    j["linear_attn_config"]["head_dim"] = v;
    Dir(j);
    ExpectInvalid(Load(dir, LoadFormat::kDummy),
                  absl::StrCat(dir_.File("config.json"),
                               ": field 'linear_attn_config.head_dim': ", OutOfInt32(v)));
  }
}

TEST_F(HostileLoad, ACheckpointWithAHostileConfigIsRefusedByName) {
  json j = Fixture("qwen3next_c");
  j["head_dim"] = k2e40;
  const std::string dir = Dir(j, "qwen3next_c");
  ExpectInvalid(Load(dir, LoadFormat::kAuto),
                absl::StrCat(dir_.File("config.json"), ": field 'head_dim': ", OutOfInt32(k2e40)));
}

TEST_F(HostileLoad, ADuplicateKeyIsRefusedAtLoad) {
  const std::string text = R"({"model_type": "kimi_linear", "model_type": "x"})";
  WriteText(dir_.File("config.json"), text);
  Status s = Load(dir_.path(), LoadFormat::kDummy);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat(dir_.File("config.json"), ": duplicate key 'model_type' at byte ",
                         text.rfind("\"model_type\"")));
}

}  // namespace
}  // namespace strata
