// Hostile token ids in tokenizer files (issue 27): an id beyond int32, or
// beyond the largest supported vocabulary (the tokenizers keep dense tables
// sized from the largest id), or beyond the model's vocab_size when the
// directory's config.json states one, is refused naming the file and the
// token instead of allocating 2^31 entries or wrapping around.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "loader_test_util.h"
#include "text/text_model.h"
#include "text/tokenizer.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTestDir;
using testing_util::WriteText;

constexpr char kLimit[] = "is outside [0, 16777216) (the largest supported vocabulary)";

// A byte-level BPE tokenizer.json with `extra_vocab` spliced into the vocab,
// `added` as added_tokens and `post` as post_processor.
std::string TokenizerJson(const std::string& extra_vocab, const std::string& added = "[]",
                          const std::string& post = "null") {
  return absl::StrCat(R"({"version": "1.0", "added_tokens": )", added, R"(,
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": )",
                      post, R"(, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2)",
                      extra_vocab, R"(},
              "merges": ["a b"]}})");
}

template <class T>
std::string Error(const StatusOr<T>& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  return std::string(r.status().message());
}

StatusOr<std::unique_ptr<Tokenizer>> LoadJson(const ScopedTestDir& d, const std::string& text) {
  WriteText(d.File("tokenizer.json"), text);
  StatusOr<std::unique_ptr<Tokenizer>> out = absl::UnknownError("threw");
  EXPECT_NO_THROW(out = Tokenizer::FromTokenizerJson(d.File("tokenizer.json")));
  return out;
}

TEST(HostileTokenIds, TheBaseTokenizerLoads) {
  ScopedTestDir d;
  StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(d, TokenizerJson(""));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 3);
}

TEST(HostileTokenIds, VocabIdsBeyondTheLargestVocabularyAreRefused) {
  ScopedTestDir d;
  const std::string file = d.File("tokenizer.json");
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson(R"(, "huge": 2147483647)"))),
            absl::StrCat(file, ": model.vocab: token \"huge\": id 2147483647 ", kLimit));
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson(R"(, "wide": 1099511627776)"))),
            absl::StrCat(file, ": model.vocab: token \"wide\": id 1099511627776 ", kLimit));
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson(R"(, "edge": 16777216)"))),
            absl::StrCat(file, ": model.vocab: token \"edge\": id 16777216 ", kLimit));
  // Past int64: refused, never wrapped to a small id.
  EXPECT_THAT(Error(LoadJson(d, TokenizerJson(R"(, "past": 18446744073709551615)"))),
              HasSubstr("token \"past\""));
}

TEST(HostileTokenIds, AddedTokenIdsAreCheckedBeforeNarrowing) {
  ScopedTestDir d;
  const std::string file = d.File("tokenizer.json");
  const std::string added = R"([{"id": 2147483647, "content": "<huge>", "special": true}])";
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson("", added))),
            absl::StrCat(file, ": added_tokens[0]: token \"<huge>\": id 2147483647 ", kLimit));
  // 2^32 + 5 would read as id 5 through int32.
  const std::string wraps = R"([{"id": 4294967301, "content": "<wrap>", "special": true}])";
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson("", wraps))),
            absl::StrCat(file, ": added_tokens[0]: token \"<wrap>\": id 4294967301 ", kLimit));
}

TEST(HostileTokenIds, PostProcessorIdsAreCheckedInBothPositions) {
  ScopedTestDir d;
  const std::string file = d.File("tokenizer.json");
  auto post = [](const std::string& ids) {
    return absl::StrCat(R"({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "ab"}}],
        "special_tokens": {"ab": {"id": "ab", "ids": )",
                        ids, R"(, "tokens": ["ab"]}}})");
  };
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson("", "[]", post("[4294967298]")))),
            absl::StrCat(file, ": post_processor: token \"ab\": id 4294967298 ", kLimit));
  // Within the limit but past this vocabulary: a suffix id is checked like a prefix one.
  EXPECT_EQ(Error(LoadJson(d, TokenizerJson("", "[]", post("[9]")))),
            absl::StrCat(file, ": post_processor: token id 9 is out of the vocabulary"));
  EXPECT_TRUE(LoadJson(d, TokenizerJson("", "[]", post("[2]"))).ok());
}

TEST(HostileTokenIds, TiktokenRanksAndSpecialsAreChecked) {
  ScopedTestDir d;
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b)), enc;
    absl::Base64Escape(one, &enc);
    ranks += absl::StrCat(enc, " ", b, "\n");
  }
  const std::string path = d.File("bad.tiktoken");
  WriteText(path, ranks + "YWI= 2147483647\n");  // "ab"
  StatusOr<std::unique_ptr<Tokenizer>> t = absl::UnknownError("threw");
  EXPECT_NO_THROW(t = Tokenizer::FromTiktoken(path, "\\S+", {}));
  EXPECT_EQ(Error(t), absl::StrCat(path, ":257: token \"YWI=\": id 2147483647 ", kLimit));

  const std::string ok = d.File("ok.tiktoken");
  WriteText(ok, ranks);
  EXPECT_NO_THROW(t = Tokenizer::FromTiktoken(ok, "\\S+", {{"<|end|>", 2147483647}}));
  EXPECT_EQ(Error(t), absl::StrCat(ok, ": token \"<|end|>\": id 2147483647 ", kLimit));
}

TEST(HostileTokenIds, TokenizerConfigAddedTokenIdsAreChecked) {
  ScopedTestDir d;
  WriteText(d.File("tokenizer_config.json"),
            R"({"added_tokens_decoder": {"2147483647": {"content": "<big>", "special": true}}})");
  WriteText(d.File("tokenizer.json"), TokenizerJson(""));
  StatusOr<std::unique_ptr<Tokenizer>> t = absl::UnknownError("threw");
  EXPECT_NO_THROW(t = Tokenizer::FromDirectory(d.path()));
  EXPECT_EQ(Error(t),
            absl::StrCat(d.File("tokenizer_config.json"),
                         ": added_tokens_decoder: token \"<big>\": id 2147483647 ", kLimit));
}

TEST(HostileTokenIds, IdsBeyondTheModelsVocabularyAreRefusedWhereConfigSaysIt) {
  ScopedTestDir d;
  WriteText(d.File("tokenizer.json"), TokenizerJson(R"(, "abc": 40)"));
  WriteText(d.File("config.json"), R"({"model_type": "kimi_linear", "vocab_size": 32})");
  StatusOr<std::shared_ptr<const TextModel>> m = absl::UnknownError("threw");
  EXPECT_NO_THROW(m = TextModel::FromDirectory(d.path()));
  EXPECT_EQ(Error(m),
            absl::StrCat(d.File("tokenizer.json"),
                         ": token \"abc\": id 40 is outside the model's vocabulary [0, 32) (",
                         d.File("config.json"), ": vocab_size)"));
  // A model vocabulary larger than the tokenizer's (padded) is normal.
  WriteText(d.File("config.json"), R"({"model_type": "kimi_linear", "vocab_size": 64})");
  EXPECT_TRUE(TextModel::FromDirectory(d.path()).ok());
}

}  // namespace
}  // namespace strata
