// The host side of the GPU executor (the layer executor,
// exec/cuda/cuda_executor.h): states and their
// slot/block bookkeeping, argument checks, the prefill slice loop, the batched
// decode driver (per-step inputs into fixed device buffers, incremental
// block-table upload, one CUDA graph per step shape), clone / reset / host
// offload of states. An executor derives from it, fills Frame, StateLayout,
// the layer stack (stack_, ffn_) and the runtime members at load, and supplies
// only its mixers (EnqueueMixer) and how a decode step's shape is chosen
// (DecodeVariant); the stack of norms, mixers and feed-forward blocks with its
// decode tunings is this class's (EnqueueLayers), the same for every
// architecture.
//
// Locking: mu_ serialises everything that uses the stream, the scratch and the
// pinned mirrors (one forward pass at a time; see Turn); the PagedStateBook
// has its own lock because states are destroyed without the model's.
//
// Tuning: the executor resolves its tuning::Config at load (ReadOptions)
// and reads its own switches from tuning_; the backend's host functions read
// tuning::Current(), which every Turn (and the load) sets to tuning_, so a
// decode graph is captured with this model's choices.
#ifndef STRATA_EXEC_CUDA_CUDA_EXECUTOR_BASE_H_
#define STRATA_EXEC_CUDA_CUDA_EXECUTOR_BASE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/sampling.h"
#include "base/tuning.h"
#include "exec/arch_spec.h"
#include "exec/cuda/cuda_executor_stats.h"
#include "exec/cuda/cuda_load_helpers.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/cuda_paged_state.h"
#include "exec/cuda/ffn_cuda.h"
#include "memory/paged_state_book.h"
#include "model/model.h"

namespace strata {
namespace cuda_exec {

using cuda::bf16;

// Slots and blocks of an executor's pools, as CudaExecutorBase::Usage reports.
struct PoolUsage {
  int64_t slots_total = 0, slots_free = 0;
  int64_t blocks_total = 0, blocks_free = 0;
  int64_t checkpoint_slots_total = 0, checkpoint_slots_free = 0;
};

class CudaExecutorBase : public Model {
 public:
  ~CudaExecutorBase() override;

  const ModelInfo& info() const override { return info_; }

  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;
  Status DecodeBatch(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                     float* logits) const override;
  Status DecodeBatchSample(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                           std::span<const DecodeSampling> sampling,
                           int32_t* out_tokens) const override;
  // The selection kernel of DecodeBatchSample on the last position's device
  // logits; [vocab] logits are copied to the host only when `logits` is set.
  Status ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                       const DecodeSampling& sampling, int32_t* out_token,
                       float* logits) const override;

  // CudaCheckpoint (cuda_paged_state.h): the full blocks shared, the slot and
  // the partial last block copied into a checkpoint slot and a block of its
  // own (device to device, no wait), or to pinned host memory when none is
  // free; no sequence slot held.
  StatusOr<std::unique_ptr<StateCheckpoint>> Checkpoint(const SequenceState& state) const override;
  // Into the same state object: its slot is reused, the checkpoint's full
  // blocks shared, one fresh block taken for a partial last block.
  Status Restore(const StateCheckpoint& checkpoint,
                 std::unique_ptr<SequenceState>& state) const override;

  // Offered where the executor sets benchmark_fill_ (Model's Unimplemented
  // otherwise): random cache blocks (every block region, region by region,
  // layer by layer, runs of consecutive blocks) and FillSlotForBenchmark.
  Status FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                 uint64_t seed) const override;

  PoolUsage Usage() const;
  CudaExecutorStats ExecutorStats() const;

  // For CudaSequenceState (take mu_ themselves).
  // Clone shares the source's full blocks and copies its partial tail block
  // and slot (cuda_paged_state.h); null when no slot or block is free.
  std::unique_ptr<SequenceState> CloneState(const CudaSequenceState& src) const;
  void ResetState(CudaSequenceState& st) const;
  // Copies the slot and blocks to pinned host memory and gives them back to
  // the pools. No-op when already on the host.
  Status MoveStateToHost(CudaSequenceState& st) const;
  // Takes a slot and blocks again and copies the contents back (bit-exact);
  // ResourceExhausted (nothing changed) when the pools have no room.
  Status MoveStateToDevice(CudaSequenceState& st) const;

 protected:
  CudaExecutorBase() = default;

  // One 2-token prefill and one decode step on a scratch sequence, run once
  // at load: every op sees the model's shapes (a kernel that rejects them
  // says so now, and lazily loaded kernels load before any graph capture).
  // Unimplemented naming the failure (ResourceExhausted and Unavailable pass
  // through as they are); Internal when the logits are not finite.
  Status LoadTimeCheck(int64_t vocab) const;

  // Whether a decode step's input norms (each architecture's EnqueueLayers)
  // and its final norm let the next kernel, a weight-streaming GEMV, launch
  // before their PDL wait (AddRmsNorm's early_trigger; norm.early, same
  // results).
  bool NormEarlyTrigger() const { return tuning_.On(tuning::Key::kNormEarly); }

  // What shapes a decode step beyond its batch size and sampling: the
  // attention length bound (0 when unused) and, for DSA, whether the step is
  // sparse. One CUDA graph is captured per (batch, bound, sparse, sample).
  struct StepVariant {
    int64_t bound = 0;
    bool sparse = false;
    // Set by EnqueueDecode when the step's first kernel has already formed h
    // (the embedding) and xn (the first layer's input norm), see
    // FusedDecodeStart: EnqueueLayers then starts at the first layer's mixer.
    bool start_fused = false;
  };

  // A decode step begins with h = embed[token] and xn = RMSNorm(h) · the
  // first layer's input norm; EnqueueDecode forms both in the step's first
  // kernel together with the input upload (cuda::EmbedRmsNormStart) and
  // passes StepVariant::start_fused, unless step.start_fused=0.
  struct DecodeStart {
    const bf16* embed = nullptr;  // [V, D]
    const float* norm = nullptr;  // [D]
  };
  DecodeStart FusedDecodeStart() const;

  // Sizes and device buffers of the plan that the shared passes use. The
  // executor fills it at load (the pointers are into its scratch/weights).
  struct Frame {
    int64_t max_batch = 0, max_blocks = 0, max_ctx = 0, slice = 0, logits_chunk_rows = 0;
    int64_t D = 0, V = 0;
    float eps = 0.f;
    const bf16* embed = nullptr;  // [V, D]
    const float* final_norm = nullptr;
    const bf16* lm_head = nullptr;   // [V, D]
    int32_t* tokens = nullptr;       // [rows] prefill token ids
    int32_t* step = nullptr;         // [4, max_batch]: tokens | slots | positions | seq_lens
    int32_t* block_table = nullptr;  // [max_batch + 1, max_blocks]; the last row is prefill's
    cuda::GpuSamplingRow* sampling = nullptr;  // [max_batch]
    int32_t* sampled = nullptr;                // [max_batch] (only with step.upload=0)
    float* h = nullptr;                        // [rows, D] residual stream
    bf16* xn = nullptr;                        // [rows, D]
    float* logits = nullptr;                   // [max(max_batch, logits_chunk_rows), V]
    void* sample_ws = nullptr;
    size_t sample_ws_bytes = 0;
  };

  // --- the layer stack ---------------------------------------------------
  // Per layer: h += pending, xn = RMSNorm(h); the mixer adds into h;
  // xn = RMSNorm(h); the feed-forward block (ffn_) adds into h and leaves the
  // routed sum pending. The norms before a weight-streaming product may let
  // it launch early (NormEarlyTrigger; the post-attention one only where
  // CudaFfn::PostNormMayTriggerEarly, norm.post_early).
  struct StackLayer {
    const float* input_norm = nullptr;  // [D]
    const float* post_norm = nullptr;   // [D]
    FfnWeights ffn;
  };
  // Enqueues the embedding (unless v.start_fused) and every layer for n rows
  // (enqueue only, graph-safe). Prefill: `prefill_state` is the sequence and
  // `past` its length before the slice, `v` is {}. Decode: `prefill_state`
  // is null, the rows come from Frame::step and `v` is DecodeVariant's.
  // `pending` receives the routed-expert output still to be added to h (or
  // null).
  Status EnqueueLayers(int64_t n, const int32_t* tokens, const CudaSequenceState* prefill_state,
                       int64_t past, const StepVariant& v, const float** pending) const;
  // --- the executor's own math --------------------------------------------
  // Layer `layer`'s mixer: reads xn, adds its output into h (arguments as
  // for EnqueueLayers).
  virtual Status EnqueueMixer(size_t layer, int64_t n, const CudaSequenceState* prefill_state,
                              int64_t past, const StepVariant& v) const = 0;
  // The variant of a decode step whose longest sequence has max_len tokens
  // (after the step). Called once per step, under mu_.
  virtual StepVariant DecodeVariant(int64_t max_len) const = 0;
  // Random recurrent-slot contents for FillContextForBenchmark, drawing seeds
  // from `next` after the blocks'. Default: none (no slot state).
  virtual Status FillSlotForBenchmark(const CudaSequenceState& st,
                                      const std::function<uint64_t()>& next) const {
    return OkStatus();
  }

  // --- shared pieces the executors use ---------------------------------------
  // y = x·wᵀ (weights [n, k], bf16 or FP8) on stream_, or on `stream`
  // (stream_ or side_): CudaOps::Mm.
  Status Mm(const void* x, cuda::ActType x_type, int64_t ldx, int64_t m, const bf16* w, int64_t n,
            int64_t k, void* y, cuda::ActType y_type, int64_t ldy, float beta,
            float alpha = 1.f) const;
  Status Mm(const void* x, cuda::ActType x_type, int64_t ldx, int64_t m, const Mat& w, int64_t n,
            int64_t k, void* y, cuda::ActType y_type, int64_t ldy, float beta,
            float alpha = 1.f) const;
  Status MmOn(cudaStream_t stream, const void* x, cuda::ActType x_type, int64_t ldx, int64_t m,
              const bf16* w, int64_t n, int64_t k, void* y, cuda::ActType y_type, int64_t ldy,
              float beta, float alpha = 1.f) const;

  // What the layer modules enqueue through (cuda_ops.h): the streams, the
  // cuBLASLt context, the tuning and the FP8 tile, as they are now.
  CudaOps Ops() const;
  // Ops()'s, on this executor's streams (see CudaOps::Branching).
  bool Branching(int64_t n) const;
  Status Fork() const;
  Status Join() const;
  // InvalidArgument for a state of another model, FailedPrecondition for one
  // that is on the host (MoveToHost) until it is moved back.
  Status CheckState(SequenceState* s, CudaSequenceState** out, const char* what) const;
  // Blocks for `tokens` tokens; checks that the block the next row goes to is
  // owned by `st` alone (the copy-on-write invariant, cuda_paged_state.h).
  Status EnsureBlocks(CudaSequenceState& st, int64_t tokens) const;
  Status Sync(const char* what) const;
  // Waits until a decode step's sampling has written `batch` tokens into
  // h_sampled_ (set to −1 before the launch; tokens are ≥ 0), asking the
  // stream now and then so that a failed step returns its error instead of
  // spinning. The step's graph may still be retiring when this returns.
  Status AwaitSampledTokens(int64_t batch) const;
  // Fills frame_ from an executor's geometry, plan, weights and scratch (the
  // three executors name these fields alike).
  template <typename Geometry, typename Plan, typename Weights, typename Scratch>
  void BindFrame(const Geometry& g, const Plan& p, const Weights& w, const Scratch& s,
                 int64_t logits_chunk_rows) {
    Frame& f = frame_;
    f.max_batch = p.max_batch;
    f.max_blocks = p.max_blocks;
    f.max_ctx = p.max_ctx;
    f.slice = p.slice;
    f.logits_chunk_rows = logits_chunk_rows;
    f.D = g.D;
    f.V = g.V;
    f.eps = g.eps;
    f.embed = w.embed;
    f.final_norm = w.final_norm;
    f.lm_head = w.lm_head;
    f.tokens = s.tokens;
    f.step = s.step;
    f.block_table = s.block_table;
    f.sampling = s.sampling;
    f.sampled = s.sampled;
    f.h = s.h;
    f.xn = s.xn;
    f.logits = s.logits;
    f.sample_ws = s.sample_ws;
    f.sample_ws_bytes = p.sample_ws;
  }
  // Fills stack_ and ffn_ from an executor's layers (input_norm, post_norm,
  // is_moe and an FfnWeights `ffn` each) and scratch (xn, h, delta, gu, act,
  // router_logits, moe_ws); `shared` and `shared_gate` only for a gated
  // shared expert.
  template <typename Weights, typename Scratch>
  void BindStack(const Weights& w, const Scratch& s, const FfnDims& dims, size_t moe_ws_bytes,
                 bool batch_invariant, float* shared = nullptr, float* shared_gate = nullptr) {
    stack_.clear();
    for (const auto& layer : w.layers) {
      StackLayer& L = stack_.emplace_back();
      L.input_norm = layer.input_norm;
      L.post_norm = layer.post_norm;
      L.ffn = layer.ffn;
      L.ffn.is_moe = layer.is_moe;
    }
    FfnBuffers b;
    b.xn = s.xn;
    b.h = s.h;
    b.delta = s.delta;
    b.gu = s.gu;
    b.act = s.act;
    b.router_logits = s.router_logits;
    b.shared = shared;
    b.shared_gate = shared_gate;
    b.moe_ws = s.moe_ws;
    b.moe_ws_bytes = moe_ws_bytes;
    ffn_ = CudaFfn(dims, b, batch_invariant);
  }
  // --- loading (cuda_executor_load_cuda.cc) -----------------------------------
  // First in a load after ReadOptions (whose tuning Scope the load holds): makes
  // the visible device LoadOptions::device_index current (an sm_90 part, or
  // Unavailable) and plans `p` from the options, the checkpoint's context
  // and the executor's default prefill slice, with the sampling workspace
  // for a vocabulary of `vocab`. Returns the device's name.
  StatusOr<std::string> BeginLoad(const LoadOptions& options, int64_t vocab,
                                  int64_t config_max_context, int64_t default_slice,
                                  SequencePlan& p);
  // What an executor allocates: its weight arena and scratch, laid out by
  // its carve functions (run once on a null Carver to size them, then on the
  // allocation), and its state pools.
  struct MemoryPlan {
    std::function<void(Carver&)> carve_weights, carve_scratch;
    std::vector<PoolArray> slot_arrays, block_arrays;
  };
  // Creates stream_ and blas_ first, so that the free memory planned with is
  // what is really left; gives the block pool what remains of
  // `memory_fraction` of it after the weights, the scratch and p.max_sequences
  // slots (at most what p's sequences can use, none without block arrays);
  // allocates weight_mem_ and runtime_mem_ (the scratch at its start, then
  // each slot array, then each block array), both zeroed before this
  // returns, so that the padding rows of fused matrices read zero; carves
  // them; describes the arrays in layout_ (units: slots, then blocks) and
  // returns the number of blocks. ResourceExhausted saying what does not fit.
  StatusOr<int64_t> AllocateMemory(const std::string& device_name, const SequencePlan& p,
                                   double memory_fraction, const MemoryPlan& plan);
  // info_ for `spec` on `device_name` once the memory exists: the layer
  // kinds, the stored parameters (of `weights`; 0 for dummy weights), the
  // state bytes from layout_, p's context (states cannot exceed it) and p's
  // sequences as the limit of live states (the slot pool).
  void DescribeModel(const exec::ArchSpec& spec, const std::string& device_name,
                     const WeightStore* weights, const SequencePlan& p);

  // After load, once frame_, layout_, stream_ and the pools exist: the
  // pinned mirrors (plus `extra_pinned` bytes returned in *extra, e.g. the
  // weight-upload staging), the slot/block book and the block-table owners.
  Status InitRuntime(int64_t slots, int64_t checkpoint_slots, int64_t blocks, bool cuda_graphs,
                     size_t extra_pinned, char** extra);
  // First in a load: tuning_ from LoadOptions::options over STRATA_OPTIONS,
  // and batch_invariant (invariant_, prefill_single_tokens_). The load then
  // holds a tuning::Scope on tuning_ for its own launches.
  Status ReadOptions(const LoadOptions& options);

  // Held by every call that uses the stream: mu_, the model's device as the
  // thread's current one, and tuning_ as the thread's tuning::Current().
  class Turn {
   public:
    explicit Turn(const CudaExecutorBase& model);

   private:
    std::lock_guard<std::mutex> lock_;
    tuning::Scope tuned_;
  };

  // --- state of the runtime (set at load) ------------------------------------
  ModelInfo info_;
  // LoadOptions::batch_invariant: every kernel takes its invariant variant
  // (each executor's header says what that means for its mixers).
  bool invariant_ = false;
  tuning::Config tuning_;
  Frame frame_;
  StateLayout layout_;
  int device_ = 0;
  mutable bool graphs_enabled_ = true;
  bool benchmark_fill_ = false;  // FillContextForBenchmark offered
  // Forward of one token runs the prefill passes instead of a decode step:
  // set with invariant_, since every executor's prefill and decode kernels
  // round differently (GDN's recurrent or chunked prefill, KDA's, MLA's), so
  // a prompt cut one token before its end (prefill chunk, prefix-cache block
  // boundary) computes that token as an uncut prompt does.
  bool prefill_single_tokens_ = false;
  cudaStream_t stream_ = nullptr;
  // Created by InitRuntime; see Fork.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ev_ = nullptr;
  cudaEvent_t join_ev_ = nullptr;
  std::unique_ptr<cuda::BlasContext> blas_;
  // Executors with FP8 weights: the prefill products' dequantisation tile.
  bf16* fp8_tile_ = nullptr;
  int64_t fp8_tile_elems_ = 0;
  // The layer stack (EnqueueLayers), set at load.
  std::vector<StackLayer> stack_;
  CudaFfn ffn_;
  void* weight_mem_ = nullptr;
  void* runtime_mem_ = nullptr;
  std::shared_ptr<PagedStateBook> book_;
  mutable std::mutex mu_;  // one forward pass at a time: scratch and stream are shared
  size_t weight_bytes_ = 0, scratch_bytes_ = 0, state_pool_bytes_ = 0, kv_pool_bytes_ = 0;
  mutable int64_t graph_captures_ = 0, graph_launches_ = 0, eager_steps_ = 0;
  mutable std::string graph_error_;

 private:
  Status UploadPrefillTable(const CudaSequenceState& st, int64_t tokens) const;
  // Forward's and ForwardSample's argument checks (before any work).
  Status CheckForward(std::span<const int32_t> tokens, SequenceState& state, const char* what,
                      CudaSequenceState** st) const;
  // One token on the decode path, more on Prefill; with `sampling`, the
  // last position's token is selected on the device into *out_token.
  Status ForwardLocked(std::span<const int32_t> tokens, CudaSequenceState& st, float* logits,
                       bool all_logits, const DecodeSampling* sampling, int32_t* out_token) const;
  Status Prefill(std::span<const int32_t> tokens, CudaSequenceState& st, float* logits,
                 bool all_logits, const DecodeSampling* sampling, int32_t* out_token) const;
  Status DecodeLocked(std::span<const int32_t> tokens, std::span<CudaSequenceState* const> states,
                      float* logits, std::span<const DecodeSampling> sampling,
                      int32_t* out_tokens) const;
  Status EnqueueDecode(int64_t batch, const StepVariant& v, bool sample) const;
  Status RunDecodeStep(int64_t batch, const StepVariant& v, bool sample) const;
  // Row b's checks of DecodeBatch / DecodeBatchSample: cs[b] ← states[b].
  Status CheckBatchRow(std::span<SequenceState* const> states, size_t b, const char* what,
                       std::vector<CudaSequenceState*>& cs) const;

  // Pinned host mirrors of the per-step device inputs, and result staging.
  // By default a decode step's kernels use them directly: its first kernel
  // reads h_step_ and h_sampling_, its sampling kernel writes h_sampled_
  // (StepIoInKernels in cuda_executor_base_cuda.cc; step.upload=0
  // goes through Frame::step, sampling and sampled with copies instead).
  void* pinned_ = nullptr;
  int32_t* h_step_ = nullptr;         // [4, max_batch]
  int32_t* h_block_table_ = nullptr;  // [max_batch + 1, max_blocks]
  cuda::GpuSamplingRow* h_sampling_ = nullptr;
  int32_t* h_sampled_ = nullptr;
  float* h_logits_ = nullptr;  // [max_batch, V]

  // Which (state id, generation, blocks) each device block-table row holds,
  // so a decode step uploads only what changed.
  struct RowOwner {
    uint64_t id = 0, generation = 0;
    int64_t blocks = 0;
  };
  mutable std::vector<RowOwner> row_owner_;
  // Decode graphs by (batch, bound, sparse, sample).
  using GraphKey = std::tuple<int64_t, int64_t, bool, bool>;
  struct GraphEntry {
    int eager_runs = 0;  // the first step of a key runs eagerly (kernel loading)
    cudaGraphExec_t exec = nullptr;
  };
  mutable std::map<GraphKey, GraphEntry> graphs_;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_EXECUTOR_BASE_H_
