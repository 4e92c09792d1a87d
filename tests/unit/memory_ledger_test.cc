#include "memory/memory_ledger.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "memory/state_bytes.h"
#include "model/model.h"

namespace strata {
namespace {

ModelInfo Info(uint64_t per_token, uint64_t per_sequence) {
  ModelInfo info;
  info.state_bytes_per_token = per_token;
  info.state_bytes_per_sequence = per_sequence;
  return info;
}

TEST(StateBytesTest, AttentionGrowsWithTokensRecurrentDoesNot) {
  const ModelInfo info = Info(96, 7000);
  EXPECT_EQ(StateUseOf(info, 0), (StateUse{0, 7000}));
  EXPECT_EQ(StateUseOf(info, 131), (StateUse{96 * 131, 7000}));
  EXPECT_EQ(StateUseOf(info, -5), (StateUse{0, 7000}));
  EXPECT_EQ(StateBytes(info, 131), 96u * 131 + 7000);
}

TEST(MemoryLedgerTest, AnAccountMovesBetweenTiersAndTheBudget) {
  MemoryLedger ledger;
  {
    LedgerAccount a(&ledger);
    a.Set({300, 50}, Residence::kResident, /*budgeted=*/false);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{300, 50, 0, 0}));
    a.Set({300, 50}, Residence::kResident, /*budgeted=*/true);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{300, 50, 0, 350}));
    EXPECT_EQ(ledger.active(), 350u);
    // A preempted state leaves the device and the budget for the host tier.
    a.Set({300, 50}, Residence::kSwapped, /*budgeted=*/true);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{0, 0, 350, 0}));
    a.Set({420, 50}, Residence::kResident, /*budgeted=*/true);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{420, 50, 0, 470}));
    EXPECT_EQ(a.share(), ledger.Totals());
    // Shrinking (a reset or a restore to a shorter prefix) takes bytes out.
    a.Set({10, 50}, Residence::kResident, /*budgeted=*/true);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{10, 50, 0, 60}));
  }
  // The destroyed account's share left with it.
  EXPECT_EQ(ledger.Totals(), MemoryTotals{});
}

TEST(MemoryLedgerTest, TotalsAreTheSumOfTheLiveAccounts) {
  MemoryLedger ledger;
  LedgerAccount a(&ledger), b(&ledger);
  a.Set({1000, 64}, Residence::kResident, true);
  b.Set({77, 64}, Residence::kSwapped, true);
  EXPECT_EQ(ledger.Totals(), (MemoryTotals{1000, 64, 141, 1064}));
  {
    LedgerAccount c(&ledger);
    c.Set({5, 64}, Residence::kResident, false);
    EXPECT_EQ(ledger.Totals(), (MemoryTotals{1005, 128, 141, 1064}));
  }
  EXPECT_EQ(ledger.Totals(), (MemoryTotals{1000, 64, 141, 1064}));
}

TEST(MemoryLedgerTest, AccountsOnManyThreadsSumExactly) {
  MemoryLedger ledger;
  constexpr int kThreads = 8, kSteps = 2000;
  std::vector<std::unique_ptr<LedgerAccount>> accounts;
  for (int t = 0; t < kThreads; ++t) accounts.push_back(std::make_unique<LedgerAccount>(&ledger));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 1; i <= kSteps; ++i) {
        const Residence where = i % 3 == 0 ? Residence::kSwapped : Residence::kResident;
        accounts[t]->Set({static_cast<uint64_t>(i * (t + 1)), 8}, where, i % 2 == 0);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  MemoryTotals want;
  for (const auto& a : accounts) {
    want.attention += a->share().attention;
    want.recurrent += a->share().recurrent;
    want.swapped += a->share().swapped;
    want.active += a->share().active;
  }
  // The last step of each thread: i = 2000, resident and budgeted.
  EXPECT_EQ(want.swapped, 0u);
  EXPECT_EQ(want.attention, static_cast<uint64_t>(kSteps) * (kThreads * (kThreads + 1) / 2));
  EXPECT_EQ(ledger.Totals(), want);
  accounts.clear();
  EXPECT_EQ(ledger.Totals(), MemoryTotals{});
}

}  // namespace
}  // namespace strata
