// Per-CTA timestamps for the decode kernels, a diagnostic compiled in only
// with the CMake option STRATA_CTA_PROBE (default OFF: every macro below is
// empty and the kernels are unchanged). With it, and the tuning option
// cuda.cta_probe=path at run time, each probed launch gets a slot
// of records in mapped host memory when it is enqueued (once per node of a
// captured graph, so a replay overwrites its slot); thread 0 of each CTA
// writes {SM id, start, after the PDL wait, end} (%globaltimer ns), and the
// records go to `path` as CSV at exit. tools/gpu/cta_probe.py reads them.
//
// Why: a kernel-level trace shows when a kernel's first CTA starts and its
// last one ends; what a batch-1 decode step loses is inside that span (CTAs
// that become resident late, loads queued behind a neighbour's weight
// stream, stragglers). The shared expert's x staged before the PDL wait and
// the MLA merge's early partial loads were both found in these records
// (docs/dev/journal/performance.md).
#ifndef STRATA_BACKEND_CUDA_CTA_PROBE_CUH_
#define STRATA_BACKEND_CUDA_CTA_PROBE_CUH_

#ifdef STRATA_CTA_PROBE

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

__device__ __forceinline__ unsigned long long ProbeTime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0's record for CTA (blockIdx.x, blockIdx.y) of a grid with
// gridDim.z == 1.
__device__ __forceinline__ void ProbeWrite(unsigned long long* rec, unsigned long long t0,
                                           unsigned long long t1) {
  if (rec == nullptr || threadIdx.x != 0) return;
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  unsigned long long* r = rec + 4 * (blockIdx.x + gridDim.x * blockIdx.y);
  r[0] = sm;
  r[1] = t0;
  r[2] = t1;
  r[3] = ProbeTime();
}

}  // namespace strata::cuda

// A params struct's field (named by the caller), and the hooks: START at the
// kernel's top declares the record's times, WAITED right after PdlWait, END
// where the CTA is done; a device function that waits for the kernel takes
// STRATA_PROBE_PARAM and is called with STRATA_PROBE_PASS.
#define STRATA_PROBE_FIELD(name) unsigned long long* name = nullptr;
#define STRATA_PROBE_START(rec)                                                                   \
  const unsigned long long strata_probe_t0_ = (rec) != nullptr ? ::strata::cuda::ProbeTime() : 0; \
  unsigned long long strata_probe_t1_ = 0
#define STRATA_PROBE_WAITED(rec) \
  if ((rec) != nullptr) strata_probe_t1_ = ::strata::cuda::ProbeTime()
#define STRATA_PROBE_END(rec) ::strata::cuda::ProbeWrite((rec), strata_probe_t0_, strata_probe_t1_)
#define STRATA_PROBE_PARAM , unsigned long long& strata_probe_t1_
#define STRATA_PROBE_PASS , strata_probe_t1_
#define STRATA_PROBE_SLOT(field, tag, ctas) (field) = ::strata::cuda::CtaProbeSlot((tag), (ctas))

#else  // !STRATA_CTA_PROBE

#define STRATA_PROBE_FIELD(name)
#define STRATA_PROBE_START(rec) static_cast<void>(0)
#define STRATA_PROBE_WAITED(rec) static_cast<void>(0)
#define STRATA_PROBE_END(rec) static_cast<void>(0)
#define STRATA_PROBE_PARAM
#define STRATA_PROBE_PASS
#define STRATA_PROBE_SLOT(field, tag, ctas) static_cast<void>(0)

#endif  // STRATA_CTA_PROBE

#endif  // STRATA_BACKEND_CUDA_CTA_PROBE_CUH_
