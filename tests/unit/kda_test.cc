// Tests for the KDA CPU kernels: both forms against a double-precision token
// recurrence written here from model-spec §2.3, carried state across calls,
// and argument errors.
#include "backend/cpu/kda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

constexpr double kTolerance = 1e-5;

struct Shape {
  int64_t heads;
  int64_t key_dim;
  int64_t value_dim;
};

// Inputs of one sequence in the kernel layout ([T, H, d]).
struct Inputs {
  int64_t tokens = 0;
  Shape shape{};
  std::vector<float> q, k, v, g, beta;
};

// g = −exp(a)·softplus(b) as Kimi computes it, plus a sprinkling of very strong
// decays (≈ −20 and beyond) and near-zero decays.
float RandomGate(std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  const float pick = unit(rng);
  if (pick < 0.06f) return -(20.f + 10.f * unit(rng));
  if (pick < 0.12f) return -1e-6f - 1e-4f * unit(rng);
  std::uniform_real_distribution<float> a_dist(-3.f, 1.f);
  std::normal_distribution<float> b_dist(0.f, 2.f);
  const float b = b_dist(rng);
  const float softplus = b > 20.f ? b : std::log1p(std::exp(b));
  return -std::exp(a_dist(rng)) * std::max(softplus, 1e-6f);
}

// Draws a value that is never exactly zero.
float NonZero(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  float x = 0.f;
  while (x == 0.f) x = dist(rng);
  return x;
}

Inputs MakeInputs(int64_t tokens, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.tokens = tokens;
  in.shape = shape;
  const int64_t rows = tokens * shape.heads;
  in.q.resize(rows * shape.key_dim);
  in.k.resize(rows * shape.key_dim);
  in.g.resize(rows * shape.key_dim);
  in.v.resize(rows * shape.value_dim);
  in.beta.resize(rows);
  // q and k come out of conv + SiLU, so mostly positive with a small negative tail.
  for (float& x : in.q) x = NonZero(rng, -0.27f, 2.f);
  for (float& x : in.k) x = NonZero(rng, -0.27f, 2.f);
  for (float& x : in.v) x = NonZero(rng, -2.f, 2.f);
  for (float& x : in.g) x = RandomGate(rng);
  std::normal_distribution<float> logit(0.f, 1.5f);
  for (float& x : in.beta) x = 1.f / (1.f + std::exp(-logit(rng)));
  return in;
}

std::vector<float> RandomState(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> s(shape.heads * shape.key_dim * shape.value_dim);
  for (float& x : s) x = NonZero(rng, -1.f, 1.f);
  return s;
}

// The token recurrence of §2.3 step 6 in double precision. `state` is updated
// in place; returns the outputs [T, H, dv].
std::vector<double> Reference(const Inputs& in, std::vector<double>& state, double scale = 0.0) {
  const int64_t nh = in.shape.heads, dk = in.shape.key_dim, dv = in.shape.value_dim;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> out(in.tokens * nh * dv);
  std::vector<double> qh(dk), kh(dk), e(dv);
  for (int64_t t = 0; t < in.tokens; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t row = t * nh + h;
      double sq = 0, sk = 0;
      for (int64_t d = 0; d < dk; ++d) {
        sq += double(in.q[row * dk + d]) * in.q[row * dk + d];
        sk += double(in.k[row * dk + d]) * in.k[row * dk + d];
      }
      const double rq = scale / std::sqrt(sq + 1e-6), rk = 1.0 / std::sqrt(sk + 1e-6);
      for (int64_t d = 0; d < dk; ++d) {
        qh[d] = in.q[row * dk + d] * rq;
        kh[d] = in.k[row * dk + d] * rk;
      }
      double* s = state.data() + h * dk * dv;
      for (int64_t d = 0; d < dk; ++d) {
        const double alpha = std::exp(double(in.g[row * dk + d]));
        for (int64_t n = 0; n < dv; ++n) s[d * dv + n] *= alpha;
      }
      for (int64_t n = 0; n < dv; ++n) {
        double pred = 0;
        for (int64_t d = 0; d < dk; ++d) pred += s[d * dv + n] * kh[d];
        e[n] = in.v[row * dv + n] - pred;
      }
      const double beta = in.beta[row];
      for (int64_t d = 0; d < dk; ++d) {
        for (int64_t n = 0; n < dv; ++n) s[d * dv + n] += kh[d] * beta * e[n];
      }
      for (int64_t n = 0; n < dv; ++n) {
        double o = 0;
        for (int64_t d = 0; d < dk; ++d) o += s[d * dv + n] * qh[d];
        out[row * dv + n] = o;
      }
    }
  }
  return out;
}

template <typename A, typename B>
double RelativeError(const std::vector<A>& ours, const std::vector<B>& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ours.size() && i < ref.size(); ++i) {
    const double diff = double(ours[i]) - double(ref[i]);
    num += diff * diff;
    den += double(ref[i]) * double(ref[i]);
  }
  if (!std::isfinite(num)) return std::numeric_limits<double>::infinity();
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Views `in` rows [t0, t0 + len) as kernel arguments.
KdaArgs ArgsFor(const Inputs& in, int64_t t0, int64_t len, float* state, float* out,
                float scale = 0.f) {
  const int64_t nh = in.shape.heads, dk = in.shape.key_dim, dv = in.shape.value_dim;
  KdaArgs a;
  a.num_tokens = len;
  a.num_heads = nh;
  a.key_dim = dk;
  a.value_dim = dv;
  a.q = in.q.data() + t0 * nh * dk;
  a.k = in.k.data() + t0 * nh * dk;
  a.g = in.g.data() + t0 * nh * dk;
  a.v = in.v.data() + t0 * nh * dv;
  a.beta = in.beta.data() + t0 * nh;
  a.state = state;
  a.out = out + t0 * nh * dv;
  a.scale = scale;
  return a;
}

// A 64-byte-aligned workspace for KdaChunked.
class Workspace {
 public:
  explicit Workspace(size_t bytes) : storage_(bytes / sizeof(float) + 16) {}
  void* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage_.data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
  }

 private:
  std::vector<float> storage_;
};

Status RunChunked(const KdaArgs& a, ThreadPool* pool, int threads) {
  const size_t bytes =
      KdaChunkedWorkspaceBytes(a.num_tokens, a.num_heads, a.key_dim, a.value_dim, threads);
  Workspace ws(bytes);
  return KdaChunked(a, ws.data(), bytes, pool);
}

std::vector<double> ToDouble(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// ---------------------------------------------------------------------------
// Both forms against the double reference over lengths and shapes.

class KdaMatchesReference : public ::testing::TestWithParam<std::tuple<int64_t, Shape>> {};

TEST_P(KdaMatchesReference, ChunkedAndRecurrentFromZeroState) {
  const auto [tokens, shape] = GetParam();
  const Inputs in = MakeInputs(tokens, shape, 1234u + uint32_t(tokens * 7 + shape.key_dim));
  const size_t state_size = shape.heads * shape.key_dim * shape.value_dim;
  std::vector<double> ref_state(state_size, 0.0);
  const std::vector<double> ref_out = Reference(in, ref_state);

  ThreadPool pool(2);
  for (bool recurrent : {false, true}) {
    SCOPED_TRACE(recurrent ? "recurrent" : "chunked");
    std::vector<float> state(state_size, 0.f), out(ref_out.size(), 0.f);
    const KdaArgs a = ArgsFor(in, 0, tokens, state.data(), out.data());
    ASSERT_TRUE((recurrent ? KdaRecurrent(a, &pool) : RunChunked(a, &pool, 2)).ok());
    EXPECT_LE(RelativeError(out, ref_out), kTolerance);
    EXPECT_LE(RelativeError(state, ref_state), kTolerance);
  }
}

std::string ShapeName(const ::testing::TestParamInfo<std::tuple<int64_t, Shape>>& info) {
  const auto& [t, s] = info.param;
  return absl::StrCat("T", t, "_H", s.heads, "_dk", s.key_dim, "_dv", s.value_dim);
}

INSTANTIATE_TEST_SUITE_P(
    LengthsAndShapes, KdaMatchesReference,
    ::testing::Combine(::testing::Values<int64_t>(1, 2, 63, 64, 65, 127, 130, 200),
                       ::testing::Values(Shape{1, 16, 16}, Shape{3, 32, 48}, Shape{5, 24, 16},
                                         Shape{2, 128, 128}, Shape{3, 128, 64}, Shape{3, 20, 13})),
    ShapeName);

// ---------------------------------------------------------------------------
// Carried state: a sequence split over two calls equals one call.

class KdaSplitSequence : public ::testing::TestWithParam<int64_t> {};

TEST_P(KdaSplitSequence, ChunkedThenRecurrentTokensMatchesOneCall) {
  const Shape shape{3, 64, 32};
  const int64_t tokens = 130;
  const int64_t split = GetParam() < 0 ? tokens + GetParam() : GetParam();
  const Inputs in = MakeInputs(tokens, shape, 99u);
  const size_t state_size = shape.heads * shape.key_dim * shape.value_dim;

  std::vector<float> whole_state(state_size, 0.f),
      whole_out(tokens * shape.heads * shape.value_dim);
  ASSERT_TRUE(
      RunChunked(ArgsFor(in, 0, tokens, whole_state.data(), whole_out.data()), nullptr, 1).ok());

  std::vector<float> state(state_size, 0.f), out(whole_out.size(), 0.f);
  ASSERT_TRUE(RunChunked(ArgsFor(in, 0, split, state.data(), out.data()), nullptr, 1).ok());
  for (int64_t t = split; t < tokens; ++t) {
    ASSERT_TRUE(KdaRecurrent(ArgsFor(in, t, 1, state.data(), out.data()), nullptr).ok());
  }
  EXPECT_LE(RelativeError(out, whole_out), kTolerance);
  EXPECT_LE(RelativeError(state, whole_state), kTolerance);

  std::vector<double> ref_state(state_size, 0.0);
  const std::vector<double> ref_out = Reference(in, ref_state);
  EXPECT_LE(RelativeError(out, ref_out), kTolerance);
  EXPECT_LE(RelativeError(state, ref_state), kTolerance);
}

TEST_P(KdaSplitSequence, ChunkedThenChunkedMatchesOneCall) {
  const Shape shape{5, 32, 48};
  const int64_t tokens = 130;
  const int64_t split = GetParam() < 0 ? tokens + GetParam() : GetParam();
  const Inputs in = MakeInputs(tokens, shape, 77u);
  const size_t state_size = shape.heads * shape.key_dim * shape.value_dim;

  ThreadPool pool(3);
  std::vector<float> whole_state(state_size, 0.f),
      whole_out(tokens * shape.heads * shape.value_dim);
  ASSERT_TRUE(
      RunChunked(ArgsFor(in, 0, tokens, whole_state.data(), whole_out.data()), &pool, 3).ok());

  std::vector<float> state(state_size, 0.f), out(whole_out.size(), 0.f);
  ASSERT_TRUE(RunChunked(ArgsFor(in, 0, split, state.data(), out.data()), &pool, 3).ok());
  ASSERT_TRUE(
      RunChunked(ArgsFor(in, split, tokens - split, state.data(), out.data()), &pool, 3).ok());
  EXPECT_LE(RelativeError(out, whole_out), kTolerance);
  EXPECT_LE(RelativeError(state, whole_state), kTolerance);
}

// Negative values count from the end: −1 is T−1.
INSTANTIATE_TEST_SUITE_P(SplitPoints, KdaSplitSequence,
                         ::testing::Values<int64_t>(1, 63, 64, 65, -1),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param < 0 ? std::string("TMinus1")
                                                 : absl::StrCat("N", info.param);
                         });

// ---------------------------------------------------------------------------
// Other behaviour.

TEST(KdaTest, ContinuesFromNonZeroInitialState) {
  const Shape shape{3, 128, 64};
  for (int64_t tokens : {1, 65, 200}) {
    SCOPED_TRACE(tokens);
    const Inputs in = MakeInputs(tokens, shape, 5u + uint32_t(tokens));
    const std::vector<float> initial = RandomState(shape, 17u);
    std::vector<double> ref_state = ToDouble(initial);
    const std::vector<double> ref_out = Reference(in, ref_state);
    for (bool recurrent : {false, true}) {
      SCOPED_TRACE(recurrent ? "recurrent" : "chunked");
      std::vector<float> state = initial, out(ref_out.size(), 0.f);
      const KdaArgs a = ArgsFor(in, 0, tokens, state.data(), out.data());
      ASSERT_TRUE((recurrent ? KdaRecurrent(a, nullptr) : RunChunked(a, nullptr, 1)).ok());
      EXPECT_LE(RelativeError(out, ref_out), kTolerance);
      EXPECT_LE(RelativeError(state, ref_state), kTolerance);
    }
  }
}

// Rounding must not accumulate over many chunks of carried state.
TEST(KdaTest, LongSequenceStaysAccurate) {
  const Shape shape{2, 128, 128};
  const int64_t tokens = 2048;
  const Inputs in = MakeInputs(tokens, shape, 2048u);
  std::vector<double> ref_state(shape.heads * shape.key_dim * shape.value_dim, 0.0);
  const std::vector<double> ref_out = Reference(in, ref_state);
  ThreadPool pool(2);
  for (bool recurrent : {false, true}) {
    SCOPED_TRACE(recurrent ? "recurrent" : "chunked");
    std::vector<float> state(ref_state.size(), 0.f), out(ref_out.size(), 0.f);
    const KdaArgs a = ArgsFor(in, 0, tokens, state.data(), out.data());
    ASSERT_TRUE((recurrent ? KdaRecurrent(a, &pool) : RunChunked(a, &pool, 2)).ok());
    EXPECT_LE(RelativeError(out, ref_out), kTolerance);
    EXPECT_LE(RelativeError(state, ref_state), kTolerance);
  }
}

TEST(KdaTest, ExplicitScaleIsUsedInsteadOfDefault) {
  const Shape shape{2, 32, 32};
  const Inputs in = MakeInputs(70, shape, 8u);
  std::vector<double> ref_state(shape.heads * shape.key_dim * shape.value_dim, 0.0);
  const std::vector<double> ref_out = Reference(in, ref_state, 0.37);
  for (bool recurrent : {false, true}) {
    std::vector<float> state(ref_state.size(), 0.f), out(ref_out.size(), 0.f);
    const KdaArgs a = ArgsFor(in, 0, 70, state.data(), out.data(), 0.37f);
    ASSERT_TRUE((recurrent ? KdaRecurrent(a, nullptr) : RunChunked(a, nullptr, 1)).ok());
    EXPECT_LE(RelativeError(out, ref_out), kTolerance) << (recurrent ? "recurrent" : "chunked");
  }
}

// A channel decayed hard early in a chunk and barely afterwards has large,
// nearly equal cumulative gates; their differences must stay accurate.
TEST(KdaTest, StrongEarlyDecayThenSlowDecayStaysAccurate) {
  const Shape shape{2, 64, 64};
  const int64_t tokens = 128;
  Inputs in = MakeInputs(tokens, shape, 31u);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(1e-5f, 1e-3f), strong(25.f, 30.f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < shape.heads * shape.key_dim; ++i) {
      const bool is_strong = (t % 64) < 6 && (i % 2 == 0);
      in.g[t * shape.heads * shape.key_dim + i] = is_strong ? -strong(rng) : -small(rng);
    }
  }
  const std::vector<float> initial = RandomState(shape, 4u);
  std::vector<double> ref_state = ToDouble(initial);
  const std::vector<double> ref_out = Reference(in, ref_state);
  std::vector<float> state = initial, out(ref_out.size(), 0.f);
  ASSERT_TRUE(RunChunked(ArgsFor(in, 0, tokens, state.data(), out.data()), nullptr, 1).ok());
  EXPECT_LE(RelativeError(out, ref_out), kTolerance);
  EXPECT_LE(RelativeError(state, ref_state), kTolerance);
}

// Inputs are views into longer buffers whose tail is NaN: a kernel that reads
// past T (e.g. padding the last chunk from memory) would poison its outputs.
TEST(KdaTest, PartialChunkReadsNothingPastTheInputs) {
  const Shape shape{3, 32, 24};
  const int64_t tokens = 70, padded = 128;
  Inputs in = MakeInputs(padded, shape, 12u);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t nh = shape.heads;
  auto poison = [&](std::vector<float>& x, int64_t width) {
    std::fill(x.begin() + tokens * nh * width, x.end(), nan);
  };
  poison(in.q, shape.key_dim);
  poison(in.k, shape.key_dim);
  poison(in.g, shape.key_dim);
  poison(in.v, shape.value_dim);
  poison(in.beta, 1);
  std::vector<float> state(nh * shape.key_dim * shape.value_dim, 0.f);
  std::vector<float> out(padded * nh * shape.value_dim, 0.f);
  ASSERT_TRUE(RunChunked(ArgsFor(in, 0, tokens, state.data(), out.data()), nullptr, 1).ok());
  for (float x : state) ASSERT_TRUE(std::isfinite(x));
  for (int64_t i = 0; i < tokens * nh * shape.value_dim; ++i) ASSERT_TRUE(std::isfinite(out[i]));
  // Nothing is written past the last token either.
  for (size_t i = tokens * nh * shape.value_dim; i < out.size(); ++i) ASSERT_EQ(out[i], 0.f);
}

// Scratch is never read before it is written: a workspace full of NaN gives
// the same bits as a zeroed one.
TEST(KdaTest, StaleWorkspaceContentsDoNotAffectResults) {
  for (Shape shape : {Shape{3, 20, 13}, Shape{2, 128, 64}}) {
    const int64_t tokens = 70;
    const Inputs in = MakeInputs(tokens, shape, 41u);
    const std::vector<float> initial = RandomState(shape, 42u);
    const size_t bytes =
        KdaChunkedWorkspaceBytes(tokens, shape.heads, shape.key_dim, shape.value_dim, 2);
    std::vector<float> results[2][2];  // [fill][state, out]
    ThreadPool pool(2);
    for (int fill = 0; fill < 2; ++fill) {
      Workspace ws(bytes);
      const float value = fill == 0 ? 0.f : std::numeric_limits<float>::quiet_NaN();
      std::fill_n(static_cast<float*>(ws.data()), bytes / sizeof(float), value);
      std::vector<float> state = initial, out(tokens * shape.heads * shape.value_dim);
      ASSERT_TRUE(
          KdaChunked(ArgsFor(in, 0, tokens, state.data(), out.data()), ws.data(), bytes, &pool)
              .ok());
      results[fill][0] = state;
      results[fill][1] = out;
    }
    for (float x : results[1][1]) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(results[1][0], results[0][0]);
    EXPECT_EQ(results[1][1], results[0][1]);
  }
}

TEST(KdaTest, ThreadCountDoesNotChangeResults) {
  const Shape shape{5, 40, 24};
  const int64_t tokens = 100;
  const Inputs in = MakeInputs(tokens, shape, 21u);
  const std::vector<float> initial = RandomState(shape, 22u);
  std::vector<float> base_state = initial, base_out(tokens * shape.heads * shape.value_dim);
  ASSERT_TRUE(
      RunChunked(ArgsFor(in, 0, tokens, base_state.data(), base_out.data()), nullptr, 1).ok());
  ThreadPool pool(3);
  // Workspace sized for 1, 2 and 3 workers on a 3-thread pool.
  for (int threads : {1, 2, 3}) {
    std::vector<float> state = initial, out(base_out.size());
    ASSERT_TRUE(RunChunked(ArgsFor(in, 0, tokens, state.data(), out.data()), &pool, threads).ok());
    EXPECT_EQ(out, base_out) << threads;
    EXPECT_EQ(state, base_state) << threads;
  }
  std::vector<float> rec_base_state = initial, rec_base_out(base_out.size());
  ASSERT_TRUE(
      KdaRecurrent(ArgsFor(in, 0, tokens, rec_base_state.data(), rec_base_out.data()), nullptr)
          .ok());
  std::vector<float> rec_state = initial, rec_out(base_out.size());
  ASSERT_TRUE(KdaRecurrent(ArgsFor(in, 0, tokens, rec_state.data(), rec_out.data()), &pool).ok());
  EXPECT_EQ(rec_out, rec_base_out);
  EXPECT_EQ(rec_state, rec_base_state);
}

TEST(KdaTest, WorkspaceBytesRejectsBadSizesAndGrowsWithThreads) {
  EXPECT_EQ(KdaChunkedWorkspaceBytes(0, 4, 128, 128, 1), 0u);
  EXPECT_EQ(KdaChunkedWorkspaceBytes(64, 0, 128, 128, 1), 0u);
  EXPECT_EQ(KdaChunkedWorkspaceBytes(64, 4, -1, 128, 1), 0u);
  EXPECT_EQ(KdaChunkedWorkspaceBytes(64, 4, 128, 0, 1), 0u);
  const size_t one = KdaChunkedWorkspaceBytes(64, 4, 128, 128, 1);
  const size_t two = KdaChunkedWorkspaceBytes(64, 4, 128, 128, 2);
  EXPECT_GT(one, 0u);
  EXPECT_GT(two, one);
  // Workers beyond the head count get no scratch.
  EXPECT_EQ(KdaChunkedWorkspaceBytes(64, 4, 128, 128, 16),
            KdaChunkedWorkspaceBytes(64, 4, 128, 128, 4));
}

TEST(KdaTest, InvalidArgumentsReturnErrors) {
  const Shape shape{2, 16, 8};
  const Inputs in = MakeInputs(10, shape, 1u);
  std::vector<float> state(shape.heads * shape.key_dim * shape.value_dim, 0.f);
  std::vector<float> out(10 * shape.heads * shape.value_dim, 0.f);
  const KdaArgs good = ArgsFor(in, 0, 10, state.data(), out.data());
  const size_t bytes = KdaChunkedWorkspaceBytes(10, shape.heads, shape.key_dim, shape.value_dim, 1);
  Workspace ws(bytes);
  ASSERT_TRUE(KdaChunked(good, ws.data(), bytes, nullptr).ok());
  ASSERT_TRUE(KdaRecurrent(good, nullptr).ok());
  const std::vector<float> state_before = state, out_before = out;

  std::vector<std::pair<std::string, KdaArgs>> bad;
  auto add = [&](const std::string& name, auto mutate) {
    KdaArgs a = good;
    mutate(a);
    bad.emplace_back(name, a);
  };
  add("null q", [](KdaArgs& a) { a.q = nullptr; });
  add("null k", [](KdaArgs& a) { a.k = nullptr; });
  add("null v", [](KdaArgs& a) { a.v = nullptr; });
  add("null g", [](KdaArgs& a) { a.g = nullptr; });
  add("null beta", [](KdaArgs& a) { a.beta = nullptr; });
  add("null state", [](KdaArgs& a) { a.state = nullptr; });
  add("null out", [](KdaArgs& a) { a.out = nullptr; });
  add("zero tokens", [](KdaArgs& a) { a.num_tokens = 0; });
  add("negative tokens", [](KdaArgs& a) { a.num_tokens = -3; });
  add("zero heads", [](KdaArgs& a) { a.num_heads = 0; });
  add("negative key dim", [](KdaArgs& a) { a.key_dim = -16; });
  add("zero value dim", [](KdaArgs& a) { a.value_dim = 0; });
  add("huge key dim", [](KdaArgs& a) { a.key_dim = int64_t{1} << 40; });
  add("overflowing sizes", [](KdaArgs& a) { a.num_tokens = int64_t{1} << 62; });
  add("nan scale", [](KdaArgs& a) { a.scale = std::numeric_limits<float>::quiet_NaN(); });
  for (const auto& [name, a] : bad) {
    SCOPED_TRACE(name);
    const Status chunked = KdaChunked(a, ws.data(), bytes, nullptr);
    EXPECT_EQ(chunked.code(), absl::StatusCode::kInvalidArgument) << chunked;
    const Status recurrent = KdaRecurrent(a, nullptr);
    EXPECT_EQ(recurrent.code(), absl::StatusCode::kInvalidArgument) << recurrent;
  }
  EXPECT_EQ(KdaChunked(good, nullptr, bytes, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KdaChunked(good, ws.data(), 0, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // One byte short of what a single worker needs (the last 64 are alignment slack).
  EXPECT_EQ(KdaChunked(good, ws.data(), bytes - 65, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Rejected calls leave state and outputs alone.
  EXPECT_EQ(state, state_before);
  EXPECT_EQ(out, out_before);
}

}  // namespace
}  // namespace cpu
}  // namespace strata
