// The events waiting for the host: one queue per request, so a poll for one
// request takes its oldest event without passing any other request's, plus
// the order in which the events of non-private requests arrived, so a poll
// for any request takes the oldest of those. Every operation is O(1)
// amortised.
//
// Thread-safety: none of its own; the engine calls it under its mutex.
#ifndef STRATA_ENGINE_EVENT_QUEUE_H_
#define STRATA_ENGINE_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

#include "engine/event.h"

namespace strata {

class EventQueue {
 public:
  // Appends `ev` to its request's queue (ev.request must be set).
  void Push(Event ev);
  // The oldest event of `request`; false when it has none.
  bool TakeFor(const Request* request, Event* out);
  // The oldest event of any request whose events are not private; false
  // when there is none.
  bool TakeAny(Event* out);
  // Forgets every event of `request`.
  void Drop(const Request* request);
  size_t size() const { return size_; }

 private:
  struct Queued {
    uint64_t seq;
    Event event;
  };
  // Pops the front of `request`'s queue into *out.
  void PopFront(std::unordered_map<const Request*, std::deque<Queued>>::iterator it, Event* out);

  std::unordered_map<const Request*, std::deque<Queued>> by_request_;
  // (seq, request) of every event pushed for a non-private request, oldest
  // first. An entry whose event a TakeFor or Drop already removed is stale:
  // its seq is below the front of its request's queue (or the queue is gone),
  // and TakeAny skips it.
  std::deque<std::pair<uint64_t, const Request*>> arrival_;
  uint64_t next_seq_ = 0;
  size_t size_ = 0;
};

}  // namespace strata

#endif  // STRATA_ENGINE_EVENT_QUEUE_H_
