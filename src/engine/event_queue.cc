#include "engine/event_queue.h"

namespace strata {

void EventQueue::Push(Event ev) {
  const Request* r = ev.request.get();
  const uint64_t seq = next_seq_++;
  if (!r->private_events()) arrival_.emplace_back(seq, r);
  by_request_[r].push_back({seq, std::move(ev)});
  ++size_;
}

void EventQueue::PopFront(std::unordered_map<const Request*, std::deque<Queued>>::iterator it,
                          Event* out) {
  *out = std::move(it->second.front().event);
  it->second.pop_front();
  if (it->second.empty()) by_request_.erase(it);
  --size_;
}

bool EventQueue::TakeFor(const Request* request, Event* out) {
  auto it = by_request_.find(request);
  if (it == by_request_.end()) return false;
  PopFront(it, out);
  return true;
}

bool EventQueue::TakeAny(Event* out) {
  while (!arrival_.empty()) {
    const auto [seq, r] = arrival_.front();
    arrival_.pop_front();
    auto it = by_request_.find(r);
    // Each request's queue is in seq order, so its front is the oldest
    // event still there: equal when this entry's event is it, greater when
    // the entry's event was taken for the request or dropped.
    if (it == by_request_.end() || it->second.front().seq != seq) continue;
    PopFront(it, out);
    return true;
  }
  return false;
}

void EventQueue::Drop(const Request* request) {
  auto it = by_request_.find(request);
  if (it == by_request_.end()) return;
  size_ -= it->second.size();
  by_request_.erase(it);
}

}  // namespace strata
