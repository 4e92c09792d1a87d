// Google Benchmark of the MLA prefill attention (cuda::MlaPrefill) at
// Kimi-Linear-48B's shape: H = 32, qk head dim 192 (128 nope + 64 rope), v
// head dim 128, causal, one layer. Args: (chunk T, keys already cached). The
// long-prompt prefill runs 8192-token slices over a growing cache, so
// (8192, 0), (8192, 8192), (8192, 24576) are its first, second and last
// slices of 32K; (4096, 0) a short prompt.
//
// Reported: TFLOP/s of the causal work 2·H·(dqk + dv)·(T·past + T(T+1)/2)
// and its % of the measured 686 TFLOP/s bf16 peak. BM_CudaMlaPrefillOld runs
// the same with mla.prefill=mma (the mma.sync kernel) for an A/B in one
// run. Times are CUDA-event times (manual time). Inputs are random bf16
// in [-1, 1] (a repeated 1M-element pattern; the speed does not depend on
// the values). Built only with CUDA (the file is empty otherwise).
#if defined(STRATA_HAVE_CUDA)

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/mla.h"
#include "base/tuning.h"

namespace strata::cuda {
namespace {

constexpr double kBf16Flops = 686e12;  // H200 measured bf16 matmul
constexpr int64_t kH = 32, kDn = 128, kDr = 64, kDv = 128, kR = 512;

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Fills `n` bf16 elements with a repeated pattern of random values in [-1, 1].
cudaError_t FillRandomBf16(void* dst, size_t n, uint32_t seed) {
  constexpr size_t kPattern = size_t{1} << 20;
  std::vector<uint16_t> pattern(std::min(n, kPattern));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (uint16_t& b : pattern) {
    const float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    b = static_cast<uint16_t>(u >> 16);
  }
  for (size_t off = 0; off < n; off += pattern.size()) {
    const size_t count = std::min(pattern.size(), n - off);
    const cudaError_t e = cudaMemcpy(static_cast<uint16_t*>(dst) + off, pattern.data(),
                                     count * sizeof(uint16_t), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void RunPrefill(benchmark::State& state, bool old_path) {
  const int64_t T = state.range(0), past = state.range(1), S = past + T;
  const int64_t dqk = kDn + kDr, cd = kR + kDr;
  DeviceBuffer q(static_cast<size_t>(T * kH * dqk) * 2);
  DeviceBuffer kv(static_cast<size_t>(S * kH * (kDn + kDv)) * 2);
  DeviceBuffer rows(static_cast<size_t>(S * cd) * 2);  // gathered latents [c | k_rope]
  DeviceBuffer out(static_cast<size_t>(T * kH * kDv) * 2);
  if (q.p == nullptr || kv.p == nullptr || rows.p == nullptr || out.p == nullptr) {
    state.SkipWithError("cudaMalloc failed");
    return;
  }
  for (const auto& [buf, n, seed] :
       {std::tuple<void*, size_t, uint32_t>{q.p, static_cast<size_t>(T * kH * dqk), 1},
        {kv.p, static_cast<size_t>(S * kH * (kDn + kDv)), 2},
        {rows.p, static_cast<size_t>(S * cd), 3}}) {
    const cudaError_t e = FillRandomBf16(buf, n, seed);
    if (e != cudaSuccess) {
      state.SkipWithError(cudaGetErrorString(e));
      return;
    }
  }
  MlaPrefillArgs a;
  a.shape.num_heads = kH;
  a.shape.nope_dim = kDn;
  a.shape.rope_dim = kDr;
  a.shape.v_dim = kDv;
  a.shape.kv_rank = kR;
  a.num_tokens = T;
  a.past = past;
  a.q = q.as<bf16>();
  a.kv = kv.as<bf16>();
  a.k_rope = rows.as<bf16>() + kR;
  a.ld_krope = cd;
  a.out = out.as<bf16>();

  const tuning::ScopedOptions arm(old_path ? "mla.prefill=mma" : "");
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  Status st = MlaPrefill(a, stream);  // untimed: module load, smem attribute
  double total_s = 0;
  int64_t timed = 0;
  if (st.ok()) {
    cudaStreamSynchronize(stream);
    for (auto _ : state) {
      cudaEventRecord(start, stream);
      st = MlaPrefill(a, stream);
      if (!st.ok()) break;
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      state.SetIterationTime(ms / 1e3);
      total_s += ms / 1e3;
      ++timed;
    }
  }
  if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (st.ok() && err != cudaSuccess) state.SkipWithError(cudaGetErrorString(err));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);

  const double flops = 2.0 * kH * static_cast<double>(dqk + kDv) *
                       (static_cast<double>(T) * past + static_cast<double>(T) * (T + 1) / 2);
  // From the event times themselves (Google Benchmark's rate counters divide
  // by CPU time, not by the manual time).
  const double per_s = total_s > 0 ? timed / total_s : 0;
  state.counters["TFLOP/s"] = flops * per_s / 1e12;
  state.counters["pct_of_686TF"] = 100.0 * flops * per_s / kBf16Flops;
  state.counters["GFLOP"] = flops / 1e9;
}

void BM_CudaMlaPrefill(benchmark::State& state) { RunPrefill(state, /*old_path=*/false); }
void BM_CudaMlaPrefillOld(benchmark::State& state) { RunPrefill(state, /*old_path=*/true); }

void PrefillArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "past"});
  b->Args({8192, 0})->Args({8192, 8192})->Args({8192, 24576})->Args({4096, 0});
}

BENCHMARK(BM_CudaMlaPrefill)->Apply(PrefillArgs)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaMlaPrefillOld)
    ->Apply(PrefillArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::cuda

#endif  // defined(STRATA_HAVE_CUDA)
