// Runtime errors as Status values. A sticky error (the context is corrupted:
// illegal address, device-side assert, ECC) cannot be cleared and every later
// call fails the same way, so it is reported as Unavailable ("device lost")
// for the engine to enter its failed state; anything else is Internal and the
// error state is cleared so the next call starts clean.
#include "backend/cuda/cuda_common.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata::cuda {
namespace {

bool IsSticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

Status Make(cudaError_t err, const char* prefix, const char* what) {
  if (IsSticky(err)) {
    return absl::UnavailableError(absl::StrCat(prefix, what, ": ", cudaGetErrorName(err), " (",
                                               cudaGetErrorString(err), ") [device lost]"));
  }
  cudaGetLastError();  // clears a non-sticky error so it is not reported twice
  return absl::InternalError(
      absl::StrCat(prefix, what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

}  // namespace

Status CudaError(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return OkStatus();
  return Make(err, "", what);
}

bool EnvSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool PdlEnabled() {
  static const bool enabled = EnvSwitchOn("STRATA_CUDA_PDL");
  return enabled;
}

Status LaunchStatus(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return OkStatus();
  return Make(err, "launch of ", kernel);
}

}  // namespace strata::cuda
