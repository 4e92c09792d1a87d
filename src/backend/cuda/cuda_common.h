// Shared conventions of the CUDA backend (FlashInfer-style: check, size, plan,
// run). Every op is a host function taking device pointers and a stream:
//  1. it checks its arguments on the host and returns InvalidArgument naming
//     the field (never launches on bad input);
//  2. scratch it needs is sized by a *WorkspaceBytes() function and passed in
//     by the caller, planned once per shape: kernels never allocate;
//  3. it enqueues work on `stream` only (no device-wide sync), so a decode step
//     can be captured in a CUDA graph;
//  4. a launch failure comes back as a Status naming the kernel.
// Layouts are row-major; [T, H, d] means d is contiguous. Weights are bf16;
// activations bf16 with fp32 accumulation; norms, softmax, gates and recurrent
// states fp32.
#ifndef STRATA_BACKEND_CUDA_CUDA_COMMON_H_
#define STRATA_BACKEND_CUDA_CUDA_COMMON_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "base/tuning.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

// Element type of an activation buffer whose precision the caller picks.
enum class ActType : int { kBf16 = 0, kF32 = 1 };

inline size_t ActBytes(ActType t) { return t == ActType::kBf16 ? 2 : 4; }

// Internal error naming `what` and the runtime's message (and clears the
// error state with cudaGetLastError when the error is not sticky). A sticky
// error (illegal address, device assert, ECC...: the context is lost) comes
// back as Unavailable with "[device lost]" so the engine can enter its failed
// state (style-anchors §3.4). cudaSuccess gives OK.
Status CudaError(cudaError_t err, const char* what);

// The status of the last launch on this thread: OK, or an error naming `kernel`.
Status LaunchStatus(const char* kernel);

// The host functions' switches (experiment arms, rollback paths) are entries
// of the tuning registry, read through tuning::Current(): the Config the
// calling executor installed (base/tuning.h).

// Whether kernel launches ask for programmatic dependent launch (see pdl.cuh):
// the registry's cuda.pdl. Results are identical either way.
bool PdlEnabled();

#ifdef STRATA_CTA_PROBE
// Device pointer to `ctas` records of 4 words for a launch tagged `tag`;
// null when cuda.cta_probe is empty or the buffer (16 M words) is full. The
// first path asked for in the process gets every record. See cta_probe.cuh.
unsigned long long* CtaProbeSlot(const char* tag, int64_t ctas);
#endif

// Rounds `bytes` up to the 256-byte alignment every workspace slice uses.
constexpr size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace strata::cuda

#define STRATA_CUDA_RETURN_IF_ERROR(expr)                               \
  do {                                                                  \
    const cudaError_t strata_cuda_err_ = (expr);                        \
    if (strata_cuda_err_ != cudaSuccess) {                              \
      return ::strata::cuda::CudaError(strata_cuda_err_, #expr);        \
    }                                                                   \
  } while (0)

#endif  // STRATA_BACKEND_CUDA_CUDA_COMMON_H_
