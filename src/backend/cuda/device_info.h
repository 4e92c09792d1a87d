// CUDA device discovery. Without a driver (or without a GPU) this reports zero
// devices with the runtime's reason rather than failing the process.
#ifndef STRATA_BACKEND_CUDA_DEVICE_INFO_H_
#define STRATA_BACKEND_CUDA_DEVICE_INFO_H_

#include <string>
#include <vector>

#include "base/status.h"

namespace strata::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t total_memory_bytes = 0;
};

// Lists the visible CUDA devices. Unavailable (with the runtime's message) when
// there is no usable driver or device; never aborts.
StatusOr<std::vector<DeviceInfo>> ListDevices();

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_DEVICE_INFO_H_
