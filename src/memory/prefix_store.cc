#include "memory/prefix_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "memory/prefix_key.h"
#include "memory/state_object.h"

namespace strata {

Status PrefixStore::Publish(const StateSnapshot& snap) {
  if (snap.model == nullptr || snap.checkpoint == nullptr || !Stores(*snap.model)) {
    return OkStatus();
  }
  const ModelFingerprint fp = FingerprintOf(*snap.model);
  const std::string key = ToHex(PrefixKey(fp, snap.tokens));
  if (tier_->Contains(key)) return OkStatus();
  StatusOr<std::vector<uint8_t>> checkpoint = snap.model->SaveCheckpoint(*snap.checkpoint);
  Status st = checkpoint.status();
  if (st.ok()) {
    const std::vector<uint8_t> object = EncodeStateObject(
        fp, {snap.tokens, snap.max_context, snap.logits, *std::move(checkpoint)});
    st = tier_->Put(key, object);
    if (st.ok()) {
      written_.fetch_add(1, std::memory_order_relaxed);
      bytes_written_.fetch_add(object.size(), std::memory_order_relaxed);
    }
  }
  if (!st.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  return st;
}

std::shared_ptr<StateSnapshot> PrefixStore::Fetch(const Model& model, int64_t max_context,
                                                  std::span<const int32_t> target,
                                                  int64_t min_tokens) {
  if (!Stores(model)) return nullptr;
  const ModelFingerprint fp = FingerprintOf(model);
  const std::vector<Sha256Digest> blocks = BlockPrefixKeys(fp, target);
  // Candidates from the longest: the whole target, then each block boundary.
  std::vector<std::pair<size_t, Sha256Digest>> candidates;
  if (target.size() % kPrefixKeyBlock != 0) {
    candidates.push_back({target.size(), PrefixKeyFromBlocks(fp, blocks, target)});
  }
  for (size_t i = blocks.size(); i-- > 0;) candidates.push_back({(i + 1) * kPrefixKeyBlock, blocks[i]});
  for (const auto& [len, digest] : candidates) {
    if (static_cast<int64_t>(len) <= min_tokens) break;
    const std::string key = ToHex(digest);
    std::vector<uint8_t> bytes;
    if (!tier_->Get(key, &bytes).ok()) continue;  // not there (or gone meanwhile)
    bytes_read_.fetch_add(bytes.size(), std::memory_order_relaxed);
    const std::string source = std::string(tier_->name()) + " object " + key.substr(0, 16);
    StatusOr<StoredPrefix> p = DecodeStateObject(bytes, fp, digest, source);
    if (!p.ok()) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      tier_->Erase(key);
      continue;
    }
    // Sessions restore only states of their own capacity (as in memory).
    if (p->max_context != max_context ||
        !std::equal(p->tokens.begin(), p->tokens.end(), target.begin())) {
      continue;
    }
    StatusOr<std::unique_ptr<StateCheckpoint>> cp = model.LoadCheckpoint(p->checkpoint, max_context);
    if (!cp.ok()) {
      if (absl::IsDataLoss(cp.status())) {
        rejected_.fetch_add(1, std::memory_order_relaxed);
        tier_->Erase(key);
        continue;
      }
      errors_.fetch_add(1, std::memory_order_relaxed);  // no room: a miss, the object kept
      break;
    }
    hits_.fetch_add(1, std::memory_order_relaxed);
    hit_tokens_.fetch_add(static_cast<int64_t>(p->tokens.size()), std::memory_order_relaxed);
    return MakeSnapshot(model, max_context, std::move(p->tokens), *std::move(cp),
                        std::move(p->logits));
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

TierStats PrefixStore::stats() const {
  TierStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.hit_tokens = hit_tokens_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.rejected_objects = rejected_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.objects_written = written_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.bytes_held = tier_->bytes();
  return s;
}

}  // namespace strata
