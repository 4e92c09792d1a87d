// PrefixCache: block-chained keys, LRU with pinning, exact verification.
#include "memory/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "base/splitmix64.h"

namespace strata {

std::shared_ptr<StateSnapshot> MakeSnapshot(const Model& model, int64_t max_context,
                                            std::vector<int32_t> tokens,
                                            std::unique_ptr<StateCheckpoint> checkpoint,
                                            std::vector<float> logits) {
  auto snap = std::make_shared<StateSnapshot>();
  snap->model = &model;
  snap->max_context = max_context;
  snap->bytes = StateBytes(model.info(), static_cast<int64_t>(tokens.size()));
  snap->tokens = std::move(tokens);
  snap->checkpoint = std::move(checkpoint);
  snap->logits = std::move(logits);
  return snap;
}
namespace {

uint64_t HashTokens(uint64_t seed, std::span<const int32_t> tokens) {
  uint64_t h = seed;
  for (int32_t t : tokens) h = SplitMix64(h ^ static_cast<uint32_t>(t));
  return h;
}

// The unpinned entries of `lru` (of `model`, or all for null) in eviction
// order: those not shared, least recently used first, then the shared ones
// so. A template so that const and mutable lists give their own iterators.
template <typename List>
auto Victims(List& lru, const Model* model) {
  std::vector<decltype(lru.begin())> victims;
  for (const bool shared : {false, true}) {
    for (auto it = lru.end(); it != lru.begin();) {
      --it;
      // use_count > 1: a session's mark (or a restore in progress) holds it.
      if (it->shared != shared || it->snap.use_count() > 1) continue;
      if (model == nullptr || it->snap->model == model) victims.push_back(it);
    }
  }
  return victims;
}

}  // namespace

PrefixCache::PrefixCache(uint64_t capacity_bytes, int32_t block_tokens)
    : capacity_(capacity_bytes), block_tokens_(std::max(1, block_tokens)) {}

// The key of a prefix chains one hash per full block (each block's hash
// depends on every block before it), then the partial tail and the length:
// a GPU block table can reuse the per-block chain as its block identities.
uint64_t PrefixCache::ChainSeed(const Model* model, int64_t max_context) {
  return SplitMix64(reinterpret_cast<uintptr_t>(model) ^ SplitMix64(static_cast<uint64_t>(max_context)));
}

uint64_t PrefixCache::ChainStep(uint64_t h, std::span<const int32_t> block) {
  return SplitMix64(h ^ HashTokens(0x5EED, block));
}

uint64_t PrefixCache::KeyAfter(uint64_t chained, std::span<const int32_t> tail, size_t length) {
  return SplitMix64(SplitMix64(chained ^ HashTokens(0x7A11, tail)) ^ static_cast<uint64_t>(length));
}

std::vector<uint64_t> PrefixCache::Chain(const Model* model, int64_t max_context,
                                         std::span<const int32_t> tokens) const {
  const size_t b = static_cast<size_t>(block_tokens_);
  std::vector<uint64_t> chain;
  chain.reserve(tokens.size() / b + 1);
  chain.push_back(ChainSeed(model, max_context));
  for (size_t i = 0; i + b <= tokens.size(); i += b) {
    chain.push_back(ChainStep(chain.back(), tokens.subspan(i, b)));
  }
  return chain;
}

uint64_t PrefixCache::KeyOf(const std::vector<uint64_t>& chain,
                            std::span<const int32_t> prefix) const {
  const size_t blocks = prefix.size() / static_cast<size_t>(block_tokens_);
  const size_t tail = blocks * static_cast<size_t>(block_tokens_);
  return KeyAfter(chain[blocks], prefix.subspan(tail), prefix.size());
}

uint64_t PrefixCache::Key(const Model* model, int64_t max_context, std::span<const int32_t> tokens) const {
  const size_t b = static_cast<size_t>(block_tokens_);
  uint64_t h = ChainSeed(model, max_context);
  size_t i = 0;
  for (; i + b <= tokens.size(); i += b) h = ChainStep(h, tokens.subspan(i, b));
  return KeyAfter(h, tokens.subspan(i), tokens.size());
}

int64_t PrefixCache::CommonLocked(const Entry& e, const std::vector<uint64_t>& chain,
                                  std::span<const int32_t> tokens) const {
  // Equal chain values: equal blocks up to there (each value covers every
  // block before it); then the tokens of the one block where they part.
  const size_t blocks = std::min(chain.size(), e.chain.size());
  const size_t equal = static_cast<size_t>(
      std::mismatch(chain.begin(), chain.begin() + static_cast<ptrdiff_t>(blocks), e.chain.begin())
          .first -
      chain.begin());
  if (equal == 0) return 0;  // another model or context size
  const std::vector<int32_t>& other = e.snap->tokens;
  const size_t from = (equal - 1) * static_cast<size_t>(block_tokens_);
  const size_t to = std::min({tokens.size(), other.size(), from + static_cast<size_t>(block_tokens_)});
  const auto start = tokens.begin() + static_cast<ptrdiff_t>(from);
  return static_cast<int64_t>(
      std::mismatch(start, tokens.begin() + static_cast<ptrdiff_t>(to),
                    other.begin() + static_cast<ptrdiff_t>(from)).first - tokens.begin());
}

std::shared_ptr<const StateSnapshot> PrefixCache::Lookup(const Model* model, int64_t max_context,
                                                         std::span<const int32_t> tokens, int64_t min_tokens,
                                                         int64_t* shared) {
  if (shared != nullptr) *shared = 0;
  if (!enabled()) return nullptr;
  const std::vector<uint64_t> chain = Chain(model, max_context, tokens);
  std::lock_guard<std::mutex> lock(mu_);
  if (shared != nullptr) *shared = SharedLocked(chain, tokens);
  for (const auto& [len, n] : lengths_) {  // longest first
    if (len > static_cast<int64_t>(tokens.size())) continue;
    if (len <= min_tokens) break;
    const auto prefix = tokens.first(static_cast<size_t>(len));
    const uint64_t key = KeyOf(chain, prefix);
    auto [lo, hi] = by_key_.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      const StateSnapshot& s = *it->second->snap;
      // The hash only finds candidates; the tokens decide (exactness).
      if (s.model != model || s.max_context != max_context || s.tokens.size() != prefix.size() ||
          !std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) {
        continue;
      }
      it->second->shared = true;
      lru_.splice(lru_.begin(), lru_, it->second);
      return lru_.front().snap;
    }
  }
  return nullptr;
}

bool PrefixCache::Contains(const Model* model, int64_t max_context, std::span<const int32_t> tokens) const {
  if (!enabled()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto [lo, hi] = by_key_.equal_range(Key(model, max_context, tokens));
  for (auto it = lo; it != hi; ++it) {
    const StateSnapshot& s = *it->second->snap;
    if (s.model == model && s.max_context == max_context && s.tokens.size() == tokens.size() &&
        std::equal(tokens.begin(), tokens.end(), s.tokens.begin())) {
      return true;
    }
  }
  return false;
}

int64_t PrefixCache::SharedPrefix(const Model* model, int64_t max_context,
                                  std::span<const int32_t> tokens) const {
  if (!enabled()) return 0;
  const std::vector<uint64_t> chain = Chain(model, max_context, tokens);
  std::lock_guard<std::mutex> lock(mu_);
  return SharedLocked(chain, tokens);
}

int64_t PrefixCache::SharedLocked(const std::vector<uint64_t>& chain,
                                  std::span<const int32_t> tokens) const {
  int64_t best = 0;
  for (const Entry& e : lru_) best = std::max(best, CommonLocked(e, chain, tokens));
  return best;
}

uint64_t PrefixCache::ChargeLocked(const StateSnapshot& snap, uint64_t* own) const {
  if (snap.checkpoint == nullptr) return *own = snap.bytes;
  const StateCheckpoint::Footprint f = snap.checkpoint->footprint();
  if (f.block_bytes == 0) return *own = snap.bytes;
  *own = f.own_bytes;
  uint64_t charge = f.own_bytes;
  for (int32_t b : f.shared_blocks) {
    if (block_refs_.find({snap.model, b}) == block_refs_.end()) charge += f.block_bytes;
  }
  return charge;
}

uint64_t PrefixCache::ChargeOf(const StateSnapshot& snap) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t own = 0;
  return ChargeLocked(snap, &own);
}

bool PrefixCache::Insert(std::shared_ptr<const StateSnapshot> snap) {
  if (!enabled() || snap == nullptr || snap->checkpoint == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> chain = Chain(snap->model, snap->max_context, snap->tokens);
  const uint64_t key = KeyOf(chain, snap->tokens);
  auto [lo, hi] = by_key_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    const StateSnapshot& s = *it->second->snap;
    if (s.model == snap->model && s.max_context == snap->max_context && s.tokens == snap->tokens) {
      EraseLocked(it->second);
      break;
    }
  }
  uint64_t own = 0;
  ChargeLocked(*snap, &own);
  const StateCheckpoint::Footprint f = snap->checkpoint->footprint();
  // More than the whole cache on its own: never kept.
  if (own + f.shared_blocks.size() * f.block_bytes > capacity_) return false;
  // Already inside a longer entry: a prefix that more than one sequence has.
  const int64_t n = static_cast<int64_t>(snap->tokens.size());
  bool shared = false;
  for (const Entry& e : lru_) {
    if (static_cast<int64_t>(e.snap->tokens.size()) > n && CommonLocked(e, chain, snap->tokens) == n) {
      shared = true;
      break;
    }
  }
  lru_.push_front(Entry{key, snap, own, shared, std::move(chain)});
  by_key_.emplace(key, lru_.begin());
  ++lengths_[static_cast<int64_t>(snap->tokens.size())];
  bytes_ += own;
  if (f.block_bytes > 0) {
    for (int32_t b : f.shared_blocks) {
      if (block_refs_[{snap->model, b}]++ == 0) bytes_ += f.block_bytes;
    }
  }
  if (bytes_ > capacity_) EvictLocked(capacity_);
  // It may have been the only unpinned entry left to drop; a pinned one that
  // still does not fit (pinned entries fill the cache) is not kept either:
  // the cache never grows past its capacity.
  for (auto [a, b] = by_key_.equal_range(key); a != b; ++a) {
    if (a->second->snap != snap) continue;
    if (bytes_ <= capacity_) return true;
    EraseLocked(a->second);
    return false;
  }
  return false;
}

void PrefixCache::EraseLocked(List::iterator it) {
  auto [lo, hi] = by_key_.equal_range(it->key);
  for (auto k = lo; k != hi; ++k) {
    if (k->second == it) {
      by_key_.erase(k);
      break;
    }
  }
  auto len = lengths_.find(static_cast<int64_t>(it->snap->tokens.size()));
  if (len != lengths_.end() && --len->second == 0) lengths_.erase(len);
  bytes_ -= it->own;
  const StateCheckpoint::Footprint f = it->snap->checkpoint->footprint();
  if (f.block_bytes > 0) {
    for (int32_t b : f.shared_blocks) {
      auto ref = block_refs_.find({it->snap->model, b});
      if (ref != block_refs_.end() && --ref->second == 0) {
        block_refs_.erase(ref);
        bytes_ -= f.block_bytes;
      }
    }
  }
  lru_.erase(it);
}

uint64_t PrefixCache::EvictLocked(uint64_t target_bytes) {
  uint64_t freed = 0;
  for (const List::iterator victim : Victims(lru_, nullptr)) {
    if (bytes_ <= target_bytes) break;
    const uint64_t before = bytes_;
    EraseLocked(victim);
    freed += before - bytes_;
  }
  return freed;
}

uint64_t PrefixCache::EvictTo(uint64_t target_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return EvictLocked(target_bytes);
}

bool PrefixCache::EvictOne(const Model* model) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto victims = Victims(lru_, model);
  if (victims.empty()) return false;
  EraseLocked(victims.front());
  return true;
}

int64_t PrefixCache::EntriesOf(const Model* model) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const Entry& e : lru_) n += e.snap->model == model ? 1 : 0;
  return n;
}

uint64_t PrefixCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t PrefixCache::BytesAndEvictable(std::vector<uint64_t>* evictable) const {
  std::lock_guard<std::mutex> lock(mu_);
  evictable->clear();
  // EvictLocked's order and its frees: a shared block is freed with the last
  // entry that holds it.
  std::map<BlockId, int64_t> refs = block_refs_;
  for (const auto& it : Victims(lru_, nullptr)) {
    uint64_t freed = it->own;
    const StateCheckpoint::Footprint f = it->snap->checkpoint->footprint();
    if (f.block_bytes > 0) {
      for (int32_t b : f.shared_blocks) {
        auto ref = refs.find({it->snap->model, b});
        if (ref != refs.end() && --ref->second == 0) freed += f.block_bytes;
      }
    }
    evictable->push_back(freed);
  }
  return bytes_;
}

int64_t PrefixCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(lru_.size());
}

}  // namespace strata
