// Normalizers, decoders, the Metaspace pre-tokenizer and BPE byte fallback on
// hand-made inputs (expected values taken from the reference tokenizers
// 0.23.3), and clear errors naming the JSON path for what is not supported.
// Exactness at scale is tokenizer_normalizer_live_test.cc's job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/unicode_nfc.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ::testing::HasSubstr;

std::string Normalized(const std::string& spec, std::string s) {
  auto n = text::Normalizer::FromJson(Json::parse(spec), "n");
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok()) return "";
  EXPECT_TRUE((*n)->Normalize(&s).ok());
  return s;
}

TEST(TokenizerNormalizerTest, UnicodeForms) {
  EXPECT_EQ(text::ToNfkc("ﬁ①ｶﾞ１２Ａ"), "fi1ガ12A");
  EXPECT_EQ(text::ToNfkd("ﬁ①é"), "fi1e\u0301");
  EXPECT_EQ(text::ToNfkc("ㄱㅏ"), "\uac00");  // compatibility jamo compose
  EXPECT_EQ(text::ToNfkc("\u2126\u212a"), "\u03a9K");
  EXPECT_EQ(text::ToNfkc("㍻"), "平成");
  // The reference's tables lack these (Unicode 12.1+): left alone.
  EXPECT_EQ(text::ToNfkc("㋿"), "㋿");
  EXPECT_EQ(text::ToNfc("\U00011935\U00011930"), "\U00011935\U00011930");
  EXPECT_TRUE(text::IsNfkcStable("plain ascii, 世界 and é"));
  EXPECT_FALSE(text::IsNfkcStable("x\u00a0y"));
}

TEST(TokenizerNormalizerTest, LowercaseIsPerCharacter) {
  // Σ is always σ (no final-sigma context), İ is i + U+0307.
  EXPECT_EQ(text::ToLowercase("ΟΔΥΣΣΕΥΣ İSTANBUL ẞ ǅ"), "οδυσσευσ i\u0307stanbul ß ǆ");
  EXPECT_EQ(text::ToLowercase("ABC xyz 123"), "abc xyz 123");
}

TEST(TokenizerNormalizerTest, NormalizersFromJson) {
  EXPECT_EQ(Normalized(R"({"type": "NFKC"})", "ﬁ"), "fi");
  EXPECT_EQ(Normalized(R"({"type": "Sequence", "normalizers": [{"type": "NFD"},
                          {"type": "StripAccents"}, {"type": "Lowercase"}]})",
                       "Ǆéàç\u0301X\u20dd"),
            "ǆeacx");
  EXPECT_EQ(Normalized(R"({"type": "Nmt"})", "a\001b\tc\u200bd\ufeffe\u2581f\x7f\u0085"),
            "ab c d e f\u0085");
  EXPECT_EQ(Normalized(R"({"type": "ByteLevel"})", "é a"), "Ã©Ġa");
}

std::string Decoded(const std::string& spec, std::vector<std::string> tokens) {
  auto d = text::Decoder::FromJson(Json::parse(spec), "d");
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return "";
  EXPECT_TRUE((*d)->DecodeChain(&tokens).ok());
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

constexpr char kLlamaDecoder[] = R"({"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";

TEST(TokenizerNormalizerTest, Decoders) {
  // An invalid byte run gives one U+FFFD per byte; "<0x+A>" is byte 0x0A, as
  // Rust's from_str_radix reads it.
  EXPECT_EQ(Decoded(kLlamaDecoder, {"▁Hello", "▁world", "<0xE5>", "<0x8f>", "a", "<0xe5>", "<0x8f>",
                                    "<0xab>", "<0x+A>"}),
            "Hello world\uFFFD\uFFFDa叫\n");
  // Metaspace drops every replacement character of the first token unless
  // prepend_scheme is "never".
  EXPECT_EQ(Decoded(R"({"type": "Metaspace", "replacement": "▁"})", {"▁▁a", "▁b▁"}), "a b ");
  EXPECT_EQ(Decoded(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})",
                    {"▁▁a", "▁b▁"}),
            "  a b ");
  EXPECT_EQ(Decoded(R"({"type": "Strip", "content": "x", "start": 2, "stop": 3})", {"xxxaxx"}),
            "xa");
  auto d = text::Decoder::FromJson(Json::parse(kLlamaDecoder), "d");
  ASSERT_TRUE(d.ok());
  std::string t = "<0xE5>";
  (*d)->StreamBytes(&t);
  EXPECT_EQ(t, "\xE5");
  t = "▁world";
  (*d)->StreamBytes(&t);
  EXPECT_EQ(t, " world");
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / absl::StrCat("strata_norm_test_", getpid(), "_", n_++);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  static inline int n_ = 0;
  fs::path path_;
};

// A sentencepiece-style BPE with some byte tokens (<0xC3>, <0xA9>) and unk.
std::string FallbackJson(const std::string& normalizer, const std::string& pre,
                         const std::string& decoder, bool fuse_unk = true) {
  return absl::StrCat(R"({"version": "1.0", "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false,
       "normalized": false, "single_word": false}],
    "normalizer": )",
                      normalizer, R"(, "pre_tokenizer": )", pre,
                      R"(, "post_processor": null, "decoder": )", decoder, R"(,
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": )",
                      fuse_unk ? "true" : "false", R"(,
      "vocab": {"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "a": 3, "b": 4, "ab": 5, "▁": 6, "▁a": 7},
      "merges": [["a", "b"], ["▁", "a"]]}})");
}

TEST(TokenizerNormalizerTest, ByteFallbackAndUnkAsTheReference) {
  TempDir d;
  auto t = Tokenizer::FromTokenizerJson(d.Write("t.json", FallbackJson("null", "null", "null")));
  ASSERT_TRUE(t.ok()) << t.status();
  const EncodeOptions o{.add_special_tokens = false};
  EXPECT_EQ(*(*t)->Encode("éx", o), (std::vector<int32_t>{1, 2, 0}));
  // A pending unk is added only before the next vocab token or at the end:
  // byte tokens come first.
  EXPECT_EQ(*(*t)->Encode("xé", o), (std::vector<int32_t>{1, 2, 0}));
  EXPECT_EQ(*(*t)->Encode("xyé", o), (std::vector<int32_t>{1, 2, 0}));  // fused
  EXPECT_EQ(*(*t)->Encode("éaxyb", o), (std::vector<int32_t>{1, 2, 3, 0, 4}));
  EXPECT_EQ(*(*t)->Encode("ü", o), (std::vector<int32_t>{0}));  // no <0xBC>
  auto nofuse =
      Tokenizer::FromTokenizerJson(d.Write("n.json", FallbackJson("null", "null", "null", false)));
  ASSERT_TRUE(nofuse.ok()) << nofuse.status();
  EXPECT_EQ(*(*nofuse)->Encode("xyé", o), (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(*(*nofuse)->Encode("xyab", o), (std::vector<int32_t>{0, 0, 5}));
}

TEST(TokenizerNormalizerTest, MetaspaceFirstPrependsOnlyAtTheStart) {
  TempDir d;
  auto t = Tokenizer::FromTokenizerJson(
      d.Write("t.json", FallbackJson("null",
                                     R"({"type": "Metaspace", "replacement": "▁",
                                 "prepend_scheme": "first", "split": true})",
                                     kLlamaDecoder)));
  ASSERT_TRUE(t.ok()) << t.status();
  const EncodeOptions o{.add_special_tokens = false};
  EXPECT_EQ(*(*t)->Encode("a a", o), (std::vector<int32_t>{7, 7}));
  // After an added token the text does not start at offset 0: no prefix.
  EXPECT_EQ(*(*t)->Encode("<unk>a a", o), (std::vector<int32_t>{0, 3, 7}));
  EXPECT_EQ(*(*t)->Decode({0, 3, 7}), "<unk>a a");
  EXPECT_EQ(*(*t)->Decode({7, 7, 1, 2}), "a aé");
  EXPECT_EQ(*(*t)->TokenBytes(7), " a");
  EXPECT_EQ(*(*t)->TokenBytes(1), "\xC3");
}

TEST(TokenizerNormalizerTest, NormalizedAddedTokensDecodeNormalized) {
  // The reference decodes a normalized added token in its normalized form,
  // and skip_special_tokens compares strings, so a special token whose
  // normalized form differs is kept.
  TempDir d;
  auto t = Tokenizer::FromTokenizerJson(d.Write("t.json", R"({"version": "1.0",
    "added_tokens": [
      {"id": 3, "content": "ＳＰ", "special": true, "lstrip": false, "rstrip": false,
       "normalized": true, "single_word": false},
      {"id": 4, "content": "ＡＤ", "special": false, "lstrip": false, "rstrip": false,
       "normalized": true, "single_word": false}],
    "normalizer": {"type": "NFKC"}, "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Fuse"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}, "merges": []}})"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("aSPbＳＰ"), (std::vector<int32_t>{0, 3, 1, 3}));
  EXPECT_EQ(*(*t)->Decode({0, 3, 4, 1}), "aSPADb");
  EXPECT_EQ(*(*t)->Decode({0, 3, 4, 1}, {.skip_special_tokens = true}), "aSPADb");
}

TEST(TokenizerNormalizerTest, MetaspaceFirstAfterNormalizersThatDropTheStart) {
  // When a normalizer deletes the first characters (or replaces a run of them),
  // the reference's alignments no longer put the text at offset 0, so
  // prepend_scheme "first" adds nothing. Expected ids from the reference.
  struct Case {
    const char* normalizer;
    const char* text;
    std::vector<int32_t> ids;
  };
  const Case cases[] = {
      {R"({"type": "Strip", "strip_left": true, "strip_right": true})", "  a a", {3, 7}},
      {R"({"type": "Replace", "pattern": {"String": "q"}, "content": ""})", "qa a", {3, 7}},
      {R"({"type": "Replace", "pattern": {"String": "qq"}, "content": "b"})", "qqa", {4, 3}},
      {R"({"type": "Replace", "pattern": {"String": "q"}, "content": "b"})", "qa", {6, 4, 3}},
      {R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})",
       "\u0301a a",
       {3, 7}},
      {R"({"type": "NFKC"})", "\u00aa a", {7, 7}},
      {R"({"type": "Nmt"})", "\001a a", {3, 7}},
      {R"({"type": "Sequence", "normalizers": [
          {"type": "Strip", "strip_left": true, "strip_right": false},
          {"type": "Prepend", "prepend": "b"}]})",
       " a",
       {4, 3}},
      {R"({"type": "Sequence", "normalizers": [
          {"type": "Replace", "pattern": {"String": "q"}, "content": ""},
          {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}]})",
       "qa",
       {4}},
  };
  TempDir d;
  int i = 0;
  for (const Case& c : cases) {
    auto t = Tokenizer::FromTokenizerJson(d.Write(
        absl::StrCat("t", i++, ".json"), FallbackJson(c.normalizer,
                                                      R"({"type": "Metaspace", "replacement": "▁",
                                 "prepend_scheme": "first", "split": true})",
                                                      "null")));
    ASSERT_TRUE(t.ok()) << t.status();
    auto ids = (*t)->Encode(c.text, {.add_special_tokens = false});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c.ids) << c.normalizer << " on " << c.text;
  }
}

void ExpectError(const StatusOr<std::unique_ptr<Tokenizer>>& r, const std::string& part1,
                 const std::string& part2) {
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(part1));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(part2));
}

TEST(TokenizerNormalizerTest, UnsupportedTypesNameTheJsonPath) {
  TempDir d;
  std::string p =
      d.Write("n.json", FallbackJson(R"({"type": "Sequence", "normalizers": [{"type": "NFKC"},
                                  {"type": "Precompiled", "precompiled_charsmap": "AA=="}]})",
                                     "null", "null"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p + ": normalizer.normalizers[1].type",
              "\"Precompiled\" is not supported");
  p = d.Write("bert.json", FallbackJson(R"({"type": "BertNormalizer"})", "null", "null"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "normalizer.type", "\"BertNormalizer\"");
  p = d.Write("dec.json",
              FallbackJson("null", "null",
                           R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                {"type": "WordPiece", "prefix": "##"}]})"));
  ExpectError(Tokenizer::FromTokenizerJson(p), p + ": decoder.decoders[1].type",
              "\"WordPiece\" is not supported");
  p = d.Write("strip.json", FallbackJson("null", "null",
                                         R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
                                {"type": "Strip", "content": "ab", "start": 1, "stop": 0}]})"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "decoder.decoders[1].content", "one character");
  p = d.Write("ms.json", FallbackJson("null",
                                      R"({"type": "Metaspace", "replacement": "▁",
                                          "prepend_scheme": "sometimes"})",
                                      "null"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "pre_tokenizer.prepend_scheme", "\"sometimes\"");
  p = d.Write("ms2.json", FallbackJson("null",
                                       R"({"type": "Metaspace", "replacement": "▁",
                                           "add_prefix_space": false})",
                                       "null"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "pre_tokenizer.add_prefix_space", "prepend_scheme");
  p = d.Write("re.json", FallbackJson(R"({"type": "Replace", "pattern": {"Regex": "(a"},
                                         "content": "b"})",
                                      "null", "null"));
  ExpectError(Tokenizer::FromTokenizerJson(p), "normalizer.pattern.Regex", "");
  std::string j = FallbackJson("null", "null", "null");
  j.replace(j.find(R"("type": "BPE")"), 13, R"("type": "Unigram")");
  p = d.Write("uni.json", j);
  ExpectError(Tokenizer::FromTokenizerJson(p), "model.type", "Unigram");
}

}  // namespace
}  // namespace strata
