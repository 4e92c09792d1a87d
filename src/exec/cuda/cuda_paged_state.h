// The per-sequence state of the GPU executors (kimi_linear, deepseek_v32,
// qwen3_next) and the device operations on it that do not depend on the
// architecture: each executor describes its pools as a StateLayout (which
// arrays are indexed by sequence slot, which by 64-token cache block) and the
// copies (clone, offload to pinned host memory and back, zeroing a slot) are
// done here, region by region.
//
// Copy-on-write prefix blocks. A cache block holds 64 consecutive token rows
// of every attention layer and is written only when one of its rows is
// appended: prefill and decode write rows [tokens, tokens + n) and nothing
// else, so a block all of whose 64 rows lie below num_tokens() is never
// written again by anyone (the caches are append-only; there is no truncate
// or rollback of a CUDA state: Reset gives every block back, and
// FillContextForBenchmark needs an empty state). Clone therefore shares the
// FULL blocks of its source (a reference count each in the PagedStateBook) and
// copies only the partial tail block and the recurrent slot, so that both
// sides own the one block they will write next. LayerExecutor::EnsureBlocks,
// which every writer calls before enqueueing, checks that invariant (the
// block of row num_tokens() has a count of 1) and refuses with Internal
// otherwise, rather than corrupt another sequence.
#ifndef STRATA_EXEC_CUDA_CUDA_PAGED_STATE_H_
#define STRATA_EXEC_CUDA_CUDA_PAGED_STATE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "memory/paged_state_book.h"
#include "model/model.h"

namespace strata {
namespace cuda_exec {

constexpr int64_t kBlockTokens = 64;  // == cuda::kKvBlockTokens

// One array of a pool: `layers` consecutive sub-arrays of `units` units
// (slots or blocks) of `unit_bytes` bytes each; unit u of layer l starts at
// base + (l·units + u)·unit_bytes.
struct StateRegion {
  char* base = nullptr;
  int64_t layers = 0;
  int64_t units = 0;
  size_t unit_bytes = 0;
  char* At(int64_t layer, int64_t unit) const {
    return base + (static_cast<size_t>(layer * units + unit)) * unit_bytes;
  }
  bool empty() const { return base == nullptr || layers == 0 || unit_bytes == 0; }
};

struct StateLayout {
  std::vector<StateRegion> slot_regions;   // recurrent state, conv tails
  std::vector<StateRegion> block_regions;  // paged attention caches
  // Bytes of one sequence's slot, and of one block id (all layers, all regions).
  size_t SlotBytes() const;
  size_t BlockBytes() const;
  bool has_blocks() const;
};

class LayerExecutor;

// Device copies on `stream` (enqueue only; the caller synchronises).
Status ZeroSlot(const StateLayout& layout, int32_t slot, cudaStream_t stream);
Status CopySlot(const StateLayout& layout, int32_t dst, int32_t src, cudaStream_t stream);
// Block dst[j] ← block src[j] in every block region; runs of consecutive ids
// on both sides go as one copy.
Status CopyBlocks(const StateLayout& layout, std::span<const int32_t> dst,
                  std::span<const int32_t> src, cudaStream_t stream);
// Slot `slot` and blocks `blocks` ↔ `host` (SlotBytes() + blocks·BlockBytes()
// bytes: the slot regions layer by layer, then each block region layer by
// layer, blocks in sequence order).
Status SlotAndBlocksToHost(const StateLayout& layout, int32_t slot, std::span<const int32_t> blocks,
                           char* host, cudaStream_t stream);
Status SlotAndBlocksFromHost(const StateLayout& layout, int32_t slot,
                             std::span<const int32_t> blocks, const char* host,
                             cudaStream_t stream);

// Pinned host memory (cudaMallocHost), freed on destruction.
class PinnedBuffer {
 public:
  static StatusOr<std::unique_ptr<PinnedBuffer>> Create(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PinnedBuffer(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

// A sequence of a GPU executor: a slot and blocks_ (cache blocks in sequence
// order) while on the device; after MoveToHost, their contents in host_
// (slot −1, no blocks). Only the owning executor touches the fields.
class CudaSequenceState final : public SequenceState {
 public:
  CudaSequenceState(const LayerExecutor* owner, std::shared_ptr<PagedStateBook> book, uint64_t id,
                    int32_t slot, int64_t max_tokens)
      : owner_(owner), book_(std::move(book)), id_(id), slot_(slot), max_tokens_(max_tokens) {}
  ~CudaSequenceState() override;
  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override;
  void Reset() override;
  Status MoveToHost() override;
  Status MoveToDevice() override;
  bool on_host() const override { return host_ != nullptr; }

  const LayerExecutor* owner_;
  std::shared_ptr<PagedStateBook> book_;
  uint64_t id_;
  int32_t slot_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  uint64_t generation_ = 0;      // bumped whenever blocks_ is replaced
  std::vector<int32_t> blocks_;  // cache blocks, in sequence order
  // Host-resident contents (MoveToHost): the slot, then host_blocks_ blocks.
  std::unique_ptr<PinnedBuffer> host_;
  int64_t host_blocks_ = 0;
};

// A checkpoint of a CudaSequenceState (Model::Checkpoint). It holds a
// reference to each of the source's full cache blocks (never written again,
// the rule above) and no sequence slot; its recurrent slot and the rows of
// the partial last block are copied either on the device, into a checkpoint
// slot (PagedStateBook) and a block of its own, or, when no checkpoint slot
// or block is free, to pinned host memory (SlotAndBlocksToHost's layout with
// `host_blocks_` = 0 or 1 blocks). Only the owning executor touches the
// fields.
class CudaCheckpoint final : public StateCheckpoint {
 public:
  CudaCheckpoint(const LayerExecutor* owner, std::shared_ptr<PagedStateBook> book)
      : owner_(owner), book_(std::move(book)) {}
  ~CudaCheckpoint() override {
    book_->Release(blocks_);
    book_->Release(tail_);
    book_->GiveCheckpointSlot(slot_);
  }
  int64_t num_tokens() const override { return tokens_; }
  Footprint footprint() const override { return {blocks_, block_bytes_, own_bytes_}; }

  const LayerExecutor* owner_;
  std::shared_ptr<PagedStateBook> book_;
  int64_t tokens_ = 0;
  std::vector<int32_t> blocks_;  // the shared full blocks, in sequence order
  // On the device: the checkpoint slot and the copy of the partial block
  // (0 or 1 blocks of its own). Otherwise slot_ is −1 and host_ holds both.
  int32_t slot_ = -1;
  std::vector<int32_t> tail_;
  std::unique_ptr<PinnedBuffer> host_;
  int64_t host_blocks_ = 0;
  uint64_t block_bytes_ = 0;  // of one block of the pool
  uint64_t own_bytes_ = 0;    // the slot and the partial block, wherever they are
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_PAGED_STATE_H_
