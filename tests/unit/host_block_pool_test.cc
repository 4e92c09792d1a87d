// The host blocks of CPU sequence states (HostBlockPool): ids with a holder
// count each, storage that lives exactly as long as some holder does, ids
// reused after their last release, and concurrent holders on many threads.
#include "memory/host_block_pool.h"

#include <gtest/gtest.h>

#include <new>
#include <set>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(HostBlockPool, BlocksAreFreedWithTheirLastHolderAndTheirIdsReused) {
  HostBlockPool pool(16);
  EXPECT_EQ(pool.block_bytes(), 64u);
  std::vector<int32_t> ids;
  std::vector<float*> data;
  pool.Take(3, ids, data);
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_EQ(data.size(), 3u);
  EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_NE(data[i], nullptr);
    for (int j = 0; j < 16; ++j) data[i][j] = static_cast<float>(i * 100 + j);  // writable
    EXPECT_EQ(pool.RefCount(ids[i]), 1);
  }
  EXPECT_EQ(pool.held_blocks(), 3);

  // A second holder of the first two: one release leaves them held and intact.
  pool.Share(std::span(ids.data(), 2));
  EXPECT_EQ(pool.RefCount(ids[0]), 2);
  pool.Release(ids);
  EXPECT_EQ(pool.held_blocks(), 2);
  EXPECT_EQ(pool.RefCount(ids[0]), 1);
  EXPECT_EQ(pool.RefCount(ids[2]), 0);
  EXPECT_EQ(data[1][5], 105.f);

  // The freed id comes back first; the held ones are not handed out again.
  std::vector<int32_t> more;
  std::vector<float*> more_data;
  pool.Take(2, more, more_data);
  EXPECT_EQ(more[0], ids[2]);
  EXPECT_NE(more[1], ids[0]);
  EXPECT_NE(more[1], ids[1]);
  EXPECT_EQ(pool.held_blocks(), 4);
  pool.Release(std::span(ids.data(), 2));
  pool.Release(more);
  EXPECT_EQ(pool.held_blocks(), 0);
  EXPECT_EQ(pool.RefCount(-1), 0);
  EXPECT_EQ(pool.RefCount(1000), 0);
}

TEST(HostBlockPool, ATakeWithoutMemoryThrowsAndTakesNothing) {
  // More than any host can give: bad_alloc (the C ABI's STRATA_OUT_OF_MEMORY),
  // and neither ids nor storage are left behind.
  HostBlockPool pool(int64_t{1} << 60);
  std::vector<int32_t> ids;
  std::vector<float*> data;
  EXPECT_THROW(pool.Take(2, ids, data), std::bad_alloc);
  EXPECT_TRUE(ids.empty());
  EXPECT_TRUE(data.empty());
  EXPECT_EQ(pool.held_blocks(), 0);
}

TEST(HostBlockPool, ConcurrentHoldersLeaveNothingBehind) {
  HostBlockPool pool(8);
  std::vector<int32_t> base;
  std::vector<float*> base_data;
  pool.Take(4, base, base_data);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &base] {
      for (int i = 0; i < 200; ++i) {
        pool.Share(base);
        std::vector<int32_t> own;
        std::vector<float*> own_data;
        pool.Take(1, own, own_data);
        pool.Release(own);
        pool.Release(base);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(pool.held_blocks(), 4);
  for (int32_t id : base) EXPECT_EQ(pool.RefCount(id), 1);
  pool.Release(base);
  EXPECT_EQ(pool.held_blocks(), 0);
}

}  // namespace
}  // namespace strata
