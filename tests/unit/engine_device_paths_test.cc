// The engine's GPU paths against a fake model that emulates a CUDA executor:
// token selection by DecodeBatchSample (chosen only when every row of a
// step is expressible as DecodeSampling and the model samples on the
// device) and, for the first token, by the prefill's ForwardSample,
// prefix-cache checkpoints that hold no slot of the fixed pool (as a GPU
// executor's CudaCheckpoint) restored into a session's own state, the automatic prefill budget by
// device, admission under a fixed pool of sequence states, and the prefix cache giving state slots
// back instead of failing requests. The fake's greedy output counts upwards (token t is followed by
// t + 1), so every expected token is known.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/session.h"

namespace strata {
namespace {

constexpr int32_t kVocab = 64;

class PoolModel;

// A state holds one slot of its model's pool while it lives.
class PoolState : public SequenceState {
 public:
  explicit PoolState(const PoolModel* owner) : owner_(owner) {}
  ~PoolState() override;
  int64_t num_tokens() const override { return n; }
  std::unique_ptr<SequenceState> Clone() const override;
  void Reset() override {
    n = 0;
    last = -1;
  }
  int64_t n = 0;
  int32_t last = -1;

 private:
  const PoolModel* owner_;
};

class PoolModel : public Model {
 public:
  // `slots` 0: no pool. `sessions_take_slots` false emulates states that
  // live off the device until admitted (only clones draw from the pool).
  PoolModel(int64_t slots, bool device_sampling, std::string device = "cuda:0 fake")
      : slots_(slots) {
    info_.architecture = "fake";
    info_.num_layers = 2;
    info_.layer_kinds = {"kda", "mla"};
    info_.vocab_size = kVocab;
    info_.hidden_size = 4;
    info_.max_context = 20000;
    info_.eos_token_id = -1;
    info_.state_bytes_per_token = 10;
    info_.state_bytes_per_sequence = 100;
    info_.device = std::move(device);
    info_.max_live_states = slots;
    info_.device_sampling = device_sampling;
  }
  const ModelInfo& info() const override { return info_; }
  void set_max_live_states(int64_t n) { info_.max_live_states = n; }
  void set_checkpoint_slots(int64_t n) { info_.checkpoint_slots = n; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    if (!Take()) return absl::ResourceExhaustedError("all sequence slots are in use");
    return std::unique_ptr<SequenceState>(std::make_unique<PoolState>(this));
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits, bool) const override {
    forward_sizes_push(tokens.size());
    if (hook) hook();
    auto& s = static_cast<PoolState&>(state);
    s.n += static_cast<int64_t>(tokens.size());
    s.last = tokens.back();
    if (logits != nullptr) {
      for (int i = 0; i < kVocab; ++i) logits[i] = i == (s.last + 1) % kVocab ? 5.0f : 0.0f;
    }
    return OkStatus();
  }
  Status DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                     float* logits) const override {
    logits_batches.fetch_add(1);
    NoteRows(tokens.size());
    return Model::DecodeBatch(tokens, states, logits);
  }
  // Greedy rows: the argmax (t + 1). Temperature rows: a draw that is a
  // function of (seed, step) only, like a Philox stream.
  Status DecodeBatchSample(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                           std::span<const DecodeSampling> sampling, int32_t* out) const override {
    sample_batches.fetch_add(1);
    NoteRows(tokens.size());
    for (size_t b = 0; b < tokens.size(); ++b) {
      STRATA_RETURN_IF_ERROR(Forward(tokens.subspan(b, 1), *states[b], nullptr, false));
      out[b] = Draw(tokens[b], sampling[b]);
    }
    return OkStatus();
  }
  // The prefill's last forward selects the first token the same way.
  Status ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                       const DecodeSampling& sampling, int32_t* out, float* logits) const override {
    forward_samples.fetch_add(1);
    if (logits != nullptr) forward_samples_with_logits.fetch_add(1);
    STRATA_RETURN_IF_ERROR(Forward(tokens, state, logits, false));
    *out = Draw(tokens.back(), sampling);
    return OkStatus();
  }
  // As the CUDA executor's: a checkpoint takes no slot, a restore reuses the
  // state's own.
  struct PoolCheckpoint : StateCheckpoint {
    PoolCheckpoint(const PoolModel* m, int64_t tokens, int32_t token)
        : model(m), n(tokens), last(token) {}
    int64_t num_tokens() const override { return n; }
    const PoolModel* model;
    int64_t n;
    int32_t last;
  };
  StatusOr<std::unique_ptr<StateCheckpoint>> Checkpoint(const SequenceState& state) const override {
    const auto& s = static_cast<const PoolState&>(state);
    return std::unique_ptr<StateCheckpoint>(std::make_unique<PoolCheckpoint>(this, s.n, s.last));
  }
  Status Restore(const StateCheckpoint& checkpoint,
                 std::unique_ptr<SequenceState>& state) const override {
    const auto& cp = static_cast<const PoolCheckpoint&>(checkpoint);
    if (cp.model != this) return absl::InvalidArgumentError("another model's checkpoint");
    if (fail_restore) return absl::InternalError("the device failed during the copy");
    if (state == nullptr) {
      StatusOr<std::unique_ptr<SequenceState>> fresh = NewState(cp.n + 1);
      if (!fresh.ok()) return fresh.status();
      state = *std::move(fresh);
    }
    auto& s = static_cast<PoolState&>(*state);
    s.n = cp.n;
    s.last = cp.last;
    restores.fetch_add(1);
    return OkStatus();
  }
  int32_t Draw(int32_t last, const DecodeSampling& d) const {
    std::lock_guard<std::mutex> lock(mu_);
    rows_seen.push_back(d);
    return d.temperature == 0.f ? (last + 1) % kVocab
                                : static_cast<int32_t>((d.seed * 31 + d.step * 7) % kVocab);
  }

  bool Take() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (slots_ > 0 && live_ >= slots_) return false;
    max_live = std::max(max_live, ++live_);
    return true;
  }
  void Give() const {
    std::lock_guard<std::mutex> lock(mu_);
    --live_;
  }
  void NoteRows(size_t rows) const {
    std::lock_guard<std::mutex> lock(mu_);
    max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(rows));
  }
  void forward_sizes_push(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    forward_sizes.push_back(static_cast<int64_t>(n));
  }

  mutable std::mutex mu_;
  mutable std::atomic<int> logits_batches{0}, sample_batches{0};
  mutable std::atomic<int> forward_samples{0}, forward_samples_with_logits{0}, restores{0};
  mutable std::vector<DecodeSampling> rows_seen;  // guarded by mu_
  mutable std::vector<int64_t> forward_sizes;     // guarded by mu_
  mutable int64_t max_live = 0, max_rows = 0;     // guarded by mu_
  std::function<void()> hook;
  bool fail_restore = false;

 private:
  const int64_t slots_;
  mutable int64_t live_ = 0;  // guarded by mu_
  ModelInfo info_;
};

PoolState::~PoolState() { owner_->Give(); }

std::unique_ptr<SequenceState> PoolState::Clone() const {
  if (!owner_->Take()) return nullptr;
  auto c = std::make_unique<PoolState>(owner_);
  c->n = n;
  c->last = last;
  return c;
}

GenerationParams Greedy(int32_t max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.stop_at_eos = false;
  return p;
}

std::unique_ptr<Engine> NewEngine(EngineOptions o = {}) {
  o.num_threads = 1;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok());
  return *std::move(e);
}

// Runs each prompt on its own session, all submitted at once.
std::vector<std::vector<int32_t>> RunAll(Engine& engine, const std::shared_ptr<const Model>& model,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<GenerationParams>& params) {
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::shared_ptr<Request>> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto s = Session::Create(&engine, model, SessionOptions{8192, nullptr});
    EXPECT_TRUE(s.ok()) << s.status();
    sessions.push_back(*std::move(s));
    auto r = engine.Submit(*sessions.back(), prompts[i], params[i], nullptr, true);
    EXPECT_TRUE(r.ok()) << r.status();
    requests.push_back(*r);
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& r : requests) {
    EXPECT_TRUE(engine.RunToCompletion(*r, nullptr, nullptr).ok()) << r->status();
    out.push_back(r->generated_tokens());
  }
  return out;
}

std::vector<int32_t> Counting(int32_t after, int n) {
  std::vector<int32_t> t;
  for (int i = 1; i <= n; ++i) t.push_back((after + i) % kVocab);
  return t;
}

TEST(EngineDeviceSampling, GreedyRowsSampleOnTheDeviceWithTheSameTokens) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/true);
  auto engine = NewEngine();
  const auto out = RunAll(*engine, model, {{1}, {10, 11}, {30}}, {Greedy(8), Greedy(8), Greedy(8)});
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{Counting(1, 8), Counting(11, 8), Counting(30, 8)}));
  EXPECT_GT(model->sample_batches.load(), 0);
  EXPECT_EQ(model->logits_batches.load(), 0);  // no [B, vocab] logits ever came back
  const EngineMetrics m = engine->Metrics();
  EXPECT_EQ(m.device_sampled_rows, 3 * 7);  // decode rows
  EXPECT_EQ(m.host_sampled_rows, 0);
  // The first token of each comes from its prefill's last forward, and no
  // logits came back there either (a token request makes no snapshot at its
  // prompt's end when the prompt is shorter than a cache block).
  EXPECT_EQ(m.device_first_tokens, 3);
  EXPECT_EQ(model->forward_samples.load(), 3);
  EXPECT_EQ(model->forward_samples_with_logits.load(), 0);
}

TEST(EngineDeviceSampling, TheEngineOptionCanKeepEveryRowOnTheHost) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/true);
  EngineOptions o;
  o.device_sampling = false;
  auto engine = NewEngine(o);
  const auto out = RunAll(*engine, model, {{1}, {10, 11}}, {Greedy(5), Greedy(5)});
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{Counting(1, 5), Counting(11, 5)}));
  EXPECT_EQ(model->sample_batches.load(), 0);
  EXPECT_EQ(model->forward_samples.load(), 0);
  EXPECT_EQ(engine->Metrics().host_sampled_rows, 2 * 4);
  EXPECT_EQ(engine->Metrics().device_first_tokens, 0);
}

TEST(EngineDeviceSampling, ACpuModelKeepsTheHostPath) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/false, "cpu");
  auto engine = NewEngine();
  const auto out = RunAll(*engine, model, {{1}, {10}}, {Greedy(6), Greedy(6)});
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{Counting(1, 6), Counting(10, 6)}));
  EXPECT_EQ(model->sample_batches.load(), 0);
  EXPECT_EQ(model->forward_samples.load(), 0);
  EXPECT_GT(model->logits_batches.load(), 0);
  EXPECT_EQ(engine->Metrics().device_sampled_rows, 0);
  EXPECT_EQ(engine->Metrics().host_sampled_rows, 2 * 5);
}

TEST(EngineDeviceSampling, PenaltiesAndMinPStayOnTheHostAndSplitTheStep) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/true);
  auto engine = NewEngine();
  GenerationParams penalised = Greedy(6);
  penalised.sampling.presence_penalty = 0.5f;  // seen tokens never reach the argmax's 5.0 margin
  GenerationParams min_p = Greedy(6);
  min_p.sampling.min_p = 0.1f;
  const auto out = RunAll(*engine, model, {{1}, {20}, {40}}, {Greedy(6), penalised, min_p});
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{Counting(1, 6), Counting(20, 6), Counting(40, 6)}));
  EXPECT_GT(model->sample_batches.load(), 0);
  EXPECT_GT(model->logits_batches.load(), 0);
  const EngineMetrics m = engine->Metrics();
  EXPECT_EQ(m.device_sampled_rows, 5);
  EXPECT_EQ(m.host_sampled_rows, 10);
  EXPECT_EQ(m.device_first_tokens, 1);  // the greedy request's; the others' are host-sampled
}

TEST(EngineDeviceSampling, TemperatureRowsCarryTheirSeedAndAStepPerToken) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/true);
  auto engine = NewEngine();
  GenerationParams p = Greedy(5);
  p.sampling.temperature = 0.7f;
  p.sampling.top_k = 5;
  p.sampling.top_p = 0.9f;
  p.sampling.seed = 3;
  const auto out = RunAll(*engine, model, {{1}}, {p});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 5u);
  EXPECT_EQ(model->forward_samples.load(), 1);
  std::lock_guard<std::mutex> lock(model->mu_);
  // Token 0 is drawn by the prefill's ForwardSample (step 0), the rest by
  // decode steps.
  ASSERT_EQ(model->rows_seen.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const DecodeSampling& d = model->rows_seen[i];
    EXPECT_EQ(d.seed, 3u);
    EXPECT_EQ(d.step, i);
    EXPECT_FLOAT_EQ(d.temperature, 0.7f);
    EXPECT_EQ(d.top_k, 5);
    EXPECT_FLOAT_EQ(d.top_p, 0.9f);
    EXPECT_EQ(out[0][i], static_cast<int32_t>((3 * 31 + i * 7) % kVocab));
  }
}

// A prompt that ends on a prefix-cache snapshot point (a whole number of
// cache blocks) keeps its last logits: a later request restoring that
// snapshot samples its first token from them, without a forward.
TEST(EngineDeviceSampling, APromptEndingOnASnapshotPointKeepsItsLogitsForTheCache) {
  auto model = std::make_shared<PoolModel>(0, /*device_sampling=*/true);
  EngineOptions o;
  o.prefix_cache_bytes = 1 << 20;
  auto engine = NewEngine(o);
  const int64_t block = engine->prefix_cache().block_tokens();
  std::vector<int32_t> prompt(static_cast<size_t>(block));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 50);
  const auto first = RunAll(*engine, model, {prompt}, {Greedy(3)});
  EXPECT_EQ(model->forward_samples.load(), 1);
  EXPECT_EQ(model->forward_samples_with_logits.load(), 1);
  ASSERT_EQ(engine->Metrics().prefix_cache_entries, 1);
  const size_t forwards_before = [&] {
    std::lock_guard<std::mutex> lock(model->mu_);
    return model->forward_sizes.size();
  }();
  const auto again = RunAll(*engine, model, {prompt}, {Greedy(3)});
  EXPECT_EQ(again, first);
  EXPECT_EQ(model->forward_samples.load(), 1);  // the hit's first token came from its logits
  std::lock_guard<std::mutex> lock(model->mu_);
  // Only the two decode steps ran: no forward re-evaluated the prompt.
  EXPECT_EQ(model->forward_sizes.size() - forwards_before, 2u);
}

// The largest prefill Forward of one 5000-token prompt, alone or submitted
// while another request is decoding; checks every prompt token ran once.
// Beside a decode, the prompt is queued while the decoding request's first
// decode step (the model's second Forward) waits for it, so the prompt always
// arrives while it decodes: when the test only waited for that request's
// first token, a loaded host could let all of its steps finish first, and
// the prompt got the budget of an idle engine (it failed that way under CPU
// load).
int64_t LargestPrefill(std::shared_ptr<PoolModel> model, EngineOptions o, bool beside_decode) {
  o.prefix_cache_bytes = 0;
  o.max_pending_token_events = size_t{1} << 20;  // the decoding request never waits for its events to be read
  std::atomic<int> forwards{0};
  std::atomic<bool> queued{!beside_decode};
  model->hook = [&] {
    if (forwards.fetch_add(1) == 0) return;  // the decoding request's prefill
    while (!queued.load()) std::this_thread::yield();
  };
  // A failed step releases the hook (the engine's thread would wait in it
  // for good) and returns -1, which fails the caller's expectation.
  auto give_up = [&] {
    queued.store(true);
    return int64_t{-1};
  };
  auto engine = NewEngine(o);
  std::unique_ptr<Session> decoding;
  std::shared_ptr<Request> running;
  if (beside_decode) {
    auto s = Session::Create(engine.get(), model, SessionOptions{8192, nullptr});
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return give_up();
    decoding = *std::move(s);
    auto r = engine->Submit(*decoding, std::vector<int32_t>{1}, Greedy(4000), nullptr, true);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return give_up();
    running = *r;
    // It decodes from now on; a request that fails first would never get here.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (forwards.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the decoding request never reached its first decode step: "
                      << running->status();
        return give_up();
      }
      std::this_thread::yield();
    }
  }
  auto prompt_session = Session::Create(engine.get(), model, SessionOptions{8192, nullptr});
  EXPECT_TRUE(prompt_session.ok()) << prompt_session.status();
  if (!prompt_session.ok()) return give_up();
  auto prompt =
      engine->Submit(**prompt_session, std::vector<int32_t>(5000, 3), Greedy(2), nullptr, true);
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  if (!prompt.ok()) return give_up();
  queued.store(true);
  EXPECT_TRUE(engine->RunToCompletion(**prompt, nullptr, nullptr).ok()) << (*prompt)->status();
  if (running != nullptr) engine->Cancel(*running);
  if (running != nullptr) engine->RunToCompletion(*running, nullptr, nullptr).IgnoreError();
  std::lock_guard<std::mutex> lock(model->mu_);
  int64_t prompt_tokens = 0, largest = 0;
  for (int64_t n : model->forward_sizes) {
    if (n > 1) prompt_tokens += n;
    largest = std::max(largest, n);
  }
  EXPECT_EQ(prompt_tokens, 5000);
  return largest;
}

TEST(EnginePrefillBudget, AutomaticBudgetFollowsTheDevice) {
  EngineOptions o;
  o.prefix_cache_bytes = 0;
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, false, "cpu"), o, false), kCpuPrefillChunk);
  // On a GPU the whole 5000-token prompt goes in one chunk.
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, true), o, false), 5000);
  o.prefill_chunk_tokens = 1000;  // the option overrides
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, true), o, false), 1000);
}

TEST(EnginePrefillBudget, WhileDecodingThePrefillIsBoundedToLimitTheStall) {
  EngineOptions o;
  o.prefix_cache_bytes = 0;
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, true), o, true), kGpuPrefillWhileDecoding);
  o.prefill_tokens_while_decoding = 300;
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, true), o, true), 300);
  // On the CPU both budgets are the chunk.
  EXPECT_EQ(LargestPrefill(std::make_shared<PoolModel>(0, false, "cpu"), EngineOptions{}, true), kCpuPrefillChunk);
}

TEST(EngineStatePool, AdmissionNeverExceedsTheModelsStatePool) {
  // Sessions' states are made before the pool applies (as if offloaded),
  // so only admission keeps the running requests within it.
  auto capped = std::make_shared<PoolModel>(0, true);
  capped->set_max_live_states(2);
  EngineOptions o;
  o.prefix_cache_bytes = 0;
  auto engine = NewEngine(o);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  capped->hook = [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return go; });
  };
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::shared_ptr<Request>> requests;
  for (int32_t start : {1, 10, 20, 30, 40}) {
    auto s = Session::Create(engine.get(), capped, {});
    ASSERT_TRUE(s.ok());
    sessions.push_back(*std::move(s));
    auto r = engine->Submit(*sessions.back(), std::vector<int32_t>{start}, Greedy(6), nullptr, true);
    ASSERT_TRUE(r.ok());
    requests.push_back(*r);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(engine->RunToCompletion(*requests[i], nullptr, nullptr).ok());
    EXPECT_EQ(requests[i]->generated_tokens(), Counting(i == 0 ? 1 : static_cast<int32_t>(10 * i), 6));
  }
  std::lock_guard<std::mutex> lock(capped->mu_);
  EXPECT_LE(capped->max_rows, 2);
  EXPECT_EQ(capped->max_rows, 2);  // and it does batch up to the pool
}

// An engine with a large prefix cache of 16-token blocks.
std::unique_ptr<Engine> NewCachingEngine() {
  EngineOptions o;
  o.prefix_cache_bytes = 1 << 30;
  o.prefix_block_tokens = 16;
  return NewEngine(o);
}

// 200 tokens every prompt of RunSharedPrefixPrompts begins with.
std::vector<int32_t> SharedPrefix() {
  std::vector<int32_t> shared(200);
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<int32_t>(i % 50) + 1;
  return shared;
}

// Six requests, one after another, each on a fresh session: `shared`, then
// 100 tokens of its own (with 16-token cache blocks, snapshot points at 128,
// shared by all, and 256 and 288, the prompt's own; the second request also
// leaves one at 192, the block boundary below where it parts from the
// first). Each must count on from its last token. `most`: the most
// prefix-cache entries seen after one.
void RunSharedPrefixPrompts(Engine& engine, const std::shared_ptr<PoolModel>& model,
                            const std::vector<int32_t>& shared, int64_t* most) {
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = shared;
    for (int j = 0; j < 100; ++j) prompt.push_back(static_cast<int32_t>((i * 7 + j) % 40) + 1);
    const auto out = RunAll(engine, model, {prompt}, {Greedy(4)});
    EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{Counting(prompt.back(), 4)}))
        << "request " << i;
    if (most != nullptr) *most = std::max(*most, engine.Metrics().prefix_cache_entries);
  }
}

TEST(EngineStatePool, PrefixCacheCheckpointsHoldNoSlotsAndRestoreIntoTheSessionsState) {
  // 4 slots, all of them the host's sessions' at the end: the cache's
  // checkpoints never take one, so nothing is evicted for slots and every
  // request still restores its shared prefix into its own session's state.
  auto model = std::make_shared<PoolModel>(4, true);
  auto engine = NewCachingEngine();
  const std::vector<int32_t> shared = SharedPrefix();
  RunSharedPrefixPrompts(*engine, model, shared, nullptr);
  EngineMetrics m = engine->Metrics();
  EXPECT_GT(m.prefix_hit_tokens, 0);
  // More checkpoints than the pool has slots: the 128 rung, the 192 parting
  // point and each prompt's 256 and 288.
  const int64_t entries = m.prefix_cache_entries;
  EXPECT_EQ(entries, 2 + 6 * 2);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 4; ++i) {
    // The capacity RunAll's sessions had: a checkpoint restores into its own size.
    auto s = Session::Create(engine.get(), model, SessionOptions{8192, nullptr});
    ASSERT_TRUE(s.ok()) << "session " << i << ": " << s.status();
    sessions.push_back(*std::move(s));
  }
  EXPECT_EQ(engine->Metrics().prefix_cache_entries, entries);
  EXPECT_EQ(engine->Metrics().prefix_cache_slot_evictions, 0);
  const int restores_before = model->restores.load();
  const int64_t hits_before = engine->Metrics().prefix_hit_tokens;
  std::vector<std::shared_ptr<Request>> requests;
  for (auto& s : sessions) {
    auto r = engine->Submit(*s, shared, Greedy(3), nullptr, true);
    ASSERT_TRUE(r.ok());
    requests.push_back(*r);
  }
  for (auto& r : requests) {
    ASSERT_TRUE(engine->RunToCompletion(*r, nullptr, nullptr).ok()) << r->status();
    EXPECT_EQ(r->generated_tokens(), Counting(shared.back(), 3));
  }
  // Each restores the 192-token parting point.
  EXPECT_EQ(model->restores.load() - restores_before, 4);
  EXPECT_EQ(engine->Metrics().prefix_hit_tokens - hits_before, 4 * 192);
  std::lock_guard<std::mutex> lock(model->mu_);
  EXPECT_LE(model->max_live, 4);
}

// A restore that fails on the device (not for want of room) leaves the
// session's state unknown: that request fails, and so does the session until
// it is reset.
TEST(EngineStatePool, ARestoreThatFailsOnTheDeviceFailsTheRequestAndTheSession) {
  auto model = std::make_shared<PoolModel>(4, true);
  auto engine = NewCachingEngine();
  std::vector<int32_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 50) + 1;
  EXPECT_EQ(RunAll(*engine, model, {prompt}, {Greedy(3)}),
            (std::vector<std::vector<int32_t>>{Counting(prompt.back(), 3)}));
  model->fail_restore = true;
  auto s = Session::Create(engine.get(), model, SessionOptions{8192, nullptr});
  ASSERT_TRUE(s.ok());
  auto r = engine->Submit(**s, prompt, Greedy(3), nullptr, true);
  ASSERT_TRUE(r.ok());
  engine->RunToCompletion(**r, nullptr, nullptr).IgnoreError();
  EXPECT_EQ((*r)->finish_reason(), FinishReason::kError);
  EXPECT_TRUE(absl::IsInternal((*r)->status())) << (*r)->status();
  EXPECT_TRUE((*s)->failed());
  EXPECT_TRUE(absl::IsFailedPrecondition((*s)->Append(std::vector<int32_t>{1})));
  ASSERT_TRUE((*s)->Reset().ok());
  EXPECT_FALSE((*s)->failed());
}

// The model keeps 3 checkpoints on its device: the cache never holds more
// of its entries, the least recently used making way, so no checkpoint of
// the cache goes to (slow to allocate) host memory; the shared entry every
// request hits stays.
TEST(EngineStatePool, PrefixCacheStaysWithinTheModelsDeviceCheckpoints) {
  auto model = std::make_shared<PoolModel>(4, true);
  model->set_checkpoint_slots(3);
  auto engine = NewCachingEngine();
  int64_t most = 0;
  RunSharedPrefixPrompts(*engine, model, SharedPrefix(), &most);
  EXPECT_LE(most, 3);
  // Request 2 restored the shared 128-token rung and left the 192-token
  // parting point, which requests 3 to 6 restored.
  EXPECT_EQ(engine->Metrics().prefix_hit_tokens, 128 + 4 * 192);
}

}  // namespace
}  // namespace strata
