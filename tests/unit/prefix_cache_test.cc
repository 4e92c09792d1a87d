// PrefixCache's byte accounting with checkpoints that share blocks (the GPU
// executor's CudaCheckpoint shares the full attention blocks of its state):
// each shared block counts once, an eviction frees what no other entry holds.
#include "memory/prefix_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace strata {
namespace {

// Only its address matters to the cache.
class NullModel final : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    return absl::UnimplementedError("NullModel");
  }
  Status Forward(std::span<const int32_t>, SequenceState&, float*, bool) const override {
    return absl::UnimplementedError("NullModel");
  }

 private:
  ModelInfo info_;
};

class SharingCheckpoint final : public StateCheckpoint {
 public:
  SharingCheckpoint(int64_t tokens, std::vector<int32_t> blocks, uint64_t block_bytes, uint64_t own)
      : tokens_(tokens), blocks_(std::move(blocks)), block_bytes_(block_bytes), own_(own) {}
  int64_t num_tokens() const override { return tokens_; }
  Footprint footprint() const override { return {blocks_, block_bytes_, own_}; }

 private:
  int64_t tokens_;
  std::vector<int32_t> blocks_;
  uint64_t block_bytes_, own_;
};

constexpr int32_t kBlock = 64;
constexpr uint64_t kBlockBytes = 100, kOwn = 10;

// The first `n` tokens of one conversation, sharing blocks 1..n/64.
std::shared_ptr<const StateSnapshot> Prefix(const Model* m, int64_t n, uint64_t model_bytes = 0) {
  auto s = std::make_shared<StateSnapshot>();
  s->model = m;
  s->max_context = 4096;
  for (int64_t i = 0; i < n; ++i) s->tokens.push_back(static_cast<int32_t>(7 + i % 50));
  std::vector<int32_t> blocks;
  for (int32_t b = 1; b <= n / kBlock; ++b) blocks.push_back(b);
  s->checkpoint = std::make_unique<SharingCheckpoint>(n, std::move(blocks), kBlockBytes, kOwn);
  s->bytes = model_bytes;
  return s;
}

TEST(PrefixCacheBytes, SharedBlocksCountOnceAndAnEvictionFreesWhatNoOtherEntryHolds) {
  NullModel model;
  PrefixCache cache(1 << 20, kBlock);
  auto a = Prefix(&model, 130);  // blocks 1, 2 and a partial block of its own
  auto b = Prefix(&model, 200);  // blocks 1, 2, 3
  EXPECT_EQ(cache.ChargeOf(*a), kOwn + 2 * kBlockBytes);
  ASSERT_TRUE(cache.Insert(a));
  EXPECT_EQ(cache.bytes(), kOwn + 2 * kBlockBytes);
  EXPECT_EQ(cache.ChargeOf(*b), kOwn + kBlockBytes);  // only block 3 is new
  ASSERT_TRUE(cache.Insert(b));
  EXPECT_EQ(cache.bytes(), 2 * kOwn + 3 * kBlockBytes);
  a.reset();  // held by the cache alone: unpinned
  b.reset();
  // Oldest first: a frees its own copies only (b holds its blocks), then b
  // frees everything else.
  std::vector<uint64_t> evictable;
  EXPECT_EQ(cache.BytesAndEvictable(&evictable), 2 * kOwn + 3 * kBlockBytes);
  EXPECT_EQ(evictable, (std::vector<uint64_t>{kOwn, kOwn + 3 * kBlockBytes}));
  EXPECT_EQ(cache.EvictTo(cache.bytes() - 1), kOwn);
  EXPECT_EQ(cache.bytes(), kOwn + 3 * kBlockBytes);
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.EvictTo(0), kOwn + 3 * kBlockBytes);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(PrefixCacheBytes, TheCapacityCountsSharedBlocksOnceAndPinnedEntriesStay) {
  NullModel model;
  // Room for two entries' copies and four shared blocks: what the 200- and
  // 260-token prefixes hold together, counting blocks 1..3 once.
  PrefixCache cache(2 * kOwn + 4 * kBlockBytes, kBlock);
  const std::vector<int32_t> a_tokens = Prefix(&model, 130)->tokens;
  ASSERT_TRUE(cache.Insert(Prefix(&model, 130)));  // unpinned: only the cache holds it
  auto b = Prefix(&model, 200);                    // pinned: this test holds it too
  ASSERT_TRUE(cache.Insert(b));
  EXPECT_EQ(cache.entries(), 2);
  // c adds block 4 and its copies: the least recently used unpinned entry
  // (a, whose blocks b and c still hold) makes way; b stays though older.
  ASSERT_TRUE(cache.Insert(Prefix(&model, 260)));
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.bytes(), 2 * kOwn + 4 * kBlockBytes);
  EXPECT_EQ(cache.Lookup(&model, 4096, a_tokens, 0), nullptr);
  EXPECT_NE(cache.Lookup(&model, 4096, b->tokens, 0), nullptr);
  // A prefix larger than the whole cache on its own is never kept.
  EXPECT_FALSE(cache.Insert(Prefix(&model, 64 * 6)));
}

TEST(PrefixCacheBytes, ACheckpointThatSharesNothingCountsTheModelsAccounting) {
  NullModel model;
  PrefixCache cache(1 << 20, kBlock);
  auto s = std::make_shared<StateSnapshot>();
  s->model = &model;
  s->max_context = 4096;
  s->tokens = {1, 2, 3};
  s->checkpoint = std::make_unique<SharingCheckpoint>(3, std::vector<int32_t>{}, 0, 0);
  s->bytes = 12345;
  ASSERT_TRUE(cache.Insert(s));
  EXPECT_EQ(cache.bytes(), 12345u);
  s.reset();
  EXPECT_EQ(cache.EvictTo(0), 12345u);
}

// Drops the next entry in eviction order (each frees something here).
void EvictNext(PrefixCache& cache) { cache.EvictTo(cache.bytes() - 1); }

TEST(PrefixCacheEviction, PrefixesOfOneSequenceGoBeforeThoseThatSeveralShared) {
  NullModel model;
  PrefixCache cache(1 << 20, kBlock);
  auto other_start = [&](int64_t n) {  // shares nothing with any other prompt here
    auto s = Prefix(&model, n);
    std::const_pointer_cast<StateSnapshot>(s)->tokens[0] = static_cast<int32_t>(1000 + n);
    return s;
  };
  const std::vector<int32_t> hit = Prefix(&model, 130)->tokens;
  const std::vector<int32_t> inside = Prefix(&model, 100)->tokens;
  const std::vector<int32_t> tail = other_start(300)->tokens;
  const std::vector<int32_t> late = other_start(70)->tokens;
  ASSERT_TRUE(cache.Insert(Prefix(&model, 130)));
  ASSERT_NE(cache.Lookup(&model, 4096, hit, 0), nullptr);  // shared: hit
  ASSERT_TRUE(cache.Insert(other_start(300)));
  ASSERT_TRUE(cache.Insert(Prefix(&model, 100)));  // shared: inside the 130 entry
  ASSERT_TRUE(cache.Insert(other_start(70)));
  ASSERT_EQ(cache.entries(), 4);
  // Least recently used alone would drop 130, 300, 100, 70. The ones only
  // one sequence had go first (300, then 70), then the shared (130, 100).
  std::vector<uint64_t> evictable;
  cache.BytesAndEvictable(&evictable);
  EXPECT_EQ(evictable.size(), 4u);
  EvictNext(cache);
  EXPECT_FALSE(cache.Contains(&model, 4096, tail));
  EXPECT_TRUE(cache.Contains(&model, 4096, hit));
  EvictNext(cache);
  EXPECT_FALSE(cache.Contains(&model, 4096, late));
  EXPECT_TRUE(cache.Contains(&model, 4096, inside));
  EvictNext(cache);
  EXPECT_FALSE(cache.Contains(&model, 4096, hit));
  EXPECT_TRUE(cache.Contains(&model, 4096, inside));
  EXPECT_TRUE(cache.EvictOne(&model));
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_FALSE(cache.EvictOne(&model));
}

TEST(PrefixCacheSharing, SharedPrefixIsTheLongestCommonStartWithAnyEntryOfTheModel) {
  NullModel model, other;
  PrefixCache cache(1 << 20, kBlock);
  EXPECT_EQ(cache.SharedPrefix(&model, 4096, Prefix(&model, 10)->tokens), 0);  // empty cache
  ASSERT_TRUE(cache.Insert(Prefix(&model, 130)));
  ASSERT_TRUE(cache.Insert(Prefix(&other, 300)));
  std::vector<int32_t> parting = Prefix(&model, 200)->tokens;
  parting[100] = 999;  // parts from the 130-token entry at 100 (no entry is its prefix)
  EXPECT_EQ(cache.SharedPrefix(&model, 4096, parting), 100);
  int64_t from_lookup = -1;  // the same from the lookup's hashing (a miss here)
  EXPECT_EQ(cache.Lookup(&model, 4096, parting, 0, &from_lookup), nullptr);
  EXPECT_EQ(from_lookup, 100);
  EXPECT_EQ(cache.SharedPrefix(&model, 4096, std::span(parting).first(40)), 40);
  EXPECT_EQ(cache.SharedPrefix(&model, 4096, Prefix(&model, 200)->tokens), 130);  // a prefix
  // Parting at a block edge, at the first token, and inside the entry's tail.
  for (const int64_t at : {int64_t{64}, int64_t{0}, int64_t{128}, int64_t{129}}) {
    std::vector<int32_t> t = Prefix(&model, 200)->tokens;
    t[static_cast<size_t>(at)] = 999;
    EXPECT_EQ(cache.SharedPrefix(&model, 4096, t), at) << at;
  }
  // Another model's or context size's entries do not count, however long.
  parting[100] = Prefix(&model, 200)->tokens[100];
  parting[150] = 999;
  EXPECT_EQ(cache.SharedPrefix(&model, 4096, parting), 130);
  EXPECT_EQ(cache.SharedPrefix(&model, 2048, parting), 0);
  EXPECT_EQ(cache.SharedPrefix(&other, 4096, parting), 150);
  PrefixCache off(0, kBlock);
  EXPECT_EQ(off.SharedPrefix(&model, 4096, parting), 0);
}

}  // namespace
}  // namespace strata
