// The GPU executor of a layer list (exec/cuda/cuda_executor.h makes one).
// Per layer (n rows: one prefill slice, or one token of each of B sequences
// at decode):
//   xn = RMSNorm(h += pending); the mixer module adds into h;
//   xn = RMSNorm(h); the feed-forward module adds into h (routed sum pending)
// then logits = lm_head(RMSNorm(h += pending)). The layers of one mixer kind
// with one spec form one module (cuda_mixer.h; its members); modules come in
// the order their first layer appears, and so do their state arrays in the
// StateLayout. Around the stack: states and their slot/block bookkeeping,
// argument checks, the prefill slice loop, the batched decode driver
// (per-step inputs into fixed device buffers, incremental block-table
// upload, one CUDA graph per step shape) with the decode tunings of the
// stack, checkpoints and host offload of states.
//
// Files: layer_executor_cuda.cc (the modules, weights, Setup),
// layer_executor_load_cuda.cc (the memory plan, ModelInfo),
// layer_executor_run_cuda.cc (states, prefill, decode).
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
#include "exec/cuda/cuda_mixer.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/cuda_paged_state.h"
#include "exec/cuda/ffn_cuda.h"
#include "exec/cuda/weight_carver.h"
#include "memory/paged_state_book.h"
#include "model/model.h"

namespace strata {
namespace cuda_exec {

using cuda::bf16;

// Slots and blocks of an executor's pools, as LayerExecutor::Usage reports.
struct PoolUsage {
  int64_t slots_total = 0, slots_free = 0;
  int64_t blocks_total = 0, blocks_free = 0;
  int64_t checkpoint_slots_total = 0, checkpoint_slots_free = 0;
};

class LayerExecutor final : public Model {
 public:
  LayerExecutor() = default;
  ~LayerExecutor() override;

  // Plans, allocates and fills the device memory for `spec` from `weights`
  // (null: random weights made on the device), then runs LoadTimeCheck.
  Status Setup(std::shared_ptr<const WeightStore> weights, exec::ArchSpec spec,
               const LoadOptions& options);

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

  // The decode rows and the prefill's first slice in one eager pass (rows
  // [0, B) decode, then the slice): each mixer runs its decode and its
  // prefill path on its rows, the norms, the feed-forward blocks and the LM
  // head run over all of them. The rest of a chunk longer than a slice
  // follows as a plain prefill. Batch-invariant mode, a batch over
  // max_batch or a one-token chunk make the two calls instead.
  Status DecodeAndPrefill(std::span<const int32_t> tokens, std::span<SequenceState* const> states,
                          std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                          const PrefillPart& prefill) const override;

  // CudaCheckpoint (cuda_paged_state.h): the full blocks shared, the slot and
  // the partial last block copied into a checkpoint slot and a block of its
  // own (device to device, no wait), or to pinned host memory when none is
  // free; no sequence slot held.
  StatusOr<std::unique_ptr<StateCheckpoint>> Checkpoint(const SequenceState& state) const override;
  // Into the same state object: its slot is reused, the checkpoint's full
  // blocks shared, one fresh block taken for a partial last block.
  Status Restore(const StateCheckpoint& checkpoint,
                 std::unique_ptr<SequenceState>& state) const override;

  // Random cache blocks (every block region, region by region, layer by
  // layer, runs of consecutive blocks) and random recurrent slots.
  Status FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                 uint64_t seed) const override;
  int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const override;

  PoolUsage Usage() const;
  // With the FP8 footprint and the modules' counters.
  CudaExecutorStats Stats() const;

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

 private:
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

  // --- the layer stack ---------------------------------------------------
  // Per layer: h += pending, xn = RMSNorm(h); the mixer adds into h;
  // xn = RMSNorm(h); the feed-forward block (ffn_) adds into h and leaves the
  // routed sum pending. The norms before a weight-streaming product may let
  // it launch early (NormEarlyTrigger; the post-attention one only where
  // CudaFfn::PostNormMayTriggerEarly, norm.post_early).
  struct StackLayer {
    float* input_norm = nullptr;  // [D]
    float* post_norm = nullptr;   // [D]
    FfnWeights ffn;
  };
  struct Weights {
    bf16* embed = nullptr;        // [V, D]
    bf16* lm_head = nullptr;      // [V, D] (the embedding when tied)
    float* final_norm = nullptr;  // [D]
    std::vector<StackLayer> layers;
  };
  struct Scratch : StepScratch {
    float* shared = nullptr;   // [rows, D] a gated shared expert's output before its gate
    float* sgate = nullptr;    // [rows, kSharedGateRows] its gate's logits
    bf16* fp8_tile = nullptr;  // [fp8_tile_elems_]: FP8 weight rows for the prefill products
  };
  // Where layer l's mixer is: module `mixer`, member `index`.
  struct Member {
    size_t mixer = 0, index = 0;
  };
  // The rows of one pass: `decode` rows of as many sequences (their inputs
  // in Scratch::step, the step shaped by `v`), then `prefill` rows of one
  // sequence `ps` after its `past` tokens (their ids in Scratch::tokens).
  struct PassRows {
    int64_t decode = 0;
    StepVariant v;
    const CudaSequenceState* ps = nullptr;
    int64_t prefill = 0, past = 0;
    int64_t n() const { return decode + prefill; }
  };
  // Enqueues the embedding (of the decode rows unless v.start_fused) and
  // every layer for the pass's rows (enqueue only, graph-safe). `pending`
  // receives the routed-expert output still to be added to h (or null).
  Status EnqueueLayers(const PassRows& rows, const float** pending) const;
  // Layer `layer`'s mixer on n rows from `row0`: reads xn, adds its output
  // into h. Prefill: `ps` is the sequence and `past` its length before the
  // rows, `v` is {}. Decode: `ps` is null and `v` is DecodeVariant's.
  Status EnqueueMixer(size_t layer, int64_t row0, int64_t n, const CudaSequenceState* ps,
                      int64_t past, const StepVariant& v) const;
  // The variant of a decode step whose longest sequence has max_len tokens
  // (after the step): the largest length bound of the modules (0 when none
  // takes one). Called once per step, under mu_.
  StepVariant DecodeVariant(int64_t max_len) const;

  // --- pieces the passes share ---------------------------------------------
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
  // --- loading (layer_executor_load_cuda.cc) -----------------------------------
  // First in a load after ReadOptions (whose tuning Scope the load holds): makes
  // the visible device LoadOptions::device_index current (an sm_90 part, or
  // Unavailable) and plans `p` from the options, the checkpoint's context
  // and the executor's default prefill slice, with the sampling workspace
  // for a vocabulary of `vocab`. Returns the device's name.
  StatusOr<std::string> BeginLoad(const LoadOptions& options, int64_t vocab,
                                  int64_t config_max_context, int64_t default_slice,
                                  SequencePlan& p);
  // The modules of spec_'s layers (mixers_, members_).
  Status BuildMixers();
  // Which matrices stay FP8 (the FP8 footprint), then the plan's FP8 tile;
  // Unimplemented for FP8 dense matrices in batch-invariant mode.
  Status PlanFp8(const WeightStore* weights);
  // The weight arena and the scratch, on a null Carver to size them, then on
  // the allocation.
  void CarveWeights(WeightCarver& c);
  void CarveScratch(Carver& c);
  Status UploadWeights(const WeightStore& ws, const LoadOptions& options);
  // Random weights; *parameters receives how many elements they hold.
  Status MakeDummyWeights(uint64_t seed, int64_t* parameters);
  // Creates stream_ and blas_ first, so that the free memory planned with is
  // what is really left; gives the block pool what remains of
  // `memory_fraction` of it after the weights, the scratch and p.max_sequences
  // slots (at most what p's sequences can use, none without block arrays);
  // allocates weight_mem_ and runtime_mem_ (the scratch at its start, then
  // each slot array, then each block array), both zeroed before this
  // returns, so that the padding rows of fused matrices read zero; carves
  // them; describes the arrays in layout_ (units: slots, then blocks) and
  // returns the number of blocks. ResourceExhausted saying what does not fit.
  // The state pools are the modules' slot and block arrays.
  StatusOr<int64_t> AllocateMemory(const std::string& device_name, double memory_fraction);
  // info_ on `device_name` once the memory exists: the layer kinds, the
  // stored parameters (of `weights`; 0 for dummy weights), the state bytes
  // from layout_, the plan's context (states cannot exceed it) and its
  // sequences as the limit of live states (the slot pool).
  void DescribeModel(const std::string& device_name, const WeightStore* weights);

  // After load, once the scratch, layout_, stream_ and the pools exist: the
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
    explicit Turn(const LayerExecutor& model);

   private:
    std::lock_guard<std::mutex> lock_;
    tuning::Scope tuned_;
  };

  // --- state of the runtime (set at load) ------------------------------------
  exec::ArchSpec spec_;
  int64_t D_ = 0, V_ = 0;  // spec_'s hidden size and vocabulary
  float eps_ = 0.f;        // spec_'s norm epsilon
  SequencePlan plan_;
  ModelInfo info_;
  // LoadOptions::batch_invariant: every kernel takes its invariant variant
  // (each module's header says what that means for its kernels).
  bool invariant_ = false;
  tuning::Config tuning_;
  FfnDims ffn_dims_;
  size_t moe_ws_ = 0;
  bool separate_lm_head_ = false;
  Fp8Query is_fp8_;  // null: no FP8 weights
  Fp8Footprint fp8_;
  std::vector<std::unique_ptr<CudaMixer>> mixers_;
  std::vector<Member> members_;
  Weights w_;
  Scratch s_;
  MixerFrame mixer_frame_;
  char* h_staging_ = nullptr;  // weight upload staging (pinned)
  StateLayout layout_;
  int device_ = 0;
  mutable bool graphs_enabled_ = true;
  // Forward of one token runs the prefill passes instead of a decode step:
  // set with invariant_, since every module's prefill and decode kernels
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
  CudaFfn ffn_;
  void* weight_mem_ = nullptr;
  void* runtime_mem_ = nullptr;
  std::shared_ptr<PagedStateBook> book_;
  mutable std::mutex mu_;  // one forward pass at a time: scratch and stream are shared
  size_t weight_bytes_ = 0, scratch_bytes_ = 0, state_pool_bytes_ = 0, kv_pool_bytes_ = 0;
  mutable int64_t graph_captures_ = 0, graph_launches_ = 0, eager_steps_ = 0, mixed_steps_ = 0;
  mutable std::string graph_error_;

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
  // ResourceExhausted unless the block pool has room for one more token of
  // each decode row and `prefill_tokens` more of `ps` (null: none).
  Status CheckBlockRoom(std::span<CudaSequenceState* const> decode_rows,
                        const CudaSequenceState* ps, int64_t prefill_tokens) const;
  // Token ids and capacity of decode rows (before any work).
  Status CheckDecodeRows(std::span<const int32_t> tokens,
                         std::span<CudaSequenceState* const> states) const;
  // A decode step's rows into the pinned step inputs and the device block
  // table (their blocks taken first; ResourceExhausted before any change when
  // the pool is short); *max_len: the longest sequence after the step.
  Status StageDecodeRows(std::span<const int32_t> tokens,
                         std::span<CudaSequenceState* const> states, int64_t* max_len) const;
  Status MixedLocked(std::span<const int32_t> tokens, std::span<CudaSequenceState* const> states,
                     std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                     CudaSequenceState& ps, const PrefillPart& p) const;
  Status EnqueueDecode(int64_t batch, const StepVariant& v, bool sample) const;
  Status RunDecodeStep(int64_t batch, const StepVariant& v, bool sample) const;
  // Row b's checks of DecodeBatch / DecodeBatchSample: cs[b] ← states[b].
  Status CheckBatchRow(std::span<SequenceState* const> states, size_t b, const char* what,
                       std::vector<CudaSequenceState*>& cs) const;

  // Pinned host mirrors of the per-step device inputs, and result staging.
  // By default a decode step's kernels use them directly: its first kernel
  // reads h_step_ and h_sampling_, its sampling kernel writes h_sampled_
  // (StepIoInKernels in layer_executor_run_cuda.cc; step.upload=0
  // goes through Scratch::step, sampling and sampled with copies instead).
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
