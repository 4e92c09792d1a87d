// Tokenizer loading and building blocks: clear errors for bad files (naming
// the file and the field or line), both merges encodings, Kimi-style tiktoken
// directories, NFC and the UTF-8 helpers. Exactness against the reference is
// tokenizer_live_test.cc's job.
#include "text/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "text/unicode.h"
#include "text/unicode_nfc.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / absl::StrCat("strata_tok_test_", getpid(), "_", counter_++);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// A tiny byte-level BPE tokenizer.json; `merges` is spliced in verbatim.
std::string TinyJson(const std::string& merges,
                     const std::string& pre =
                         R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})") {
  return absl::StrCat(R"({"version": "1.0", "added_tokens": [
      {"id": 7, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}],
    "normalizer": null, "pre_tokenizer": )",
                      pre, R"(,
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5, "Ġab": 6},
              "merges": )",
                      merges, "}}");
}

TEST(TokenizerTest, BothMergesEncodingsGiveTheSameIds) {
  TempDir d;
  auto a = Tokenizer::FromTokenizerJson(d.Write("a.json", TinyJson(R"(["a b", "ab c", "Ġ ab"])")));
  auto b = Tokenizer::FromTokenizerJson(
      d.Write("b.json", TinyJson(R"([["a", "b"], ["ab", "c"], ["Ġ", "ab"]])")));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (const char* text : {"abc", "ab ab", "cab<s>abc", "ba"}) {
    auto ia = (*a)->Encode(text), ib = (*b)->Encode(text);
    ASSERT_TRUE(ia.ok() && ib.ok());
    EXPECT_EQ(*ia, *ib) << text;
  }
  EXPECT_EQ(*(*a)->Encode("abc ab<s>"), (std::vector<int32_t>{4, 6, 7}));
  EXPECT_EQ(*(*a)->Decode({4, 6, 7}), "abc ab<s>");
  EXPECT_EQ(*(*a)->Decode({4, 6, 7}, {.skip_special_tokens = true}), "abc ab");
  EXPECT_TRUE((*a)->IsSpecial(7));
  EXPECT_EQ((*a)->TokenToId("Ġab"), 6);
  EXPECT_EQ(*(*a)->TokenBytes(6), " ab");
}

void ExpectError(const StatusOr<std::unique_ptr<Tokenizer>>& r, const std::string& part1,
                 const std::string& part2) {
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(part1));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(part2));
}

TEST(TokenizerTest, BadTokenizerJsonErrorsNameFileAndField) {
  TempDir d;
  std::string p = d.Write("t1.json", "{not json");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "not valid JSON");
  p = d.Write("t2.json", TinyJson(R"(["a b", 12])"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "model.merges[1]");
  p = d.Write("t3.json", TinyJson(R"(["a b c"])"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "model.merges[0]");
  p = d.Write("t4.json", TinyJson(R"(["a x"])"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "model.merges[0]", "\"x\" is not in the vocab");
  p = d.Write(
      "t5.json",
      TinyJson(
          R"([])",
          R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Bogus"}]})"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "pre_tokenizer.pretokenizers[1].type");
  p = d.Write(
      "t6.json",
      TinyJson(R"([])",
               R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "pre_tokenizer.pattern.Regex");
  p = d.Write(
      "t7.json",
      TinyJson(R"([])", R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"})"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "behavior");
  ExpectError(Tokenizer::FromTokenizerJson(d.path() + "/missing.json"), "missing.json",
              "file not found");
}

TEST(TokenizerTest, BadConfigAndDirectoryErrors) {
  TempDir d;
  d.Write("tokenizer.json", TinyJson(R"(["a b"])"));
  d.Write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  ExpectError(Tokenizer::FromDirectory(d.path()), "tokenizer_config.json", "add_bos_token");
  d.Write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<nope>"})");
  ExpectError(Tokenizer::FromDirectory(d.path()), "bos_token", "<nope>");
  d.Write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": {"content": "<s>"}})");
  auto t = Tokenizer::FromDirectory(d.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("ab"), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(*(*t)->Encode("ab", {.add_special_tokens = false}), (std::vector<int32_t>{3}));
  EXPECT_EQ((*t)->bos_token(), "<s>");
  TempDir empty;
  ExpectError(Tokenizer::FromDirectory(empty.path()), empty.path(), "no tokenizer.json");
}

TEST(TokenizerTest, BadTiktokenFileErrorsNameLine) {
  TempDir d;
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b)), enc;
    absl::Base64Escape(one, &enc);
    ranks += absl::StrCat(enc, " ", b, "\n");
  }
  const std::string ok_path = d.Write("ok.tiktoken", ranks);
  EXPECT_TRUE(Tokenizer::FromTiktoken(ok_path, "\\S+|\\s+", {}).ok());
  std::string p = d.Write("bad1.tiktoken", ranks + "YWI= notanumber\n");
  ExpectError(Tokenizer::FromTiktoken(p, "\\S+", {}), p + ":257", "rank");
  p = d.Write("bad2.tiktoken", "YQ== 0\n!!!! 1\n");
  ExpectError(Tokenizer::FromTiktoken(p, "\\S+", {}), p + ":2", "base64");
  p = d.Write("bad3.tiktoken", "YQ== 0\n");
  ExpectError(Tokenizer::FromTiktoken(p, "\\S+", {}), p, "has no rank");
  ExpectError(Tokenizer::FromTiktoken(ok_path, "(", {}), ok_path, "pattern");
}

// Inputs the fuzzers found (tests/fuzz/corpus keeps them too): ids that
// would size a table of billions, or wrap to 32 bits, and flags of the wrong
// type are errors naming the field, not crashes.
TEST(TokenizerTest, TokenIdsAndFlagsAreChecked) {
  TempDir d;
  std::string p = d.Write("ids1.json", R"({"added_tokens": [{"id": 4294967297, "content": "x"}],
      "model": {"vocab": {"a": 0}, "merges": []}})");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "added_tokens[0]");
  p = d.Write("ids2.json", R"({"model": {"vocab": {"a": 2147483647}, "merges": []}})");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "vocab: token \"a\"");
  p = d.Write("ids3.json", R"({"model": {"vocab": {"a": 0}, "merges": []},
      "post_processor": {"type": "RobertaProcessing", "cls": ["a", 0], "sep": ["b", 5]}})");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "token id 5 is out of the vocabulary");
  p = d.Write("flag.json", R"({"added_tokens": [{"id": 1, "content": "x", "special": "yes"}],
      "model": {"vocab": {"a": 0}, "merges": []}})");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "added_tokens[0].special");
  p = d.Write("dropout.json", R"({"model": {"vocab": {"a": 0}, "merges": [], "dropout": "0.1"}})");
  ExpectError(Tokenizer::FromTokenizerJson(p), p, "model.dropout");

  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    std::string enc;
    absl::Base64Escape(std::string(1, static_cast<char>(b)), &enc);
    ranks += absl::StrCat(enc, " ", b, "\n");
  }
  p = d.Write("big.tiktoken", ranks + "YWI= 2147483647\n");
  ExpectError(Tokenizer::FromTiktoken(p, "\\S+", {}), p + ":257", "is outside [0, 16777216)");
  p = d.Write("dup.tiktoken", ranks + "YWI= 256\nY2Q= 256\n");
  ExpectError(Tokenizer::FromTiktoken(p, "\\S+", {}), p + ":258", "rank 256");
  ExpectError(Tokenizer::FromTiktoken(d.Write("ok.tiktoken", ranks), "\\S+", {{"<x>", -1}}),
              "ok.tiktoken", "id -1 is outside");

  d.Write("tiktoken.model", ranks);
  d.Write("tokenizer_config.json",
          R"({"added_tokens_decoder": {"2147483647": {"content": "<x>"}}})");
  ExpectError(Tokenizer::FromDirectory(d.path()), "tokenizer_config.json", "2147483647");
  d.Write("tokenizer_config.json",
          R"({"added_tokens_decoder": {"300": {"content": "<x>", "lstrip": 1}}})");
  ExpectError(Tokenizer::FromDirectory(d.path()), "added_tokens_decoder[\"300\"].lstrip",
              "true or false");
}

TEST(TokenizerTest, KimiStyleTiktokenDirectory) {
  // tiktoken.model + tokenizer_config.json whose added_tokens_decoder names
  // the specials after the ranked tokens (Kimi's layout).
  TempDir d;
  const std::string ranks = std::string(STRATA_TEXT_DATA_DIR) + "/tiktoken/cl100k_base.tiktoken";
  std::error_code ec;
  fs::copy_file(ranks, d.path() + "/tiktoken.model", ec);
  ASSERT_FALSE(ec) << "copying " << ranks << ": " << ec.message();
  d.Write("tokenizer_config.json", R"({
    "add_bos_token": true, "bos_token": "[BOS]", "eos_token": "[EOS]",
    "added_tokens_decoder": {"100256": {"content": "[BOS]", "special": true},
                             "100257": {"content": "[EOS]", "special": true}}})");
  auto t = Tokenizer::FromDirectory(d.path());
  ASSERT_TRUE(t.ok()) << t.status();
  auto ids = (*t)->Encode("hello[EOS]<|reserved_token_100300|>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{100256, 15339, 100257, 100300}));
  EXPECT_EQ((*t)->vocab_size(), 100256 + 256);
  EXPECT_TRUE((*t)->IsSpecial(100257));
  EXPECT_EQ(*(*t)->Decode(*ids, {.skip_special_tokens = true}), "hello");
  // Han runs are their own pieces under Kimi's pattern.
  auto a = (*t)->Encode("世界abc", {.add_special_tokens = false});
  auto b = (*t)->Encode("世界", {.add_special_tokens = false});
  auto c = (*t)->Encode("abc", {.add_special_tokens = false});
  std::vector<int32_t> bc = *b;
  bc.insert(bc.end(), c->begin(), c->end());
  EXPECT_EQ(*a, bc);
}

TEST(TokenizerTest, InvalidUtf8InputIsAnError) {
  TempDir d;
  auto t = Tokenizer::FromTokenizerJson(d.Write("t.json", TinyJson(R"([])")));
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Encode("ab\xC3");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("byte 2"));
  EXPECT_FALSE((*t)->Decode({99}).ok());
}

TEST(UnicodeTest, Nfc) {
  EXPECT_EQ(text::ToNfc("e\u0301"), "\u00e9");
  EXPECT_EQ(text::ToNfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(text::ToNfc("\u212b"), "\u00c5");
  EXPECT_EQ(text::ToNfc("a\u0301\u0328"), "\u0105\u0301");  // reordered, then composed
  EXPECT_EQ(text::ToNfc("\u0958"), "\u0915\u093c");         // composition exclusion
  EXPECT_EQ(text::ToNfd("\u00e9"), "e\u0301");
  EXPECT_TRUE(text::IsNfcStable("plain ascii and 世界"));
  EXPECT_FALSE(text::IsNfcStable("e\u0301"));
}

TEST(UnicodeTest, Utf8LossyAndCompletePrefix) {
  EXPECT_EQ(text::Utf8Lossy("a\xF0\x9F\x98"), "a\uFFFD");  // one maximal subpart
  EXPECT_EQ(text::Utf8Lossy("\xE0\x80\x41"), "\uFFFD\uFFFD\x41");
  EXPECT_EQ(text::Utf8Lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(text::CompleteUtf8PrefixLength("ab\xE4\xB8"), 2u);
  EXPECT_EQ(text::CompleteUtf8PrefixLength("ab\xE4\xB8\x96"), 5u);
  EXPECT_EQ(text::CompleteUtf8PrefixLength("ab\xE0\x80"), 4u);  // invalid: no reason to wait
  EXPECT_EQ(text::CompleteUtf8PrefixLength("\xF0\x9F\x98"), 0u);
}

}  // namespace
}  // namespace strata
