// Hostile config.json through the C ABI (issue 27): a num_hidden_layers or
// head_dim of 2^31, 2^40 or 2^62 in a 1 KB config makes strata_model_load
// return STRATA_ERR_INVALID_ARGUMENT naming the file and the field (never
// OUT_OF_MEMORY or INTERNAL after allocating gigabytes), with dummy weights
// and with a real checkpoint; strata_model_params.check_weights turns a NaN
// in the weights into STRATA_ERR_DATA_LOSS naming the tensor.
//
// Through the shared library only; the configs are written inline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest_util.h"
#include "strata/strata.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using strata_capi_test::LastError;
using strata_capi_test::ReadFile;
using strata_capi_test::WriteFile;

const fs::path kData = fs::path(STRATA_TEST_DATA_DIR);

// tests/data/kimi_c's config (4 layers: KDA, MLA, KDA, MLA), with
// num_hidden_layers and linear_attn_config.head_dim spliced in.
std::string KimiConfig(const std::string& layers, const std::string& head_dim) {
  return R"({
  "model_type": "kimi_linear", "vocab_size": 256, "hidden_size": 64,
  "num_hidden_layers": )" +
         layers + R"(,
  "linear_attn_config": {"full_attn_layers": [2, 4], "kda_layers": [1, 3],
                         "num_heads": 4, "head_dim": )" +
         head_dim + R"(, "short_conv_kernel_size": 4},
  "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
  "first_k_dense_replace": 2, "intermediate_size": 128, "moe_intermediate_size": 32,
  "num_experts": 7, "num_experts_per_token": 3, "num_shared_experts": 1,
  "num_attention_heads": 2, "num_key_value_heads": 2, "kv_lora_rank": 32,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "tie_word_embeddings": false
})";
}

// What strata_last_error_message() says after a failed strata_model_load.
std::string LoadError(const std::string& message) { return "strata_model_load: " + message; }

class HostileConfigTest : public strata_capi_test::EngineTest {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(STRATA_BINARY_DIR) / "testdata" / (std::string("hostile_config_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    EngineTest::SetUp();
  }
  void TearDown() override {
    EngineTest::TearDown();
    fs::remove_all(dir_);
  }

  strata_status Load(bool dummy, bool check_weights = false) {
    strata_model_params p;
    strata_model_params_init(&p);
    p.device = STRATA_DEVICE_CPU;
    p.dummy_weights = dummy;
    p.check_weights = check_weights;
    if (model_ != nullptr) strata_model_destroy(model_);
    model_ = nullptr;
    return strata_model_load(engine_, dir_.c_str(), &p, &model_);
  }

  std::string ConfigPath() const { return (dir_ / "config.json").string(); }

  fs::path dir_;
};

constexpr const char* kHuge[] = {"2147483648", "1099511627776", "4611686018427387904"};

TEST_F(HostileConfigTest, HugeLayerCountIsInvalidArgumentWithDummyWeights) {
  WriteFile(dir_ / "config.json", KimiConfig("4", "24"));
  ASSERT_EQ(Load(/*dummy=*/true), STRATA_OK) << LastError();  // the unmodified config loads
  for (const char* v : kHuge) {
    SCOPED_TRACE(v);
    WriteFile(dir_ / "config.json", KimiConfig(v, "24"));
    EXPECT_EQ(Load(/*dummy=*/true), STRATA_ERR_INVALID_ARGUMENT) << LastError();
    EXPECT_EQ(model_, nullptr);
    EXPECT_EQ(LastError(), LoadError(ConfigPath() + ": field 'num_hidden_layers': " + v +
                                     " is outside the supported range [-2147483648, 2147483647]"));
  }
}

TEST_F(HostileConfigTest, HugeHeadDimIsInvalidArgumentWithDummyWeights) {
  for (const char* v : kHuge) {
    SCOPED_TRACE(v);
    WriteFile(dir_ / "config.json", KimiConfig("4", v));
    EXPECT_EQ(Load(/*dummy=*/true), STRATA_ERR_INVALID_ARGUMENT) << LastError();
    EXPECT_EQ(LastError(), LoadError(ConfigPath() + ": field 'linear_attn_config.head_dim': " + v +
                                     " is outside the supported range [-2147483648, 2147483647]"));
  }
}

TEST_F(HostileConfigTest, HugeValuesAreInvalidArgumentWithARealCheckpoint) {
  fs::create_symlink(kData / "kimi_c" / "model.safetensors", dir_ / "model.safetensors");
  WriteFile(dir_ / "config.json", KimiConfig("4", "24"));
  ASSERT_EQ(Load(/*dummy=*/false), STRATA_OK) << LastError();
  for (const char* v : kHuge) {
    SCOPED_TRACE(v);
    WriteFile(dir_ / "config.json", KimiConfig(v, "24"));
    EXPECT_EQ(Load(/*dummy=*/false), STRATA_ERR_INVALID_ARGUMENT) << LastError();
    EXPECT_THAT(LastError(), HasSubstr(ConfigPath() + ": field 'num_hidden_layers': "));
    WriteFile(dir_ / "config.json", KimiConfig("4", v));
    EXPECT_EQ(Load(/*dummy=*/false), STRATA_ERR_INVALID_ARGUMENT) << LastError();
    EXPECT_THAT(LastError(), HasSubstr(ConfigPath() + ": field 'linear_attn_config.head_dim': "));
  }
}

TEST_F(HostileConfigTest, DuplicateKeyIsInvalidArgumentNamingKeyAndOffset) {
  std::string config = KimiConfig("4", "24");
  config.insert(config.rfind('}'), R"(, "hidden_size": 4096)");
  WriteFile(dir_ / "config.json", config);
  EXPECT_EQ(Load(/*dummy=*/true), STRATA_ERR_INVALID_ARGUMENT) << LastError();
  EXPECT_EQ(LastError(), LoadError(ConfigPath() + ": duplicate key 'hidden_size' at byte " +
                                   std::to_string(config.rfind("\"hidden_size\""))));
}

TEST_F(HostileConfigTest, CheckWeightsTurnsANaNIntoDataLoss) {
  // kimi_c's checkpoint with element 3 of model.norm.weight (F32) set to NaN,
  // found through the safetensors header: [u64 length][JSON][data].
  std::string st = ReadFile(kData / "kimi_c" / "model.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, st.data(), 8);
  const std::string header = st.substr(8, header_len);
  const size_t entry = header.find("\"model.norm.weight\"");
  ASSERT_NE(entry, std::string::npos);
  const size_t end = header.find('}', entry);
  ASSERT_NE(header.substr(entry, end - entry).find("\"F32\""), std::string::npos);
  const size_t offsets = header.find("\"data_offsets\"", entry);
  ASSERT_LT(offsets, end);
  const uint64_t begin = std::stoull(header.substr(header.find('[', offsets) + 1));
  const uint32_t nan_bits = 0x7fc00000u;
  std::memcpy(&st[8 + header_len + begin + 3 * 4], &nan_bits, 4);
  WriteFile(dir_ / "model.safetensors", st);
  WriteFile(dir_ / "config.json", KimiConfig("4", "24"));

  EXPECT_EQ(Load(/*dummy=*/false), STRATA_OK) << LastError();  // the check is opt-in
  EXPECT_EQ(Load(/*dummy=*/false, /*check_weights=*/true), STRATA_ERR_DATA_LOSS) << LastError();
  EXPECT_EQ(model_, nullptr);
  EXPECT_EQ(LastError(), LoadError((dir_ / "model.safetensors").string() +
                                   ": tensor 'model.norm.weight' (F32): element 3 is NaN (found by "
                                   "check_weights)"));
}

TEST_F(HostileConfigTest, CheckWeightsDefaultsToOff) {
  strata_model_params p;
  strata_model_params_init(&p);
  EXPECT_FALSE(p.check_weights);
  size_t offset = 0;
  ASSERT_EQ(strata_abi_field_offset("strata_model_params", "check_weights", &offset), STRATA_OK);
  EXPECT_EQ(offset, offsetof(strata_model_params, check_weights));
}

}  // namespace
