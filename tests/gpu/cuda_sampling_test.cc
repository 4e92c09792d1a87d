// CUDA sampling against the CPU sampler's semantics (engine/sampler.h):
//  * greedy equals the CPU argmax on random logits with planted exact ties
//    (the lower id wins), NaN, ±inf, all-NaN and all-(−inf) rows, for odd and
//    production vocabularies and a misaligned row pointer (scalar path);
//  * rows with T > 0 whose filters leave one token (top_k = 1, tiny top_p)
//    or with no finite logit give the argmax; NaN temperature is greedy;
//  * temperature / top-k / top-p draws over many deterministic seeds: every
//    drawn token lies in the support of cpu SamplingDistribution (exact), and
//    a chi-square statistic against its probabilities stays below
//    df + 6·sqrt(2·df) + 10 (deterministic seeds, so the test cannot flake);
//    cases include exact ties at the top-k and at the top-p cut, V = 163840
//    and an odd V;
//  * equal (seed, step) give equal tokens, another step gives other tokens;
//  * the first pass split over 64 CTAs per row (with a workspace) gives the
//    tokens of the in-kernel pass (without one);
//  * a captured CUDA graph replayed after the step changes on the device
//    equals eager calls;
//  * argument misuse → InvalidArgument naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <vector>

#include "backend/cuda/sampling.h"
#include "engine/sampler.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DevBuf;

float HashUniform(uint64_t seed, uint64_t i) {  // [-1, 1)
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return 2.f * (static_cast<float>(z >> 40) * 0x1.0p-24f) - 1.f;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs SampleTokens on the first `rows_host.size()` rows of `logits` ([B, V]
// row-major) placed `offset_bytes` into the device buffer.
// with_workspace false: no workspace, so the first pass runs inside the
// row kernel instead of SampleScanKernel.
// tokens_in_pinned_host: the kernel writes the tokens straight into pinned
// host memory (as a decode step does) instead of a device buffer.
std::vector<int32_t> Sample(const std::vector<float>& logits, int64_t V,
                            const std::vector<GpuSamplingRow>& rows_host, size_t offset_bytes = 0,
                            bool with_workspace = true, bool tokens_in_pinned_host = false) {
  const int64_t B = static_cast<int64_t>(rows_host.size());
  const size_t n = static_cast<size_t>(B * V);
  EXPECT_LE(n, logits.size());
  DevBuf d_logits(sizeof(float) * n + offset_bytes);
  DevBuf d_rows(sizeof(GpuSamplingRow) * B);
  DevBuf d_tokens(tokens_in_pinned_host ? 0 : sizeof(int32_t) * B);
  EXPECT_EQ(cudaMemcpy(d_logits.get(offset_bytes), logits.data(), sizeof(float) * n,
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_rows.get(), rows_host.data(), sizeof(GpuSamplingRow) * B,
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  if (!tokens_in_pinned_host) {
    EXPECT_EQ(cudaMemset(d_tokens.get(), 0xff, sizeof(int32_t) * B), cudaSuccess);
  }
  const size_t ws_bytes = with_workspace ? SampleWorkspaceBytes(B, V) : 0;
  DevBuf ws(ws_bytes);
  if (ws_bytes > 0) EXPECT_EQ(cudaMemset(ws.get(), 0, ws_bytes), cudaSuccess);  // its contract
  int32_t* pinned = nullptr;
  if (tokens_in_pinned_host) {
    EXPECT_EQ(cudaMallocHost(&pinned, sizeof(int32_t) * B), cudaSuccess);
    std::fill(pinned, pinned + B, -1);
  }
  const Status st =
      SampleTokens(d_logits.get<float>(offset_bytes), B, V, d_rows.get<GpuSamplingRow>(),
                   tokens_in_pinned_host ? pinned : d_tokens.get<int32_t>(),
                   with_workspace ? ws.get() : nullptr, ws_bytes, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> out(static_cast<size_t>(B));
  if (tokens_in_pinned_host) {
    std::copy(pinned, pinned + B, out.begin());
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  } else {
    EXPECT_EQ(cudaMemcpy(out.data(), d_tokens.get(), sizeof(int32_t) * B, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return out;
}

int32_t CpuGreedy(std::span<const float> row) {
  SamplingParams p;
  return SamplingDistribution(row, {}, p).front().first;
}

// ---------------------------------------------------------------------------
// Greedy.

std::vector<float> GreedyRows(int64_t B, int64_t V, uint64_t seed) {
  std::vector<float> l(static_cast<size_t>(B * V));
  for (size_t i = 0; i < l.size(); ++i) l[i] = 5.f * HashUniform(seed, i);
  for (int64_t b = 0; b < B; ++b) {
    float* row = l.data() + b * V;
    const int kind = static_cast<int>(b % 8);
    const float mx = *std::max_element(row, row + V);
    auto pos = [&](uint64_t j) {
      return static_cast<int64_t>((HashUniform(seed + 1, b * 16 + j) + 1.f) * 0.5f * V) % V;
    };
    switch (kind) {
      case 0:
        break;  // plain random
      case 1:   // exact ties at the max in several places
        for (uint64_t j = 0; j < 4; ++j) row[pos(j)] = mx + 1.f;
        break;
      case 2:  // NaN everywhere but a few, which tie
        for (int64_t i = 0; i < V; ++i) row[i] = kNaN;
        row[pos(0)] = 1.f;
        row[pos(1)] = 1.f;
        row[pos(2)] = -2.f;
        break;
      case 3:  // all NaN → 0
        for (int64_t i = 0; i < V; ++i) row[i] = kNaN;
        break;
      case 4:  // all −inf → the first id
        for (int64_t i = 0; i < V; ++i) row[i] = -kInf;
        break;
      case 5:  // NaN first, −inf after: the first −inf
        for (int64_t i = 0; i < V; ++i) row[i] = -kInf;
        row[0] = kNaN;
        break;
      case 6:  // +inf twice (the lower wins) among NaNs
        for (uint64_t j = 0; j < 8; ++j) row[pos(j)] = kNaN;
        row[pos(8)] = kInf;
        row[pos(9)] = kInf;
        break;
      case 7:  // −0 and +0 tie at the max
        for (int64_t i = 0; i < V; ++i) row[i] = -std::fabs(row[i]) - 1.f;
        row[pos(0)] = -0.f;
        row[pos(1)] = 0.f;
        break;
    }
  }
  return l;
}

void CheckGreedy(int64_t B, int64_t V, uint64_t seed, size_t offset_bytes) {
  SCOPED_TRACE(testing::Message() << "V=" << V << " offset=" << offset_bytes);
  const std::vector<float> l = GreedyRows(B, V, seed);
  std::vector<GpuSamplingRow> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    rows[b].seed = 1234 + b;
    rows[b].step = 7;
    // Greedy through T = 0, through a filter leaving one token, and through NaN T.
    if (b % 3 == 1) {
      rows[b].temperature = 0.7f;
      rows[b].top_k = 1;
    } else if (b % 3 == 2) {
      rows[b].temperature = std::numeric_limits<float>::quiet_NaN();
    }
  }
  const std::vector<int32_t> got = Sample(l, V, rows, offset_bytes);
  int mismatches = 0;
  for (int64_t b = 0; b < B; ++b) {
    const std::span<const float> row(l.data() + b * V, static_cast<size_t>(V));
    int32_t want = CpuGreedy(row);  // NaN temperature: greedy by our contract
    if (rows[b].temperature > 0.f) {
      // top_k = 1 on the CPU sampler: the best finite logit (or the argmax when none is finite).
      SamplingParams sp;
      sp.temperature = rows[b].temperature;
      sp.top_k = rows[b].top_k;
      const auto dist = SamplingDistribution(row, {}, sp);
      EXPECT_EQ(dist.size(), 1u) << "row " << b;
      want = dist.front().first;
    }
    if (got[b] != want && mismatches++ < 8) {
      ADD_FAILURE() << "row " << b << " (kind " << b % 8 << "): gpu " << got[b] << " cpu " << want;
    }
  }
  std::printf("greedy V=%lld B=%lld offset=%zu: %d mismatches\n", static_cast<long long>(V),
              static_cast<long long>(B), offset_bytes, mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaSampling, GreedyMatchesCpuArgmax) {
  CheckGreedy(48, 7, 1, 0);
  CheckGreedy(48, 1001, 2, 0);
  CheckGreedy(48, 1000, 3, 4);  // V % 4 == 0 but rows misaligned: scalar loads
  CheckGreedy(24, 163840, 4, 0);
}

TEST(CudaSampling, OneTokenFiltersAndNonFiniteRowsGiveArgmax) {
  const int64_t V = 4096;
  std::vector<float> l(static_cast<size_t>(6 * V));
  for (size_t i = 0; i < l.size(); ++i) l[i] = 3.f * HashUniform(9, i);
  for (int64_t i = 0; i < V; ++i) l[5 * V + i] = -kInf;  // no finite logit
  std::vector<GpuSamplingRow> rows(6);
  for (auto& r : rows) r.temperature = 1.f;
  rows[0].temperature = 0.f;
  rows[1].top_k = 1;
  rows[2].top_p = 1e-6f;  // the top token alone reaches it
  rows[3].top_k = 1;
  rows[3].top_p = 0.5f;
  rows[4].temperature = 1e-40f;  // 1/T overflows to inf: all mass on the max
  for (size_t b = 0; b < rows.size(); ++b) rows[b].seed = 99 + b;
  const std::vector<int32_t> got = Sample(l, V, rows);
  for (int64_t b = 0; b < 6; ++b) {
    EXPECT_EQ(got[b], CpuGreedy(std::span<const float>(l.data() + b * V, static_cast<size_t>(V))))
        << "row " << b;
  }
}

// ---------------------------------------------------------------------------
// Distributions.

struct DistCase {
  const char* label;
  float temperature;
  int32_t top_k;
  float top_p;
};

void CheckDistribution(const std::vector<float>& row, const DistCase& c, int64_t draws,
                       uint64_t seed_base, size_t offset_bytes = 0) {
  const int64_t V = static_cast<int64_t>(row.size());
  SCOPED_TRACE(testing::Message() << c.label << " V=" << V);
  SamplingParams sp;
  sp.temperature = c.temperature;
  sp.top_k = c.top_k;
  sp.top_p = c.top_p;
  const auto dist = SamplingDistribution(row, {}, sp);
  std::vector<double> prob(static_cast<size_t>(V), 0.0);
  for (const auto& [tok, q] : dist) prob[tok] = q;

  // Rows per call bounded to ~256 MB of logits; every draw has its own seed.
  const int64_t per_call = std::max<int64_t>(1, std::min<int64_t>(draws, (int64_t{64} << 20) / V));
  std::vector<float> logits(static_cast<size_t>(per_call * V));
  for (int64_t b = 0; b < per_call; ++b) std::copy(row.begin(), row.end(), logits.begin() + b * V);
  std::vector<int64_t> count(static_cast<size_t>(V), 0);
  int64_t outside = 0, done = 0;
  for (uint64_t step = 0; done < draws; ++step) {
    const int64_t b_now = std::min(per_call, draws - done);
    std::vector<GpuSamplingRow> rows(static_cast<size_t>(b_now));
    for (int64_t b = 0; b < b_now; ++b) {
      rows[b].temperature = c.temperature;
      rows[b].top_k = c.top_k;
      rows[b].top_p = c.top_p;
      rows[b].seed = seed_base + static_cast<uint64_t>(b);
      rows[b].step = step;
    }
    const std::vector<int32_t> got = Sample(logits, V, rows, offset_bytes);
    for (int32_t t : got) {
      if (t < 0 || t >= V || prob[t] == 0.0) {
        if (outside++ < 5) ADD_FAILURE() << "drew token " << t << " outside the support";
        continue;
      }
      ++count[t];
    }
    done += b_now;
  }
  // Chi-square over tokens expected ≥ 5 times; the rest pooled in one bin.
  double chi2 = 0, rest_expected = 0, rest_observed = 0;
  int bins = 0;
  for (int64_t t = 0; t < V; ++t) {
    if (prob[t] == 0.0) continue;
    const double e = prob[t] * static_cast<double>(draws);
    if (e >= 5.0) {
      chi2 += (count[t] - e) * (count[t] - e) / e;
      ++bins;
    } else {
      rest_expected += e;
      rest_observed += static_cast<double>(count[t]);
    }
  }
  if (rest_expected >= 5.0) {
    chi2 += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
    ++bins;
  }
  const int df = std::max(1, bins - 1);
  const double limit = df + 6.0 * std::sqrt(2.0 * df) + 10.0;
  std::printf(
      "dist %-14s V=%-6lld T=%.2f k=%-3d p=%.2f: support %zu, draws %lld, outside %lld, "
      "chi2 %.1f (df %d, limit %.1f)\n",
      c.label, static_cast<long long>(V), c.temperature, c.top_k, c.top_p, dist.size(),
      static_cast<long long>(draws), static_cast<long long>(outside), chi2, df, limit);
  EXPECT_EQ(outside, 0);
  EXPECT_LE(chi2, limit);
}

std::vector<float> UniformRow(int64_t V, uint64_t seed, float scale) {
  std::vector<float> r(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) r[i] = scale * HashUniform(seed, i);
  return r;
}

TEST(CudaSampling, TemperatureTopKTopPDistributions) {
  const std::vector<float> row = UniformRow(1000, 21, 3.f);
  CheckDistribution(row, {"temperature", 0.8f, 0, 1.f}, 20000, 1000);
  CheckDistribution(row, {"top-k", 1.f, 20, 1.f}, 20000, 2000);
  CheckDistribution(row, {"top-p", 0.7f, 0, 0.9f}, 20000, 3000);
  CheckDistribution(row, {"top-k+top-p", 1.2f, 50, 0.8f}, 20000, 4000);
  CheckDistribution(row, {"top-k>=V", 1.f, 5000, 1.f}, 20000, 5000);
  CheckDistribution(row, {"misaligned", 1.f, 30, 0.95f}, 20000, 6000, 4);
  const std::vector<float> odd = UniformRow(1001, 22, 3.f);
  CheckDistribution(odd, {"odd-V top-p", 1.f, 0, 0.95f}, 20000, 7000);
}

TEST(CudaSampling, TiesAtTheCutsKeepLowerIds) {
  // Top-k: five tokens at 5, three at 4, the rest below 2. k = 6 keeps token 7
  // (the lowest id of the tied three); k = 7 keeps 7 and 12.
  std::vector<float> row = UniformRow(64, 23, 2.f);
  for (int t : {3, 10, 20, 40, 50}) row[t] = 5.f;
  for (int t : {7, 12, 33}) row[t] = 4.f;
  CheckDistribution(row, {"tie top-k=6", 1.f, 6, 1.f}, 20000, 8000);
  CheckDistribution(row, {"tie top-k=7", 1.f, 7, 1.f}, 20000, 9000);
  // Top-p: four tokens tie at 3 with most of the mass; top_p = 0.5 needs
  // three of them: ids 5, 9, 30 (not 44).
  std::vector<float> prow = UniformRow(64, 24, 1.f);
  for (float& v : prow) v -= 1.f;
  for (int t : {5, 9, 30, 44}) prow[t] = 3.f;
  CheckDistribution(prow, {"tie top-p", 1.f, 0, 0.5f}, 20000, 10000);
  CheckDistribution(prow, {"tie top-k+p", 1.f, 3, 0.9f}, 20000, 11000);
}

TEST(CudaSampling, ProductionVocabulary) {
  // An LLM-like row: 20 peaked tokens, the rest spread over [−4, 4].
  const int64_t V = 163840;
  std::vector<float> row = UniformRow(V, 25, 4.f);
  for (int j = 0; j < 20; ++j) {
    row[static_cast<size_t>((HashUniform(26, j) + 1.f) * 0.5f * (V - 1))] = 10.f + 0.1f * j;
  }
  CheckDistribution(row, {"prod temp", 1.f, 0, 1.f}, 4096, 12000);
  CheckDistribution(row, {"prod k50 p0.9", 0.7f, 50, 0.9f}, 4096, 13000);
  CheckDistribution(row, {"prod p0.95", 1.f, 0, 0.95f}, 4096, 14000);
}

// B rows cycling through greedy, temperature 0.8, and temperature 1.3 with
// top-k 40 and top-p 0.9 (then greedy again); row b has seed seed0 + b.
std::vector<GpuSamplingRow> MixedRows(int64_t B, uint64_t seed0, uint64_t step) {
  std::vector<GpuSamplingRow> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    rows[b].seed = seed0 + static_cast<uint64_t>(b);
    rows[b].step = step;
    if (b % 4 == 1) rows[b].temperature = 0.8f;
    if (b % 4 == 2) {
      rows[b].temperature = 1.3f;
      rows[b].top_k = 40;
      rows[b].top_p = 0.9f;
    }
  }
  return rows;
}

// The first pass in kScanChunks CTAs (with a workspace) and inside the row
// kernel (without one) give the same tokens: greedy rows with ties, NaN and
// ±inf, and temperature / top-k / top-p rows whose draws depend on the max
// and the finite count; odd and production vocabularies, and a misaligned
// row (scalar loads).
TEST(CudaSampling, ChunkedFirstPassMatchesInKernelPass) {
  for (const int64_t V : {int64_t{1000}, int64_t{163840}, int64_t{77}}) {
    const int64_t B = 24;
    const std::vector<float> l = GreedyRows(B, V, 4000 + V);
    const std::vector<GpuSamplingRow> rows = MixedRows(B, 99, 3);
    EXPECT_EQ(Sample(l, V, rows), Sample(l, V, rows, 0, false)) << "V=" << V;
    EXPECT_EQ(Sample(l, V, rows, 4), Sample(l, V, rows, 4, false)) << "misaligned, V=" << V;
  }
}

// A decode step has the sampling kernel write its tokens into pinned host
// memory (layer_executor_run_cuda.cc): the same tokens as into device memory,
// with and without the chunked first pass.
TEST(CudaSampling, TokensWrittenToPinnedHostMemoryEqualDeviceOnes) {
  const int64_t B = 9, V = 163840;
  const std::vector<float> l = GreedyRows(B, V, 77);
  const std::vector<GpuSamplingRow> rows = MixedRows(B, 5, 11);
  for (const bool ws : {true, false}) {
    const std::vector<int32_t> dev = Sample(l, V, rows, 0, ws);
    EXPECT_EQ(Sample(l, V, rows, 0, ws, true), dev) << "workspace " << ws;
    for (int32_t t : dev) EXPECT_TRUE(t >= 0 && t < V) << t;
  }
}

TEST(CudaSampling, ReproducibleForEqualSeedAndStep) {
  const int64_t V = 1000, B = 256;
  const std::vector<float> row = UniformRow(V, 27, 2.f);
  std::vector<float> l(static_cast<size_t>(B * V));
  for (int64_t b = 0; b < B; ++b) std::copy(row.begin(), row.end(), l.begin() + b * V);
  std::vector<GpuSamplingRow> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    rows[b].temperature = 1.f;
    rows[b].top_p = 0.95f;
    rows[b].seed = 42 + b;
    rows[b].step = 3;
  }
  const std::vector<int32_t> a = Sample(l, V, rows);
  const std::vector<int32_t> b = Sample(l, V, rows);
  EXPECT_EQ(a, b);
  for (auto& r : rows) r.step = 4;
  const std::vector<int32_t> c = Sample(l, V, rows);
  int64_t differ = 0;
  for (int64_t i = 0; i < B; ++i) differ += a[i] != c[i] ? 1 : 0;
  std::printf("reproducibility: step 3 twice equal; step 4 differs in %lld of %lld rows\n",
              static_cast<long long>(differ), static_cast<long long>(B));
  EXPECT_GT(differ, B / 2);
}

// Captured in a CUDA graph on an explicit stream (programmatic dependent
// launch on): a replay after the caller advances `step` on the device equals
// an eager call with that step.
TEST(CudaSampling, CapturedGraphFollowsDeviceParams) {
  const int64_t V = 163840, B = 8;
  const std::vector<float> row = UniformRow(V, 28, 2.f);
  std::vector<float> l(static_cast<size_t>(B * V));
  for (int64_t b = 0; b < B; ++b) std::copy(row.begin(), row.end(), l.begin() + b * V);
  std::vector<GpuSamplingRow> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    rows[b].temperature = b == 0 ? 0.f : 1.f;
    rows[b].top_k = b % 2 == 0 ? 0 : 40;
    rows[b].top_p = b % 3 == 0 ? 1.f : 0.9f;
    rows[b].seed = 77 + b;
    rows[b].step = 0;
  }
  DevBuf d_logits(sizeof(float) * l.size()), d_rows(sizeof(GpuSamplingRow) * B),
      d_tokens(sizeof(int32_t) * B);
  CUDA_OK(cudaMemcpy(d_logits.get(), l.data(), sizeof(float) * l.size(), cudaMemcpyHostToDevice));
  CUDA_OK(
      cudaMemcpy(d_rows.get(), rows.data(), sizeof(GpuSamplingRow) * B, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // With the workspace: the chunked first pass and the row kernel are both
  // in the graph, PDL-chained.
  const size_t ws_bytes = SampleWorkspaceBytes(B, V);
  DevBuf ws(ws_bytes);
  CUDA_OK(cudaMemset(ws.get(), 0, ws_bytes));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = SampleTokens(d_logits.get<float>(), B, V, d_rows.get<GpuSamplingRow>(),
                                 d_tokens.get<int32_t>(), ws.get(), ws_bytes, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  int64_t changed = 0;
  std::vector<int32_t> previous;
  for (uint64_t step = 1; step <= 3; ++step) {
    for (auto& r : rows) r.step = step;
    CUDA_OK(
        cudaMemcpy(d_rows.get(), rows.data(), sizeof(GpuSamplingRow) * B, cudaMemcpyHostToDevice));
    // Poisoned: row 0 (greedy) must be written again by the scan's last CTA,
    // which only happens when the previous replay re-armed its count.
    CUDA_OK(cudaMemset(d_tokens.get(), 0xff, sizeof(int32_t) * B));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<int32_t> replayed(static_cast<size_t>(B));
    CUDA_OK(
        cudaMemcpy(replayed.data(), d_tokens.get(), sizeof(int32_t) * B, cudaMemcpyDeviceToHost));
    const std::vector<int32_t> eager = Sample(l, V, rows);
    EXPECT_EQ(replayed, eager) << "step " << step;
    EXPECT_EQ(replayed[0], CpuGreedy(row));
    if (!previous.empty()) {
      for (int64_t b = 1; b < B; ++b) changed += replayed[b] != previous[b] ? 1 : 0;
    }
    previous = replayed;
  }
  EXPECT_GT(changed, 0) << "the replay ignored the new step";
  // The workspace's per-row counts are zero again after every call.
  std::vector<uint32_t> counts(static_cast<size_t>(B));
  CUDA_OK(cudaMemcpy(counts.data(), static_cast<const char*>(ws.get()) + ws_bytes - 4 * B, 4 * B,
                     cudaMemcpyDeviceToHost));
  EXPECT_EQ(counts, std::vector<uint32_t>(static_cast<size_t>(B), 0u));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// One workspace (zeroed once, the same size every call) for calls of
// different batch sizes, as a decode loop whose batch changes uses it: a
// greedy row's token comes from the scan's last CTA, so every row's arrival
// count must be zero at the start of each call whatever the previous call's
// batch wrote. Tokens poisoned before each call; greedy rows against the CPU.
TEST(CudaSampling, OneWorkspaceServesCallsOfChangingBatchSizes) {
  const int64_t V = 163840, kMaxB = 8;
  const std::vector<float> l = GreedyRows(kMaxB, V, 515);
  DevBuf d_logits(sizeof(float) * l.size()), d_rows(sizeof(GpuSamplingRow) * kMaxB),
      d_tokens(sizeof(int32_t) * kMaxB);
  CUDA_OK(cudaMemcpy(d_logits.get(), l.data(), sizeof(float) * l.size(), cudaMemcpyHostToDevice));
  const size_t ws_bytes = SampleWorkspaceBytes(kMaxB, V);
  DevBuf ws(ws_bytes);
  CUDA_OK(cudaMemset(ws.get(), 0, ws_bytes));
  for (const int64_t B : {1, 8, 1, 3, 8, 2, 1}) {
    SCOPED_TRACE(testing::Message() << "batch " << B);
    std::vector<GpuSamplingRow> rows(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      rows[b].temperature = b % 2 == 0 ? 0.f : 0.8f;  // greedy and sampled rows
      rows[b].seed = 9 + b;
    }
    CUDA_OK(
        cudaMemcpy(d_rows.get(), rows.data(), sizeof(GpuSamplingRow) * B, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_tokens.get(), 0xff, sizeof(int32_t) * kMaxB));
    ASSERT_TRUE(SampleTokens(d_logits.get<float>(), B, V, d_rows.get<GpuSamplingRow>(),
                             d_tokens.get<int32_t>(), ws.get(), ws_bytes, nullptr)
                    .ok());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int32_t> got(static_cast<size_t>(B));
    CUDA_OK(cudaMemcpy(got.data(), d_tokens.get(), sizeof(int32_t) * B, cudaMemcpyDeviceToHost));
    for (int64_t b = 0; b < B; ++b) {
      if (b % 2 == 0) {
        EXPECT_EQ(got[b], CpuGreedy(std::span<const float>(l.data() + b * V, V))) << "row " << b;
      } else {
        EXPECT_TRUE(got[b] >= 0 && got[b] < V) << "row " << b << ": " << got[b];
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Misuse.

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), testing::HasSubstr(field)) << st;
}

TEST(CudaSampling, ArgumentMisuse) {
  DevBuf logits(sizeof(float) * 64), rows(sizeof(GpuSamplingRow) * 4), tokens(sizeof(int32_t) * 4);
  auto call = [&](const float* l, int64_t b, int64_t v, const GpuSamplingRow* r, int32_t* t) {
    return SampleTokens(l, b, v, r, t, nullptr, 0, nullptr);
  };
  const float* l = logits.get<float>();
  const GpuSamplingRow* r = rows.get<GpuSamplingRow>();
  int32_t* t = tokens.get<int32_t>();
  CUDA_OK(cudaMemset(logits.get(), 0, sizeof(float) * 64));
  CUDA_OK(cudaMemset(rows.get(), 0, sizeof(GpuSamplingRow) * 4));
  EXPECT_TRUE(call(l, 4, 16, r, t).ok());
  ExpectInvalid(call(nullptr, 4, 16, r, t), "logits");
  ExpectInvalid(call(l, 4, 16, nullptr, t), "rows");
  ExpectInvalid(call(l, 4, 16, r, nullptr), "tokens");
  ExpectInvalid(call(l, -1, 16, r, t), "batch");
  ExpectInvalid(call(l, 4, 0, r, t), "vocab");
  ExpectInvalid(call(l, 4, (int64_t{1} << 23) + 1, r, t), "vocab");
  EXPECT_TRUE(call(nullptr, 0, 16, nullptr, nullptr).ok());  // empty batch: no-op
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> out(4);
  CUDA_OK(cudaMemcpy(out.data(), t, sizeof(int32_t) * 4, cudaMemcpyDeviceToHost));
  EXPECT_THAT(out, testing::Each(0));  // all-zero logits, T = 0: id 0
}

}  // namespace
}  // namespace strata::cuda
