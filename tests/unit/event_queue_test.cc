// EventQueue: per-request order, arrival order across non-private requests,
// and entries made stale by a targeted take or a drop.
#include "engine/event_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/chat_turn.h"

namespace strata {
namespace {

std::shared_ptr<Request> NewRequest(uint64_t id, bool private_events) {
  return std::make_shared<Request>(id, nullptr, std::vector<int32_t>{}, GenerationParams{}, nullptr,
                                   private_events);
}

Event TokenEvent(const std::shared_ptr<Request>& r, int32_t token) {
  Event ev;
  ev.request = r;
  ev.token = token;
  return ev;
}

// Takes every event TakeAny returns, as (request id, token) pairs.
std::vector<std::pair<uint64_t, int32_t>> DrainAny(EventQueue& q) {
  std::vector<std::pair<uint64_t, int32_t>> got;
  Event ev;
  while (q.TakeAny(&ev)) got.emplace_back(ev.request->id(), ev.token);
  return got;
}

TEST(EventQueue, TakeAnyReturnsNonPrivateEventsInArrivalOrder) {
  EventQueue q;
  auto a = NewRequest(1, false), b = NewRequest(2, false), p = NewRequest(3, true);
  q.Push(TokenEvent(a, 10));
  q.Push(TokenEvent(p, 30));
  q.Push(TokenEvent(b, 20));
  q.Push(TokenEvent(a, 11));
  EXPECT_EQ(q.size(), 4u);
  using V = std::vector<std::pair<uint64_t, int32_t>>;
  EXPECT_EQ(DrainAny(q), (V{{1, 10}, {2, 20}, {1, 11}}));
  // The private request's event waits for a poll of that request.
  EXPECT_EQ(q.size(), 1u);
  Event ev;
  ASSERT_TRUE(q.TakeFor(p.get(), &ev));
  EXPECT_EQ(ev.token, 30);
  EXPECT_FALSE(q.TakeFor(p.get(), &ev));
  EXPECT_EQ(q.size(), 0u);
}

TEST(EventQueue, TakeForPassesOtherRequestsAndLeavesTheRestInOrder) {
  EventQueue q;
  auto a = NewRequest(1, false), b = NewRequest(2, false);
  for (int i = 0; i < 3; ++i) {
    q.Push(TokenEvent(a, 10 + i));
    q.Push(TokenEvent(b, 20 + i));
  }
  Event ev;
  ASSERT_TRUE(q.TakeFor(b.get(), &ev));
  EXPECT_EQ(ev.token, 20);
  ASSERT_TRUE(q.TakeFor(b.get(), &ev));
  EXPECT_EQ(ev.token, 21);
  // b's first two entries in the arrival order are stale now.
  using V = std::vector<std::pair<uint64_t, int32_t>>;
  EXPECT_EQ(DrainAny(q), (V{{1, 10}, {1, 11}, {1, 12}, {2, 22}}));
  EXPECT_EQ(q.size(), 0u);
}

TEST(EventQueue, DropForgetsARequestsEventsOnly) {
  EventQueue q;
  auto a = NewRequest(1, false), b = NewRequest(2, false);
  q.Push(TokenEvent(a, 10));
  q.Push(TokenEvent(b, 20));
  q.Push(TokenEvent(a, 11));
  q.Drop(a.get());
  EXPECT_EQ(q.size(), 1u);
  Event ev;
  EXPECT_FALSE(q.TakeFor(a.get(), &ev));
  // A new event of the dropped request after the drop is delivered, and the
  // stale entries before it are not mistaken for it.
  q.Push(TokenEvent(a, 12));
  using V = std::vector<std::pair<uint64_t, int32_t>>;
  EXPECT_EQ(DrainAny(q), (V{{2, 20}, {1, 12}}));
}

TEST(EventQueue, ManyRequestsInterleavedKeepEveryOrder) {
  EventQueue q;
  std::vector<std::shared_ptr<Request>> rs;
  for (uint64_t i = 0; i < 50; ++i) rs.push_back(NewRequest(i, false));
  for (int round = 0; round < 20; ++round) {
    for (auto& r : rs) q.Push(TokenEvent(r, round));
  }
  Event ev;
  // Take request 7's events by request; the others come out by arrival.
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(q.TakeFor(rs[7].get(), &ev));
    EXPECT_EQ(ev.token, round);
  }
  std::vector<int32_t> next(50, 0);
  int taken = 0;
  while (q.TakeAny(&ev)) {
    const uint64_t id = ev.request->id();
    ASSERT_NE(id, 7u);
    EXPECT_EQ(ev.token, next[id]++) << "request " << id;
    ++taken;
  }
  EXPECT_EQ(taken, 49 * 20);
}

}  // namespace
}  // namespace strata
