// sync_probe: what one dependency between two steps of a decode chain costs
// on this GPU, with no DRAM traffic in the way, three ways:
//  1. kernel boundary: a CUDA graph of N kernels chained with programmatic
//     dependent launch (PDL), each of G CTAs reading the previous kernel's
//     G·256 outputs (one per thread, through L2) and writing its own;
//  2. grid barrier: one persistent kernel of G CTAs doing the same N steps,
//     separated by an atomic-counter barrier (every CTA arrives with a
//     fence and an atomic add, then spins on the count with acquire loads);
//  3. flag handoff: two CTAs on different SMs passing a token back and forth
//     through a flag in global memory (one-way latency);
//  4. forks in a graph: the chain of (1) with F side branches (a one-CTA
//     kernel forked off the chain and joined two kernels later, as a decode
//     step's shared expert is), against the same chain without them, and
//     whether such a graph launched right behind a short fork-free graph
//     starts any sooner (what splitting a step's graph in two would give).
// A megakernel would replace (1) by (2) or (3) between its steps; the
// difference per dependency times the ~370 dependencies of a batch-1
// Kimi-Linear step bounds what it can gain. (1) launches through the
// backend's LaunchPdl, so STRATA_OPTIONS=cuda.pdl=0 measures a plain boundary. (1) is
// the mean of 20 graph launches, (2) the best of 5 kernel runs. Development
// only: built with the CUDA backend, not installed, not part of the tests.
//
// Usage: strata_sync_probe [steps=400] [ctas=132] [forks=33]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "backend/cuda/pdl.cuh"

namespace {

using strata::cuda::LaunchPdl;
using strata::cuda::PdlLaunchDependents;
using strata::cuda::PdlWait;

constexpr int kThreads = 256;

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// out[i] = in[(i * 7919) % n] + 1: every CTA depends on other CTAs' outputs.
__global__ void __launch_bounds__(kThreads) StepKernel(const float* in, float* out, int n) {
  PdlWait();
  PdlLaunchDependents();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i < n) out[i] = __ldcg(in + (static_cast<long long>(i) * 7919) % n) + 1.f;
}

__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The same steps in one grid; buffers alternate; `count` starts at 0.
__global__ void __launch_bounds__(kThreads)
    PersistentKernel(float* a, float* b, int n, int steps, unsigned* count) {
  const unsigned ctas = gridDim.x;
  for (int s = 0; s < steps; ++s) {
    const float* in = (s & 1) ? b : a;
    float* out = (s & 1) ? a : b;
    const int i = blockIdx.x * kThreads + threadIdx.x;
    if (i < n) out[i] = __ldcg(in + (static_cast<long long>(i) * 7919) % n) + 1.f;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(count, 1u);
      const unsigned target = ctas * static_cast<unsigned>(s + 1);
      while (LoadAcquire(count) < target) {
      }
    }
    __syncthreads();
  }
}

// CTA 0 and CTA 1 (launched with one CTA per SM's worth of shared memory, so
// on different SMs) pass a counter back and forth `rounds` times.
__global__ void PingPongKernel(unsigned* flag, int rounds) {
  if (threadIdx.x != 0) return;
  const unsigned me = blockIdx.x;
  for (int r = 0; r < rounds; ++r) {
    const unsigned want = 2u * static_cast<unsigned>(r) + me;
    while (LoadAcquire(flag) != want) {
    }
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(want + 1) : "memory");
  }
}

// Mean time of one round of `execs` launched in order, over `reps` rounds,
// after one warm-up round.
float TimeMs(cudaStream_t s, std::initializer_list<cudaGraphExec_t> execs, int reps) {
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  for (cudaGraphExec_t e : execs) CHECK(cudaGraphLaunch(e, s));
  CHECK(cudaEventRecord(t0, s));
  for (int r = 0; r < reps; ++r) {
    for (cudaGraphExec_t e : execs) CHECK(cudaGraphLaunch(e, s));
  }
  CHECK(cudaEventRecord(t1, s));
  CHECK(cudaEventSynchronize(t1));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  CHECK(cudaEventDestroy(t0));
  CHECK(cudaEventDestroy(t1));
  return ms / static_cast<float>(reps);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  const int ctas = argc > 2 ? std::atoi(argv[2]) : 132;
  const int forks = argc > 3 ? std::atoi(argv[3]) : 33;
  if (steps < 2 || ctas < 2 || forks < 0) {
    std::fprintf(stderr, "usage: sync_probe [steps >= 2] [ctas >= 2] [forks >= 0]\n");
    return 2;
  }
  const int n = ctas * kThreads;
  float *a, *b;
  unsigned* count;
  CHECK(cudaMalloc(&a, sizeof(float) * n));
  CHECK(cudaMalloc(&b, sizeof(float) * n));
  CHECK(cudaMalloc(&count, sizeof(unsigned)));
  CHECK(cudaMemset(a, 0, sizeof(float) * n));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // The graphs of parts 1 and 4: `kernels` PDL-chained kernels on s, and
  // `forks` one-CTA kernels on a second captured stream, each forked after
  // main kernel k and joined before main kernel k + 3.
  float* c;
  CHECK(cudaMalloc(&c, sizeof(float) * kThreads));
  CHECK(cudaMemset(c, 0, sizeof(float) * kThreads));
  cudaStream_t side;
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork_ev, join_ev;
  CHECK(cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming));
  auto capture = [&](int kernels, int n_forks) {
    const int every = n_forks > 0 ? std::max(3, kernels / n_forks) : kernels + 1;
    cudaGraph_t g;
    cudaGraphExec_t e;
    int made = 0;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < kernels; ++k) {
      CHECK(LaunchPdl(StepKernel, dim3(ctas), dim3(kThreads), 0, s,
                      static_cast<const float*>((k & 1) ? b : a), (k & 1) ? a : b, n));
      if (k % every == 1 && k + 3 < kernels && made < n_forks) {
        CHECK(cudaEventRecord(fork_ev, s));
        CHECK(cudaStreamWaitEvent(side, fork_ev, 0));
        CHECK(LaunchPdl(StepKernel, dim3(1), dim3(kThreads), 0, side, static_cast<const float*>(c),
                        c, kThreads));
        CHECK(cudaEventRecord(join_ev, side));
        ++made;
      }
      if (k % every == 3 && made > 0 && k / every == made - 1) {
        CHECK(cudaStreamWaitEvent(s, join_ev, 0));
      }
    }
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    return e;
  };

  // 1. Kernel boundaries: a graph of `steps` PDL-chained kernels, and the
  // same graph of 1 kernel to subtract the launch of the graph itself.
  cudaGraphExec_t many = capture(steps, 0), one = capture(1, 0);
  const float ms_many = TimeMs(s, {many}, 20);
  const float ms_one = TimeMs(s, {one}, 20);
  const double us_boundary = (ms_many - ms_one) * 1e3 / (steps - 1);

  // 2. Grid barriers in one persistent kernel (all CTAs resident: ctas must
  // not exceed what the GPU holds at once, which the occupancy check says).
  int per_sm = 0, sms = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, PersistentKernel, kThreads, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  double us_barrier = -1.0;
  if (ctas <= per_sm * sms) {
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned), s));
      CHECK(cudaEventRecord(t0, s));
      PersistentKernel<<<ctas, kThreads, 0, s>>>(a, b, n, steps, count);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(t1, s));
      CHECK(cudaEventSynchronize(t1));
      float ms = 0.f;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      if (ms < best) best = ms;
    }
    us_barrier = best * 1e3 / steps;
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
  }

  // 3. One-way flag latency between two SMs.
  const int rounds = 20000;
  int max_smem = 0;
  CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(
      cudaFuncSetAttribute(PingPongKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
  CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned), s));
  cudaEvent_t p0, p1;
  CHECK(cudaEventCreate(&p0));
  CHECK(cudaEventCreate(&p1));
  CHECK(cudaEventRecord(p0, s));
  PingPongKernel<<<2, 32, max_smem, s>>>(count, rounds);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(p1, s));
  CHECK(cudaEventSynchronize(p1));
  float ms_pp = 0.f;
  CHECK(cudaEventElapsedTime(&ms_pp, p0, p1));
  const double us_flag = ms_pp * 1e3 / (2.0 * rounds);

  // 4. Forks, and the forked graph right behind a short fork-free one.
  cudaGraphExec_t forked = capture(steps, forks), head = capture(20, 0);
  const float ms_forked = TimeMs(s, {forked}, 20);
  const float ms_head = TimeMs(s, {head}, 20);
  const float ms_pair = TimeMs(s, {head, forked}, 20);

  std::printf("steps %d, CTAs %d x %d threads, %d SMs\n", steps, ctas, kThreads, sms);
  std::printf("PDL kernel boundary in a graph : %.3f us per dependency\n", us_boundary);
  if (us_barrier >= 0) {
    std::printf("grid barrier in one kernel     : %.3f us per dependency\n", us_barrier);
  } else {
    std::printf("grid barrier in one kernel     : skipped (%d CTAs do not fit at once)\n", ctas);
  }
  std::printf("flag handoff between two SMs   : %.3f us one way\n", us_flag);
  std::printf("graph of %d kernels, no forks  : %.2f us per launch\n", steps, ms_many * 1e3);
  std::printf("same with %d forks              : %.2f us per launch (%+.2f)\n", forks,
              ms_forked * 1e3, (ms_forked - ms_many) * 1e3);
  std::printf("20-kernel graph, then the forked one: %.2f us (alone: %.2f + %.2f; %+.2f)\n",
              ms_pair * 1e3, ms_head * 1e3, ms_forked * 1e3, (ms_pair - ms_head - ms_forked) * 1e3);
  CHECK(cudaGraphExecDestroy(forked));
  CHECK(cudaGraphExecDestroy(head));
  CHECK(cudaEventDestroy(fork_ev));
  CHECK(cudaEventDestroy(join_ev));
  CHECK(cudaStreamDestroy(side));
  CHECK(cudaFree(c));
  CHECK(cudaGraphExecDestroy(many));
  CHECK(cudaGraphExecDestroy(one));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(count));
  return 0;
}
