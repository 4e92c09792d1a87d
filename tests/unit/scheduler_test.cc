// The scheduler's rules against a fake model whose greedy output counts
// upwards (token t is followed by t + 1): priorities and preemption under a
// memory budget, deadlines, per-request context limits, cancellation in the
// middle of a chunked prefill, a failing request that leaves the others of
// its batch alone, a budget too small for any request, the metrics callback.
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

class FakeState : public SequenceState {
 public:
  int64_t num_tokens() const override { return n; }
  std::unique_ptr<SequenceState> Clone() const override { return std::make_unique<FakeState>(*this); }
  void Reset() override {
    n = 0;
    last = -1;
  }
  int64_t n = 0;
  int32_t last = -1;
};

// Forward fails (Internal) for any token equal to `poison`; `hook` runs at
// the start of each Forward with the number of tokens.
class FakeModel : public Model {
 public:
  FakeModel() {
    info_.architecture = "fake";
    info_.num_layers = 2;
    info_.layer_kinds = {"kda", "mla"};
    info_.vocab_size = kVocab;
    info_.hidden_size = 4;
    info_.max_context = 256;
    info_.eos_token_id = -1;
    info_.state_bytes_per_token = 100;
    info_.state_bytes_per_sequence = 1000;
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    return std::unique_ptr<SequenceState>(std::make_unique<FakeState>());
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits, bool) const override {
    calls.fetch_add(1);
    if (hook) hook(tokens.size());
    for (int32_t t : tokens) {
      if (t == poison) return absl::InternalError("poisoned token");
    }
    auto& s = static_cast<FakeState&>(state);
    s.n += static_cast<int64_t>(tokens.size());
    s.last = tokens.back();
    for (int i = 0; i < kVocab; ++i) logits[i] = i == (s.last + 1) % kVocab ? 5.0f : 0.0f;
    return OkStatus();
  }
  std::function<void(size_t)> hook;
  int32_t poison = -1;
  mutable std::atomic<int> calls{0};

 private:
  ModelInfo info_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(EngineOptions o) {
    o.num_threads = 1;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok());
    engine_ = *std::move(e);
  }
  std::unique_ptr<Session> NewSession() {
    auto s = Session::Create(engine_.get(), model_, {});
    EXPECT_TRUE(s.ok());
    return *std::move(s);
  }
  void TearDown() override {
    sessions_.clear();
    engine_.reset();
  }

  std::shared_ptr<FakeModel> model_ = std::make_shared<FakeModel>();
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Session>> sessions_;
};

GenerationParams Greedy(int32_t max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.stop_at_eos = false;
  return p;
}

TEST_F(SchedulerTest, HigherPriorityPreemptsUnderTheMemoryBudgetAndBothFinishExactly) {
  EngineOptions o;
  o.prefix_cache_bytes = 0;
  // Each request fits alone (1000 + 31 tokens), not both.
  o.memory_budget_bytes = 2 * 1000 + 35 * 100 - 1000;
  Start(o);
  auto low_s = NewSession(), high_s = NewSession();
  // The low-priority request runs alone first (the gate holds the model).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> seen{0};
  model_->hook = [&](size_t) {
    if (seen.fetch_add(1) == 3) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
    }
  };
  GenerationParams low = Greedy(30);
  low.priority = 0;
  auto rl = engine_->Submit(*low_s, std::vector<int32_t>{1}, low);
  ASSERT_TRUE(rl.ok());
  while (seen.load() < 4) std::this_thread::yield();
  GenerationParams high = Greedy(30);
  high.priority = 5;
  auto rh = engine_->Submit(*high_s, std::vector<int32_t>{10}, high);
  ASSERT_TRUE(rh.ok());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  // The order of the FINISHED events: the preempted low-priority request
  // waits until the high one is done.
  std::vector<const Request*> finished;
  Event ev;
  while (finished.size() < 2) {
    engine_->PollEvent(&ev, -1);
    if (ev.type == EventType::kFinished) {
      EXPECT_TRUE(ev.status.ok()) << ev.status;
      finished.push_back(ev.request.get());
    }
  }
  EXPECT_EQ(finished, (std::vector<const Request*>{rh->get(), rl->get()}));
  std::vector<int32_t> want_low, want_high;
  for (int i = 0; i < 30; ++i) {
    want_low.push_back((2 + i) % kVocab);
    want_high.push_back((11 + i) % kVocab);
  }
  EXPECT_EQ((*rl)->generated_tokens(), want_low);
  EXPECT_EQ((*rh)->generated_tokens(), want_high);
  EXPECT_GE(engine_->Metrics().preemptions, 1);
}

TEST_F(SchedulerTest, ARequestThatCanNeverFitTheBudgetIsRefusedAtSubmit) {
  EngineOptions o;
  o.prefix_cache_bytes = 0;
  o.memory_budget_bytes = 1000 + 5 * 100;  // the session's fixed state and 5 tokens
  Start(o);
  auto s = NewSession();
  // 3 prompt tokens + 50 new ones need 53 tokens of state at the end: refused
  // before any prefill, with the numbers in the message.
  auto r = engine_->Submit(*s, std::vector<int32_t>{1, 2, 3}, Greedy(50), nullptr, true);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("memory budget of 1500 bytes"), std::string::npos) << r.status();
  EXPECT_FALSE(s->busy());
  // One that fits at its longest (3 + 2 tokens) runs to the end.
  auto ok = engine_->Submit(*s, std::vector<int32_t>{1, 2, 3}, Greedy(2), nullptr, true);
  ASSERT_TRUE(ok.ok()) << ok.status();
  FinishReason reason;
  EXPECT_TRUE(engine_->RunToCompletion(**ok, nullptr, &reason).ok());
  EXPECT_EQ(reason, FinishReason::kMaxTokens);
}

TEST_F(SchedulerTest, MissedDeadlineEndsTheRequest) {
  Start({});
  auto s = NewSession();
  model_->hook = [](size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  GenerationParams p = Greedy(1000);
  p.deadline_ms = 1;
  auto r = engine_->Submit(*s, std::vector<int32_t>{1}, p, nullptr, true);
  ASSERT_TRUE(r.ok());
  FinishReason reason;
  Status st = engine_->RunToCompletion(**r, nullptr, &reason);
  EXPECT_EQ(reason, FinishReason::kDeadline);
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  EXPECT_EQ(engine_->Metrics().deadline_misses, 1);
}

TEST_F(SchedulerTest, PerRequestContextLimit) {
  Start({});
  auto s = NewSession();
  GenerationParams p = Greedy(100);
  p.max_context_tokens = 8;
  auto r = engine_->Submit(*s, std::vector<int32_t>{1, 2, 3}, p, nullptr, true);
  ASSERT_TRUE(r.ok());
  FinishReason reason;
  EXPECT_TRUE(engine_->RunToCompletion(**r, nullptr, &reason).ok());
  EXPECT_EQ(reason, FinishReason::kContextFull);
  EXPECT_EQ(s->num_tokens(), 8);
  // A prompt that already fills the request's limit is refused at submit.
  p.max_context_tokens = 9;
  EXPECT_TRUE(absl::IsOutOfRange(engine_->Submit(*s, std::vector<int32_t>{1}, p).status()));
}

TEST_F(SchedulerTest, CancelInTheMiddleOfAChunkedPrefill) {
  EngineOptions o;
  o.prefill_chunk_tokens = 4;
  Start(o);
  auto s = NewSession();
  std::shared_ptr<Request> req;
  std::mutex mu;
  model_->hook = [&](size_t) {
    if (model_->calls.load() == 3) {
      std::lock_guard<std::mutex> lock(mu);
      req->Cancel();
    }
  };
  std::vector<int32_t> prompt(40, 7);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto r = engine_->Submit(*s, prompt, Greedy(5), nullptr, true);
    ASSERT_TRUE(r.ok());
    req = *r;
  }
  FinishReason reason;
  Status st = engine_->RunToCompletion(*req, nullptr, &reason);
  EXPECT_EQ(reason, FinishReason::kCancelled);
  EXPECT_TRUE(absl::IsCancelled(st));
  EXPECT_EQ(req->num_generated(), 0);
  EXPECT_EQ(model_->calls.load(), 3);  // stopped between chunks
  EXPECT_EQ(s->num_tokens(), 12);      // the chunks evaluated so far stay
  // The session is usable afterwards.
  EXPECT_TRUE(s->Append(std::vector<int32_t>{1}).ok());
}

TEST_F(SchedulerTest, AFailingRequestLeavesTheOthersOfItsBatchAlone) {
  Start({});
  model_->poison = 20;  // reached by the request counting from 15 after 5 tokens
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::shared_ptr<Request>> requests;
  for (int32_t start : {1, 15, 30}) {
    sessions.push_back(NewSession());
    auto r = engine_->Submit(*sessions.back(), std::vector<int32_t>{start}, Greedy(10), nullptr, true);
    ASSERT_TRUE(r.ok());
    requests.push_back(*r);
  }
  FinishReason reason;
  EXPECT_TRUE(engine_->RunToCompletion(*requests[0], nullptr, &reason).ok());
  EXPECT_EQ(reason, FinishReason::kMaxTokens);
  EXPECT_FALSE(engine_->RunToCompletion(*requests[1], nullptr, &reason).ok());
  EXPECT_EQ(reason, FinishReason::kError);
  EXPECT_TRUE(engine_->RunToCompletion(*requests[2], nullptr, &reason).ok());
  EXPECT_EQ(reason, FinishReason::kMaxTokens);
  EXPECT_EQ(requests[2]->num_generated(), 10);
  EXPECT_TRUE(sessions[1]->failed());
  EXPECT_FALSE(sessions[2]->failed());
}

TEST_F(SchedulerTest, MetricsCallbackRunsAndCountsTokens) {
  std::atomic<int> calls{0};
  std::atomic<int64_t> generated{0};
  EngineOptions o;
  o.metrics_interval_ms = 1;
  o.metrics_callback = [&](const EngineMetrics& m) {
    calls.fetch_add(1);
    generated.store(m.generated_tokens);
  };
  Start(o);
  auto s = NewSession();
  auto r = engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(20), nullptr, true);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(engine_->RunToCompletion(**r, nullptr, nullptr).ok());
  while (generated.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(calls.load(), 1);
  const EngineMetrics m = engine_->Metrics();
  EXPECT_EQ(m.generated_tokens, 20);
  EXPECT_EQ(m.tpot.count, 19);
  EXPECT_EQ(m.state_resident_bytes, 1000u + 100u * 20);  // 1 prompt + 19 evaluated generated tokens
  EXPECT_EQ(m.state_active_bytes, 0u);                   // the session is idle: outside the budget
}

}  // namespace
}  // namespace strata
