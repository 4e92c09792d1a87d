// The BPE merge loop shared by tokenizer.json BPE and tiktoken rank BPE:
// repeatedly merge the adjacent pair with the lowest rank, leftmost first on
// ties, until no adjacent pair has a rank.
#ifndef STRATA_TEXT_BPE_MERGE_H_
#define STRATA_TEXT_BPE_MERGE_H_

#include <cstdint>
#include <queue>
#include <vector>

namespace strata::text {

struct BpeSymbol {
  int32_t id;
  uint32_t begin, end;  // bytes of the piece this symbol covers
};

struct PairMerge {
  int32_t rank = -1;  // < 0: the pair does not merge
  int32_t new_id = -1;
};

// `rank_of(const BpeSymbol& left, const BpeSymbol& right) -> PairMerge`.
template <typename RankFn>
void MergeSymbols(std::vector<BpeSymbol>* syms, RankFn&& rank_of) {
  std::vector<BpeSymbol>& s = *syms;
  const size_t n = s.size();
  if (n < 2) return;
  if (n <= 96) {
    // Short pieces (nearly all): rescan the pair ranks; memmove beats a heap.
    PairMerge ranks_buf[96];
    PairMerge* ranks = ranks_buf;
    size_t m = n;
    for (size_t i = 0; i + 1 < m; ++i) ranks[i] = rank_of(s[i], s[i + 1]);
    while (m > 1) {
      size_t best = m;
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < m; ++i) {
        if (ranks[i].rank >= 0 && ranks[i].rank < best_rank) {
          best_rank = ranks[i].rank;
          best = i;
        }
      }
      if (best == m) break;
      s[best].id = ranks[best].new_id;
      s[best].end = s[best + 1].end;
      s.erase(s.begin() + best + 1);
      for (size_t i = best + 1; i + 1 < m; ++i) ranks[i] = ranks[i + 1];
      --m;
      if (best + 1 < m) ranks[best] = rank_of(s[best], s[best + 1]);
      if (best > 0) ranks[best - 1] = rank_of(s[best - 1], s[best]);
    }
    return;
  }
  // Long pieces: a doubly linked list and a min-heap of candidate pairs keyed
  // by (rank, left position); stale entries are skipped when popped.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    const PairMerge pm = rank_of(s[i], s[i + 1]);
    if (pm.rank >= 0) heap.push({pm.rank, static_cast<int32_t>(i), pm.new_id});
  }
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int32_t r = next[c.pos];
    const PairMerge pm = rank_of(s[c.pos], s[r]);
    if (pm.rank != c.rank || pm.new_id != c.new_id) continue;
    s[c.pos].id = pm.new_id;
    s[c.pos].end = s[r].end;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) {
      const PairMerge l = rank_of(s[prev[c.pos]], s[c.pos]);
      if (l.rank >= 0) heap.push({l.rank, prev[c.pos], l.new_id});
    }
    if (next[c.pos] >= 0) {
      const PairMerge rr = rank_of(s[c.pos], s[next[c.pos]]);
      if (rr.rank >= 0) heap.push({rr.rank, c.pos, rr.new_id});
    }
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) s[w++] = s[i];
  }
  s.resize(w);
}

}  // namespace strata::text

#endif  // STRATA_TEXT_BPE_MERGE_H_
