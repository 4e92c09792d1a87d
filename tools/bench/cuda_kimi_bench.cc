// Google Benchmark of the kimi_linear CUDA kernels at Kimi-Linear-48B-A3B's
// production shapes (H=32, dk=dv=128; MLA H=32, r=512, dr=64; E=256 top-8,
// I=1024, D=2304), each against its physical limit on the H200:
//   * KDA chunked prefill (one layer, T tokens):   TFLOP/s and % of 686 TFLOP/s
//   * KDA recurrent decode (one layer, B seqs):    GB/s and % of 4270 GB/s
//     (fp32 state read + written per sequence dominates)
//   * MLA absorbed decode (one layer, B × ctx):    GB/s and % of 4270 GB/s
//     (the bf16 latent cache, 1152 bytes per token, read once)
//   * MoE layer (routing + grouped experts):       decode: GB/s over the
//     expected distinct experts' weights; prefill: TFLOP/s of 2·n·k·3·I·D
// Small working sets rotate through copies larger than the 50 MB L2 so each
// iteration streams from HBM. Times are CUDA-event times (manual time).
// Built only with CUDA (the file is empty otherwise).
#if defined(STRATA_HAVE_CUDA)

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/moe.h"
#include "base/tuning.h"

namespace strata::cuda {
namespace {

constexpr double kHbmBytesPerSecond = 4270e9;  // H200 measured copy bandwidth
constexpr double kBf16Flops = 686e12;          // H200 measured bf16 matmul
constexpr size_t kRotateBytes = size_t{256} << 20;  // > L2 (50 MB)

constexpr int64_t kH = 32, kDk = 128, kC = kH * kDk;
constexpr int64_t kMlaH = 32, kR = 512, kDr = 64, kDn = 128, kDv = 128;
constexpr int64_t kD = 2304, kE = 256, kTopK = 8, kI = 1024;

// Device buffer freed at scope exit; aborts the benchmark on failure.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

bool Check(benchmark::State& state, const Status& s) {
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  return s.ok();
}
bool Check(benchmark::State& state, cudaError_t e) {
  if (e != cudaSuccess) state.SkipWithError(cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Times `run(iteration)` with CUDA events; reports per-iteration seconds.
template <typename Run>
void TimeLoop(benchmark::State& state, cudaStream_t stream, Run run) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int64_t it = 0;
  // One untimed call loads the kernels and warms cuBLASLt heuristics.
  if (!Check(state, run(it++))) return;
  cudaStreamSynchronize(stream);
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    if (!Check(state, run(it++))) break;
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void ReportBandwidth(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes"] = bytes_per_iter;
  // % of the HBM limit: filled in as a rate, then scaled.
  state.counters["pct_of_4270GBs"] = benchmark::Counter(
      100.0 * bytes_per_iter / kHbmBytesPerSecond, benchmark::Counter::kIsIterationInvariantRate);
}

void ReportFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops_per_iter / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_of_686TFs"] = benchmark::Counter(100.0 * flops_per_iter / kBf16Flops,
                                                       benchmark::Counter::kIsIterationInvariantRate);
}

KdaGates Gates(const float* g, const float* beta, const float* nea, const float* dtb) {
  KdaGates gates;
  gates.g_raw = g;
  gates.g_type = ActType::kF32;
  gates.ld_g = kC;
  gates.beta_raw = beta;
  gates.beta_type = ActType::kF32;
  gates.ld_beta = kH;
  gates.neg_exp_a = nea;
  gates.dt_bias = dtb;
  return gates;
}

// --- KDA prefill: one layer, T tokens, from a zero state ---------------------
// BM_CudaKdaPrefill runs the path the tuning selects (the default unless
// STRATA_OPTIONS sets kda.prefill); BM_CudaKdaPrefillOld forces the
// reference kernels (kda.prefill=tf32), so one run of the binary gives the
// A/B pair; BM_CudaKdaPrefillRecurrent the batch-invariant path.
void RunKdaPrefill(benchmark::State& state, bool recurrent = false) {
  const int64_t T = state.range(0);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  KdaShape shape{kH, kDk, kDk, 0.f};
  DeviceBuffer qkv(sizeof(bf16) * T * 3 * kC), g(sizeof(float) * T * kC), beta(sizeof(float) * T * kH),
      nea(sizeof(float) * kH), dtb(sizeof(float) * kC), st(sizeof(float) * kH * kDk * kDk),
      out(sizeof(bf16) * T * kC);
  const size_t ws_bytes = KdaPrefillWorkspaceBytes(shape, T);
  DeviceBuffer ws(ws_bytes);
  if (!qkv.p || !g.p || !beta.p || !out.p || !ws.p) return state.SkipWithError("cudaMalloc failed");
  if (!Check(state, FillRandomBf16(qkv.as<bf16>(), T * 3 * kC, 1, 1.f, s)) ||
      !Check(state, FillRandomF32(g.as<float>(), T * kC, 2, -1.f, 1.f, s)) ||
      !Check(state, FillRandomF32(beta.as<float>(), T * kH, 3, -2.f, 2.f, s)) ||
      !Check(state, FillRandomF32(nea.as<float>(), kH, 4, -16.f, -1.f, s)) ||
      !Check(state, FillRandomF32(dtb.as<float>(), kC, 5, -6.9f, -2.3f, s))) {
    return;
  }
  KdaPrefillArgs a;
  a.shape = shape;
  a.num_tokens = T;
  a.q = qkv.as<bf16>();
  a.k = qkv.as<bf16>() + kC;
  a.v = qkv.as<bf16>() + 2 * kC;
  a.ld_qkv = 3 * kC;
  a.gates = Gates(g.as<float>(), beta.as<float>(), nea.as<float>(), dtb.as<float>());
  a.state = st.as<float>();
  a.out = out.p;
  a.recurrent = recurrent;
  TimeLoop(state, s, [&](int64_t) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(st.p, 0, sizeof(float) * kH * kDk * kDk, s));
    return KdaPrefill(a, ws.p, ws_bytes, s);
  });
  // µs per token of the layer (the recurrent path is a chain of T steps).
  state.counters["us_per_token"] = benchmark::Counter(
      1e-6 * static_cast<double>(T),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  // Multiply-adds per 64-token chunk and head (see KimiLinearPrefillFlops).
  const double c = 64, dk = kDk;
  const double macs = c * c * 5 * dk + c * c * c / 3 + 3 * c * dk * dk;
  ReportFlops(state, 2 * macs * std::ceil(static_cast<double>(T) / c) * kH);
  cudaStreamDestroy(s);
}
void BM_CudaKdaPrefill(benchmark::State& state) { RunKdaPrefill(state); }
BENCHMARK(BM_CudaKdaPrefill)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_CudaKdaPrefillOld(benchmark::State& state) {
  const tuning::ScopedOptions arm("kda.prefill=tf32");
  RunKdaPrefill(state);
}
BENCHMARK(BM_CudaKdaPrefillOld)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMillisecond);
// The batch-invariant token recurrence (KdaPrefillArgs::recurrent); its FLOP
// counter still counts the chunked form's work, for comparison.
void BM_CudaKdaPrefillRecurrent(benchmark::State& state) { RunKdaPrefill(state, true); }
BENCHMARK(BM_CudaKdaPrefillRecurrent)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMillisecond);

// --- KDA decode: one layer, B sequences, one token each ----------------------
void BM_CudaKdaDecode(benchmark::State& state) {
  const int64_t B = state.range(0);
  const int64_t state_elems = kH * kDk * kDk;
  const size_t per_batch = sizeof(float) * static_cast<size_t>(B * state_elems);
  const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kRotateBytes / per_batch));
  const int64_t slots = B * copies;
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DeviceBuffer pool(sizeof(float) * slots * state_elems), qkv(sizeof(bf16) * B * 3 * kC),
      g(sizeof(float) * B * kC), beta(sizeof(float) * B * kH), nea(sizeof(float) * kH), dtb(sizeof(float) * kC),
      out(sizeof(bf16) * B * kC), slot_ids(sizeof(int32_t) * slots);
  if (!pool.p || !slot_ids.p) return state.SkipWithError("cudaMalloc failed");
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  if (!Check(state, cudaMemcpy(slot_ids.p, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice)) ||
      !Check(state, FillRandomF32(pool.as<float>(), slots * state_elems, 9, -0.1f, 0.1f, s)) ||
      !Check(state, FillRandomBf16(qkv.as<bf16>(), B * 3 * kC, 1, 1.f, s)) ||
      !Check(state, FillRandomF32(g.as<float>(), B * kC, 2, -1.f, 1.f, s)) ||
      !Check(state, FillRandomF32(beta.as<float>(), B * kH, 3, -2.f, 2.f, s)) ||
      !Check(state, FillRandomF32(nea.as<float>(), kH, 4, -16.f, -1.f, s)) ||
      !Check(state, FillRandomF32(dtb.as<float>(), kC, 5, -6.9f, -2.3f, s))) {
    return;
  }
  KdaDecodeArgs a;
  a.shape = KdaShape{kH, kDk, kDk, 0.f};
  a.batch = B;
  a.q = qkv.as<bf16>();
  a.k = qkv.as<bf16>() + kC;
  a.v = qkv.as<bf16>() + 2 * kC;
  a.ld_qkv = 3 * kC;
  a.gates = Gates(g.as<float>(), beta.as<float>(), nea.as<float>(), dtb.as<float>());
  a.state_pool = pool.as<float>();
  a.out = out.p;
  TimeLoop(state, s, [&](int64_t it) {
    a.slots = slot_ids.as<int32_t>() + (it % copies) * B;  // a cold set of states each time
    return KdaDecode(a, s);
  });
  const double bytes = static_cast<double>(B) * (2.0 * 4 * state_elems + 2.0 * 3 * kC + 4.0 * kC + 4.0 * kH +
                                                 2.0 * kC);
  ReportBandwidth(state, bytes);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaKdaDecode)->Arg(1)->Arg(8)->Arg(32)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- MLA decode: one layer, B sequences of ctx tokens --------------------------
void BM_CudaMlaDecode(benchmark::State& state) {
  const int64_t B = state.range(0), ctx = state.range(1);
  MlaShape shape{kMlaH, kDn, kDr, kDv, kR, 0.f};
  const int64_t cd = shape.cache_dim();
  const int64_t blocks_per_seq = (ctx + kKvBlockTokens - 1) / kKvBlockTokens;
  const size_t per_batch = sizeof(bf16) * static_cast<size_t>(B * blocks_per_seq * kKvBlockTokens * cd);
  const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kRotateBytes / per_batch));
  const int64_t blocks = copies * B * blocks_per_seq;
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DeviceBuffer pool(sizeof(bf16) * blocks * kKvBlockTokens * cd), table(sizeof(int32_t) * blocks),
      lens(sizeof(int32_t) * B), q(sizeof(bf16) * B * kMlaH * cd), out(sizeof(bf16) * B * kMlaH * kR);
  const size_t ws_bytes = MlaDecodeWorkspaceBytes(shape, B, ctx);
  DeviceBuffer ws(ws_bytes);
  if (!pool.p || !table.p || !ws.p) return state.SkipWithError("cudaMalloc failed");
  // Copy c's sequence b owns blocks [(c·B + b)·bps, +bps): its block-table row.
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<int32_t> seq_lens(static_cast<size_t>(B), static_cast<int32_t>(ctx));
  if (!Check(state, cudaMemcpy(table.p, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice)) ||
      !Check(state, cudaMemcpy(lens.p, seq_lens.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice)) ||
      !Check(state, FillRandomBf16(pool.as<bf16>(), blocks * kKvBlockTokens * cd, 1, 1.f, s)) ||
      !Check(state, FillRandomBf16(q.as<bf16>(), B * kMlaH * cd, 2, 1.f, s))) {
    return;
  }
  MlaDecodeArgs a;
  a.shape = shape;
  a.batch = B;
  a.q_abs = q.as<bf16>();
  a.cache.pool = pool.as<bf16>();
  a.cache.max_blocks = blocks_per_seq;
  a.seq_lens = lens.as<int32_t>();
  a.max_seq_len = ctx;
  a.out_latent = out.p;
  TimeLoop(state, s, [&](int64_t it) {
    a.cache.block_table = table.as<int32_t>() + (it % copies) * B * blocks_per_seq;
    return MlaDecode(a, ws.p, ws_bytes, s);
  });
  ReportBandwidth(state, static_cast<double>(B) * (static_cast<double>(ctx) * cd * 2 + kMlaH * (cd + kR) * 2.0));
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaMlaDecode)
    ->ArgsProduct({{1, 8, 32, 64}, {4096, 32768, 131072}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- MoE layer: routing + grouped experts + combine ---------------------------
// BM_CudaMoeLayer takes the GEMM the tuning selects (moe.gemm=cutlass|mma|
// auto in STRATA_OPTIONS, default auto); BM_CudaMoeLayerMma forces the
// mma.sync kernels, so one run gives the prefill A/B pair.
void RunMoeLayer(benchmark::State& state, MoeGemmImpl impl) {
  const int64_t n = state.range(0);
  MoeShape shape{kE, kD, kI, kTopK, true, 2.446f};
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DeviceBuffer w13(sizeof(bf16) * kE * 2 * kI * kD), w2(sizeof(bf16) * kE * kD * kI), x(sizeof(bf16) * n * kD),
      logits(sizeof(float) * n * kE), bias(sizeof(float) * kE), y(sizeof(float) * n * kD);
  const size_t ws_bytes = MoeWorkspaceBytes(shape, n);
  DeviceBuffer ws(ws_bytes);
  if (!w13.p || !w2.p || !ws.p) return state.SkipWithError("cudaMalloc failed");
  if (!Check(state, FillRandomBf16(w13.as<bf16>(), kE * 2 * kI * kD, 1, 0.02f, s)) ||
      !Check(state, FillRandomBf16(w2.as<bf16>(), kE * kD * kI, 2, 0.02f, s)) ||
      !Check(state, FillRandomBf16(x.as<bf16>(), n * kD, 3, 1.f, s)) ||
      !Check(state, FillRandomF32(logits.as<float>(), n * kE, 4, -4.f, 4.f, s)) ||
      !Check(state, FillRandomF32(bias.as<float>(), kE, 5, -0.01f, 0.01f, s))) {
    return;
  }
  MoeArgs a;
  a.shape = shape;
  a.num_tokens = n;
  a.x = x.as<bf16>();
  a.router_logits = logits.as<float>();
  a.score_bias = bias.as<float>();
  a.w13 = w13.as<bf16>();
  a.w2 = w2.as<bf16>();
  a.y = y.as<float>();
  a.gemm_impl = impl;
  // The expert weights (3.6 GB) dwarf L2: no rotation needed.
  TimeLoop(state, s, [&](int64_t) { return MoeForward(a, ws.p, ws_bytes, s); });
  const double per_expert = 3.0 * kI * kD * 2;
  const double distinct = kE * (1 - std::pow(1 - static_cast<double>(kTopK) / kE, static_cast<double>(n)));
  if (n <= 256) {
    ReportBandwidth(state, distinct * per_expert);
  } else {
    ReportFlops(state, 2.0 * n * kTopK * 3.0 * kI * kD);
  }
  cudaStreamDestroy(s);
}
// --- MoE routing alone (sigmoid + bias top-8 of 256) ---------------------------
// 32 back-to-back route kernels per iteration, reported per kernel: the
// routing's latency on a busy stream, as in a decode step (the kernels are
// serial through their PDL waits).
void BM_CudaMoeRoute(benchmark::State& state) {
  const int64_t n = state.range(0);
  constexpr int kReps = 32;
  MoeShape shape{kE, kD, kI, kTopK, true, 2.446f};
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DeviceBuffer logits(sizeof(float) * n * kE), bias(sizeof(float) * kE),
      idx(sizeof(int32_t) * n * kTopK), wt(sizeof(float) * n * kTopK);
  if (!logits.p || !bias.p || !idx.p || !wt.p) return state.SkipWithError("cudaMalloc failed");
  if (!Check(state, FillRandomF32(logits.as<float>(), n * kE, 4, -4.f, 4.f, s)) ||
      !Check(state, FillRandomF32(bias.as<float>(), kE, 5, -0.01f, 0.01f, s))) {
    return;
  }
  TimeLoop(state, s, [&](int64_t) -> Status {
    for (int r = 0; r < kReps; ++r) {
      STRATA_RETURN_IF_ERROR(MoeRoute(shape, logits.as<float>(), bias.as<float>(), n,
                                      idx.as<int32_t>(), wt.as<float>(), s));
    }
    return OkStatus();
  });
  state.counters["us_per_kernel"] = benchmark::Counter(
      kReps * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaMoeRoute)->Arg(1)->Arg(8)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_CudaMoeLayer(benchmark::State& state) { RunMoeLayer(state, MoeGemmImpl::kAuto); }
BENCHMARK(BM_CudaMoeLayer)->Arg(1)->Arg(8)->Arg(32)->Arg(64)->Arg(2048)->Arg(8192)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);
void BM_CudaMoeLayerMma(benchmark::State& state) { RunMoeLayer(state, MoeGemmImpl::kMma); }
BENCHMARK(BM_CudaMoeLayerMma)->Arg(2048)->Arg(8192)->Arg(32768)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::cuda

#endif  // STRATA_HAVE_CUDA
