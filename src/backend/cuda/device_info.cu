// CUDA device discovery through the runtime API; errors become Status values.
#include "backend/cuda/device_info.h"

#include <cuda_runtime.h>

namespace strata::cuda {

StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Without a driver the count is left untouched and error 35 (or 100) returned.
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("CUDA unavailable: ", cudaGetErrorString(err)));
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      return absl::UnavailableError(
          absl::StrCat("cudaGetDeviceProperties(", i, "): ", cudaGetErrorString(err)));
    }
    out.push_back(DeviceInfo{i, prop.name, prop.major, prop.minor,
                             static_cast<uint64_t>(prop.totalGlobalMem)});
  }
  return out;
}

}  // namespace strata::cuda
