// Preemption and copy-on-write prefix blocks of the GPU executors
// (SequenceState::MoveToHost / MoveToDevice, Clone), on the small fixtures of
// each: kimi_g1 (KDA + MLA), dsv32_g1 (DSA: latent rows + indexer keys, no
// recurrent slot), qwen3next_a (GDN + GQA), strata_hybrid_g1 (KDA + DSA).
// For each:
//   * a state prefilled with N tokens moved to the host gives its slot and
//     every block back to the pools; moved back, its decode logits are
//     bit-identical to a state that never left (the same kernels on the same
//     contents; the blocks it gets back are other ones, so the block table
//     must be re-uploaded);
//   * while on the host it is refused (FailedPrecondition) by Forward,
//     DecodeBatch, DecodeBatchSample and FillContextForBenchmark, and it can
//     be Reset, cloned and destroyed;
//   * MoveToDevice without a free slot is ResourceExhausted and leaves it on
//     the host, unchanged;
//   * Clone after a prefill takes one slot and at most one block (the partial
//     tail; full blocks are shared), and both states, continued with
//     different tokens (single steps and multi-token prefill inside the
//     partial block), equal independent runs bit for bit, also after the
//     source is destroyed;
//   * a Checkpoint holds no sequence slot: a checkpoint slot and, for a
//     partial last block, one block (device copies), or with every
//     checkpoint slot taken both in host memory; with every sequence slot
//     taken by live states it still succeeds;
//     restored into a used state (its own slot reused, no other taken) or a
//     new one, the state continues bit-identically to the source, any number
//     of times, also after the source is destroyed, and everything returns
//     to the pools when the last holder goes.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda/layer_executor.h"
#include "harness/parity.h"
#include "model/model.h"

namespace strata {
namespace {

using cuda_exec::LayerExecutor;
using cuda_exec::PoolUsage;

constexpr int64_t kBlock = 64;

class CudaStateOffload : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    parity::LoadFixture(GetParam(), &fixture_);
    ASSERT_GE(fixture_.prompt.size(), 140u);
    model_ = parity::LoadCuda(fixture_.dir, parity::CudaOptions());
    ASSERT_NE(model_, nullptr);
    exec_ = dynamic_cast<const LayerExecutor*>(model_.get());
    ASSERT_NE(exec_, nullptr) << "not a CUDA executor";
    vocab_ = model_->info().vocab_size;
  }

  PoolUsage Usage() const { return exec_->Usage(); }
  bool HasBlocks() const { return Usage().blocks_total > 0; }

  // Tokens: the prompt's first n, then `more` (other token ids than the
  // prompt's continuation where `shift` ≠ 0).
  std::vector<int32_t> Continuation(int64_t from, int64_t m, int32_t shift) const {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t p = fixture_.prompt[static_cast<size_t>(from + i)];
      t.push_back(static_cast<int32_t>((p + shift) % vocab_));
    }
    return t;
  }

  std::unique_ptr<SequenceState> Prefilled(int64_t n) const {
    auto st = model_->NewState(static_cast<int64_t>(fixture_.prompt.size()) + 64);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return nullptr;
    const Status s =
        model_->Forward(std::span(fixture_.prompt.data(), static_cast<size_t>(n)), **st, nullptr,
                        false);
    EXPECT_TRUE(s.ok()) << s;
    return std::move(*st);
  }

  // One Forward per token of `tokens` on `st`: the logits of each step.
  std::vector<float> Decode(SequenceState& st, const std::vector<int32_t>& tokens) const {
    std::vector<float> out(tokens.size() * static_cast<size_t>(vocab_));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const Status s = model_->Forward(std::span(tokens.data() + i, 1), st,
                                       out.data() + i * static_cast<size_t>(vocab_), false);
      EXPECT_TRUE(s.ok()) << "step " << i << ": " << s;
      if (!s.ok()) break;
    }
    return out;
  }

  // All logits of one multi-token Forward.
  std::vector<float> Prefill(SequenceState& st, const std::vector<int32_t>& tokens) const {
    std::vector<float> out(tokens.size() * static_cast<size_t>(vocab_));
    const Status s = model_->Forward(tokens, st, out.data(), /*all_logits=*/true);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // N tokens of prefill, then `tokens` decoded, on a fresh state.
  std::vector<float> Independent(int64_t n, const std::vector<int32_t>& tokens,
                                 bool as_prefill) const {
    std::unique_ptr<SequenceState> st = Prefilled(n);
    if (st == nullptr) return {};
    return as_prefill ? Prefill(*st, tokens) : Decode(*st, tokens);
  }

  static void ExpectBitIdentical(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    ASSERT_FALSE(a.empty()) << what;
    size_t differ = 0, first = a.size();
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
        if (differ++ == 0) first = i;
      }
    }
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size()
                          << " logits differ, the first at " << first << " (" << a[first]
                          << " vs " << b[first] << ")";
  }

  parity::Fixture fixture_;
  std::unique_ptr<Model> model_;
  const LayerExecutor* exec_ = nullptr;
  int64_t vocab_ = 0;
};

// The executor itself must be reproducible for "bit-identical" to mean
// anything: two fresh states fed the same tokens give the same bits.
TEST_P(CudaStateOffload, TheExecutorIsReproducible) {
  const std::vector<int32_t> next = Continuation(100, 8, 0);
  ExpectBitIdentical(Independent(100, next, false), Independent(100, next, false),
                     "two independent runs");
}

TEST_P(CudaStateOffload, RoundTripFreesThePoolsAndDecodesBitIdentically) {
  const int64_t n = 100;  // one full block and a partial one
  const std::vector<int32_t> next = Continuation(n, 8, 0);
  const std::vector<float> want = Independent(n, next, false);

  std::unique_ptr<SequenceState> st = Prefilled(n);
  ASSERT_NE(st, nullptr);
  const PoolUsage before = Usage();
  EXPECT_FALSE(st->on_host());
  ASSERT_TRUE(st->MoveToHost().ok());
  EXPECT_TRUE(st->on_host());
  EXPECT_EQ(st->num_tokens(), n);
  const PoolUsage away = Usage();
  EXPECT_EQ(away.slots_free, before.slots_free + 1);
  if (HasBlocks()) {
    EXPECT_EQ(away.blocks_free, before.blocks_free + (n + kBlock - 1) / kBlock);
  }
  EXPECT_TRUE(st->MoveToHost().ok());  // already there: nothing to do
  EXPECT_EQ(Usage().slots_free, away.slots_free);

  // Something else uses the freed blocks meanwhile (and overwrites them).
  {
    std::unique_ptr<SequenceState> other = Prefilled(n);
    ASSERT_NE(other, nullptr);
  }
  const Status back = st->MoveToDevice();
  ASSERT_TRUE(back.ok()) << back;
  EXPECT_FALSE(st->on_host());
  EXPECT_EQ(Usage().slots_free, before.slots_free);
  EXPECT_EQ(Usage().blocks_free, before.blocks_free);
  ExpectBitIdentical(Decode(*st, next), want, "decode after MoveToHost + MoveToDevice");
}

TEST_P(CudaStateOffload, RoundTripWithBatchedDecodeMatchesTheSameBatchWithoutIt) {
  // Two sequences decoded together; one of them made the round trip first.
  const int64_t n1 = 70, n2 = 128;
  const std::vector<int32_t> tokens = {fixture_.prompt[static_cast<size_t>(n1)],
                                       fixture_.prompt[static_cast<size_t>(n2)]};
  auto run = [&](bool round_trip) {
    std::unique_ptr<SequenceState> a = Prefilled(n1), b = Prefilled(n2);
    EXPECT_TRUE(a != nullptr && b != nullptr);
    if (a == nullptr || b == nullptr) return std::vector<float>{};
    if (round_trip) {
      EXPECT_TRUE(b->MoveToHost().ok());
      EXPECT_TRUE(b->MoveToDevice().ok());
    }
    std::vector<float> out(static_cast<size_t>(4 * vocab_));
    std::vector<SequenceState*> both = {a.get(), b.get()};
    for (int step = 0; step < 2; ++step) {
      const Status s = model_->DecodeBatch(tokens, both, out.data() + step * 2 * vocab_);
      EXPECT_TRUE(s.ok()) << s;
    }
    return out;
  };
  ExpectBitIdentical(run(true), run(false), "DecodeBatch after a round trip");
}

TEST_P(CudaStateOffload, HostResidentStatesAreRefusedButCanBeResetClonedAndDestroyed) {
  std::unique_ptr<SequenceState> st = Prefilled(70);
  ASSERT_NE(st, nullptr);
  ASSERT_TRUE(st->MoveToHost().ok());
  const int32_t one = fixture_.prompt[70];
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->Forward(std::span(&one, 1), *st, nullptr, false)));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(model_->Forward(fixture_.prompt, *st, nullptr, false)));
  SequenceState* rows[1] = {st.get()};
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->DecodeBatch(std::span(&one, 1), rows, nullptr)));
  int32_t out = -1;
  const std::vector<DecodeSampling> greedy(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      model_->DecodeBatchSample(std::span(&one, 1), rows, greedy, &out)));
  EXPECT_EQ(st->num_tokens(), 70);

  // A clone of a host-resident state is host-resident too and holds no slot.
  const PoolUsage before = Usage();
  std::unique_ptr<SequenceState> copy = st->Clone();
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->on_host());
  EXPECT_EQ(copy->num_tokens(), 70);
  EXPECT_EQ(Usage().slots_free, before.slots_free);
  ASSERT_TRUE(copy->MoveToDevice().ok());
  const std::vector<int32_t> next = Continuation(70, 4, 0);
  ExpectBitIdentical(Decode(*copy, next), Independent(70, next, false),
                     "clone of a host-resident state, moved to the device");

  // Reset on the host: an empty sequence, back on the device like a new one.
  st->Reset();
  EXPECT_EQ(st->num_tokens(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->FillContextForBenchmark(*st, 8, 1)) ||
              absl::IsUnimplemented(model_->FillContextForBenchmark(*st, 8, 1)));
  ASSERT_TRUE(st->MoveToDevice().ok());
  const std::vector<int32_t> prompt(fixture_.prompt.begin(), fixture_.prompt.begin() + 40);
  auto fresh = model_->NewState(64);
  ASSERT_TRUE(fresh.ok());
  ExpectBitIdentical(Prefill(*st, prompt), Prefill(**fresh, prompt), "Reset on the host");

  // Destroying a host-resident state gives nothing back (it holds nothing).
  std::unique_ptr<SequenceState> gone = Prefilled(30);
  ASSERT_NE(gone, nullptr);
  ASSERT_TRUE(gone->MoveToHost().ok());
  const PoolUsage held = Usage();
  gone.reset();
  EXPECT_EQ(Usage().slots_free, held.slots_free);
  EXPECT_EQ(Usage().blocks_free, held.blocks_free);
}

TEST_P(CudaStateOffload, MoveToDeviceWithoutRoomIsResourceExhaustedAndChangesNothing) {
  LoadOptions o = parity::CudaOptions();
  o.max_sequences = 2;
  std::unique_ptr<Model> small = parity::LoadCuda(fixture_.dir, o);
  ASSERT_NE(small, nullptr);
  auto a = small->NewState(256);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(small->Forward(std::span(fixture_.prompt.data(), 90), **a, nullptr, false).ok());
  ASSERT_TRUE((*a)->MoveToHost().ok());
  auto b = small->NewState(256), c = small->NewState(256);
  ASSERT_TRUE(b.ok() && c.ok());
  const Status full = (*a)->MoveToDevice();
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_TRUE((*a)->on_host());
  EXPECT_EQ((*a)->num_tokens(), 90);
  c->reset();
  ASSERT_TRUE((*a)->MoveToDevice().ok());
  EXPECT_FALSE((*a)->on_host());
  b->reset();  // room for the reference state
  // Continues exactly like a state of the same model that never moved.
  auto ref = small->NewState(256);
  ASSERT_TRUE(ref.ok());
  ASSERT_TRUE(small->Forward(std::span(fixture_.prompt.data(), 90), **ref, nullptr, false).ok());
  std::vector<float> x(static_cast<size_t>(vocab_)), y(static_cast<size_t>(vocab_));
  ASSERT_TRUE(small->Forward(std::span(fixture_.prompt.data() + 90, 1), **a, x.data(), false).ok());
  ASSERT_TRUE(
      small->Forward(std::span(fixture_.prompt.data() + 90, 1), **ref, y.data(), false).ok());
  ExpectBitIdentical(x, y, "after a refused and then granted MoveToDevice");
}

// Clone at a partial block (n = 100) and at a block boundary (n = 128).
TEST_P(CudaStateOffload, CloneSharesFullBlocksAndBothSidesMatchIndependentRuns) {
  for (int64_t n : {int64_t{100}, int64_t{128}}) {
    SCOPED_TRACE("prefill " + std::to_string(n));
    const std::vector<int32_t> x = Continuation(n, 6, 0), y = Continuation(n, 6, 7);
    const std::vector<float> want_x = Independent(n, x, false);
    const std::vector<float> want_y = Independent(n, y, false);

    std::unique_ptr<SequenceState> src = Prefilled(n);
    ASSERT_NE(src, nullptr);
    const PoolUsage before = Usage();
    std::unique_ptr<SequenceState> copy = src->Clone();
    ASSERT_NE(copy, nullptr);
    const PoolUsage after = Usage();
    EXPECT_EQ(after.slots_free, before.slots_free - 1);
    if (HasBlocks()) {
      // Full blocks are shared; only the partial tail (if any) is copied.
      EXPECT_EQ(before.blocks_free - after.blocks_free, n % kBlock == 0 ? 0 : 1);
    }
    EXPECT_EQ(copy->num_tokens(), n);
    ExpectBitIdentical(Decode(*src, x), want_x, "source continued after Clone");
    ExpectBitIdentical(Decode(*copy, y), want_y, "clone continued with other tokens");
  }
}

TEST_P(CudaStateOffload, CheckpointsHoldNoSlotAndRestoreBitIdenticallyIntoAnyState) {
  for (int64_t n : {int64_t{100}, int64_t{128}}) {
    SCOPED_TRACE("prefill " + std::to_string(n));
    const std::vector<int32_t> x = Continuation(n, 6, 0), y = Continuation(n, 20, 5);
    const std::vector<float> want_x = Independent(n, x, false);
    const std::vector<float> want_y = Independent(n, y, true);
    std::unique_ptr<SequenceState> src = Prefilled(n);
    ASSERT_NE(src, nullptr);
    // Every other slot taken by a live state: the checkpoint needs none.
    std::vector<std::unique_ptr<SequenceState>> hogs;
    while (Usage().slots_free > 0) {
      auto st = model_->NewState(static_cast<int64_t>(fixture_.prompt.size()) + 64);
      ASSERT_TRUE(st.ok()) << st.status();
      hogs.push_back(std::move(*st));
    }
    const PoolUsage before = Usage();
    ASSERT_GT(before.checkpoint_slots_free, 0);
    StatusOr<std::unique_ptr<StateCheckpoint>> cp = model_->Checkpoint(*src);
    ASSERT_TRUE(cp.ok()) << cp.status();
    EXPECT_EQ((*cp)->num_tokens(), n);
    const PoolUsage after = Usage();
    // A checkpoint slot and, for a partial last block, one block of its own;
    // the full blocks are shared.
    EXPECT_EQ(after.slots_free, before.slots_free);
    EXPECT_EQ(after.checkpoint_slots_free, before.checkpoint_slots_free - 1);
    if (HasBlocks()) EXPECT_EQ(before.blocks_free - after.blocks_free, n % kBlock == 0 ? 0 : 1);
    // With every checkpoint slot taken, a checkpoint keeps its slot and
    // partial block in host memory instead: no device room taken at all.
    std::vector<std::unique_ptr<StateCheckpoint>> more;
    while (Usage().checkpoint_slots_free > 0) {
      StatusOr<std::unique_ptr<StateCheckpoint>> c = model_->Checkpoint(*src);
      ASSERT_TRUE(c.ok()) << c.status();
      more.push_back(std::move(*c));
    }
    const PoolUsage full_cp = Usage();
    StatusOr<std::unique_ptr<StateCheckpoint>> host_cp = model_->Checkpoint(*src);
    ASSERT_TRUE(host_cp.ok()) << host_cp.status();
    EXPECT_EQ(Usage().blocks_free, full_cp.blocks_free);
    EXPECT_EQ(Usage().checkpoint_slots_free, 0);
    more.clear();
    // A new state needs a slot, and none is free.
    std::unique_ptr<SequenceState> none;
    EXPECT_TRUE(absl::IsResourceExhausted(model_->Restore(**cp, none)));
    EXPECT_EQ(none, nullptr);
    // Into a used state: its slot is reused; its old blocks go back.
    std::unique_ptr<SequenceState>& used = hogs.back();
    ASSERT_TRUE(model_->Forward(std::span(fixture_.prompt.data(), 70), *used, nullptr, false).ok());
    SequenceState* const same = used.get();
    ASSERT_TRUE(model_->Restore(**cp, used).ok());
    EXPECT_EQ(used.get(), same);
    EXPECT_EQ(used->num_tokens(), n);
    EXPECT_EQ(Usage().slots_free, 0);
    ExpectBitIdentical(Decode(*used, x), want_x, "restored into a used state, decoded");
    // The same from the host-resident checkpoint, into the same state.
    ASSERT_TRUE(model_->Restore(**host_cp, used).ok());
    EXPECT_EQ(used->num_tokens(), n);
    ExpectBitIdentical(Decode(*used, x), want_x, "restored from host memory, decoded");
    ExpectBitIdentical(Decode(*src, x), want_x, "the source after the checkpoint");
    src.reset();
    hogs.pop_back();
    // Into a new state (a slot is free again), after the source is gone and
    // its blocks reused, continued by a prefill inside the partial block.
    {
      std::unique_ptr<SequenceState> scribble = Prefilled(n);
      ASSERT_NE(scribble, nullptr);
    }
    std::unique_ptr<SequenceState> fresh;
    ASSERT_TRUE(model_->Restore(**cp, fresh).ok());
    ASSERT_NE(fresh, nullptr);
    ExpectBitIdentical(Prefill(*fresh, y), want_y, "restored into a new state, prefilled");
    // A checkpoint of another model, or a host-resident state, is refused.
    ASSERT_TRUE(fresh->MoveToHost().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(model_->Checkpoint(*fresh).status()));
    EXPECT_TRUE(absl::IsFailedPrecondition(model_->Restore(**cp, fresh)));
    auto cpu = LoadModel(fixture_.dir);
    ASSERT_TRUE(cpu.ok());
    auto cpu_state = (*cpu)->NewState(8);
    ASSERT_TRUE(cpu_state.ok());
    auto cpu_cp = (*cpu)->Checkpoint(**cpu_state);
    ASSERT_TRUE(cpu_cp.ok());
    std::unique_ptr<SequenceState> target = std::move(hogs.back());
    hogs.pop_back();
    EXPECT_TRUE(absl::IsInvalidArgument(model_->Restore(**cpu_cp, target)));
    target.reset();
    hogs.clear();
    fresh.reset();
    cp->reset();
    host_cp->reset();
    const PoolUsage idle = Usage();
    EXPECT_EQ(idle.slots_free, idle.slots_total);
    EXPECT_EQ(idle.blocks_free, idle.blocks_total);
    EXPECT_EQ(idle.checkpoint_slots_free, idle.checkpoint_slots_total);
  }
}

TEST_P(CudaStateOffload, CheckpointFootprintsNameTheSharedBlocksAndTheirOwnCopies) {
  // What the prefix cache counts (StateCheckpoint::footprint): the full
  // blocks, shared with the state and with a later checkpoint of it, and the
  // slot plus the partial block as the checkpoint's own bytes.
  ASSERT_TRUE(HasBlocks()) << "every fixture of this suite has attention layers";
  const ModelInfo& info = model_->info();
  const uint64_t block_bytes = info.state_bytes_per_token * kBlock;
  std::unique_ptr<SequenceState> st = Prefilled(100);
  ASSERT_NE(st, nullptr);
  auto first = model_->Checkpoint(*st);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(model_->Forward(Continuation(100, 30, 0), *st, nullptr, false).ok());
  auto second = model_->Checkpoint(*st);
  ASSERT_TRUE(second.ok()) << second.status();
  const StateCheckpoint::Footprint a = (*first)->footprint(), b = (*second)->footprint();
  EXPECT_EQ(a.block_bytes, block_bytes);
  EXPECT_EQ(b.block_bytes, block_bytes);
  ASSERT_EQ(a.shared_blocks.size(), 1u);  // 100 tokens: one full block and a partial one
  ASSERT_EQ(b.shared_blocks.size(), 2u);  // 130 tokens: two full blocks and a partial one
  EXPECT_EQ(a.shared_blocks[0], b.shared_blocks[0]);
  EXPECT_EQ(a.own_bytes, info.state_bytes_per_sequence + block_bytes);
  EXPECT_EQ(b.own_bytes, info.state_bytes_per_sequence + block_bytes);
}

TEST_P(CudaStateOffload, PrefillInsideThePartialBlockAfterCloneAndSourceDestroyed) {
  const int64_t n = 100;
  const std::vector<int32_t> x = Continuation(n, 20, 0), y = Continuation(n, 20, 11);
  const std::vector<float> want_x = Independent(n, x, true);
  const std::vector<float> want_y = Independent(n, y, true);
  std::unique_ptr<SequenceState> src = Prefilled(n);
  ASSERT_NE(src, nullptr);
  std::unique_ptr<SequenceState> copy = src->Clone();
  ASSERT_NE(copy, nullptr);
  std::unique_ptr<SequenceState> copy2 = copy->Clone();  // a clone of a clone
  ASSERT_NE(copy2, nullptr);
  ExpectBitIdentical(Prefill(*src, x), want_x, "source prefill after Clone");
  src.reset();  // the shared full block stays with the clones
  {
    std::unique_ptr<SequenceState> scribble = Prefilled(n);  // reuses freed blocks
    ASSERT_NE(scribble, nullptr);
  }
  ExpectBitIdentical(Prefill(*copy, y), want_y, "clone prefill after the source is gone");
  ExpectBitIdentical(Prefill(*copy2, x), want_x, "clone of a clone");
  // Everything back once all holders are gone.
  copy.reset();
  copy2.reset();
  const PoolUsage idle = Usage();
  EXPECT_EQ(idle.slots_free, idle.slots_total);
  EXPECT_EQ(idle.blocks_free, idle.blocks_total);
}

TEST_P(CudaStateOffload, RoundTripOfAStateSharingBlocksWithAClone) {
  const int64_t n = 130;
  const std::vector<int32_t> x = Continuation(n, 5, 0), y = Continuation(n, 5, 3);
  std::unique_ptr<SequenceState> src = Prefilled(n);
  ASSERT_NE(src, nullptr);
  std::unique_ptr<SequenceState> copy = src->Clone();
  ASSERT_NE(copy, nullptr);
  const PoolUsage before = Usage();
  ASSERT_TRUE(src->MoveToHost().ok());
  if (HasBlocks()) {
    // Only its own tail block is freed: the full ones are still the clone's.
    EXPECT_EQ(Usage().blocks_free, before.blocks_free + 1);
  }
  ExpectBitIdentical(Decode(*copy, y), Independent(n, y, false), "clone while the source is away");
  ASSERT_TRUE(src->MoveToDevice().ok());
  ExpectBitIdentical(Decode(*src, x), Independent(n, x, false), "source after its round trip");
}

INSTANTIATE_TEST_SUITE_P(SmallFixtures, CudaStateOffload,
                         ::testing::Values("kimi_g1", "dsv32_g1", "qwen3next_a",
                                           "strata_hybrid_g1"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace strata
