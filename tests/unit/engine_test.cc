// Engine, Session and Request against a tiny fake Model whose greedy output is
// known (token t is always followed by t + 1): event order, stop rules,
// validation, cancellation from another thread, backpressure, failures.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "base/catch_allocation.h"

namespace strata {
namespace {

constexpr int32_t kVocab = 16;
constexpr int32_t kEos = 15;

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

// Logits put 5.0 on (last + 1) % vocab and 0 elsewhere, so greedy decoding
// counts upwards. `hook(call_index)` runs at the start of every Forward call;
// `fail_at_call` makes that call fail with Internal.
class FakeModel : public Model {
 public:
  FakeModel() {
    info_.architecture = "fake";
    info_.num_layers = 1;
    info_.vocab_size = kVocab;
    info_.hidden_size = 4;
    info_.max_context = 64;
    info_.eos_token_id = kEos;
  }
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t) const override {
    return std::unique_ptr<SequenceState>(std::make_unique<FakeState>());
  }
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits, bool) const override {
    const int call = calls_++;
    if (hook) hook(call);
    if (call == fail_at_call) return absl::InternalError("injected failure");
    for (int32_t t : tokens) {
      if (t < 0 || t >= kVocab) return absl::InvalidArgumentError("bad token");
    }
    auto& s = static_cast<FakeState&>(state);
    s.n += static_cast<int64_t>(tokens.size());
    s.last = tokens.back();
    for (int i = 0; i < kVocab; ++i) logits[i] = flat ? 0.0f : (i == (s.last + 1) % kVocab ? 5.0f : 0.0f);
    return OkStatus();
  }
  int calls() const { return calls_; }

  std::function<void(int)> hook;
  int fail_at_call = -1;
  bool flat = false;  // uniform logits, for sampling tests

 private:
  ModelInfo info_;
  mutable std::atomic<int> calls_{0};
};

// A one-shot gate: the scheduler thread waits in the model until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false, open = false;
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void WaitReached() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Opens `gate` once `r` has been asked to stop (no sleeps: it spins on the flag).
void OpenWhenCancelled(Gate& gate, const Request& r) {
  while (r.cancel_reason() == FinishReason::kNone) std::this_thread::yield();
  gate.Open();
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.num_threads = 1;
    o.max_pending_token_events = pending_limit_;
    engine_ = *Engine::Create(o);
    model_ = std::make_shared<FakeModel>();
  }
  std::unique_ptr<Session> NewSession(int64_t ctx = 0) {
    SessionOptions so;
    so.max_context_tokens = ctx;
    return *Session::Create(engine_.get(), model_, so);
  }
  // Polls `r`'s events until FINISHED; returns the TOKEN tokens and the final event.
  std::vector<int32_t> Drain(const Request& r, Event* finished) {
    std::vector<int32_t> tokens;
    Event ev;
    for (;;) {
      EXPECT_TRUE(engine_->PollEventFor(r, &ev, -1));
      if (ev.type == EventType::kFinished) break;
      EXPECT_EQ(ev.num_generated, static_cast<int64_t>(tokens.size()) + 1);
      tokens.push_back(ev.token);
    }
    *finished = ev;
    return tokens;
  }
  GenerationParams Greedy(int32_t max_tokens) {
    GenerationParams p;
    p.max_tokens = max_tokens;
    return p;
  }

  size_t pending_limit_ = 64;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<FakeModel> model_;
};

TEST_F(EngineTest, GreedyGenerationStopsAtMaxTokens) {
  auto s = NewSession();
  const std::vector<int32_t> prompt = {1};
  auto r = *engine_->Submit(*s, prompt, Greedy(5));
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kMaxTokens);
  EXPECT_TRUE(fin.status.ok());
  EXPECT_EQ(fin.num_generated, 5);
  EXPECT_TRUE(r->finished());
  EXPECT_EQ(r->generated_tokens(), (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(s->num_tokens(), 6);
  EXPECT_FALSE(s->busy());
  // The last token is evaluated lazily: the logits follow the whole history.
  auto logits = *s->Logits();
  EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), 7);
}

TEST_F(EngineTest, EosEndsTheRequestWithoutATokenEvent) {
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{12}, Greedy(10));
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{13, 14}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kEos);
  EXPECT_EQ(fin.token, kEos);
  EXPECT_EQ(s->tokens(), (std::vector<int32_t>{12, 13, 14, 15}));
}

TEST_F(EngineTest, StopAtEosCanBeTurnedOff) {
  auto s = NewSession();
  GenerationParams p = Greedy(4);
  p.stop_at_eos = false;
  auto r = *engine_->Submit(*s, std::vector<int32_t>{13}, p);
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{14, 15, 0, 1}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kMaxTokens);
}

TEST_F(EngineTest, StopTokenEndsTheRequest) {
  auto s = NewSession();
  GenerationParams p = Greedy(10);
  p.stop_tokens = {9, 5};
  auto r = *engine_->Submit(*s, std::vector<int32_t>{2}, p);
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kStopToken);
  EXPECT_EQ(fin.token, 5);
}

TEST_F(EngineTest, FullContextEndsTheRequest) {
  auto s = NewSession(/*ctx=*/8);
  auto r = *engine_->Submit(*s, std::vector<int32_t>{0, 1, 2}, Greedy(0));
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kContextFull);
  EXPECT_EQ(s->num_tokens(), 8);
  EXPECT_TRUE(s->Logits().ok());  // the 8th token still fits in the state
  EXPECT_TRUE(absl::IsOutOfRange(s->Append(std::vector<int32_t>{1})));
}

TEST_F(EngineTest, SecondRequestContinuesTheConversation) {
  auto s = NewSession();
  auto r1 = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(2));
  Event fin;
  Drain(*r1, &fin);
  auto r2 = *engine_->Submit(*s, {}, Greedy(2));  // empty prompt: continue
  EXPECT_EQ(Drain(*r2, &fin), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(s->tokens(), (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

TEST_F(EngineTest, SubmitValidatesAndLeavesTheSessionUnchanged) {
  auto s = NewSession(/*ctx=*/4);
  EXPECT_TRUE(absl::IsOutOfRange(engine_->Submit(*s, std::vector<int32_t>{16}, Greedy(1)).status()));
  EXPECT_TRUE(absl::IsOutOfRange(engine_->Submit(*s, std::vector<int32_t>{-1}, Greedy(1)).status()));
  GenerationParams bad_stop = Greedy(1);
  bad_stop.stop_tokens = {99};
  EXPECT_TRUE(absl::IsOutOfRange(engine_->Submit(*s, std::vector<int32_t>{1}, bad_stop).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->Submit(*s, {}, Greedy(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(-1)).status()));
  GenerationParams bad_temp = Greedy(1);
  bad_temp.sampling.temperature = -2;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->Submit(*s, std::vector<int32_t>{1}, bad_temp).status()));
  // 4 tokens fill a context of 4 and leave no room to generate.
  EXPECT_TRUE(absl::IsOutOfRange(engine_->Submit(*s, std::vector<int32_t>{1, 2, 3, 4}, Greedy(1)).status()));
  EXPECT_EQ(s->num_tokens(), 0);
  EXPECT_FALSE(s->busy());
  EXPECT_EQ(model_->calls(), 0);
}

TEST_F(EngineTest, BusySessionRefusesSubmitAndAppend) {
  Gate gate;
  model_->hook = [&](int call) {
    if (call == 0) gate.ArriveAndWait();
  };
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(1));
  gate.WaitReached();
  EXPECT_TRUE(s->busy());
  EXPECT_TRUE(absl::IsFailedPrecondition(engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(1)).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(s->Append(std::vector<int32_t>{1})));
  EXPECT_TRUE(absl::IsFailedPrecondition(s->Reset()));
  gate.Open();
  Event fin;
  Drain(*r, &fin);
  EXPECT_TRUE(s->Append(std::vector<int32_t>{1}).ok());
}

TEST_F(EngineTest, CancelFromAnotherThreadEndsBeforeTheNextToken) {
  Gate gate;
  model_->hook = [&](int call) {
    if (call == 2) gate.ArriveAndWait();  // third forward: two tokens are out
  };
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{0}, Greedy(0));
  gate.WaitReached();
  std::thread canceller([&] { r->Cancel(); });
  canceller.join();
  gate.Open();
  Event fin;
  // The step in flight completes (third token), then the cancel lands.
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(absl::IsCancelled(fin.status));
  EXPECT_EQ(r->finish_reason(), FinishReason::kCancelled);
  r->Cancel();  // after the fact: harmless
  EXPECT_EQ(r->finish_reason(), FinishReason::kCancelled);
}

TEST_F(EngineTest, CancelBeforeStartProducesNoTokens) {
  Gate gate;
  model_->hook = [&](int call) {
    if (call == 0) gate.ArriveAndWait();
  };
  auto s1 = NewSession(), s2 = NewSession();
  auto blocker = *engine_->Submit(*s1, std::vector<int32_t>{1}, Greedy(1));
  gate.WaitReached();  // the scheduler is busy in s1's request
  auto r = *engine_->Submit(*s2, std::vector<int32_t>{1}, Greedy(5));
  r->Cancel();
  gate.Open();
  Event fin;
  EXPECT_TRUE(Drain(*r, &fin).empty());
  EXPECT_EQ(fin.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(s2->num_tokens(), 0);  // the prompt never ran
  Drain(*blocker, &fin);
}

TEST_F(EngineTest, EventsOfEachRequestArriveInOrderAcrossSessions) {
  auto s1 = NewSession(), s2 = NewSession();
  auto r1 = *engine_->Submit(*s1, std::vector<int32_t>{0}, Greedy(4));
  auto r2 = *engine_->Submit(*s2, std::vector<int32_t>{8}, Greedy(3));
  std::map<const Request*, std::vector<int32_t>> tokens;
  std::map<const Request*, int> finished;
  Event ev;
  while (finished.size() < 2) {
    ASSERT_TRUE(engine_->PollEvent(&ev, -1));
    const Request* r = ev.request.get();
    ASSERT_EQ(finished.count(r), 0u) << "event after FINISHED";
    if (ev.type == EventType::kToken) {
      tokens[r].push_back(ev.token);
    } else {
      finished[r] = 1;
    }
  }
  EXPECT_EQ(tokens[r1.get()], (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(tokens[r2.get()], (std::vector<int32_t>{9, 10, 11}));
  EXPECT_FALSE(engine_->PollEvent(&ev, 0));
}

TEST_F(EngineTest, PrivateEventsAreNotSeenByTheEngineWidePoll) {
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(3), nullptr, /*private_events=*/true);
  Event fin;
  EXPECT_EQ(Drain(*r, &fin).size(), 3u);  // PollEventFor sees them
  auto s2 = NewSession();
  auto r2 = *engine_->Submit(*s2, std::vector<int32_t>{1}, Greedy(1), nullptr, /*private_events=*/true);
  while (!r2->finished()) {
    Event ev;
    EXPECT_FALSE(engine_->PollEvent(&ev, 0));
    std::this_thread::yield();
  }
  Event ev;
  EXPECT_FALSE(engine_->PollEvent(&ev, 0));
  Drain(*r2, &fin);
}

class EngineBackpressureTest : public EngineTest {
 protected:
  EngineBackpressureTest() { pending_limit_ = 2; }
};

TEST_F(EngineBackpressureTest, SchedulerStaysAtMostTheLimitAhead) {
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{0}, Greedy(12));
  int polled = 0;
  Event ev;
  for (;;) {
    ASSERT_TRUE(engine_->PollEventFor(*r, &ev, -1));
    if (ev.type == EventType::kFinished) break;
    ++polled;
    // Produced but not yet polled never exceeds the limit.
    EXPECT_LE(r->num_generated() - polled, 2);
  }
  EXPECT_EQ(polled, 12);
}

TEST_F(EngineTest, RunToCompletionStopsWhenTheCallbackSaysSo) {
  // The scheduler runs ahead of the callback; hold it at the third forward
  // until the callback's stop has landed, so it cannot finish another way first.
  Gate gate;
  model_->hook = [&](int call) {
    if (call == 2) gate.ArriveAndWait();
  };
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(0), nullptr, true);
  std::thread opener([&] { OpenWhenCancelled(gate, *r); });
  std::vector<int32_t> seen;
  FinishReason reason = FinishReason::kNone;
  Status st = engine_->RunToCompletion(
      *r, [&](int32_t t) {
        seen.push_back(t);
        return seen.size() < 2;
      },
      &reason);
  opener.join();
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(reason, FinishReason::kCallback);
  EXPECT_EQ(seen, (std::vector<int32_t>{2, 3}));
}

TEST_F(EngineTest, DetachDropsEventsAndDestroyWaitsForTheScheduler) {
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(0));
  engine_->Detach(*r);
  Event ev;
  EXPECT_FALSE(engine_->PollEvent(&ev, 0));
  s.reset();  // ~Session waits until the request let go
  EXPECT_TRUE(r->finished());
  EXPECT_FALSE(engine_->PollEvent(&ev, 0));
}

TEST_F(EngineTest, DestroyingASessionCancelsItsRequest) {
  Gate gate;
  model_->hook = [&](int call) {
    if (call == 1) gate.ArriveAndWait();
  };
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(0));
  gate.WaitReached();
  std::thread opener([&] { OpenWhenCancelled(gate, *r); });
  s.reset();
  opener.join();
  EXPECT_TRUE(r->finished());
  EXPECT_EQ(r->finish_reason(), FinishReason::kCancelled);
}

TEST_F(EngineTest, ModelFailureFinishesWithErrorAndNeedsReset) {
  model_->fail_at_call = 1;
  auto s = NewSession();
  auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(5));
  Event fin;
  EXPECT_EQ(Drain(*r, &fin), (std::vector<int32_t>{2}));
  EXPECT_EQ(fin.finish_reason, FinishReason::kError);
  EXPECT_TRUE(absl::IsInternal(fin.status));
  EXPECT_NE(fin.status.message().find("injected"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsFailedPrecondition(s->Append(std::vector<int32_t>{1})));
  EXPECT_TRUE(s->Reset().ok());
  EXPECT_TRUE(s->Append(std::vector<int32_t>{1}).ok());
  EXPECT_EQ(s->num_tokens(), 1);
}

// A failed allocation on the scheduler thread is the request's
// OUT_OF_MEMORY (the payload the C ABI maps), in the prefill (the first
// model call) and in the decode step after it.
TEST_F(EngineTest, AllocationFailureInTheModelIsOutOfMemory) {
  for (int at : {0, 1}) {
    SCOPED_TRACE(at);
    const int fail = model_->calls() + at;
    model_->hook = [fail](int call) {
      if (call == fail) throw std::bad_alloc();
    };
    auto s = NewSession();
    auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, Greedy(5));
    Event fin;
    Drain(*r, &fin);
    EXPECT_EQ(fin.finish_reason, FinishReason::kError);
    EXPECT_TRUE(IsOutOfMemory(fin.status)) << fin.status;
    EXPECT_NE(fin.status.message().find("out of memory while"), absl::string_view::npos);
  }
  model_->hook = nullptr;
}

TEST_F(EngineTest, AppendChecksTokensAndCapacity) {
  auto s = NewSession(/*ctx=*/3);
  EXPECT_TRUE(absl::IsFailedPrecondition(s->Logits().status()));  // empty
  EXPECT_TRUE(absl::IsOutOfRange(s->Append(std::vector<int32_t>{1, 16})));
  EXPECT_TRUE(absl::IsOutOfRange(s->Append(std::vector<int32_t>{1, 2, 3, 4})));
  EXPECT_EQ(s->num_tokens(), 0);
  EXPECT_TRUE(s->Append(std::vector<int32_t>{4, 5}).ok());
  auto logits = *s->Logits();
  EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), 6);
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  model_->flat = true;
  auto run = [&](uint64_t seed) {
    auto s = NewSession();
    GenerationParams p = Greedy(20);
    p.stop_at_eos = false;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    auto r = *engine_->Submit(*s, std::vector<int32_t>{1}, p);
    Event fin;
    return Drain(*r, &fin);
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(EngineCreate, RejectsBadOptions) {
  EngineOptions o;
  o.num_threads = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(Engine::Create(o).status()));
  o.num_threads = 1;
  o.max_pending_token_events = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Engine::Create(o).status()));
}

TEST(EngineLog, CallbackGetsMessagesAtOrAboveTheLevel) {
  std::vector<std::pair<LogLevel, std::string>> got;
  EngineOptions o;
  o.num_threads = 1;
  o.min_log_level = LogLevel::kWarning;
  o.log = [&](LogLevel l, std::string_view m) { got.emplace_back(l, std::string(m)); };
  auto e = *Engine::Create(o);
  e->Log(LogLevel::kInfo, "quiet");
  e->Log(LogLevel::kError, "loud");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second, "loud");
}

}  // namespace
}  // namespace strata
