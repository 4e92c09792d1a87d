// Reference-counted host blocks for CPU sequence states.
#include "memory/host_block_pool.h"

namespace strata {

void HostBlockPool::Take(int64_t n, std::vector<int32_t>& ids, std::vector<float*>& data) {
  // Allocated outside the lock: the pool's other users wait for no page faults.
  std::vector<std::unique_ptr<float[]>> fresh(static_cast<size_t>(n));
  for (std::unique_ptr<float[]>& f : fresh) f.reset(new float[static_cast<size_t>(block_floats_)]);
  ids.reserve(ids.size() + fresh.size());
  data.reserve(data.size() + fresh.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (std::unique_ptr<float[]>& storage : fresh) {
    int32_t id;
    if (free_.empty()) {
      id = static_cast<int32_t>(blocks_.size());
      blocks_.emplace_back();
    } else {
      id = free_.back();
      free_.pop_back();
    }
    Block& b = blocks_[static_cast<size_t>(id)];
    b.data = std::move(storage);
    b.refs = 1;
    ids.push_back(id);
    data.push_back(b.data.get());
  }
  held_ += n;
}

void HostBlockPool::Share(std::span<const int32_t> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t id : ids) ++blocks_[static_cast<size_t>(id)].refs;
}

void HostBlockPool::Release(std::span<const int32_t> ids) {
  std::vector<std::unique_ptr<float[]>> freed;  // returned after the lock is dropped
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int32_t id : ids) {
      Block& b = blocks_[static_cast<size_t>(id)];
      if (--b.refs > 0) continue;
      freed.push_back(std::move(b.data));
      free_.push_back(id);
      --held_;
    }
  }
}

int32_t HostBlockPool::RefCount(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || static_cast<size_t>(id) >= blocks_.size()) return 0;
  return blocks_[static_cast<size_t>(id)].refs;
}

int64_t HostBlockPool::held_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace strata
