// Streaming detokenizer: feeding ids one by one yields exactly Decode of the
// whole sequence (including invalid UTF-8 and tokens that split characters),
// never a partial UTF-8 sequence, and stops at stop strings across tokens.
#include "text/detokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "text/tokenizer.h"
#include "text/unicode.h"

namespace strata {
namespace {

// Each tokenizer is loaded once per process. A missing or unreadable file
// fails every test that needs it, with the loader's status, instead of
// aborting the binary.
const StatusOr<std::unique_ptr<Tokenizer>>& Load(const std::string& name) {
  static auto* loaded = new std::map<std::string, StatusOr<std::unique_ptr<Tokenizer>>>();
  auto it = loaded->find(name);
  if (it == loaded->end()) {
    it = loaded
             ->emplace(name, Tokenizer::FromDirectory(std::string(STRATA_TEXT_DATA_DIR) +
                                                      "/tokenizers/" + name))
             .first;
  }
  return it->second;
}

class DetokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"qwen3", "deepseek_v3"}) {
      ASSERT_TRUE(Load(name).ok())
          << name << " tokenizer from the text data: " << Load(name).status();
    }
  }
  static const Tokenizer& Qwen3() { return **Load("qwen3"); }
  static const Tokenizer& DeepSeek() { return **Load("deepseek_v3"); }
};

const char* kSnippets[] = {
    "Hello",
    " world",
    "😀",
    "👨‍👩‍👧‍👦",
    "🇺🇸",
    "世界",
    "こんにちは",
    "안녕",
    "مرحبا",
    "नमस्ते",
    "สวัสดี",
    "Привет",
    "\n\n",
    "  ",
    "\t",
    "123456",
    "é",
    "e\u0301",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "{\"a\": 1}",
    "STOP",
    "ST",
    "OP",
    "🀄",
    "\u00a0",
};

std::string RandomText(std::mt19937& rng) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kSnippets) - 1);
  std::uniform_int_distribution<int> len(0, 12);
  std::string s;
  for (int i = len(rng); i > 0; --i) s += kSnippets[pick(rng)];
  return s;
}

struct Streamed {
  std::string text;
  bool stopped = false;
  std::optional<size_t> stop_index;
};

Streamed Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, DetokenizerOptions opt) {
  StreamingDetokenizer d(tok, std::move(opt));
  Streamed s;
  for (int32_t id : ids) {
    auto out = d.Push(id);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return s;
    // Every chunk is complete UTF-8 on its own.
    EXPECT_EQ(text::FirstInvalidUtf8(out->text), out->text.size());
    s.text += out->text;
    if (out->stopped) {
      s.stopped = true;
      s.stop_index = out->stop_index;
      EXPECT_FALSE(d.Push(id).ok());
      return s;
    }
  }
  DetokenizerOutput fin = d.Finish();
  s.text += fin.text;
  s.stopped = fin.stopped;
  s.stop_index = fin.stop_index;
  return s;
}

TEST_F(DetokenizerTest, StreamEqualsDecodeOfEncodedText) {
  std::mt19937 rng(7);
  for (const Tokenizer* tok : {&Qwen3(), &DeepSeek()}) {
    for (int i = 0; i < 2000; ++i) {
      const std::string text = RandomText(rng);
      auto ids = tok->Encode(text);
      ASSERT_TRUE(ids.ok());
      for (bool skip : {false, true}) {
        DecodeOptions o;
        o.skip_special_tokens = skip;
        auto whole = tok->Decode(*ids, o);
        ASSERT_TRUE(whole.ok());
        DetokenizerOptions dopt;
        dopt.skip_special_tokens = skip;
        EXPECT_EQ(Stream(*tok, *ids, dopt).text, *whole) << text;
      }
    }
  }
}

TEST_F(DetokenizerTest, StreamEqualsDecodeOfRandomIds) {
  // Random ids, biased to byte tokens, give split and invalid UTF-8 sequences.
  const Tokenizer& tok = Qwen3();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() - 1);
  std::uniform_int_distribution<int32_t> low(0, 400);
  std::uniform_int_distribution<int> len(0, 20);
  for (int i = 0; i < 5000; ++i) {
    std::vector<int32_t> ids;
    for (int k = len(rng); k > 0; --k) ids.push_back(rng() % 3 ? low(rng) : any(rng));
    auto whole = tok.Decode(ids);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(Stream(tok, ids, {}).text, *whole);
  }
}

TEST_F(DetokenizerTest, HoldsBackPartialCharacter) {
  // DeepSeek-V3 splits this emoji over two tokens: nothing until the second.
  const Tokenizer& tok = DeepSeek();
  auto ids = tok.Encode("😀", {.add_special_tokens = false});
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  StreamingDetokenizer d(tok, {});
  auto a = d.Push((*ids)[0]);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->text, "");
  auto b = d.Push((*ids)[1]);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->text, "😀");
  // An unfinished sequence at the end is flushed as U+FFFD, as Decode does.
  StreamingDetokenizer d2(tok, {});
  ASSERT_TRUE(d2.Push((*ids)[0]).ok());
  EXPECT_EQ(d2.Finish().text, "\xEF\xBF\xBD");
}

TEST_F(DetokenizerTest, StopStringAcrossTokens) {
  const Tokenizer& tok = Qwen3();
  auto ids = tok.Encode("Hello world, this is the end. More text");
  ASSERT_TRUE(ids.ok());
  DetokenizerOptions opt;
  opt.stop_strings = {"zzz", "s the e"};  // spans " is", " the", " end"
  Streamed s = Stream(tok, *ids, opt);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.stop_index, 1u);
  EXPECT_EQ(s.text, "Hello world, this i");
}

TEST_F(DetokenizerTest, StopStringPrefixIsHeldBackThenReleased) {
  const Tokenizer& tok = Qwen3();
  // "<|im" could start the stop string "<|im_end|>"... but it is followed by
  // "_start|>": the held text must come out unchanged.
  auto ids = tok.Encode("a <|im_start|> b", {.add_special_tokens = true, .parse_special = false});
  ASSERT_TRUE(ids.ok());
  DetokenizerOptions opt;
  opt.stop_strings = {"<|im_end|>"};
  Streamed s = Stream(tok, *ids, opt);
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.text, "a <|im_start|> b");
}

TEST_F(DetokenizerTest, StopStringPropertyOnRandomText) {
  // For random text and a stop string cut from its decode, the stream ends
  // exactly before the first occurrence.
  std::mt19937 rng(5);
  const Tokenizer& tok = Qwen3();
  int stops = 0;
  for (int i = 0; i < 2000; ++i) {
    auto ids = tok.Encode(RandomText(rng));
    ASSERT_TRUE(ids.ok());
    auto whole = tok.Decode(*ids);
    ASSERT_TRUE(whole.ok());
    std::string stop = "STOP";
    if (whole->size() > 2 && rng() % 2) {
      // A substring starting and ending on character boundaries.
      size_t b = rng() % whole->size(), e = b + 1 + rng() % 6;
      while (b > 0 && (static_cast<unsigned char>((*whole)[b]) & 0xC0) == 0x80) --b;
      while (e < whole->size() && (static_cast<unsigned char>((*whole)[e]) & 0xC0) == 0x80) ++e;
      stop = whole->substr(b, std::min(e, whole->size()) - b);
    }
    DetokenizerOptions opt;
    opt.stop_strings = {stop};
    Streamed s = Stream(tok, *ids, opt);
    const size_t p = whole->find(stop);
    if (p == std::string::npos) {
      EXPECT_FALSE(s.stopped);
      EXPECT_EQ(s.text, *whole);
    } else {
      ++stops;
      EXPECT_TRUE(s.stopped) << stop;
      EXPECT_EQ(s.text, whole->substr(0, p)) << stop;
    }
  }
  EXPECT_GT(stops, 500);
}

TEST_F(DetokenizerTest, SkipsSpecialTokensOnRequest) {
  const Tokenizer& tok = Qwen3();
  auto ids = tok.Encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_TRUE(ids.ok());
  DetokenizerOptions opt;
  opt.skip_special_tokens = true;
  EXPECT_EQ(Stream(tok, *ids, opt).text, "user\nhi");
  EXPECT_EQ(Stream(tok, *ids, {}).text, "<|im_start|>user\nhi<|im_end|>");
}

}  // namespace
}  // namespace strata
