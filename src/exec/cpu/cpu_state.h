// A sequence's state on the CPU, laid out from the layers' state regions:
// fixed regions (recurrent matrices, conv tails) as zero-initialised fp32
// arrays of the state's own; per-token regions (attention rows) in blocks of
// kStateBlockRows tokens from the executor's HostBlockPool, one block holding
// every per-token region's rows for its tokens. Rows are only ever appended,
// so a block below num_tokens() is never written again: a clone (a fork, a
// checkpoint, a restore) shares the full blocks and copies only the fixed
// regions and the partial last block. Plus the scratch the executor carves
// per slice (never cloned). Owned by a session; not thread-safe.
#ifndef STRATA_EXEC_CPU_CPU_STATE_H_
#define STRATA_EXEC_CPU_CPU_STATE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/cpu/cpu_layer.h"
#include "memory/host_block_pool.h"
#include "model/model.h"

namespace strata::exec {

// Where each region lives, made once by the executor from its layers'.
struct CpuStateLayout {
  explicit CpuStateLayout(std::vector<StateRegion> regions);

  std::vector<StateRegion> regions;
  // Per-token regions: the region's first float inside a block.
  std::vector<int64_t> block_offset;
  int64_t block_floats = 0;  // a block: kStateBlockRows rows of every per-token region
  uint64_t fixed_bytes = 0;

  // What SaveContents writes, for Model::SavedStateLayout: the block size and
  // each region's kind and fp32 count.
  std::string Describe() const;
};

class CpuSequenceState final : public SequenceState {
 public:
  // `layout` (the executor's) outlives the state; `blocks` is null when the
  // layout has no per-token region.
  CpuSequenceState(const Model* owner, const CpuStateLayout* layout,
                   std::shared_ptr<HostBlockPool> blocks, int64_t max_tokens);
  ~CpuSequenceState() override;

  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override;
  void Reset() override;
  // The full blocks, shared; the fixed regions and a partial last block, own.
  StateFootprint footprint() const override;
  // The token count (8 bytes, little-endian), then every region's fp32
  // values in layout order: a per-token region's rows in token order, a
  // fixed region whole.
  Status SaveContents(std::vector<uint8_t>* out) const override;
  Status LoadContents(std::span<const uint8_t> bytes) override;

  const Model* owner() const { return owner_; }
  int64_t max_tokens() const { return max_tokens_; }
  // Blocks for `tokens` rows of every per-token region (rows so far kept).
  void ReserveRows(int64_t tokens);
  void Advance(int64_t tokens) { tokens_ += tokens; }
  // Views of every region, in layout order, valid until the next ReserveRows
  // or Reset.
  std::vector<RegionView> Views();
  // `bytes` of 64-byte aligned scratch; grows the buffer only when needed.
  void* Scratch(size_t bytes);

 private:
  // Row `t` of per-token region `region`, in the state's blocks.
  float* RowOf(size_t region, int64_t t) const {
    return block_data_[static_cast<size_t>(t >> kStateBlockShift)] + layout_->block_offset[region] +
           (t & (kStateBlockRows - 1)) * layout_->regions[region].floats;
  }

  const Model* owner_;
  const CpuStateLayout* layout_;
  std::shared_ptr<HostBlockPool> pool_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> fixed_;  // per layout entry; empty for per-token ones
  std::vector<int32_t> block_ids_;          // in token order
  std::vector<float*> block_data_;          // block_ids_' storage
  std::vector<uint8_t> scratch_;
};

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_STATE_H_
