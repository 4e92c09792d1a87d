// Sizes in config.json past what any model has are refused, naming the file
// and the field, by every architecture parser: a layer count sizes the
// per-layer lists the parsers build, and products of dimensions must not
// overflow (tests/fuzz/corpus/config keeps the inputs that once did).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/input_limits.h"
#include "model/config_reader.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/qwen3_next_config.h"
#include "model/models/strata_hybrid_config.h"

namespace strata {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Fixture(const std::string& name) {
  std::ifstream f(std::string(STRATA_TEST_DATA_DIR) + "/configs/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

// The message of the parse of `config` by the parser of its model_type
// ("" when it parses).
std::string ParseError(const json& config) {
  StatusOr<ConfigReader> r = ConfigReader::FromString("config.json", config.dump());
  if (!r.ok()) return std::string(r.status().message());
  const std::string type = config.value("model_type", "");
  Status s;
  if (type == "qwen3_next") s = ParseQwen3NextConfig(*r).status();
  if (type == "kimi_linear") s = ParseKimiLinearConfig(*r).status();
  if (type == "deepseek_v32") s = ParseDeepseekV32Config(*r).status();
  if (type == "strata_hybrid") s = ParseStrataHybridConfig(*r).status();
  return std::string(s.message());
}

const char* const kFixtures[] = {"qwen3_next_hub", "kimi_linear_hub", "deepseek_v32_hub",
                                 "strata_hybrid_minimal"};

TEST(ConfigLimits, FixturesParse) {
  for (const char* name : kFixtures) EXPECT_EQ(ParseError(Fixture(name)), "") << name;
}

TEST(ConfigLimits, LayerCountIsBounded) {
  for (const char* name : kFixtures) {
    json j = Fixture(name);
    j["num_hidden_layers"] = int64_t{1} << 40;
    EXPECT_THAT(ParseError(j),
                HasSubstr("config.json: field 'num_hidden_layers': expected at most " +
                          std::to_string(limits::kMaxModelLayers)))
        << name;
  }
}

TEST(ConfigLimits, DimensionsAreBounded) {
  for (const char* name : kFixtures) {
    json j = Fixture(name);
    j["hidden_size"] = int64_t{1} << 62;
    EXPECT_THAT(ParseError(j), HasSubstr("field 'hidden_size': expected at most")) << name;
  }
  json q = Fixture("qwen3_next_hub");
  q["linear_key_head_dim"] = INT64_MAX;
  EXPECT_THAT(ParseError(q), HasSubstr("field 'linear_key_head_dim'"));
  json d = Fixture("deepseek_v32_hub");
  d["qk_nope_head_dim"] = INT64_MAX;
  EXPECT_THAT(ParseError(d), HasSubstr("field 'qk_nope_head_dim'"));
  d = Fixture("deepseek_v32_hub");
  d["qk_nope_head_dim"] = limits::kMaxModelDimension;
  EXPECT_EQ(ParseError(d), "");
}

}  // namespace
}  // namespace strata
