#include "harness/session_runs.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace strata::parity {

std::unique_ptr<Engine> NewEngine() {
  EngineOptions o;
  o.num_threads = 2;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

std::vector<int32_t> GenerateGreedy(Engine& e, Session& s, std::span<const int32_t> prompt, int32_t n) {
  GenerationParams p;
  p.max_tokens = n;
  p.stop_at_eos = false;
  auto r = e.Submit(s, prompt, p, nullptr, /*private_events=*/true);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_TRUE(e.RunToCompletion(**r, nullptr, nullptr).ok());
  return (*r)->generated_tokens();
}

Continuation Continue(Engine& e, Session& s, const std::vector<int32_t>& more) {
  Continuation c;
  c.generated = GenerateGreedy(e, s, more, 9);
  auto l = s.Logits();
  EXPECT_TRUE(l.ok()) << l.status();
  if (l.ok()) c.logits.assign(l->begin(), l->end());
  c.history = s.tokens();
  return c;
}

void ExpectSaveLoadContinuesExactly(std::shared_ptr<const Model> model,
                                    std::shared_ptr<const Model> other,
                                    const std::vector<int32_t>& prompt, int64_t cut, bool generate,
                                    const std::vector<int32_t>& more) {
  SCOPED_TRACE(testing::Message() << "saved after " << cut << " tokens"
                                  << (generate ? " and a generation" : ""));
  auto e1 = NewEngine(), e2 = NewEngine();
  ASSERT_NE(e1, nullptr);
  ASSERT_NE(e2, nullptr);
  SessionOptions so;
  so.max_context_tokens = 256;
  auto s = Session::Create(e1.get(), model, so);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Append(std::span(prompt).first(static_cast<size_t>(cut))).ok());
  uint64_t mark = 0;
  if (generate) {
    auto id = (*s)->Mark();
    ASSERT_TRUE(id.ok()) << id.status();
    mark = *id;
    GenerateGreedy(*e1, **s, {}, 5);
    EXPECT_EQ((*s)->num_pending(), 1);
  }
  auto saved = (*s)->Save();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const Continuation want = Continue(*e1, **s, more);

  auto loaded = Session::Load(e2.get(), other, *saved, so, "test bytes");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->num_tokens(), cut + (generate ? 5 : 0));
  auto again = (*loaded)->Save();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == *saved) << "a loaded session saves other bytes";
  const Continuation got = Continue(*e2, **loaded, more);
  EXPECT_EQ(got.generated, want.generated);
  EXPECT_EQ(got.history, want.history);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_TRUE(got.logits == want.logits) << "logits differ after the load";
  if (generate) {
    // The mark came along: both roll back to the same point.
    ASSERT_TRUE((*s)->Rollback(mark).ok());
    ASSERT_TRUE((*loaded)->Rollback(mark).ok());
    EXPECT_EQ((*loaded)->tokens(), (*s)->tokens());
    auto a = (*s)->Logits();
    auto b = (*loaded)->Logits();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(std::equal(a->begin(), a->end(), b->begin(), b->end()));
  }
}

}  // namespace strata::parity
