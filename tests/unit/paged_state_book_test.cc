// The host bookkeeping of the GPU executors' state pools (PagedStateBook):
// slots, checkpoint slots apart from them, blocks taken all-or-none, and the reference counts
// behind the copy-on-write prefix blocks of Clone (a shared block is free again only when its last
// holder releases it). Plain C++: no device needed.
#include "memory/paged_state_book.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(PagedStateBook, SlotsAreTakenLowestFirstAndGivenBack) {
  PagedStateBook book(3, 0);
  EXPECT_EQ(book.total_slots(), 3);
  EXPECT_EQ(book.TakeSlot(), 0);
  EXPECT_EQ(book.TakeSlot(), 1);
  EXPECT_EQ(book.TakeSlot(), 2);
  EXPECT_EQ(book.TakeSlot(), -1);
  EXPECT_EQ(book.FreeSlots(), 0);
  book.GiveSlot(1);
  book.GiveSlot(-1);  // ignored
  EXPECT_EQ(book.FreeSlots(), 1);
  EXPECT_EQ(book.TakeSlot(), 1);
}

TEST(PagedStateBook, CheckpointSlotsFollowTheSequenceSlotsAndAreKeptApart) {
  PagedStateBook book(2, 0, 2);
  EXPECT_EQ(book.total_checkpoint_slots(), 2);
  EXPECT_EQ(book.TakeCheckpointSlot(), 2);
  EXPECT_EQ(book.TakeCheckpointSlot(), 3);
  EXPECT_EQ(book.TakeCheckpointSlot(), -1);
  // Sequence slots are untouched by checkpoints, and the other way round.
  EXPECT_EQ(book.FreeSlots(), 2);
  EXPECT_EQ(book.TakeSlot(), 0);
  EXPECT_EQ(book.TakeSlot(), 1);
  EXPECT_EQ(book.TakeSlot(), -1);
  book.GiveCheckpointSlot(2);
  book.GiveCheckpointSlot(-1);  // ignored
  EXPECT_EQ(book.FreeCheckpointSlots(), 1);
  EXPECT_EQ(book.FreeSlots(), 0);
  EXPECT_EQ(book.TakeCheckpointSlot(), 2);
  EXPECT_EQ(PagedStateBook(3, 0).TakeCheckpointSlot(), -1);  // none by default
}

TEST(PagedStateBook, BlocksAreAllOrNoneAndConsecutiveFromAFreshBook) {
  PagedStateBook book(1, 5);
  std::vector<int32_t> a;
  ASSERT_TRUE(book.TakeBlocks(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(book.FreeBlocks(), 2);
  std::vector<int32_t> b = {7};
  EXPECT_FALSE(book.TakeBlocks(3, b));  // only 2 free: nothing taken
  EXPECT_EQ(b, (std::vector<int32_t>{7}));
  EXPECT_EQ(book.FreeBlocks(), 2);
  EXPECT_TRUE(book.TakeBlocks(0, b));
  for (int32_t id : a) EXPECT_EQ(book.RefCount(id), 1);
  book.Release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(book.FreeBlocks(), 5);
  for (int32_t id = 0; id < 5; ++id) EXPECT_EQ(book.RefCount(id), 0);
  // Released in reverse, so the next taker gets the same run again.
  std::vector<int32_t> c;
  ASSERT_TRUE(book.TakeBlocks(3, c));
  EXPECT_EQ(c, (std::vector<int32_t>{0, 1, 2}));
}

TEST(PagedStateBook, SharedBlocksStayHeldUntilTheLastHolderReleases) {
  PagedStateBook book(2, 4);
  std::vector<int32_t> src;
  ASSERT_TRUE(book.TakeBlocks(3, src));  // two full blocks and a partial tail
  // A clone: shares the full blocks, takes its own tail.
  std::vector<int32_t> clone(src.begin(), src.begin() + 2);
  book.Share(clone);
  ASSERT_TRUE(book.TakeBlocks(1, clone));
  EXPECT_EQ(book.RefCount(src[0]), 2);
  EXPECT_EQ(book.RefCount(src[1]), 2);
  EXPECT_EQ(book.RefCount(src[2]), 1);
  EXPECT_EQ(book.RefCount(clone[2]), 1);
  EXPECT_NE(clone[2], src[2]);
  EXPECT_EQ(book.FreeBlocks(), 0);  // the clone grew the usage by one block only

  book.Release(src);  // the source goes first
  EXPECT_EQ(book.FreeBlocks(), 1);  // its private tail only
  EXPECT_EQ(book.RefCount(clone[0]), 1);
  EXPECT_EQ(book.RefCount(clone[1]), 1);
  std::vector<int32_t> other;
  ASSERT_TRUE(book.TakeBlocks(1, other));
  EXPECT_EQ(std::set<int32_t>(clone.begin(), clone.end()).count(other[0]), 0u)
      << "a block still held by the clone was handed out again";
  book.Release(other);
  book.Release(clone);
  EXPECT_EQ(book.FreeBlocks(), 4);
  for (int32_t id = 0; id < 4; ++id) EXPECT_EQ(book.RefCount(id), 0);
}

TEST(PagedStateBook, CloneOfCloneCountsEveryHolder) {
  PagedStateBook book(3, 2);
  std::vector<int32_t> a;
  ASSERT_TRUE(book.TakeBlocks(2, a));
  std::vector<int32_t> b = a, c = a;
  book.Share(b);
  book.Share(c);
  EXPECT_EQ(book.RefCount(a[0]), 3);
  book.Release(a);
  book.Release(c);
  EXPECT_EQ(book.FreeBlocks(), 0);
  EXPECT_EQ(book.RefCount(b[1]), 1);
  book.Release(b);
  EXPECT_EQ(book.FreeBlocks(), 2);
}

TEST(PagedStateBook, IdsAndCountsStayConsistentAcrossThreads) {
  PagedStateBook book(64, 256);
  std::vector<std::vector<uint64_t>> ids(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        ids[static_cast<size_t>(t)].push_back(book.NextId());
        std::vector<int32_t> blocks;
        if (book.TakeBlocks(4, blocks)) {
          std::vector<int32_t> copy = blocks;
          book.Share(blocks);
          book.Release(copy);
          book.Release(blocks);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 4000u);
  EXPECT_EQ(book.FreeBlocks(), 256);  // every block back: counts balanced
}

TEST(PagedStateBook, EmptyBookHasNothing) {
  PagedStateBook book(0, 0);
  EXPECT_EQ(book.TakeSlot(), -1);
  std::vector<int32_t> b;
  EXPECT_FALSE(book.TakeBlocks(1, b));
  EXPECT_EQ(book.RefCount(0), 0);
  EXPECT_EQ(book.RefCount(-1), 0);
}

}  // namespace
}  // namespace strata
