// Runtime errors as Status values. A sticky error (the context is corrupted:
// illegal address, device-side assert, ECC) cannot be cleared and every later
// call fails the same way, so it is reported as Unavailable ("device lost")
// for the engine to enter its failed state; anything else is Internal and the
// error state is cleared so the next call starts clean.
#include "backend/cuda/cuda_common.h"

#include <cstring>
#ifdef STRATA_CTA_PROBE
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>
#endif

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

bool PdlEnabled() { return tuning::Current().On(tuning::Key::kCudaPdl); }

Status LaunchStatus(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return OkStatus();
  return Make(err, "launch of ", kernel);
}

}  // namespace strata::cuda

#ifdef STRATA_CTA_PROBE
// The CTA probe's records (cta_probe.cuh): mapped host memory, one slot per
// probed launch as it is enqueued, written at exit to the first
// cuda.cta_probe path asked for.
namespace strata::cuda {
namespace {

struct ProbeBook {
  unsigned long long* host = nullptr;
  unsigned long long* dev = nullptr;
  size_t words = 0;
  size_t used = 0;
  std::vector<std::tuple<std::string, size_t, int64_t>> slots;
  std::string path;
  ~ProbeBook() {
    if (host == nullptr) return;
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return;
    std::fprintf(f, "slot,tag,cta,smid,t0,t1,t2\n");
    for (size_t s = 0; s < slots.size(); ++s) {
      const auto& [tag, off, ctas] = slots[s];
      for (int64_t c = 0; c < ctas; ++c) {
        const unsigned long long* r = host + off + 4 * c;
        std::fprintf(f, "%zu,%s,%lld,%llu,%llu,%llu,%llu\n", s, tag.c_str(),
                     static_cast<long long>(c), r[0], r[1], r[2], r[3]);
      }
    }
    std::fclose(f);
  }
};

}  // namespace

unsigned long long* CtaProbeSlot(const char* tag, int64_t ctas) {
  static ProbeBook book;
  const std::string& path = tuning::Current().Text(tuning::Key::kCudaCtaProbe);
  if (path.empty() || ctas <= 0) return nullptr;
  if (book.host == nullptr) {
    book.path = path;
    book.words = size_t{16} << 20;
    void* h = nullptr;
    if (cudaHostAlloc(&h, book.words * 8, cudaHostAllocMapped) != cudaSuccess) return nullptr;
    std::memset(h, 0, book.words * 8);
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, h, 0) != cudaSuccess) return nullptr;
    book.host = static_cast<unsigned long long*>(h);
    book.dev = static_cast<unsigned long long*>(d);
  }
  const size_t need = 4 * static_cast<size_t>(ctas);
  if (book.used + need > book.words) return nullptr;
  book.slots.emplace_back(tag, book.used, ctas);
  unsigned long long* p = book.dev + book.used;
  book.used += need;
  return p;
}

}  // namespace strata::cuda
#endif  // STRATA_CTA_PROBE
