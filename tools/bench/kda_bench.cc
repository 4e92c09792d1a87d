// Google Benchmark for the KDA CPU kernels at Kimi-Linear-48B sizes (32 heads,
// dk = dv = 128): chunked prefill over T tokens and single-token recurrent
// decode. Reports tokens/s; the second argument is the thread count.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/kda.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kHeadDim = 128;

struct KdaBuffers {
  std::vector<float> q, k, v, g, beta, state, out;

  explicit KdaBuffers(int64_t tokens) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> act(-0.27f, 2.f), val(-2.f, 2.f), gate(-3.f, -0.01f),
        strength(0.05f, 0.95f);
    const int64_t rows = tokens * kHeads;
    q.resize(rows * kHeadDim);
    k.resize(rows * kHeadDim);
    g.resize(rows * kHeadDim);
    v.resize(rows * kHeadDim);
    beta.resize(rows);
    out.resize(rows * kHeadDim);
    state.assign(kHeads * kHeadDim * kHeadDim, 0.f);
    for (float& x : q) x = act(rng);
    for (float& x : k) x = act(rng);
    for (float& x : v) x = val(rng);
    for (float& x : g) x = gate(rng);
    for (float& x : beta) x = strength(rng);
  }

  KdaArgs Args(int64_t tokens) {
    KdaArgs a;
    a.num_tokens = tokens;
    a.num_heads = kHeads;
    a.key_dim = kHeadDim;
    a.value_dim = kHeadDim;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.g = g.data();
    a.beta = beta.data();
    a.state = state.data();
    a.out = out.data();
    return a;
  }
};

std::unique_ptr<ThreadPool> MakePool(int threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
}

void BM_KdaChunkedPrefill(benchmark::State& st) {
  const int64_t tokens = st.range(0);
  const int threads = static_cast<int>(st.range(1));
  KdaBuffers buf(tokens);
  const KdaArgs args = buf.Args(tokens);
  const auto pool = MakePool(threads);
  const size_t bytes = KdaChunkedWorkspaceBytes(tokens, kHeads, kHeadDim, kHeadDim, threads);
  void* workspace = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  for (auto _ : st) {
    // The state keeps evolving across iterations; the delta rule keeps it bounded.
    const Status s = KdaChunked(args, workspace, bytes, pool.get());
    if (!s.ok()) st.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(buf.out.data());
  }
  std::free(workspace);
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KdaChunkedPrefill)
    ->ArgNames({"T", "threads"})
    ->Args({1024, 1})
    ->Args({1024, 2})
    ->Args({4096, 1})
    ->Args({4096, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_KdaRecurrentDecode(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  KdaBuffers buf(1);
  const KdaArgs args = buf.Args(1);
  const auto pool = MakePool(threads);
  for (auto _ : st) {
    const Status s = KdaRecurrent(args, pool.get());
    if (!s.ok()) st.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(buf.out.data());
  }
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KdaRecurrentDecode)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace cpu
}  // namespace strata
