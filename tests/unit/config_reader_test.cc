// ConfigReader: typed config.json access and error messages that name the
// file and the (dotted) field.
#include "model/config_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "loader_test_util.h"

namespace strata {
namespace {

using ::strata::testing_util::ScopedTestDir;
using ::strata::testing_util::WriteText;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLabel[] = "/models/kimi/config.json";

ConfigReader Read(const std::string& text) {
  StatusOr<ConfigReader> r = ConfigReader::FromString(kLabel, text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : *ConfigReader::FromString(kLabel, "{}");
}

std::string Msg(const Status& s) { return std::string(s.message()); }

TEST(ConfigReader, ReadsTypedFields) {
  const ConfigReader c = Read(R"({
    "model_type": "kimi_linear", "hidden_size": 128, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": true, "layers": [0, 2, 5], "rope_theta": 10000,
    "maybe": null})");
  EXPECT_EQ(*c.GetString("model_type"), "kimi_linear");
  EXPECT_EQ(*c.GetInt("hidden_size"), 128);
  EXPECT_EQ(*c.GetPositiveInt("hidden_size"), 128);
  EXPECT_DOUBLE_EQ(*c.GetDouble("rms_norm_eps"), 1e-6);
  EXPECT_DOUBLE_EQ(*c.GetDouble("rope_theta"), 10000.0);  // integers are numbers too
  EXPECT_TRUE(*c.GetBoolOr("tie_word_embeddings", false));
  EXPECT_THAT(*c.GetIntList("layers"), ElementsAre(0, 2, 5));
  EXPECT_TRUE(c.Has("hidden_size"));
  EXPECT_FALSE(c.Has("maybe"));  // null counts as absent
  EXPECT_FALSE(c.Has("absent"));
  EXPECT_EQ(c.file_label(), kLabel);
}

TEST(ConfigReader, OptionalFieldsFallBackOnlyWhenAbsentOrNull) {
  const ConfigReader c = Read(R"({"n": 7, "x": null, "s": "seven", "b": 1})");
  EXPECT_EQ(*c.GetIntOr("n", 3), 7);
  EXPECT_EQ(*c.GetIntOr("absent", 3), 3);
  EXPECT_EQ(*c.GetIntOr("x", 3), 3);
  EXPECT_DOUBLE_EQ(*c.GetDoubleOr("absent", 0.5), 0.5);
  EXPECT_FALSE(*c.GetBoolOr("absent", false));
  // Present with the wrong type is an error, not the fallback.
  EXPECT_THAT(Msg(c.GetIntOr("s", 3).status()),
              HasSubstr("field 's': expected an integer, got \"seven\""));
  EXPECT_THAT(Msg(c.GetBoolOr("b", false).status()),
              HasSubstr("field 'b': expected true or false, got 1"));
  EXPECT_THAT(Msg(c.GetDoubleOr("s", 1.0).status()), HasSubstr("expected a number"));
}

TEST(ConfigReader, IntegralFloatsAreIntegersButBooleansAndFractionsAreNot) {
  const ConfigReader c = Read(R"({"a": 4.0, "b": 4.5, "c": true, "d": "4", "e": 1e30, "f": -2.0})");
  EXPECT_EQ(*c.GetInt("a"), 4);
  EXPECT_EQ(*c.GetInt("f"), -2);
  EXPECT_THAT(Msg(c.GetInt("b").status()), HasSubstr("field 'b': expected an integer, got 4.5"));
  EXPECT_THAT(Msg(c.GetInt("c").status()), HasSubstr("field 'c': expected an integer, got true"));
  EXPECT_FALSE(c.GetInt("d").ok());
  EXPECT_FALSE(c.GetInt("e").ok());  // out of int64 range
  EXPECT_FALSE(c.GetDouble("c").ok());
}

TEST(ConfigReader, NestedObjectErrorsUseDottedFieldPath) {
  const ConfigReader c = Read(R"({"linear_attn_config": {"num_heads": -3, "head_dim": 0}})");
  StatusOr<ConfigReader> lin = c.GetObject("linear_attn_config");
  ASSERT_TRUE(lin.ok()) << lin.status();
  Status s = lin->GetPositiveInt("num_heads").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(),
            "/models/kimi/config.json: field 'linear_attn_config.num_heads': expected a positive "
            "integer, got -3");
  EXPECT_THAT(Msg(lin->GetPositiveInt("head_dim").status()),
              HasSubstr("'linear_attn_config.head_dim': expected a positive integer, got 0"));
  EXPECT_THAT(Msg(lin->GetInt("missing").status()),
              HasSubstr("field 'linear_attn_config.missing': required but missing"));
  EXPECT_EQ(lin->FieldError("num_heads", "must divide hidden_size").message(),
            "/models/kimi/config.json: field 'linear_attn_config.num_heads': must divide "
            "hidden_size");
  EXPECT_THAT(Msg(c.GetObject("absent").status()), HasSubstr("field 'absent'"));
  EXPECT_THAT(Msg(Read(R"({"o": [1]})").GetObject("o").status()), HasSubstr("expected an object"));
}

TEST(ConfigReader, MissingAndMistypedRequiredFieldsNameTheField) {
  const ConfigReader c = Read(R"({"name": 5, "list": [1, "two"], "scalar": 3})");
  EXPECT_THAT(Msg(c.GetString("model_type").status()),
              HasSubstr("config.json: field 'model_type': required but missing"));
  EXPECT_THAT(Msg(c.GetString("name").status()),
              HasSubstr("field 'name': expected a string, got 5"));
  EXPECT_THAT(Msg(c.GetIntList("list").status()),
              HasSubstr("field 'list[1]': expected an integer, got \"two\""));
  EXPECT_THAT(Msg(c.GetIntList("scalar").status()), HasSubstr("expected a list of integers"));
  EXPECT_THAT(Msg(c.GetDouble("nope").status()), HasSubstr("field 'nope'"));
}

TEST(ConfigReader, LongValuesAreAbbreviatedInMessages) {
  const ConfigReader c = Read("{\"s\": \"" + std::string(10000, 'x') + "\"}");
  const std::string msg = Msg(c.GetInt("s").status());
  EXPECT_THAT(msg, HasSubstr("..."));
  EXPECT_LT(msg.size(), 200u);
}

TEST(ConfigReader, BadJsonIsInvalidArgumentWithByteOffset) {
  StatusOr<ConfigReader> r = ConfigReader::FromString(kLabel, "{\"a\": 1,, \"b\": 2}");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_THAT(Msg(r.status()), HasSubstr(kLabel));
  EXPECT_THAT(Msg(r.status()), HasSubstr("invalid JSON at byte 8"));

  r = ConfigReader::FromString(kLabel, "[1, 2]");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("expected a JSON object at the top level"));
  EXPECT_FALSE(ConfigReader::FromString(kLabel, "").ok());
  EXPECT_FALSE(ConfigReader::FromString(kLabel, std::string(5000, '[')).ok());
}

TEST(ConfigReader, FromFileReadsFileAndReportsMissingOne) {
  ScopedTestDir dir;
  const std::string path = dir.File("config.json");
  WriteText(path, R"({"vocab_size": 512})");
  StatusOr<ConfigReader> r = ConfigReader::FromFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->GetPositiveInt("vocab_size"), 512);
  EXPECT_EQ(r->file_label(), path);
  EXPECT_THAT(Msg(r->GetInt("x").status()), HasSubstr(path));

  r = ConfigReader::FromFile(dir.File("missing.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_THAT(Msg(r.status()), HasSubstr(dir.File("missing.json")));

  WriteText(path, "{\"vocab_size\": }");
  r = ConfigReader::FromFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(Msg(r.status()), HasSubstr(path));
  EXPECT_THAT(Msg(r.status()), HasSubstr("byte 15"));

  WriteText(path, "");
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigReader::FromFile(path).status()));
}

TEST(ConfigReader, ReadsTransformersWrittenConfig) {
  const std::string path = std::string(STRATA_TEST_DATA_DIR) + "/kimi_a/config.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << "fixture missing: " << path;
  StatusOr<ConfigReader> r = ConfigReader::FromFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->GetString("model_type"), "kimi_linear");
  EXPECT_GT(*r->GetPositiveInt("hidden_size"), 0);
}

}  // namespace
}  // namespace strata
