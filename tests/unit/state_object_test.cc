// Stored state objects and their keys (memory/state_object.h,
// memory/prefix_key.h) and the disk tier (memory/disk_tier.h): keys chain
// per 64-token block and differ for any other model or prefix; an object
// round-trips and is refused when damaged, truncated, made by another model,
// filed under another key, or holding tokens its key does not name; the
// disk tier keeps objects whole, write-once, within its capacity (least
// recently used out first), and finds what another instance (another
// process) wrote in the same directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "base/sealed_bytes.h"
#include "memory/disk_tier.h"
#include "memory/prefix_key.h"
#include "memory/state_object.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

ModelFingerprint Model(const std::string& digest = std::string(64, 'a')) {
  return {"kimi_linear", digest, "cpu.v1;block=64;rows:f32x8", 32};
}

std::vector<int32_t> Tokens(size_t n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  for (int32_t& x : t) x %= 32;
  return t;
}

TEST(PrefixKey, ChainsPerBlockAndSeparatesModelsAndPrefixes) {
  const std::vector<int32_t> t = Tokens(200);
  const std::vector<Sha256Digest> blocks = BlockPrefixKeys(Model(), t);
  ASSERT_EQ(blocks.size(), 3u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i], PrefixKey(Model(), std::span(t).first((i + 1) * 64)));
  }
  EXPECT_NE(PrefixKey(Model(), t), blocks[2]);
  EXPECT_NE(PrefixKey(Model(), std::span(t).first(129)), PrefixKey(Model(), std::span(t).first(130)));
  EXPECT_NE(PrefixKey(Model(), t), PrefixKey(Model(std::string(64, 'b')), t));
  ModelFingerprint other = Model();
  other.state_layout += "x";
  EXPECT_NE(PrefixKey(Model(), t), PrefixKey(other, t));
  std::vector<int32_t> u = t;
  u[5] = 7;
  EXPECT_NE(PrefixKey(Model(), std::span(u).first(64)), blocks[0]);
  EXPECT_NE(PrefixKey(Model(), {}), PrefixKey(Model(), std::span(t).first(1)));
}

StoredPrefix Prefix(size_t n) {
  StoredPrefix p;
  p.tokens = Tokens(n);
  p.max_context = 256;
  p.logits.assign(32, 0.25f);
  p.checkpoint.assign(1000, 7);
  return p;
}

TEST(StateObject, RoundTripsAndRefusesEveryMismatch) {
  const StoredPrefix p = Prefix(130);
  const Sha256Digest key = PrefixKey(Model(), p.tokens);
  std::vector<uint8_t> bytes = EncodeStateObject(Model(), p);
  auto back = DecodeStateObject(bytes, Model(), key, "obj");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, p.tokens);
  EXPECT_EQ(back->checkpoint, p.checkpoint);
  EXPECT_EQ(back->logits, p.logits);
  EXPECT_EQ(back->max_context, 256);

  // Every flipped byte is refused (the header's checks or the checksum).
  for (size_t at = 0; at < bytes.size(); at += 97) {
    bytes[at] ^= 0x10;
    const Status st = DecodeStateObject(bytes, Model(), key, "obj").status();
    EXPECT_FALSE(st.ok()) << "byte " << at;
    EXPECT_TRUE(absl::IsDataLoss(st) || absl::IsFailedPrecondition(st)) << st;
    bytes[at] ^= 0x10;
  }
  for (size_t n : {size_t{0}, size_t{55}, size_t{56}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeStateObject(std::span(bytes).first(n), Model(), key, "obj").status()));
  }
  // Another model: named.
  const Status other = DecodeStateObject(bytes, Model(std::string(64, 'b')), key, "obj").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;
  EXPECT_NE(other.message().find("weights_digest"), std::string::npos) << other;
  // Filed under another key.
  const Sha256Digest wrong = PrefixKey(Model(), std::span(p.tokens).first(64));
  const Status misfiled = DecodeStateObject(bytes, Model(), wrong, "obj").status();
  EXPECT_TRUE(absl::IsDataLoss(misfiled)) << misfiled;
  EXPECT_NE(misfiled.message().find("not the one asked for"), std::string::npos);
}

TEST(StateObject, ABodyWhoseTokensDoNotHashToItsKeyIsRefused) {
  // A well-formed, checksummed object claiming another prefix's key: made by
  // encoding one prefix and splicing in another's key, then resealing.
  StoredPrefix p = Prefix(64);
  std::vector<uint8_t> bytes = EncodeStateObject(Model(), p);
  ModelFingerprint fp;
  Sha256Digest stored{};
  auto body = DecodeStateObjectBody(std::span(bytes).subspan(56), &fp, &stored, "obj");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(stored, PrefixKey(Model(), p.tokens));
  std::vector<int32_t> other = p.tokens;
  other[0] = 9;
  p.tokens = other;
  std::vector<uint8_t> forged = EncodeStateObject(Model(), p);
  std::vector<uint8_t> raw(forged.begin() + 56, forged.end());
  const Sha256Digest own = PrefixKey(Model(), other);
  auto at = std::search(raw.begin(), raw.end(), own.begin(), own.end());
  ASSERT_NE(at, raw.end());
  std::copy(stored.begin(), stored.end(), at);  // `other`'s tokens under the first key
  forged = Seal("STRATAKV", kStateObjectVersion, raw);
  const Status st = DecodeStateObject(forged, Model(), stored, "obj").status();
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("do not hash to its key"), std::string::npos) << st;
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_disk_tier_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string Key(int i) { return ToHex(PrefixKey(Model(), Tokens(static_cast<size_t>(i) + 1))); }

TEST_F(DiskTierTest, KeepsObjectsWholeWithinItsCapacity) {
  auto tier = DiskTier::Open(dir_.string(), 2500);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const std::vector<uint8_t> a(1000, 1), b(1000, 2), c(1000, 3);
  ASSERT_TRUE((*tier)->Put(Key(1), a).ok());
  ASSERT_TRUE((*tier)->Put(Key(2), b).ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE((*tier)->Get(Key(1), &out).ok());  // 1 is now the most recent
  EXPECT_EQ(out, a);
  ASSERT_TRUE((*tier)->Put(Key(3), c).ok());  // evicts 2, the least recently used
  EXPECT_TRUE((*tier)->Contains(Key(1)));
  EXPECT_FALSE((*tier)->Contains(Key(2)));
  EXPECT_TRUE((*tier)->Contains(Key(3)));
  EXPECT_EQ((*tier)->bytes(), 2000u);
  // Write-once: the first object stays.
  ASSERT_TRUE((*tier)->Put(Key(1), c).ok());
  ASSERT_TRUE((*tier)->Get(Key(1), &out).ok());
  EXPECT_EQ(out, a);
  EXPECT_TRUE(absl::IsResourceExhausted((*tier)->Put(Key(4), std::vector<uint8_t>(3000, 0))));
  EXPECT_TRUE(absl::IsNotFound((*tier)->Get(Key(2), &out)));
  // Names that are not keys never reach the file system.
  EXPECT_TRUE(absl::IsInvalidArgument((*tier)->Put("../escape", a)));
  EXPECT_FALSE((*tier)->Contains("../escape"));
  EXPECT_TRUE(absl::IsInvalidArgument(DiskTier::Open(dir_.string(), 0).status()));
  // No temporary files left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().extension(), ".kv") << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2);
}

TEST_F(DiskTierTest, AnotherInstanceOnTheDirectoryFindsWhatThisOneWrote) {
  auto first = DiskTier::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Put(Key(1), std::vector<uint8_t>(10, 1)).ok());
  auto second = DiskTier::Open(dir_.string(), 1 << 20);  // as another process would
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->bytes(), 10u);
  ASSERT_TRUE((*first)->Put(Key(2), std::vector<uint8_t>(20, 2)).ok());  // after the other opened
  std::vector<uint8_t> out;
  ASSERT_TRUE((*second)->Get(Key(2), &out).ok());
  EXPECT_EQ(out, std::vector<uint8_t>(20, 2));
  EXPECT_EQ((*second)->bytes(), 30u);
  (*second)->Erase(Key(1));
  EXPECT_FALSE((*first)->Contains(Key(1)));
  EXPECT_TRUE(absl::IsNotFound((*first)->Get(Key(1), &out)));
  EXPECT_EQ((*first)->bytes(), 20u);
  // A file where the directory belongs.
  std::ofstream(dir_ / "plain") << "x";
  EXPECT_FALSE(DiskTier::Open((dir_ / "plain").string(), 1 << 20).ok());
}

}  // namespace
}  // namespace strata
