// The parity harness shared by every test that holds a model to reference
// logits (tests/model/*parity*, tests/gpu/cuda_*_parity_test and the GPU
// executor tests): fixture discovery and loading (tests/data/<arch>_*/:
// prompt.npy, logits.npy, generate.npy, meta.json), loading a model on the
// CPU or the GPU, the prefill/decode split and piece runners, the error
// metrics against a reference, checkpoint variants (one tensor scaled, one
// config value changed), and the checks every parity suite makes alike. A
// test states only its fixture prefix, its splits and pieces, its bounds and
// what is particular to its architecture; the loops, the reporting and the
// assertions they make live here once, so a fifth architecture's parity test
// does not start as a copy of the fourth.
//
// Built as the static library strata_test_harness (tests/CMakeLists.txt),
// linked into the model and GPU tests; device-neutral: the GPU checks go
// through the Model interface only, so this compiles without CUDA.
#ifndef STRATA_TESTS_HARNESS_PARITY_H_
#define STRATA_TESTS_HARNESS_PARITY_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace strata {
namespace parity {

// ---------------------------------------------------------------------------
// Fixtures.

// The fixture directories tests/data/<prefix>*, sorted.
std::vector<std::string> FixtureNames(const std::string& prefix);

// tests/data/<name>.
std::string FixtureDir(const std::string& name);

// <dir>/meta.json, or a discarded value when missing or malformed.
nlohmann::json ReadMeta(const std::string& dir);

// What every fixture directory holds: a prompt, the reference's logits for
// every position of it, a greedy continuation and the builder's notes.
struct Fixture {
  std::string name;
  std::string dir;
  std::vector<int32_t> prompt;
  std::vector<float> logits;  // [T, vocab]
  int64_t vocab = 0;
  std::vector<int32_t> generate;    // prompt[:generate_prompt_len] + continuation
  int64_t generate_prompt_len = 0;  // meta.json generate.prompt_len
  nlohmann::json meta;              // discarded when unreadable

  int64_t T() const { return static_cast<int64_t>(prompt.size()); }
};

// The first fixture tests/data/<prefix>* (a test failure if there is none).
void LoadFirstFixture(const std::string& prefix, Fixture* f);

// Fills the Fixture part of `f` from tests/data/<name>; a missing or
// malformed file, or logits whose shape is not [T, vocab], is a test failure.
void LoadFixture(const std::string& name, Fixture* f);

// ---------------------------------------------------------------------------
// Error metrics: ours against a reference, [rows, vocab] each.

struct Comparison {
  double rel = 0;     // ‖ours − ref‖ / ‖ref‖ over all elements
  double median = 0;  // median over positions of the per-position relative error
  double max_abs = 0;
  double max_rel = 0;  // max |Δ| / max |ref|
  int64_t worst_pos = -1;
  double worst_pos_rel = 0;     // that position's own ‖Δ‖/‖ref‖
  int64_t first_over_pos = -1;  // first position whose own error exceeds the position tolerance
};

double Median(std::vector<double> v);

// A non-finite element makes every field NaN, so that no bound, upper or
// lower, passes on it. `position_tolerance` > 0 sets first_over_pos (for the
// report only).
Comparison Compare(const float* ours, const float* ref, int64_t rows, int64_t vocab,
                   double position_tolerance = 0);
// Expects equal sizes.
Comparison Compare(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab,
                   double position_tolerance = 0);

std::string Describe(const Comparison& c);

// The CPU executors' bar against an fp32 reference, every architecture
// alike: relative L2 error over all positions (fp32 on both sides, so only
// summation order differs).
inline constexpr double kCpuTolerance = 1e-4;
// And that bar means something: scaling any one layer's output projection by
// kPerturbFactor moves a full prefill's logits by more than kMinSensitivity,
// so no layer can be silently wrong within it.
inline constexpr double kPerturbFactor = 1.1;
inline constexpr double kMinSensitivity = 100 * kCpuTolerance;

// What a suite allows against its reference: an overall relative L2 bound and,
// where single positions may flip (bf16 routing and selection), a bound on
// the median position. `note` explains the bounds in failure messages.
struct Bounds {
  double l2 = 0;
  double median = std::numeric_limits<double>::infinity();  // infinity: not bounded
  std::string note;
};

// EXPECT_LE on the median (when bounded), then on the L2 error.
void ExpectWithin(const Comparison& c, const Bounds& b, const std::string& what);

// ---------------------------------------------------------------------------
// Loading and running.

// `n` token ids drawn uniformly from [3, vocab) with `seed` (ids 0-2 are
// often special).
std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed);

// LoadModel(dir) on the CPU; a failure is a test failure (null).
std::unique_ptr<Model> LoadCpu(const std::string& dir);

// The plan every GPU parity test loads with (small batch, a few sequences).
LoadOptions CudaOptions();

// Loads on the GPU; a CPU fallback is a failure here (the notice says why).
std::unique_ptr<Model> LoadCuda(const std::string& dir, const LoadOptions& o = CudaOptions());

// LoadCuda with prefill passes of `slice_tokens` (slice boundaries then fall
// inside chunks and cache blocks).
std::unique_ptr<Model> LoadCudaSliced(const std::string& dir, int64_t slice_tokens,
                                      LoadOptions o = CudaOptions());

// models/presets/<name>/config.json, the published config a bench preset
// runs (e.g. "kimi-linear-48b-a3b").
std::string PresetConfigJson(const std::string& name);

// A model at `config_json`'s shapes with dummy weights made on the GPU, in
// `dir`, planned for `max_batch` rows, `max_sequences` states of up to
// `max_context_tokens` (the published shapes, which no fixture holds).
std::unique_ptr<Model> LoadDummyOnCuda(const std::string& dir, const std::string& config_json,
                                       int64_t max_batch, int64_t max_sequences,
                                       int64_t max_context_tokens);

// The prefill lengths every parity suite splits at: 1, 63, 64, 65 (around the
// 64-token chunks and cache blocks) and T − 1, those within [1, T).
std::set<int64_t> StandardSplits(int64_t T);

// Prefill the first n tokens as one Forward, then one token per Forward; the
// logits of every position (empty when no state could be made).
std::vector<float> RunSplit(const Model& model, const std::vector<int32_t>& tokens, int64_t n);

// Feeds `tokens` as Forward calls of the listed sizes (then whatever is left
// as one last piece) with all logits; `desc` gets "50+70+…".
void RunPieces(const Model& model, const std::vector<int32_t>& tokens,
               const std::vector<int64_t>& pieces, std::vector<float>* logits, std::string* desc);

// Which token each greedy step feeds: the reference's (one early mismatch
// does not hide later ones) or the step's own argmax (generation).
enum class Feed { kReference, kOwn };

// Prefills sequence[:prompt_len], then takes the argmax of each step's
// logits for every later position of `sequence`.
void GreedyTokens(const Model& model, const std::vector<int32_t>& sequence, int64_t prompt_len,
                  Feed feed, std::vector<int32_t>* tokens);

// The built command-line tool (tools/strata; tests/CMakeLists.txt builds it
// with the tests that run it).
std::string StrataCliPath();

// `strata logits` on the fixture's prompt with `flags` (e.g. "--prefill 65"):
// the logits it writes, checked to be [T, vocab].
void RunCliLogits(const Fixture& f, const std::string& flags, std::vector<float>* logits);
// RunCliLogits within `tolerance` (L2 relative) of the reference.
void ExpectCliLogitsWithin(const Fixture& f, const std::string& flags, double tolerance);

// ---------------------------------------------------------------------------
// Checkpoint variants and scratch space.

// A temporary directory removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Copies the model at `src` to `dst` with `tensor` multiplied by `factor` in
// place (the file layout is unchanged; bf16 values are re-rounded).
void WriteScaledCopy(const std::string& src, const std::string& dst, const std::string& tensor,
                     float factor);

// `dst` gets src's config.json with the top-level `overrides` merged in and a
// link to its weights.
void WriteConfigVariant(const std::string& src, const std::string& dst,
                        const nlohmann::json& overrides);

// ---------------------------------------------------------------------------
// An executor's decode-graph counters (its Stats).
struct GraphCounts {
  int64_t captures = 0, launches = 0, eager_steps = 0;
  std::string error;
  int64_t prefill_slice_tokens = 0;  // the plan's, beside them in the Stats
};
using GraphCountsOf = std::function<GraphCounts(const Model&)>;

// ---------------------------------------------------------------------------
// The per-fixture suite. A test derives its suite class (the class name is
// the suite name) from ParityTest<F>, F its Fixture with any fields its
// architecture adds, sets its bounds (and, on the GPU, its ExecutorChecks)
// and overrides what differs; SetUp loads fixture GetParam() and its model
// and checks they fit together. The STRATA_PARITY_* macros below declare the
// cases every suite runs alike.

// The name of a layer's attention output projection, o_proj.
std::string OutputProjection(int32_t layer);

// A GPU suite's executor and the checks that compare it with itself.
struct ExecutorChecks {
  LoadOptions options = CudaOptions();  // every model of the suite loads with these
  GraphCountsOf graph_counts;           // the executor's decode-graph counters
  int64_t graph_min_captures = 1;       // graph shapes the decode steps take
  int64_t graph_warmups = 2;            // eager steps before each shape is captured
  double same_device_tolerance = 1e-3;  // graph replay vs eager, clone vs original
  int64_t sample_len_b = 17;            // the longer prompt of the greedy sampling check
  bool misuse_sample_rows = false;      // ExpectMisuseIsRejectedBeforeAnyWork's options
  bool misuse_benchmark_fill = false;
};

class ParityChecks {
 protected:
  ParityChecks() = default;
  virtual ~ParityChecks() = default;

  // Ours from one prefill of the whole prompt on `model`, within `b` of the
  // reference; `what` names the run in the report.
  void ExpectPrefillWithin(const Model& model, const Bounds& b, const std::string& what);
  void ExpectFullPrefillWithin(const Bounds& b);
  // Every split of `splits`: a prefill then single-token decode steps.
  void ExpectSplitsWithin(const std::set<int64_t>& splits, const Bounds& b);
  // Every piece list (RunPieces) from an empty state.
  void ExpectPiecesWithin(const std::vector<std::vector<int64_t>>& piece_lists, const Bounds& b);
  // The greedy continuation equals generate.npy's, feeding the reference's tokens.
  void ExpectGreedyContinuationIsTheReference();
  // Scaling `tensor_of(layer)` by `factor`, for every layer, moves the logits
  // of a full prefill by more than `min_change` relative.
  void ExpectEveryLayerMatters(const std::function<std::string(int32_t layer)>& tensor_of,
                               double factor = kPerturbFactor, double min_change = kMinSensitivity);
  // The fixture with index_topk raised to `index_topk` (dense attention, the
  // same weights) on the CPU, against the reference.
  void CompareDenseAttention(int64_t index_topk, Comparison* c);
  // GPU: a model of the fixture planned with prefill passes of `slice_tokens`
  // (gpu_.graph_counts reports them) reproduces the reference within bounds_.
  void ExpectShortSlicesWithin(int64_t slice_tokens, const std::string& what);

  // The GPU suite's checks of its executor against itself (gpu_), on the
  // fixture's prompt: the free functions below.
  void ExpectGraphReplayEqualsEager();
  void ExpectCloneContinuesAndResetStartsOver();
  void ExpectGpuGreedySamplingIsTheArgmax();
  void ExpectMisuseIsRejectedBeforeAnyWork();
  // On the suite's model and on one planned with 32-token prefill slices.
  void ExpectDecodeAndPrefillMatchesSeparateCalls();

  const Model& model() const { return *model_; }
  const std::string& name() const { return base_->name; }
  int64_t T() const { return base_->T(); }

  std::string tag_ = "[parity]";  // opens every printed line
  std::string architecture_;      // checked by SetUp when set
  // Against the reference: the CPU bar unless the suite (a GPU one) sets its
  // own, maybe per fixture in ReadFixture.
  Bounds bounds_{kCpuTolerance};
  ExecutorChecks gpu_;  // GPU suites only
  std::unique_ptr<Model> model_;
  const Fixture* base_ = nullptr;  // the suite's fixture_
};

template <typename F = Fixture>
class ParityTest : public ::testing::TestWithParam<std::string>, protected ParityChecks {
 protected:
  void SetUp() override {
    base_ = &fixture_;
    ReadFixture(GetParam(), &fixture_);
    ASSERT_FALSE(fixture_.prompt.empty());
    model_ = LoadFor(fixture_.dir);
    ASSERT_NE(model_, nullptr);
    ASSERT_EQ(model_->info().vocab_size, fixture_.vocab);
    if (!architecture_.empty()) {
      ASSERT_EQ(model_->info().architecture, architecture_);
    }
  }

  // The fixture and its model; a suite whose F adds fields (or whose bounds
  // depend on the fixture) reads them here.
  virtual void ReadFixture(const std::string& name, F* f) { LoadFixture(name, f); }
  virtual std::unique_ptr<Model> LoadFor(const std::string& dir) { return LoadCpu(dir); }

  F fixture_;
};

// A GPU suite: its models load with gpu_.options and must stay on the GPU.
template <typename F = Fixture>
class GpuParityTest : public ParityTest<F> {
 protected:
  std::unique_ptr<Model> LoadFor(const std::string& dir) override {
    return LoadCuda(dir, this->gpu_.options);
  }
};

// The name of a fixture-parameterised case: the fixture directory's name.
inline std::string FixtureParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// Runs `Suite` once per name of `names` (fixture directories).
#define STRATA_PARITY_INSTANTIATE(Suite, names)                         \
  INSTANTIATE_TEST_SUITE_P(Fixtures, Suite, ::testing::ValuesIn(names), \
                           ::strata::parity::FixtureParamName)

// FullPrefillLogitsMatch<Ref> and PrefillThenDecodeSplitsMatch<Ref> (the
// StandardSplits), within the suite's bounds_ against <Ref>.
#define STRATA_PARITY_PREFILL_CASES(Suite, Ref)                                    \
  TEST_P(Suite, FullPrefillLogitsMatch##Ref) { ExpectFullPrefillWithin(bounds_); } \
  TEST_P(Suite, PrefillThenDecodeSplitsMatch##Ref) {                               \
    ExpectSplitsWithin(::strata::parity::StandardSplits(T()), bounds_);            \
  }

// The prefill cases, ChunkedContinuationsMatch<Ref> over the piece lists
// given last (braced lists of sizes) and GreedyContinuationMatches<Ref>.
#define STRATA_PARITY_CPU_CASES(Suite, Ref, ...)                                                \
  STRATA_PARITY_PREFILL_CASES(Suite, Ref)                                                       \
  TEST_P(Suite, ChunkedContinuationsMatch##Ref) { ExpectPiecesWithin({__VA_ARGS__}, bounds_); } \
  TEST_P(Suite, GreedyContinuationMatches##Ref) { ExpectGreedyContinuationIsTheReference(); }

// The executor against itself, for a GpuParityTest suite (gpu_).
#define STRATA_PARITY_GPU_CASES(Suite)                                                    \
  TEST_P(Suite, GraphReplayEqualsEagerSteps) { ExpectGraphReplayEqualsEager(); }          \
  TEST_P(Suite, CloneContinuesIdenticallyAndResetStartsOver) {                            \
    ExpectCloneContinuesAndResetStartsOver();                                             \
  }                                                                                       \
  TEST_P(Suite, GpuGreedySamplingIsTheArgmax) { ExpectGpuGreedySamplingIsTheArgmax(); }   \
  TEST_P(Suite, MisuseIsRejectedBeforeAnyWork) { ExpectMisuseIsRejectedBeforeAnyWork(); } \
  TEST_P(Suite, DecodeAndPrefillMatchesTheSeparateCalls) {                                \
    ExpectDecodeAndPrefillMatchesSeparateCalls();                                         \
  }

// ---------------------------------------------------------------------------
// GPU against GPU (and the CPU executor): the checks every executor passes alike.

// A prefill of n tokens then decode steps over the rest of `prompt`, on
// `graphs` (CUDA graphs on) and `eager` (off): equal within `tolerance`; at
// least `min_captures` graphs captured and all but `warmups` steps replayed.
void ExpectGraphReplayEqualsEager(const Model& graphs, const Model& eager,
                                  const std::vector<int32_t>& prompt, int64_t n, double tolerance,
                                  int64_t min_captures, int64_t warmups,
                                  const GraphCountsOf& counts, const std::string& tag);

// A clone after n prompt tokens continues like the original (within
// `tolerance`), and a Reset state starts over: its prefill of the whole
// prompt is returned for the caller's bound against the reference.
std::vector<float> ExpectCloneContinuesAndResetStartsOver(const Model& model,
                                                          const std::vector<int32_t>& prompt,
                                                          int64_t n, double tolerance);

// DecodeBatchSample with greedy rows picks each row's argmax of DecodeBatch's
// logits, for two sequences of `len_a` and `len_b` prompt tokens; and
// ForwardSample (ExpectForwardSampleSelectsOnTheDevice) on both lengths.
void ExpectGpuGreedySamplingIsTheArgmax(const Model& model, const std::vector<int32_t>& prompt,
                                        int64_t len_a, int64_t len_b);

// ForwardSample of the first `len` prompt tokens (a prefill, or the decode
// path for one token) on fresh states: a greedy selection is the argmax of
// Forward's logits, with or without the logits copied out (then equal to
// Forward's); a temperature / top-k draw lies in the top k and repeats for
// the same (seed, step); misuse (no out_token, a bad sampling row) is
// rejected before any work.
void ExpectForwardSampleSelectsOnTheDevice(const Model& model, const std::vector<int32_t>& prompt,
                                           int64_t len);

// DecodeAndPrefill of two decode rows (after 3 and 40 prompt tokens) and a
// chunk of the prompt on a third state (from empty, and after 20 tokens; of
// several lengths, one token included), against DecodeBatchSample then
// ForwardSample on twin states: the same greedy tokens, the chunk's logits
// and those of one more decode step of all three states within `tolerance`
// of the twins', every state as long as its twin. Misuse (a decode state as
// the prefill's, no prefill state) is rejected before any work.
void ExpectDecodeAndPrefillMatchesSeparateCalls(const Model& model,
                                                const std::vector<int32_t>& prompt,
                                                double tolerance);

// Argument errors (token ids, empty input, capacity, NewState sizes, a CPU
// state, DecodeBatch sizes and repeats) are answered before any work.
// `sample_rows`: also DecodeBatchSample's row checks; `benchmark_fill`: also
// FillContextForBenchmark's (only on an empty state, within capacity).
void ExpectMisuseIsRejectedBeforeAnyWork(const Model& model, const std::string& dir,
                                         bool sample_rows, bool benchmark_fill);

// One row of one batched decode step: against the same sequence decoded
// alone on `model`, and against the CPU executor.
struct BatchRow {
  int step = 0;
  size_t row = 0;
  Comparison vs_alone;
  Comparison vs_cpu;
};

// Prefills the prompt spans {begin, length} as separate sequences on `model`
// twice and on the CPU executor of `dir`, then decodes `steps` steps: one
// DecodeBatch of all of them, each alone, each on the CPU; `check` sees every
// row. `before_steps` runs between the prefills and the first step. Ends by
// expecting the batched and the lone states at the same length.
void DecodeBatchAgainstAloneAndCpu(const Model& model, const std::string& dir,
                                   const std::vector<int32_t>& prompt,
                                   const std::vector<std::pair<int64_t, int64_t>>& spans, int steps,
                                   const std::function<void()>& before_steps,
                                   const std::function<void(const BatchRow&)>& check);

// Dummy weights from the config.json of `config_dir`, loaded on the GPU with
// `o` once per seed of {3, 3, 4}: the split run of `tokens` at `n` for each,
// all finite. `first` (optional) gets the first model for further checks.
void RunDummySeeds(const std::string& config_dir, const LoadOptions& o,
                   const std::vector<int32_t>& tokens, int64_t n,
                   const std::function<void(const Model&)>& first,
                   std::vector<std::vector<float>>* runs);

// `batch` states filled to `context` tokens (FillContextForBenchmark, seeds
// 1…batch), then `steps` greedy DecodeBatchSample steps, each feeding the
// tokens of the one before (starting from 1…batch), and one DecodeBatch:
// every token in range, every logit finite, every state at context + steps
// + 1. `on_step` (optional) gets each sampled step's wall time.
void ExpectFilledContextBatchDecodes(const Model& model, int batch, int64_t context, int steps,
                                     const std::function<void(int step, double ms)>& on_step);

// With almost no device memory allowed, a CUDA load of `dir` falls back to
// the CPU, saying why.
void ExpectTooLittleDeviceMemoryFallsBackToTheCpu(const std::string& dir);

}  // namespace parity
}  // namespace strata

#endif  // STRATA_TESTS_HARNESS_PARITY_H_
