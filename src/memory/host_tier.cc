#include "memory/host_tier.h"

#include <utility>

namespace strata {

Status HostTier::Put(std::string_view key, std::span<const uint8_t> bytes) {
  if (bytes.size() > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("host tier: an object of ", bytes.size(),
                                                     " bytes exceeds its capacity of ", capacity_,
                                                     " bytes"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (TouchLocked(key) != lru_.end()) return OkStatus();
  }
  // Copied outside the lock: a large region does not stall readers. Another
  // writer may store the key meanwhile; the check below keeps its object.
  Object object{std::string(key), std::vector<uint8_t>(bytes.begin(), bytes.end())};
  std::lock_guard<std::mutex> lock(mu_);
  if (TouchLocked(key) != lru_.end()) return OkStatus();
  while (bytes_ + object.bytes.size() > capacity_) EraseLocked(std::prev(lru_.end()));
  bytes_ += object.bytes.size();
  lru_.push_front(std::move(object));
  by_key_.emplace(lru_.front().key, lru_.begin());
  return OkStatus();
}

Status HostTier::Get(std::string_view key, std::vector<uint8_t>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const List::iterator it = TouchLocked(key);
  if (it == lru_.end()) return absl::NotFoundError("host tier: no such object");
  out->assign(it->bytes.begin(), it->bytes.end());
  return OkStatus();
}

bool HostTier::Contains(std::string_view key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_key_.contains(key);
}

void HostTier::Erase(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_key_.find(key); it != by_key_.end()) EraseLocked(it->second);
}

uint64_t HostTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int64_t HostTier::objects() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(lru_.size());
}

HostTier::List::iterator HostTier::TouchLocked(std::string_view key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return lru_.end();
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second;
}

void HostTier::EraseLocked(List::iterator it) {
  bytes_ -= it->bytes.size();
  by_key_.erase(it->key);
  lru_.erase(it);
}

}  // namespace strata
