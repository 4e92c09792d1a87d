// CUDA device discovery on a GPU machine: the backend sees the card through
// the runtime and reports its properties without aborting.
#include "backend/cuda/device_info.h"

#include <gtest/gtest.h>

namespace strata::cuda {
namespace {

TEST(CudaDeviceInfo, ListsAtLeastOneDeviceWithItsProperties) {
  StatusOr<std::vector<DeviceInfo>> devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_GE(devices->size(), 1u);
  for (const DeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.compute_major, 7) << d.name;
    EXPECT_GT(d.total_memory_bytes, uint64_t{1} << 30) << d.name;
    std::printf("cuda:%d %s sm_%d%d %.1f GiB\n", d.index, d.name.c_str(), d.compute_major,
                d.compute_minor, d.total_memory_bytes / 1073741824.0);
  }
}

}  // namespace
}  // namespace strata::cuda
