// PrefixCache: exact prefix caching for hybrid models. An entry is a whole
// restorable sequence state (recurrent matrices, conv tails and attention
// rows together) at a token prefix, keyed by a chain of block hashes and
// verified token by token on lookup, so a hit restores everything or is a
// miss: never attention rows without the recurrent state that goes with them.
//
// An entry holds a StateCheckpoint (Model::Checkpoint): references to the
// shared full attention blocks plus copies of the recurrent state and the
// partial last block (on a GPU in a checkpoint slot, host memory beyond
// them), holding no sequence slot, so cached prefixes never take slots from
// running requests. Entries are shared, immutable StateSnapshots, restored
// into a session's own state (Model::Restore).
//
// Eviction: a prefix that only one sequence had (a prompt's own tail) goes
// before any that several had (one that was hit, or that a longer entry
// already contains: a system prompt, a shared document), each group least
// recently used first, so one-off tails do not push out the prefixes that
// serve many requests.
//
// Bytes: an entry counts its own copies (StateCheckpoint::footprint) and the
// cache counts each shared block once however many entries hold it, so a
// conversation's growing prefixes cost their new blocks, not their whole
// length again; evicting an entry frees its copies and the blocks no other
// entry holds. A checkpoint that shares nothing counts the model's accounting
// of its state (StateSnapshot::bytes). Blocks that live states hold as well
// are counted here and in those states' accounting.
#ifndef STRATA_MEMORY_PREFIX_CACHE_H_
#define STRATA_MEMORY_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "memory/state_bytes.h"
#include "model/model.h"

namespace strata {

// A sequence state frozen at `tokens`: restore with Model::Restore.
// Immutable once made, so it may be shared between the cache, sessions'
// marks and forks.
struct StateSnapshot {
  const Model* model = nullptr;
  int64_t max_context = 0;            // capacity of the state (sessions only restore their own size)
  std::vector<int32_t> tokens;        // the exact prefix the state has consumed
  std::unique_ptr<StateCheckpoint> checkpoint;
  std::vector<float> logits;          // [vocab] after the last token
  uint64_t bytes = 0;                 // the model's accounting of this state
};

// The snapshot of `model`'s state after `tokens` held in `checkpoint`,
// counted by the model's accounting.
std::shared_ptr<StateSnapshot> MakeSnapshot(const Model& model, int64_t max_context,
                                            std::vector<int32_t> tokens,
                                            std::unique_ptr<StateCheckpoint> checkpoint,
                                            std::vector<float> logits);

// Thread-safety: every method is thread-safe.
class PrefixCache {
 public:
  // capacity_bytes 0 disables the cache (Insert keeps nothing).
  PrefixCache(uint64_t capacity_bytes, int32_t block_tokens);

  bool enabled() const { return capacity_ > 0; }
  int32_t block_tokens() const { return block_tokens_; }

  // The longest entry of (model, max_context) whose tokens are a prefix of
  // `tokens` and longer than `min_tokens`; null on a miss. Marks it used.
  // `shared` (optional) receives SharedPrefix(model, max_context, tokens),
  // from the same hashing of `tokens`.
  std::shared_ptr<const StateSnapshot> Lookup(const Model* model, int64_t max_context,
                                              std::span<const int32_t> tokens, int64_t min_tokens,
                                              int64_t* shared = nullptr);

  // Adds `snap` (replacing an entry of the same prefix), then evicts
  // unpinned entries in EvictTo's order until the cache fits its capacity. A
  // snapshot is pinned while anything besides the cache holds it (a
  // session's mark). Returns false when it was not kept (cache off, or it
  // could not fit: the cache never holds more than its capacity, pinned
  // entries included).
  bool Insert(std::shared_ptr<const StateSnapshot> snap);
  // True when an entry of exactly this prefix exists (no LRU update).
  bool Contains(const Model* model, int64_t max_context, std::span<const int32_t> tokens) const;
  // The most leading tokens `tokens` has in common with an entry of (model,
  // max_context), prefix or not (no LRU update): where a prompt parts from
  // one the cache has seen, so a snapshot there serves the next prompt with
  // the same start (a system prompt, a document) whole. Full blocks are
  // compared by their chained hashes (a collision could only misplace a
  // snapshot point: lookups verify every token), so the cost is the
  // entries times the blocks, not the tokens.
  int64_t SharedPrefix(const Model* model, int64_t max_context, std::span<const int32_t> tokens) const;

  // What inserting `snap` would add to bytes() now (its copies and the
  // blocks no entry holds yet).
  uint64_t ChargeOf(const StateSnapshot& snap) const;

  // Drops unpinned entries until bytes() <= target: first those no other
  // sequence has shared (never hit, not inside a longer entry), least
  // recently used first, then the shared ones, least recently used first.
  // Returns the bytes freed.
  uint64_t EvictTo(uint64_t target_bytes);

  // Drops the first unpinned entry of `model` in EvictTo's order; false when it
  // has none (entries of a model with a fixed state pool hold its states).
  bool EvictOne(const Model* model);
  // Entries of `model`, pinned ones included.
  int64_t EntriesOf(const Model* model) const;

  uint64_t bytes() const;
  int64_t entries() const;
  // bytes(), and in `evictable` the bytes each eviction of EvictTo frees, in
  // the order it drops the unpinned entries, read together so the two agree.
  uint64_t BytesAndEvictable(std::vector<uint64_t>* evictable) const;

 private:
  struct Entry {
    uint64_t key;
    std::shared_ptr<const StateSnapshot> snap;
    uint64_t own = 0;  // its copies (the whole state when it shares no blocks)
    // A prefix of more than one sequence: hit, or inside a longer entry when
    // inserted. Evicted only after every entry that is not.
    bool shared = false;
    std::vector<uint64_t> chain;  // Chain() of its tokens
  };
  // A shared block of one model's pool.
  using BlockId = std::pair<const Model*, int32_t>;
  using List = std::list<Entry>;  // front: most recently used

  // The chain's first value, one step (the value after one more full
  // block), and a key from the value after a prefix's full blocks.
  static uint64_t ChainSeed(const Model* model, int64_t max_context);
  static uint64_t ChainStep(uint64_t h, std::span<const int32_t> block);
  static uint64_t KeyAfter(uint64_t chained, std::span<const int32_t> tail, size_t length);
  // The seed of (model, max_context), then the chained hash after each full
  // block of `tokens`: equal values at i mean equal first i blocks (but for
  // a hash collision).
  std::vector<uint64_t> Chain(const Model* model, int64_t max_context,
                              std::span<const int32_t> tokens) const;
  uint64_t Key(const Model* model, int64_t max_context, std::span<const int32_t> tokens) const;
  // Key of `prefix`, a prefix of the tokens whose Chain is `chain`.
  uint64_t KeyOf(const std::vector<uint64_t>& chain, std::span<const int32_t> prefix) const;
  // The leading tokens `tokens` (whose Chain is `chain`) has in common with
  // entry `e`, from the chains, then token by token inside the block where
  // they part; 0 for an entry of another model or context size.
  int64_t CommonLocked(const Entry& e, const std::vector<uint64_t>& chain,
                       std::span<const int32_t> tokens) const;  // requires mu_
  // The most CommonLocked over all entries.
  int64_t SharedLocked(const std::vector<uint64_t>& chain,
                       std::span<const int32_t> tokens) const;  // requires mu_
  uint64_t ChargeLocked(const StateSnapshot& snap, uint64_t* own) const;  // requires mu_
  uint64_t EvictLocked(uint64_t target_bytes);  // requires mu_
  void EraseLocked(List::iterator it);          // requires mu_

  const uint64_t capacity_;
  const int32_t block_tokens_;
  mutable std::mutex mu_;
  List lru_;                                              // guarded by mu_
  std::unordered_multimap<uint64_t, List::iterator> by_key_;  // guarded by mu_
  std::map<int64_t, int64_t, std::greater<int64_t>> lengths_;  // prefix length -> entries; guarded by mu_
  std::map<BlockId, int64_t> block_refs_;  // entries holding each shared block; guarded by mu_
  uint64_t bytes_ = 0;                     // guarded by mu_
};

}  // namespace strata

#endif  // STRATA_MEMORY_PREFIX_CACHE_H_
