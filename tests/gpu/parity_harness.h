// The scaffolding shared by the GPU executor tests (cuda_kimi_parity_test,
// cuda_dsv32_parity_test, cuda_qwen3next_parity_test, cuda_state_offload_test):
// fixture discovery and loading (tests/data/<arch>_*/: prompt.npy,
// logits.npy, generate.npy, meta.json), loading a model on the GPU (a CPU
// fallback is a failure), the prefill/decode split runner, the error metrics
// against a reference, and the GPU-against-GPU checks every executor must
// pass alike (graph replay vs eager steps, clone/reset, device greedy
// sampling, argument errors before any work). Header-only: each test is one
// executable built from its own .cc (tests/CMakeLists.txt).
#ifndef STRATA_TESTS_GPU_PARITY_HARNESS_H_
#define STRATA_TESTS_GPU_PARITY_HARNESS_H_

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "model/model.h"

namespace strata {
namespace parity {

namespace fs = std::filesystem;

// The fixture directories tests/data/<prefix>*, sorted.
inline std::vector<std::string> FixtureNames(const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STRATA_TEST_DATA_DIR, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind(prefix, 0) == 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string FixtureDir(const std::string& name) {
  return std::string(STRATA_TEST_DATA_DIR) + "/" + name;
}

// meta.json, or a discarded value when missing or malformed.
inline nlohmann::json ReadMeta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// What every fixture holds: the prompt and transformers' logits for it.
struct NpyFixture {
  std::string dir;
  std::vector<int32_t> prompt;
  std::vector<float> logits;  // [T, vocab]
  int64_t vocab = 0;
  std::vector<int32_t> generate;  // prompt[:G] + continuation (with_generate)
};

// Fills `f` from tests/data/<name>; failures are test failures.
inline void LoadNpyFixture(const std::string& name, bool with_generate, NpyFixture& f) {
  f.dir = FixtureDir(name);
  auto prompt = ReadNpyInt32(f.dir + "/prompt.npy");
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  if (prompt.ok()) f.prompt = *prompt;
  std::vector<int64_t> shape;
  auto logits = ReadNpyFloat32(f.dir + "/logits.npy", &shape);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (logits.ok() && shape.size() == 2) {
    f.logits = *logits;
    f.vocab = shape[1];
  }
  if (with_generate) {
    auto gen = ReadNpyInt32(f.dir + "/generate.npy");
    EXPECT_TRUE(gen.ok()) << gen.status();
    if (gen.ok()) f.generate = *gen;
  }
}

// Ours against a reference, [rows, vocab] each.
struct Comparison {
  double rel = 0;      // ‖ours − ref‖ / ‖ref‖ over all elements
  double median = 0;   // median over positions of the per-position relative error
  double max_abs = 0;
  double max_rel = 0;  // max |Δ| / max |ref|
  int64_t worst_pos = -1;
  double worst_pos_rel = 0;
};

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline Comparison Compare(const float* ours, const float* ref, int64_t rows, int64_t vocab) {
  Comparison c;
  double num = 0, den = 0, ref_max = 0;
  std::vector<double> per_pos;
  for (int64_t t = 0; t < rows; ++t) {
    double pn = 0, pd = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double r = ref[t * vocab + v];
      const double d = static_cast<double>(ours[t * vocab + v]) - r;
      if (!std::isfinite(d)) {
        c.rel = c.median = c.max_abs = c.max_rel = INFINITY;
        c.worst_pos = t;
        return c;
      }
      pn += d * d;
      pd += r * r;
      c.max_abs = std::max(c.max_abs, std::abs(d));
      ref_max = std::max(ref_max, std::abs(r));
    }
    num += pn;
    den += pd;
    const double pr = std::sqrt(pn / std::max(pd, 1e-30));
    per_pos.push_back(pr);
    if (pr > c.worst_pos_rel) {
      c.worst_pos_rel = pr;
      c.worst_pos = t;
    }
  }
  c.rel = std::sqrt(num / std::max(den, 1e-30));
  c.median = Median(per_pos);
  c.max_rel = c.max_abs / std::max(ref_max, 1e-30);
  return c;
}

inline Comparison Compare(const std::vector<float>& ours, const std::vector<float>& ref,
                          int64_t vocab) {
  EXPECT_EQ(ours.size(), ref.size());
  return Compare(ours.data(), ref.data(),
                 static_cast<int64_t>(std::min(ours.size(), ref.size())) / vocab, vocab);
}

inline std::string Describe(const Comparison& c) {
  std::ostringstream s;
  s << "L2 rel=" << c.rel << " median position rel=" << c.median << " max_abs=" << c.max_abs
    << " max_abs/max|ref|=" << c.max_rel << " worst position " << c.worst_pos << " (rel "
    << c.worst_pos_rel << ")";
  return s.str();
}

// The plan every parity test loads with (small batch, a few sequences).
inline LoadOptions CudaOptions() {
  LoadOptions o;
  o.device = Device::kCuda;
  o.max_batch = 8;
  o.max_sequences = 16;
  return o;
}

// Loads on the GPU; a CPU fallback is a failure here (the notice says why).
inline std::unique_ptr<Model> LoadCuda(const std::string& dir, const LoadOptions& o) {
  auto m = LoadModel(dir, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  const ModelInfo& info = (*m)->info();
  EXPECT_EQ(info.device.rfind("cuda:", 0), 0u) << dir << " fell back: " << info.notice;
  if (info.device.rfind("cuda:", 0) != 0) return nullptr;
  return std::move(*m);
}

// Prefill the first n tokens as one Forward, then one token per Forward;
// the logits of every position.
inline std::vector<float> RunSplit(const Model& model, const std::vector<int32_t>& tokens,
                                   int64_t n) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(T * vocab));
  auto state = model.NewState(T + 8);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return {};
  Status st = model.Forward(std::span(tokens.data(), static_cast<size_t>(n)), **state, out.data(),
                            /*all_logits=*/true);
  EXPECT_TRUE(st.ok()) << st;
  for (int64_t t = n; t < T && st.ok(); ++t) {
    st = model.Forward(std::span(tokens.data() + t, 1), **state, out.data() + t * vocab, false);
    EXPECT_TRUE(st.ok()) << "token " << t << ": " << st;
  }
  return out;
}

// A temporary directory removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag)
      : path_(fs::temp_directory_path() / (tag + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// ---------------------------------------------------------------------------
// GPU against GPU: the checks every executor passes alike.

// An executor's decode-graph counters (its Stats).
struct GraphCounts {
  int64_t captures = 0, launches = 0, eager_steps = 0;
  std::string error;
};
using GraphCountsOf = std::function<GraphCounts(const Model&)>;

// A prefill of n tokens then decode steps over the rest of `prompt`, on
// `graphs` (CUDA graphs on) and `eager` (off): equal within `tolerance`; at
// least `min_captures` graphs captured and all but `warmups` steps replayed.
inline void ExpectGraphReplayEqualsEager(const Model& graphs, const Model& eager,
                                         const std::vector<int32_t>& prompt, int64_t n,
                                         double tolerance, int64_t min_captures, int64_t warmups,
                                         const GraphCountsOf& counts, const std::string& tag) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  const std::vector<float> a = RunSplit(graphs, prompt, n);
  const std::vector<float> b = RunSplit(eager, prompt, n);
  const Comparison c = Compare(a, b, graphs.info().vocab_size);
  const GraphCounts ga = counts(graphs), gb = counts(eager);
  std::printf("%s graphs vs eager over %lld decode steps: %s; graphs: %lld captured, %lld "
              "replays, %lld eager%s%s\n",
              tag.c_str(), static_cast<long long>(T - n), Describe(c).c_str(),
              static_cast<long long>(ga.captures), static_cast<long long>(ga.launches),
              static_cast<long long>(ga.eager_steps), ga.error.empty() ? "" : "; disabled: ",
              ga.error.c_str());
  EXPECT_EQ(ga.error, "");
  EXPECT_GE(ga.captures, min_captures);
  EXPECT_GE(ga.launches, T - n - warmups);  // all but the warm-up steps of each shape
  EXPECT_EQ(gb.launches, 0);
  EXPECT_LE(c.rel, tolerance) << Describe(c);
}

// A clone after n prompt tokens continues like the original (within
// `tolerance`), and a Reset state starts over: its prefill of the whole
// prompt is returned for the caller's bound against the reference.
inline std::vector<float> ExpectCloneContinuesAndResetStartsOver(
    const Model& model, const std::vector<int32_t>& prompt, int64_t n, double tolerance) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  auto st = model.NewState(T + 8);
  EXPECT_TRUE(st.ok());
  if (!st.ok()) return {};
  EXPECT_TRUE(
      model.Forward(std::span(prompt.data(), static_cast<size_t>(n)), **st, nullptr, false).ok());
  std::unique_ptr<SequenceState> copy = (*st)->Clone();
  EXPECT_NE(copy, nullptr);
  if (copy == nullptr) return {};
  EXPECT_EQ(copy->num_tokens(), n);
  std::vector<float> a(static_cast<size_t>(3 * vocab)), b(static_cast<size_t>(3 * vocab));
  const std::span<const int32_t> next(prompt.data() + n, 3);
  EXPECT_TRUE(model.Forward(next, **st, a.data(), true).ok());
  EXPECT_TRUE(model.Forward(next, *copy, b.data(), true).ok());
  EXPECT_LE(Compare(a, b, vocab).rel, tolerance) << Describe(Compare(a, b, vocab));
  (*st)->Reset();
  EXPECT_EQ((*st)->num_tokens(), 0);
  std::vector<float> fresh(static_cast<size_t>(T * vocab));
  EXPECT_TRUE(model.Forward(prompt, **st, fresh.data(), true).ok());
  return fresh;
}

// DecodeBatchSample with greedy rows picks each row's argmax of DecodeBatch's
// logits, for two sequences of `len_a` and `len_b` prompt tokens.
inline void ExpectGpuGreedySamplingIsTheArgmax(const Model& model,
                                               const std::vector<int32_t>& prompt, int64_t len_a,
                                               int64_t len_b) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  std::vector<std::unique_ptr<SequenceState>> a, b;
  for (int64_t len : {len_a, len_b}) {
    for (auto* group : {&a, &b}) {
      auto st = model.NewState(T + 8);
      ASSERT_TRUE(st.ok());
      ASSERT_TRUE(
          model.Forward(std::span(prompt.data(), static_cast<size_t>(len)), **st, nullptr, false)
              .ok());
      group->push_back(std::move(*st));
    }
  }
  std::vector<SequenceState*> sa = {a[0].get(), a[1].get()}, sb = {b[0].get(), b[1].get()};
  const std::vector<int32_t> tokens = {prompt[static_cast<size_t>(len_a)],
                                       prompt[static_cast<size_t>(len_b)]};
  std::vector<float> logits(static_cast<size_t>(2 * vocab));
  ASSERT_TRUE(model.DecodeBatch(tokens, sa, logits.data()).ok());
  const std::vector<DecodeSampling> greedy(2);
  int32_t out[2] = {-1, -1};
  const Status s = model.DecodeBatchSample(tokens, sb, greedy, out);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 2; ++i) {
    const float* row = logits.data() + i * vocab;
    EXPECT_EQ(out[i], std::max_element(row, row + vocab) - row) << "row " << i;
  }
}

// Argument errors (token ids, empty input, capacity, NewState sizes, a CPU
// state, DecodeBatch sizes and repeats) are answered before any work.
// `sample_rows`: also DecodeBatchSample's row checks; `benchmark_fill`: also
// FillContextForBenchmark's (only on an empty state, within capacity).
inline void ExpectMisuseIsRejectedBeforeAnyWork(const Model& model, const std::string& dir,
                                                bool sample_rows, bool benchmark_fill) {
  const int64_t V = model.info().vocab_size;
  auto st = model.NewState(8);
  ASSERT_TRUE(st.ok());
  const int32_t bad[2] = {1, static_cast<int32_t>(V)};
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad, 2), **st, nullptr, false)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad + 1, 1), **st, nullptr, false)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward({}, **st, nullptr, false)));
  const std::vector<int32_t> nine(9, 1);
  EXPECT_TRUE(absl::IsOutOfRange(model.Forward(nine, **st, nullptr, false)));
  EXPECT_EQ((*st)->num_tokens(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(model.NewState(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(model.NewState(model.info().max_context + 1).status()));
  // A CPU state is not a GPU state.
  auto cpu = LoadModel(dir);
  ASSERT_TRUE(cpu.ok());
  auto foreign = (*cpu)->NewState(8);
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad, 1), **foreign, nullptr, false)));
  // DecodeBatch: sizes, repeats, nulls.
  auto other = model.NewState(8);
  ASSERT_TRUE(other.ok());
  const std::vector<int32_t> two = {1, 2}, one = {1};
  std::vector<SequenceState*> ab = {st->get(), other->get()}, aa = {st->get(), st->get()};
  EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatch(one, ab, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatch(two, aa, nullptr)));
  if (sample_rows) {
    int32_t out[2];
    std::vector<DecodeSampling> rows(2);
    rows[0].top_p = 0.f;
    EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatchSample(two, ab, rows, out)));
    EXPECT_TRUE(absl::IsInvalidArgument(
        model.DecodeBatchSample(two, ab, std::vector<DecodeSampling>(2), nullptr)));
  }
  EXPECT_EQ((*st)->num_tokens(), 0);
  EXPECT_EQ((*other)->num_tokens(), 0);
  if (benchmark_fill) {
    EXPECT_TRUE(absl::IsOutOfRange(model.FillContextForBenchmark(**st, 9, 1)));
    ASSERT_TRUE(model.Forward(std::span(bad, 1), **st, nullptr, false).ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(model.FillContextForBenchmark(**st, 2, 1)));
  }
}

}  // namespace parity
}  // namespace strata

#endif  // STRATA_TESTS_GPU_PARITY_HARNESS_H_
