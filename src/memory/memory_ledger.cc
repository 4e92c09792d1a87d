#include "memory/memory_ledger.h"

namespace strata {

MemoryTotals MemoryLedger::Totals() const {
  return {attention_.load(std::memory_order_relaxed), recurrent_.load(std::memory_order_relaxed),
          swapped_.load(std::memory_order_relaxed), active_.load(std::memory_order_relaxed)};
}

void MemoryLedger::Move(const MemoryTotals& before, const MemoryTotals& after) {
  // Unsigned wrap-around makes after - before the signed difference.
  attention_.fetch_add(after.attention - before.attention, std::memory_order_relaxed);
  recurrent_.fetch_add(after.recurrent - before.recurrent, std::memory_order_relaxed);
  swapped_.fetch_add(after.swapped - before.swapped, std::memory_order_relaxed);
  active_.fetch_add(after.active - before.active, std::memory_order_relaxed);
}

void LedgerAccount::Set(const StateUse& use, Residence where, bool budgeted) {
  MemoryTotals now;
  if (where == Residence::kSwapped) {
    now.swapped = use.total();
  } else {
    now.attention = use.attention;
    now.recurrent = use.recurrent;
    if (budgeted) now.active = use.total();
  }
  if (now == share_) return;
  ledger_->Move(share_, now);
  share_ = now;
}

}  // namespace strata
