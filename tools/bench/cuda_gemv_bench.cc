// Google Benchmark of the decode GEMV (cuda::Gemm with m ≤ 16, the streaming
// kernel of gemm.cu) on every weight shape of a Kimi-Linear-48B-A3B decode
// step, against the H200's copy bandwidth (4270 GB/s): time = bytes(W) /
// bandwidth is the limit, since W is read once and x, y are tiny.
//
//   BM_CudaGemv/<shape>/<m>
//
// Each iteration replays a CUDA graph of C GEMVs
// on C distinct copies of W (C · bytes ≥ 512 MB ≫ the 50 MB L2, so every
// GEMV streams from HBM, with the PDL overlap between consecutive launches
// that a decode step has) and reports the per-GEMV time (CUDA events,
// manual time). Counters: TB/s and pct_of_4270GBs over the bytes of W, x and
// y; `calls` is how many times a decode step runs the shape.
// Built only with CUDA (the file is empty otherwise).
#if defined(STRATA_HAVE_CUDA)

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm.h"

namespace strata::cuda {
namespace {

constexpr double kHbmBytesPerSecond = 4270e9;  // H200 measured copy bandwidth
constexpr size_t kRotateBytes = size_t{512} << 20;

struct GemvShape {
  const char* name;
  int64_t n, k;
  ActType y_type;
  float beta;
  int calls;  // per batch-1 decode step of Kimi-Linear-48B-A3B
};

// model-spec §2.1: D = 2304, 32 heads × 128, MLA r + dr = 576, E = 256,
// shared expert I = 1024, dense I = 9216 (layer 0), vocab 163840.
const GemvShape kShapes[] = {
    {"kda_in_proj_12576x2304", 12576, 2304, ActType::kBf16, 0.f, 20},
    {"kda_fg_b_4096x128", 4096, 128, ActType::kF32, 0.f, 40},
    {"o_proj_2304x4096", 2304, 4096, ActType::kF32, 1.f, 27},
    {"mla_q_6144x2304", 6144, 2304, ActType::kBf16, 0.f, 7},
    {"mla_kv_a_576x2304", 576, 2304, ActType::kBf16, 0.f, 7},
    {"router_256x2304", 256, 2304, ActType::kF32, 0.f, 26},
    {"shared_gate_up_2048x2304", 2048, 2304, ActType::kBf16, 0.f, 26},
    {"shared_down_2304x1024", 2304, 1024, ActType::kF32, 1.f, 26},
    {"dense_gate_up_18432x2304", 18432, 2304, ActType::kBf16, 0.f, 1},
    {"dense_down_2304x9216", 2304, 9216, ActType::kF32, 1.f, 1},
    {"lm_head_163840x2304", 163840, 2304, ActType::kF32, 0.f, 1},
};
constexpr int kNumShapes = sizeof(kShapes) / sizeof(kShapes[0]);

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
};

void BM_CudaGemv(benchmark::State& state) {
  const GemvShape& sh = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  state.SetLabel(sh.name);
  const size_t w_bytes = static_cast<size_t>(sh.n * sh.k) * 2;
  const int64_t copies =
      std::clamp<int64_t>(static_cast<int64_t>((kRotateBytes + w_bytes - 1) / w_bytes), 8, 512);
  const size_t y_bytes = static_cast<size_t>(m * sh.n) * ActBytes(sh.y_type);

  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto ctx = BlasContext::Create();
  if (!ctx.ok()) return state.SkipWithError(std::string(ctx.status().message()).c_str());
  DeviceBuffer w(w_bytes * copies), x(static_cast<size_t>(m * sh.k) * 2), y(y_bytes);
  if (!w.p || !x.p || !y.p) return state.SkipWithError("cudaMalloc failed");
  Status st = FillRandomBf16(static_cast<bf16*>(w.p), sh.n * sh.k * copies, 1, 0.05f, s);
  if (st.ok()) st = FillRandomBf16(static_cast<bf16*>(x.p), m * sh.k, 2, 1.f, s);
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  cudaMemsetAsync(y.p, 0, y_bytes, s);

  GemmArgs a;
  a.m = m;
  a.n = sh.n;
  a.k = sh.k;
  a.x = x.p;
  a.y = y.p;
  a.y_type = sh.y_type;
  a.beta = sh.beta;
  // One eager call of the same shape first (plans exist before capture).
  a.w = static_cast<const bf16*>(w.p);
  st = Gemm(**ctx, a, s);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (st.ok() && cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    for (int64_t c = 0; c < copies && st.ok(); ++c) {
      a.w = static_cast<const bf16*>(w.p) + static_cast<size_t>(c) * sh.n * sh.k;
      st = Gemm(**ctx, a, s);
    }
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess && st.ok()) {
      st = absl::InternalError("graph capture failed");
    }
  }
  if (st.ok() && (graph == nullptr || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)) {
    st = absl::InternalError("graph instantiation failed");
  }
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    return state.SkipWithError(std::string(st.message()).c_str());
  }
  cudaGraphLaunch(exec, s);  // warm-up: loads the kernels, touches every copy once
  cudaStreamSynchronize(s);

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    cudaEventRecord(start, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3 / static_cast<double>(copies));  // per GEMV
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) state.SkipWithError(cudaGetErrorString(err));

  const double bytes = static_cast<double>(w_bytes) + static_cast<double>(m * sh.k * 2) +
                       static_cast<double>(y_bytes) * (sh.beta != 0.f ? 2 : 1);
  state.counters["TB/s"] =
      benchmark::Counter(bytes / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_of_4270GBs"] = benchmark::Counter(
      100.0 * bytes / kHbmBytesPerSecond, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB"] = bytes / 1e6;
  state.counters["calls"] = sh.calls;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

void GemvArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < kNumShapes; ++i) {
    for (int64_t m : {1, 8}) b->Args({i, m});
  }
}

BENCHMARK(BM_CudaGemv)->Apply(GemvArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Prefill-sized products (m > 16): batch-invariant mode's tiled kernel
// (BM_CudaGemmInvariant) against cuBLASLt (BM_CudaGemmCublasLt, the mode
// off), bf16 x and y. Compute-bound (2·m·n·k FLOPs; the H200's mma.sync
// peak is ~660 TFLOP/s), so W is not rotated: each iteration replays a
// graph of kGemmReps products on the same operands. Counter: TFLOP/s.
struct GemmShape {
  const char* name;
  int64_t n, k;
};
const GemmShape kGemmShapes[] = {
    {"kda_in_proj_12576x2304", 12576, 2304},
    {"o_proj_2304x4096", 2304, 4096},
    {"shared_gate_up_2048x2304", 2048, 2304},
};
constexpr int kGemmReps = 10;

void RunGemm(benchmark::State& state, bool invariant) {
  const GemmShape& sh = kGemmShapes[state.range(0)];
  const int64_t m = state.range(1);
  state.SetLabel(sh.name);
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto ctx = BlasContext::Create();
  if (!ctx.ok()) return state.SkipWithError(std::string(ctx.status().message()).c_str());
  (*ctx)->set_batch_invariant(invariant);
  DeviceBuffer w(static_cast<size_t>(sh.n * sh.k) * 2), x(static_cast<size_t>(m * sh.k) * 2),
      y(static_cast<size_t>(m * sh.n) * 2);
  if (!w.p || !x.p || !y.p) return state.SkipWithError("cudaMalloc failed");
  Status st = FillRandomBf16(static_cast<bf16*>(w.p), sh.n * sh.k, 1, 0.05f, s);
  if (st.ok()) st = FillRandomBf16(static_cast<bf16*>(x.p), m * sh.k, 2, 1.f, s);
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  GemmArgs a;
  a.m = m;
  a.n = sh.n;
  a.k = sh.k;
  a.x = x.p;
  a.w = static_cast<const bf16*>(w.p);
  a.y = y.p;
  st = Gemm(**ctx, a, s);  // plans exist before capture
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (st.ok() && cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    for (int r = 0; r < kGemmReps && st.ok(); ++r) st = Gemm(**ctx, a, s);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess && st.ok()) {
      st = absl::InternalError("graph capture failed");
    }
  }
  if (st.ok() && (graph == nullptr || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)) {
    st = absl::InternalError("graph instantiation failed");
  }
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    return state.SkipWithError(std::string(st.message()).c_str());
  }
  cudaGraphLaunch(exec, s);  // warm-up
  cudaStreamSynchronize(s);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    cudaEventRecord(start, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3 / kGemmReps);  // per product
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) state.SkipWithError(cudaGetErrorString(err));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(sh.n) *
                       static_cast<double>(sh.k);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

void BM_CudaGemmInvariant(benchmark::State& state) { RunGemm(state, /*invariant=*/true); }
void BM_CudaGemmCublasLt(benchmark::State& state) { RunGemm(state, /*invariant=*/false); }

void GemmArgsList(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(sizeof(kGemmShapes) / sizeof(kGemmShapes[0])); ++i) {
    for (int64_t m : {512, 4096, 8192}) b->Args({i, m});
  }
}

BENCHMARK(BM_CudaGemmInvariant)
    ->Apply(GemmArgsList)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaGemmCublasLt)->Apply(GemmArgsList)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::cuda

#endif  // STRATA_HAVE_CUDA
