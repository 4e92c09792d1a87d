// MemoryLedger: the engine-wide byte counters of sequence state, and
// LedgerAccount, one sequence's share of them. A session owns an account and
// sets it whenever its state grows, moves between tiers or enters or leaves
// the memory budget; the account applies the difference, so the counters are
// always the sum of the live accounts and an account's destruction takes its
// share back out (a session cannot leak bytes into the totals).
#ifndef STRATA_MEMORY_MEMORY_LEDGER_H_
#define STRATA_MEMORY_MEMORY_LEDGER_H_

#include <atomic>
#include <cstdint>

#include "memory/state_bytes.h"

namespace strata {

// Where a sequence's state lives. kResident: in the executor's own memory
// (device memory on a GPU, counted against the budget while active);
// kSwapped: moved out to the host tier by a preemption.
enum class Residence { kResident, kSwapped };

// Ledger totals in bytes.
struct MemoryTotals {
  uint64_t attention = 0;  // resident attention rows
  uint64_t recurrent = 0;  // resident recurrent state
  uint64_t swapped = 0;    // states moved out to the host tier
  uint64_t active = 0;     // resident state of sequences counted against the budget

  uint64_t resident() const { return attention + recurrent; }
  friend bool operator==(const MemoryTotals&, const MemoryTotals&) = default;
};

// Thread-safety: every method is thread-safe (relaxed atomics: the totals
// are a consistent sum only once the accounts stop changing; the scheduler
// reads them for admission, where a momentary skew only delays a decision).
class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  MemoryTotals Totals() const;
  uint64_t active() const { return active_.load(std::memory_order_relaxed); }

 private:
  friend class LedgerAccount;
  // Replaces `before` by `after` in the totals.
  void Move(const MemoryTotals& before, const MemoryTotals& after);

  std::atomic<uint64_t> attention_{0}, recurrent_{0}, swapped_{0}, active_{0};
};

// One sequence's share of a ledger, which must outlive it. Thread-safety:
// not thread-safe; its owner serializes Set (a session does so under the
// engine's discipline: the scheduler while a request runs, the host
// otherwise).
class LedgerAccount {
 public:
  explicit LedgerAccount(MemoryLedger* ledger) : ledger_(ledger) {}
  ~LedgerAccount() { Set({}, Residence::kResident, false); }
  LedgerAccount(const LedgerAccount&) = delete;
  LedgerAccount& operator=(const LedgerAccount&) = delete;

  // Records the state as holding `use` in `where`; `budgeted` counts a
  // resident state against the budget (swapped state never is).
  void Set(const StateUse& use, Residence where, bool budgeted);
  const MemoryTotals& share() const { return share_; }

 private:
  MemoryLedger* const ledger_;
  MemoryTotals share_;
};

}  // namespace strata

#endif  // STRATA_MEMORY_MEMORY_LEDGER_H_
