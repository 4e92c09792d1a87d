// The contract between the GPU executor and its mixer modules (one per mixer
// kind, src/exec/cuda/*_mixer_cuda.cc). A module holds every layer of its kind
// in a model, its members: their weight views, the scratch they share (the
// layers run one after another), the state arrays they keep (one sub-array
// per member, indexed by sequence slot or by cache block) and their prefill
// and decode enqueue. Modules enqueue only (graph-safe: fixed pointers, host
// values only as shapes) and never allocate.
#ifndef STRATA_EXEC_CUDA_CUDA_MIXER_H_
#define STRATA_EXEC_CUDA_CUDA_MIXER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/arch_spec.h"
#include "exec/cuda/carver.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/cuda_paged_state.h"
#include "exec/cuda/dummy_fill.h"
#include "exec/cuda/tensor_sink.h"
#include "exec/cuda/weight_carver.h"

namespace strata {
namespace cuda_exec {

// The executor's buffers a pass reads and writes, fixed at load.
struct MixerFrame {
  const bf16* xn = nullptr;              // [rows, D] the input norm's output
  float* h = nullptr;                    // [rows, D] residual stream, the mixer adds into it
  const int32_t* step = nullptr;         // [4, max_batch]: tokens | slots | positions | seq_lens
  const int32_t* block_table = nullptr;  // [max_batch + 1, max_blocks]; the last row is prefill's
  int64_t max_batch = 0, max_blocks = 0, max_ctx = 0;

  const int32_t* slots() const { return step + max_batch; }
  const int32_t* positions() const { return step + 2 * max_batch; }
  const int32_t* seq_lens() const { return step + 3 * max_batch; }
  const int32_t* prefill_table() const { return block_table + max_batch * max_blocks; }
};

// One pass of one layer: n rows of one prefill slice of the sequence in
// `slot` after `past` tokens, or one row of each of n sequences at decode
// (slots, positions and lengths in the frame's step rows).
struct MixerPass {
  int64_t n = 0;
  bool decode = false;
  int64_t slot = 0;   // prefill only
  int64_t past = 0;   // prefill only
  int64_t bound = 0;  // decode only: the step's length bound (DecodeLengthBound)
  bool sparse = false;  // decode only: some module's SparseDecode said so for this step
};

// What every module is built with besides its spec.
struct MixerContext {
  int64_t hidden = 0;  // D
  // LoadOptions::batch_invariant: kernels take their invariant variants.
  bool invariant = false;
};

class CudaMixer {
 public:
  explicit CudaMixer(const MixerContext& ctx) : ctx_(ctx) {}
  virtual ~CudaMixer() = default;
  CudaMixer(const CudaMixer&) = delete;
  CudaMixer& operator=(const CudaMixer&) = delete;

  // The layers of this kind, in model order; a member's tensors are under
  // its mixer prefix.
  void AddMember(const std::string& mixer_prefix) { prefixes_.push_back(mixer_prefix); }
  size_t size() const { return prefixes_.size(); }

  // The prefill slice (tokens) this kind runs best at; the executor takes
  // the smallest of its modules' unless LoadOptions says otherwise.
  virtual int64_t PreferredSlice() const = 0;
  // Workspace sizes for plan `p`, before anything is carved.
  virtual void Plan(const SequencePlan& p) {}
  // Weights: what the members share (carved once, before any layer), then
  // member i's (in the layer loop, after the layer's norms).
  virtual void CarveShared(WeightCarver& c) {}
  virtual void CarveMember(size_t i, WeightCarver& c) = 0;
  virtual void CarveScratch(const SequencePlan& p, Carver& c) = 0;
  // State arrays, each with size() layers; after allocation BindPools gets
  // their regions in the same order.
  virtual std::vector<PoolArray> SlotArrays() const { return {}; }
  virtual std::vector<PoolArray> BlockArrays() const { return {}; }
  virtual void BindPools(std::span<const StateRegion> slot_regions,
                         std::span<const StateRegion> block_regions) {}
  // Checkpoint weights, or random ones drawn from `fill` in a fixed order.
  virtual Status UploadShared(const TensorSink& sink) { return OkStatus(); }
  virtual Status UploadMember(size_t i, const TensorSink& sink) = 0;
  virtual Status FillDummyShared(DummyFill& fill) { return OkStatus(); }
  virtual Status FillDummyMember(size_t i, DummyFill& fill) = 0;
  // After every weight is on the device: what the module derives from them.
  virtual Status Finalize(const CudaOps& ops) { return OkStatus(); }
  // The length bound a decode step whose longest sequence has `max_len`
  // tokens runs this module's kernels with (MixerPass::bound), 0 when they
  // take none. The executor captures one decode graph per (batch, largest
  // bound of its modules).
  virtual int64_t DecodeLengthBound(int64_t max_len, int64_t max_ctx) const { return 0; }
  // Whether a decode step whose longest sequence has `max_len` tokens takes
  // this module's sparse path (MixerPass::sparse; one graph per path). Called
  // once per decode step, under the executor's lock, so a module may count
  // the steps here.
  virtual bool SparseDecode(int64_t max_len) const { return false; }
  // How many past tokens a query at context length `context` attends to (0:
  // none grows with the context, a recurrent state); the executor reports
  // the largest as Model::EffectiveAttendedTokens.
  virtual int64_t AttendedTokens(int64_t context) const { return 0; }
  // Member i's mixer for one pass: reads f.xn, adds its output into f.h.
  virtual Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const = 0;
  // Random slot contents of sequence slot `slot` for a benchmark's context
  // (seeds drawn from `next`); the default has no slot state.
  virtual Status FillSlotForBenchmark(int64_t slot, const std::function<uint64_t()>& next,
                                      cudaStream_t stream) const {
    return OkStatus();
  }
  // The module's counters (which path its passes took, what its kernels
  // counted) into the executor's statistics, by name; called under the
  // executor's lock after every pass has finished. ClearCounters zeroes them
  // (after the load-time check, whose passes do not count).
  virtual void AddCounters(std::map<std::string, uint64_t>& counters) const {}
  virtual Status ClearCounters(cudaStream_t stream) { return OkStatus(); }

 protected:
  const std::string& prefix(size_t i) const { return prefixes_[i]; }
  MixerContext ctx_;

 private:
  std::vector<std::string> prefixes_;
};

// The decode length bound of modules that take one: the next power of two
// at or above the longest sequence, at least kMinLengthBucket, at most the
// plan's context (so a graph is captured per bucket, not per length).
constexpr int64_t kMinLengthBucket = 256;
inline int64_t LengthBucket(int64_t max_len, int64_t max_ctx) {
  int64_t b = kMinLengthBucket;
  while (b < max_len) b *= 2;
  return b < max_ctx ? b : max_ctx;
}

// One per module kind, in its own file (gdn_mixer_cuda.cc, ...).
std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::GdnSpec& spec, const MixerContext& ctx);
std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::GqaSpec& spec, const MixerContext& ctx);
std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::KdaSpec& spec, const MixerContext& ctx);
// Unimplemented for MLA shapes the kernels do not take (the rotary kernel's
// head width).
StatusOr<std::unique_ptr<CudaMixer>> MakeCudaMixer(const exec::MlaSpec& spec,
                                                   const MixerContext& ctx);

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_MIXER_H_
