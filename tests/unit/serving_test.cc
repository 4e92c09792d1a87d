// The serving engine on the demo model (kimi_linear: KDA + MLA layers):
// greedy outputs are token-for-token the same whether a request runs alone
// or batched with others, with any prefill chunk size, with the prefix cache
// on or off, and across preemptions; a prompt sharing a cached prefix
// evaluates only its suffix (counted by a test double); fork and rollback.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/session.h"
#include "model/demo_model.h"
#include "model/model.h"

namespace strata {
namespace {

// Forwards to a real model and counts the tokens it is asked to evaluate.
class CountingModel final : public Model {
 public:
  explicit CountingModel(std::shared_ptr<const Model> inner) : inner_(std::move(inner)) {}
  const ModelInfo& info() const override { return inner_->info(); }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override {
    return inner_->NewState(max_tokens);
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override {
    evaluated += static_cast<int64_t>(tokens.size());
    return inner_->Forward(tokens, state, logits, all_logits);
  }
  Status DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                     float* logits) const override {
    evaluated += static_cast<int64_t>(tokens.size());
    max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(tokens.size()));
    return inner_->DecodeBatch(tokens, states, logits);
  }
  mutable std::atomic<int64_t> evaluated{0};
  mutable std::atomic<int64_t> max_rows{0};

 private:
  std::shared_ptr<const Model> inner_;
};

// Reports a GPU placement that samples on the device, so the engine takes
// its GPU paths (automatic 8192-token prefill budget, DecodeBatchSample) on
// the real model; DecodeBatchSample is Model's default (greedy argmax over
// DecodeBatch's logits).
class GpuLikeModel final : public Model {
 public:
  explicit GpuLikeModel(std::shared_ptr<const Model> inner) : inner_(std::move(inner)), info_(inner_->info()) {
    info_.device = "cuda:0 emulated";
    info_.device_sampling = true;
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override {
    return inner_->NewState(max_tokens);
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override {
    return inner_->Forward(tokens, state, logits, all_logits);
  }
  Status DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                     float* logits) const override {
    return inner_->DecodeBatch(tokens, states, logits);
  }
  // Model's default (the two calls), counted.
  Status DecodeAndPrefill(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                          std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                          const PrefillPart& prefill) const override {
    ++mixed;
    return Model::DecodeAndPrefill(tokens, states, sampling, out_tokens, prefill);
  }
  mutable std::atomic<int64_t> mixed{0};

 private:
  std::shared_ptr<const Model> inner_;
  ModelInfo info_;
};

class ServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() /
                            ("strata_serving_" + std::to_string(::getpid())))
                               .string());
    ASSERT_TRUE(WriteDemoKimiLinearModel(*dir_).ok());
    auto m = LoadModel(*dir_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = new std::shared_ptr<const Model>(*std::move(m));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete model_;
    delete dir_;
  }

  // `n` tokens in [1, vocab - 1).
  static std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
    const int32_t vocab = (*model_)->info().vocab_size;
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 2)) + 1;
    return t;
  }

  // Prompts of assorted lengths; the last four share a 40-token prefix.
  static std::vector<std::vector<int32_t>> Prompts() {
    std::mt19937 rng(7);
    auto random_tokens = [&](int n) { return RandomTokens(rng, n); };
    std::vector<std::vector<int32_t>> prompts;
    for (int n : {3, 17, 40, 9, 66, 1}) prompts.push_back(random_tokens(n));
    const auto shared = random_tokens(40);
    for (int n : {2, 11, 25, 0}) {
      auto p = shared;
      auto tail = random_tokens(n);
      p.insert(p.end(), tail.begin(), tail.end());
      prompts.push_back(p);
    }
    return prompts;
  }

  static EngineOptions Options() {
    EngineOptions o;
    o.num_threads = 1;
    o.prefix_cache_bytes = 0;
    o.prefill_chunk_tokens = 4096;
    return o;
  }

  // An engine of Options() with a 64 MiB prefix cache of `block`-token blocks.
  static std::unique_ptr<Engine> CachingEngine(int32_t block) {
    EngineOptions o = Options();
    o.prefix_cache_bytes = 64ull << 20;
    o.prefix_block_tokens = block;
    auto engine = Engine::Create(o);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  // Greedy generations of `prompts` (each on a fresh session): all submitted
  // at once, or one after another when `alone`.
  static std::vector<std::vector<int32_t>> Generate(std::shared_ptr<const Model> model, const EngineOptions& options,
                                                    const std::vector<std::vector<int32_t>>& prompts, bool alone,
                                                    EngineMetrics* metrics = nullptr, int max_new = 12) {
    auto engine = Engine::Create(options);
    EXPECT_TRUE(engine.ok());
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::shared_ptr<Request>> requests;
    std::vector<std::vector<int32_t>> out(prompts.size());
    GenerationParams p;
    p.max_tokens = max_new;
    p.stop_at_eos = false;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = Session::Create(engine->get(), model, {});
      EXPECT_TRUE(s.ok());
      sessions.push_back(*std::move(s));
      auto r = (*engine)->Submit(*sessions.back(), prompts[i], p, nullptr, /*private_events=*/true);
      EXPECT_TRUE(r.ok()) << r.status();
      requests.push_back(*r);
      if (alone) {
        EXPECT_TRUE((*engine)->RunToCompletion(*requests.back(), nullptr, nullptr).ok());
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!alone) {
        EXPECT_TRUE((*engine)->RunToCompletion(*requests[i], nullptr, nullptr).ok());
      }
      out[i] = requests[i]->generated_tokens();
      EXPECT_EQ(out[i].size(), static_cast<size_t>(max_new));
    }
    if (metrics != nullptr) *metrics = (*engine)->Metrics();
    return out;
  }

  static std::string* dir_;
  static std::shared_ptr<const Model>* model_;
};

std::string* ServingTest::dir_ = nullptr;
std::shared_ptr<const Model>* ServingTest::model_ = nullptr;

TEST_F(ServingTest, BatchedGreedyEqualsAlone) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  auto counting = std::make_shared<CountingModel>(*model_);
  EngineMetrics m;
  const auto batched = Generate(counting, Options(), prompts, /*alone=*/false, &m);
  EXPECT_EQ(batched, alone);
  // The decode steps really ran as batches.
  EXPECT_GT(counting->max_rows.load(), 1);
  EXPECT_GT(m.decode_rows, m.decode_steps);
  EXPECT_EQ(m.generated_tokens, static_cast<int64_t>(prompts.size()) * 12);
  EXPECT_EQ(m.ttft.count, static_cast<int64_t>(prompts.size()));
}

TEST_F(ServingTest, AnyPrefillChunkSizeGivesTheSameTokens) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  for (int64_t chunk : {1, 5, 16, 33}) {
    EngineOptions o = Options();
    o.prefill_chunk_tokens = chunk;
    EXPECT_EQ(Generate(*model_, o, prompts, /*alone=*/false), alone) << "prefill chunk " << chunk;
  }
}

TEST_F(ServingTest, AutomaticPrefillBudgetAndDeviceSamplingGiveTheSameTokens) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  EngineOptions o = Options();
  o.prefill_chunk_tokens = 0;  // automatic: 512 here
  EXPECT_EQ(Generate(*model_, o, prompts, /*alone=*/false), alone);
  auto gpu = std::make_shared<GpuLikeModel>(*model_);
  for (int64_t chunk : {0, 5}) {  // 0: automatic, 8192 (one chunk per prompt)
    o.prefill_chunk_tokens = chunk;
    EngineMetrics m;
    EXPECT_EQ(Generate(gpu, o, prompts, /*alone=*/false, &m), alone) << "prefill chunk " << chunk;
    EXPECT_GT(m.device_sampled_rows, 0);
    EXPECT_EQ(m.host_sampled_rows, 0);
  }
  // With 5-token chunks, prefills of later prompts rode the decode steps of
  // earlier ones, one chunk per step.
  EXPECT_GT(gpu->mixed.load(), 0);
}

TEST_F(ServingTest, PrefillChunksRideDecodeStepsAndGiveTheSameTokens) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  auto gpu = std::make_shared<GpuLikeModel>(*model_);
  EngineOptions o = Options();
  o.prefill_chunk_tokens = 7;
  EngineMetrics m;
  EXPECT_EQ(Generate(gpu, o, prompts, /*alone=*/false, &m), alone);
  EXPECT_EQ(m.steps_with_prefill, gpu->mixed.load());
  EXPECT_GT(m.steps_with_prefill, 0);
  EXPECT_LE(m.steps_with_prefill, m.decode_steps);
}

TEST_F(ServingTest, PrefixCacheGivesTheSameTokensAndHits) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  EngineOptions o = Options();
  o.prefix_cache_bytes = 64ull << 20;
  o.prefix_block_tokens = 8;
  o.prefill_chunk_tokens = 7;
  EngineMetrics m;
  // Alone, in order: the prompts sharing a prefix find it cached.
  EXPECT_EQ(Generate(*model_, o, prompts, /*alone=*/true, &m), alone);
  EXPECT_GT(m.prefix_hit_tokens, 0);
  EXPECT_GT(m.prefix_cache_entries, 0);
  EXPECT_EQ(Generate(*model_, o, prompts, /*alone=*/false), alone);
}

TEST_F(ServingTest, PromptsThatPartFromACachedOneLeaveASnapshotWhereTheyPart) {
  // Three prompts of one 100-token start and different 60-token tails, one
  // after another: the first leaves rungs at 16, 32, 64 and 128 tokens; the
  // second hits 64 and, parting from the first at 100, leaves a snapshot at
  // 96 (the block boundary below it), so the third restores 96 tokens.
  auto counting = std::make_shared<CountingModel>(*model_);
  const std::unique_ptr<Engine> engine = CachingEngine(16);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(11);
  const std::vector<int32_t> start = RandomTokens(rng, 100);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(start);
    const auto tail = RandomTokens(rng, 60);
    prompts.back().insert(prompts.back().end(), tail.begin(), tail.end());
  }
  const auto uncached = Generate(*model_, Options(), prompts, /*alone=*/true);
  GenerationParams p;
  p.max_tokens = 12;
  p.stop_at_eos = false;
  std::vector<int64_t> hits, evaluated;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = Session::Create(engine.get(), counting, {});
    ASSERT_TRUE(s.ok());
    const int64_t hit_before = engine->Metrics().prefix_hit_tokens;
    const int64_t eval_before = counting->evaluated.load();
    auto r = engine->Submit(**s, prompts[i], p);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(engine->RunToCompletion(**r, nullptr, nullptr).ok());
    EXPECT_EQ((*r)->generated_tokens(), uncached[i]) << "prompt " << i;
    hits.push_back(engine->Metrics().prefix_hit_tokens - hit_before);
    evaluated.push_back(counting->evaluated.load() - eval_before);
  }
  EXPECT_EQ(hits, (std::vector<int64_t>{0, 64, 96}));
  // The prompt's tokens past the hit, then 11 decode steps (the 12th token needs none).
  EXPECT_EQ(evaluated, (std::vector<int64_t>{160 + 11, 96 + 11, 64 + 11}));
}

TEST_F(ServingTest, PreemptionKeepsTokensExact) {
  const auto prompts = Prompts();
  const auto alone = Generate(*model_, Options(), prompts, /*alone=*/true);
  const ModelInfo& info = (*model_)->info();
  ASSERT_GT(info.state_bytes_per_token, 0u);
  EngineOptions o = Options();
  o.prefill_chunk_tokens = 16;
  // Room for about two running requests: they take turns, preempting one another.
  o.memory_budget_bytes = 2 * info.state_bytes_per_sequence + info.state_bytes_per_token * 160;
  EngineMetrics m;
  EXPECT_EQ(Generate(*model_, o, prompts, /*alone=*/false, &m), alone);
  EXPECT_GT(m.preemptions, 0);
  EXPECT_EQ(m.state_swapped_bytes, 0u);  // all back in by the end
}

TEST_F(ServingTest, PromptSharingAMarkedPrefixEvaluatesOnlyTheSuffix) {
  auto counting = std::make_shared<CountingModel>(*model_);
  const std::unique_ptr<Engine> engine = CachingEngine(16);
  ASSERT_NE(engine, nullptr);
  const auto prompts = Prompts();
  const std::vector<int32_t> system(prompts[4].begin(), prompts[4].begin() + 37);  // not block-aligned
  auto a = Session::Create(engine.get(), counting, {});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Append(system).ok());
  ASSERT_TRUE((*a)->Mark().ok());

  std::vector<int32_t> prompt = system;
  prompt.insert(prompt.end(), {5, 6, 7, 8, 9});
  auto b = Session::Create(engine.get(), counting, {});
  ASSERT_TRUE(b.ok());
  GenerationParams p;
  p.max_tokens = 1;
  p.stop_at_eos = false;
  const int64_t before = counting->evaluated.load();
  auto r = engine->Submit(**b, prompt, p);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(engine->RunToCompletion(**r, nullptr, nullptr).ok());
  EXPECT_EQ(counting->evaluated.load() - before, 5);  // the suffix only
  const EngineMetrics m = engine->Metrics();
  EXPECT_EQ(m.prefix_hit_tokens, 37);

  // And the token is the one a full evaluation gives.
  auto c = Session::Create(engine.get(), *model_, {});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Append(prompt).ok());
  auto logits = (*c)->Logits();
  ASSERT_TRUE(logits.ok());
  const int32_t want = static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
  EXPECT_EQ((*r)->generated_tokens(), std::vector<int32_t>{want});
}

TEST_F(ServingTest, ForkContinuesLikeTheOriginalAndRollbackReturnsToTheMark) {
  auto engine = Engine::Create(Options());
  ASSERT_TRUE(engine.ok());
  auto s = Session::Create(engine->get(), *model_, {});
  ASSERT_TRUE(s.ok());
  const auto prompts = Prompts();
  ASSERT_TRUE((*s)->Append(prompts[2]).ok());
  auto mark = (*s)->Mark();
  ASSERT_TRUE(mark.ok());
  auto fork = (*s)->Fork();
  ASSERT_TRUE(fork.ok());
  GenerationParams p;
  p.max_tokens = 10;
  p.stop_at_eos = false;
  auto gen = [&](Session& on) {
    auto r = (*engine)->Submit(on, {}, p);
    EXPECT_TRUE(r.ok());
    EXPECT_TRUE((*engine)->RunToCompletion(**r, nullptr, nullptr).ok());
    return (*r)->generated_tokens();
  };
  const auto first = gen(**s);
  EXPECT_EQ(gen(**fork), first);
  // The original moves on; the fork is unaffected.
  gen(**s);
  EXPECT_EQ((*s)->num_tokens(), static_cast<int64_t>(prompts[2].size()) + 20);
  EXPECT_EQ((*fork)->num_tokens(), static_cast<int64_t>(prompts[2].size()) + 10);
  ASSERT_TRUE((*s)->Rollback(*mark).ok());
  EXPECT_EQ((*s)->num_tokens(), static_cast<int64_t>(prompts[2].size()));
  EXPECT_EQ(gen(**s), first);
  EXPECT_TRUE(absl::IsNotFound((*s)->Rollback(*mark + 100)));
  EXPECT_TRUE((*s)->ReleaseMark(*mark).ok());
  EXPECT_TRUE(absl::IsNotFound((*s)->Rollback(*mark)));
}

}  // namespace
}  // namespace strata
