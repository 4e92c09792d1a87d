// Google Benchmark for the kimi_linear CPU matmuls at Kimi-Linear-48B sizes
// (bf16 weights read in place): single-token GEMV (memory bound; reports GB/s
// of weight traffic) and the blocked prefill GEMM (reports GFLOP/s and the
// effective weight GB/s). Arguments: rows m, cols k, [tokens n,] threads.
// GEMV rotates through enough weight copies to defeat the last-level cache.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/dtype.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

constexpr size_t kRotationBytes = size_t{512} << 20;  // > any L3 we run on

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = F32ToBf16(dist(rng));
  return v;
}

std::vector<float> RandomF32(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::unique_ptr<ThreadPool> MakePool(int threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
}

void BM_Bf16Gemv(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const size_t weight_bytes = static_cast<size_t>(m * k) * 2;
  const size_t copies = std::max<size_t>(1, kRotationBytes / weight_bytes);
  // Copies of one random matrix: the content does not matter, only that each
  // pass has to stream its weights from DRAM.
  std::vector<std::vector<uint16_t>> w(copies, RandomBf16(static_cast<size_t>(m * k), 1));
  const auto x = RandomF32(static_cast<size_t>(k), 99);
  std::vector<float> y(static_cast<size_t>(m));
  auto pool = MakePool(threads);
  size_t i = 0;
  for (auto _ : state) {
    const WeightMatrix wm{DType::kBF16, w[i].data(), m, k};
    MatMul(x.data(), 1, wm, y.data(), nullptr, pool.get());
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % copies;
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Bf16Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const auto w = RandomBf16(static_cast<size_t>(m * k), 1);
  const auto x = RandomF32(static_cast<size_t>(n * k), 2);
  std::vector<float> y(static_cast<size_t>(n * m));
  auto pool = MakePool(threads);
  std::vector<float> scratch(MatMulScratchFloats(n, k, threads) + 1);
  const WeightMatrix wm{DType::kBF16, w.data(), m, k};
  for (auto _ : state) {
    MatMul(x.data(), n, wm, y.data(), scratch.data(), pool.get());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * m * k) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(m * k * 2) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

int MaxThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void GemvArgs(benchmark::internal::Benchmark* b) {
  // q/k/v_proj [4096 x 2304], o_proj [2304 x 4096], MLA q_proj [6144 x 2304],
  // expert w1/w3 [1024 x 2304], expert w2 [2304 x 1024].
  for (int threads : {1, MaxThreads()}) {
    for (auto [m, k] :
         {std::pair{4096, 2304}, {2304, 4096}, {6144, 2304}, {1024, 2304}, {2304, 1024}}) {
      b->Args({m, k, threads});
    }
  }
  b->UseRealTime();
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, MaxThreads()}) {
    for (int n : {16, 64, 256}) b->Args({4096, 2304, n, threads});
  }
  b->UseRealTime();
}

BENCHMARK(BM_Bf16Gemv)->Apply(GemvArgs)->ArgNames({"m", "k", "threads"});
BENCHMARK(BM_Bf16Gemm)->Apply(GemmArgs)->ArgNames({"m", "k", "n", "threads"});

}  // namespace
}  // namespace cpu
}  // namespace strata
