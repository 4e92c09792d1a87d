#include "memory/host_tier.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace strata {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(HostTierTest, ObjectsComeBackByteForByte) {
  HostTier tier(1 << 20);
  const std::vector<uint8_t> a = RandomBytes(1000, 1), b = RandomBytes(777, 2);
  ASSERT_TRUE(tier.Put("a", a).ok());
  ASSERT_TRUE(tier.Put("b", b).ok());
  std::vector<uint8_t> out = RandomBytes(5, 3);
  ASSERT_TRUE(tier.Get("a", &out).ok());
  EXPECT_EQ(out, a);
  ASSERT_TRUE(tier.Get("b", &out).ok());
  EXPECT_EQ(out, b);
  EXPECT_EQ(tier.bytes(), 1777u);
  EXPECT_EQ(tier.objects(), 2);
  EXPECT_EQ(tier.name(), "host");
}

TEST(HostTierTest, AMissIsNotFoundAndLeavesTheBufferAlone) {
  HostTier tier(4096);
  std::vector<uint8_t> out = RandomBytes(16, 4);
  const std::vector<uint8_t> before = out;
  const Status s = tier.Get("absent", &out);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(out, before);
  EXPECT_FALSE(tier.Contains("absent"));
}

TEST(HostTierTest, AKeyHeldKeepsItsFirstObject) {
  HostTier tier(4096);
  const std::vector<uint8_t> first = RandomBytes(100, 5);
  ASSERT_TRUE(tier.Put("k", first).ok());
  ASSERT_TRUE(tier.Put("k", RandomBytes(300, 6)).ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE(tier.Get("k", &out).ok());
  EXPECT_EQ(out, first);
  EXPECT_EQ(tier.bytes(), 100u);
}

TEST(HostTierTest, RoomIsMadeByDroppingTheLeastRecentlyUsed) {
  HostTier tier(1000);
  ASSERT_TRUE(tier.Put("a", RandomBytes(400, 7)).ok());
  ASSERT_TRUE(tier.Put("b", RandomBytes(400, 8)).ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE(tier.Get("a", &out).ok());  // b is now the least recently used
  ASSERT_TRUE(tier.Put("c", RandomBytes(300, 9)).ok());
  EXPECT_TRUE(tier.Contains("a"));
  EXPECT_FALSE(tier.Contains("b"));
  EXPECT_TRUE(tier.Contains("c"));
  EXPECT_EQ(tier.bytes(), 700u);
  // Filling it to the byte is allowed; the bytes never pass the capacity.
  ASSERT_TRUE(tier.Put("d", RandomBytes(300, 10)).ok());
  EXPECT_EQ(tier.bytes(), 1000u);
  ASSERT_TRUE(tier.Put("e", RandomBytes(1000, 11)).ok());
  EXPECT_EQ(tier.objects(), 1);
  EXPECT_EQ(tier.bytes(), 1000u);
}

TEST(HostTierTest, AnObjectLargerThanTheTierIsRefusedAndNothingIsDropped) {
  HostTier tier(1000);
  ASSERT_TRUE(tier.Put("a", RandomBytes(600, 12)).ok());
  const Status s = tier.Put("huge", RandomBytes(1001, 13));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("1001 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("1000 bytes"), std::string::npos) << s;
  EXPECT_TRUE(tier.Contains("a"));
  EXPECT_EQ(tier.bytes(), 600u);
}

TEST(HostTierTest, EraseGivesTheBytesBack) {
  HostTier tier(1000);
  ASSERT_TRUE(tier.Put("a", RandomBytes(600, 14)).ok());
  tier.Erase("a");
  tier.Erase("never held");
  EXPECT_EQ(tier.bytes(), 0u);
  EXPECT_EQ(tier.objects(), 0);
  ASSERT_TRUE(tier.Put("b", RandomBytes(1000, 15)).ok());
}

TEST(HostTierTest, ConcurrentWritersAndReadersSeeWholeObjects) {
  // Each key's object is derived from the key, so a reader can tell a whole
  // object from a torn or foreign one.
  HostTier tier(64 * 1024);
  constexpr int kThreads = 6, kOps = 3000;
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int i = 0; i < kOps; ++i) {
        const uint32_t k = static_cast<uint32_t>((i * 7 + t) % 97);
        const std::string key = "k" + std::to_string(k);
        const std::vector<uint8_t> want = RandomBytes(200 + k * 13, k);
        if (i % 3 == 0) {
          if (!tier.Put(key, want).ok()) ++bad[t];
        } else if (tier.Get(key, &out).ok() && out != want) {
          ++bad[t];
        }
        if (i % 50 == 0) tier.Erase(key);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_LE(tier.bytes(), tier.capacity());
}

}  // namespace
}  // namespace strata
