// The architecture-neutral model interface the engine drives, and the registry
// of architecture adapters (one file per model_type under src/model/models/).
#ifndef STRATA_MODEL_MODEL_H_
#define STRATA_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata {

class ThreadPool;
class WeightStore;

struct ModelInfo {
  std::string architecture;              // model_type, e.g. "kimi_linear"
  int32_t num_layers = 0;
  std::vector<std::string> layer_kinds;  // per layer, e.g. "kda+dense", "mla+moe"
  int64_t num_parameters = 0;            // stored elements
  uint64_t parameter_bytes = 0;          // stored bytes
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int64_t max_context = 0;               // tokens
  uint64_t state_bytes_per_token = 0;    // growing state (attention caches)
  uint64_t state_bytes_per_sequence = 0; // fixed state (recurrent matrices, conv tails)
  int32_t bos_token_id = -1;
  int32_t eos_token_id = -1;
  // Where the model runs: "cpu", or "cuda:<index> <device name>".
  std::string device = "cpu";
  // Empty, or why the model runs somewhere other than requested, e.g.
  // "CUDA requested but no device is visible (...); running on the CPU".
  std::string notice;
  // The tuning entries (base/tuning.h) this model runs with that differ
  // from their defaults, as an options string, e.g. "cuda.pdl=0"; empty when
  // all are defaults. Only the GPU executors have entries that apply; the
  // CPU executors leave it empty.
  std::string tuning;
  // Most SequenceStates that can exist at once (NewState and Clone draw
  // from a fixed pool: LoadOptions::max_sequences on CUDA); 0: no fixed
  // limit (the CPU). The engine admits running requests within it;
  // checkpoints (prefix-cache entries, marks) hold none.
  int64_t max_live_states = 0;
  // Checkpoints (Model::Checkpoint) the executor keeps in device memory
  // (LoadOptions::max_checkpoints on CUDA): beyond them a checkpoint's
  // recurrent state goes to pinned host memory, whose allocation stalls the
  // caller for milliseconds, so the engine keeps its prefix cache within
  // them. 0: no such limit (the CPU).
  int64_t checkpoint_slots = 0;
  // DecodeBatchSample selects tokens on the device for every DecodeSampling
  // row (greedy, temperature, top-k, top-p), so the engine samples there
  // instead of copying [B, vocab] logits to the host. False: only the
  // default (DecodeBatch + host argmax, greedy rows) is available.
  bool device_sampling = false;
  // SHA-256 (hex) identifying what the model computes: config.json's bytes,
  // every tensor's name, dtype and shape, and samples of its data (dummy
  // weights: the seed). Set by LoadModel for models on the CPU (the GPU
  // executor's states cannot be saved yet); saved sessions carry it and load
  // only into a model with the same (ModelFingerprint, engine/session_file.h).
  std::string weights_digest;
};

// What a state or checkpoint keeps alive, for byte accounting: the full
// attention-row blocks it may share with its model's other states and
// checkpoints (ids in the executor's block pool, `block_bytes` each), and the
// bytes of what it holds alone (a recurrent slot, a partial last block).
struct StateFootprint {
  std::span<const int32_t> shared_blocks;
  uint64_t block_bytes = 0;
  uint64_t own_bytes = 0;
};

// Everything one sequence carries between Forward calls (KV caches, recurrent
// states, conv tails). Owned by a session; not thread-safe.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t num_tokens() const = 0;  // tokens consumed so far
  // A copy that continues as this state would; states that page their
  // attention rows share the full blocks with it instead of copying them.
  // Null when there is no room for the copy.
  virtual std::unique_ptr<SequenceState> Clone() const = 0;
  virtual void Reset() = 0;  // back to an empty sequence
  // The default, block_bytes 0, shares nothing: the caller counts the state
  // by the model's accounting (ModelInfo's state bytes).
  virtual StateFootprint footprint() const { return {}; }

  // Saved states. SaveContents appends the state's contents to `out`: every
  // region in the model's layout (Model::SavedStateLayout), a per-token region's
  // rows for the tokens consumed, a fixed region whole. LoadContents makes
  // an empty state hold what `bytes` (SaveContents' output under the same
  // layout) describes, bit-exact; DataLoss naming the offset when they do
  // not fit the layout (the state is then Reset). Unimplemented by default.
  virtual Status SaveContents(std::vector<uint8_t>* out) const;
  virtual Status LoadContents(std::span<const uint8_t> bytes);

  // Preemption. MoveToHost copies whatever the state holds in device memory
  // (attention cache blocks, recurrent-state slot) to host memory and gives
  // the device memory back to the executor's pools; MoveToDevice takes device
  // memory again and copies the contents back, bit-exact. While on the host
  // the state can be destroyed, Reset or cloned, but Forward / DecodeBatch
  // on it fail with FailedPrecondition. MoveToDevice answers
  // ResourceExhausted (nothing changed, still on the host) when the pools
  // have no room; the caller retries later. Both are no-ops where state lives
  // in host memory anyway (the CPU executors: the default).
  virtual Status MoveToHost() { return OkStatus(); }
  virtual Status MoveToDevice() { return OkStatus(); }
  virtual bool on_host() const { return false; }
};

// A sequence state frozen at num_tokens() tokens, made by Model::Checkpoint
// and turned back into live states by Model::Restore: what the prefix cache,
// sessions' marks and turn checkpoints keep. Immutable, so one checkpoint may
// be shared and restored any number of times, from any thread (restores of
// one model are serialised by the model). It holds no sequence slot of a
// fixed state pool: on a GPU its attention rows are references to the full
// cache blocks it shares with the state it was made from (copy-on-write, see
// exec/cuda/cuda_paged_state.h) and its recurrent slot and partial last block
// are copied into a checkpoint slot and a block of its own on the device, or
// to host memory beyond ModelInfo::checkpoint_slots, so checkpoints never
// compete with running sequences for slots. The CPU's is a clone of the state,
// which shares the full blocks of its attention rows (exec/cpu/cpu_state.h).
class StateCheckpoint {
 public:
  virtual ~StateCheckpoint() = default;
  // Tokens the frozen state had consumed; its restores have the capacity of
  // the state it was made from.
  virtual int64_t num_tokens() const = 0;
  // What the checkpoint keeps alive: the attention-row blocks it shares
  // with the state it was made from and with that model's other checkpoints,
  // and the bytes of its own copies. Model::Checkpoint's default reports its
  // clone's (SequenceState::footprint).
  using Footprint = StateFootprint;
  virtual Footprint footprint() const { return {}; }
};

// Where LoadModel puts a model. kCuda and kAuto both take the first CUDA device
// when it is usable (driver, device, enough free memory, kernels that accept
// the model's shapes) and otherwise load on the CPU with ModelInfo::notice
// saying why; they never fail only because the GPU is missing.
enum class Device { kCpu, kCuda, kAuto };

// kAuto: the checkpoint's safetensors. kDummy: config.json only; weights are
// random (made on the device for CUDA) so that a model of a real model's exact
// shapes can be benchmarked without its files. Dummy models compute nonsense.
enum class LoadFormat { kAuto, kDummy };

struct LoadOptions {
  ThreadPool* pool = nullptr;  // null: ThreadPool::Default()
  // Called with a fraction in [0,1]; returning false cancels the load (Cancelled).
  std::function<bool(float)> progress;
  Device device = Device::kCpu;
  // CUDA ordinal for kCuda / kAuto (>= 0).
  int32_t device_index = 0;
  // kCuda only: fail with Unavailable (the reason in the message) instead of
  // falling back to the CPU when the model cannot run on the GPU. The C ABI's
  // STRATA_DEVICE_CUDA is strict; the CLI's --device cuda is not.
  bool require_device = false;
  LoadFormat load_format = LoadFormat::kAuto;
  uint64_t dummy_seed = 0;  // seed of --load-format dummy weights

  // GPU plan (ignored on the CPU). Scratch, graphs and state pools are sized
  // once at load from these; 0 picks the default.
  int64_t max_batch = 0;            // rows of one DecodeBatch step (default 64)
  int64_t max_sequences = 0;        // live SequenceStates (default: max_batch)
  // Checkpoint slots: device room for the recurrent state of that many
  // checkpoints (Model::Checkpoint: prefix-cache entries, marks, turn
  // checkpoints) apart from the live states, copied on the device; a
  // checkpoint beyond them keeps its slot in pinned host memory (slower to
  // make). 0: max_sequences; negative: none.
  int64_t max_checkpoints = 0;
  int64_t max_context_tokens = 0;   // longest state (default: min(model, 131072))
  int64_t prefill_slice_tokens = 0;  // tokens per prefill pass (default 8192)
  double gpu_memory_fraction = 0.92;  // of the free memory at load; the rest of
                                      // the budget after weights and scratch
                                      // becomes the paged attention cache
  bool cuda_graphs = true;          // capture decode steps in CUDA graphs
  // Batch-invariant kernels (GPU; the CPU executors always are): every row's
  // result is bit-identical whatever else shares its call (decode batch size
  // and neighbours) and wherever a prompt is cut into prefill calls (chunk
  // size, prefix-cache restore points), so greedy outputs do not depend on
  // the serving schedule. Costs speed (docs/serving.md, "Exactness on the
  // GPU"); executors that cannot honour it fail the load with Unimplemented.
  bool batch_invariant = false;
  // Tuning registry values for this model, "key=value,key=value" (base/tuning.h,
  // docs/tuning.md), applied over the environment variable STRATA_OPTIONS.
  // Checked on every device: an unknown key or a bad value fails the load
  // with InvalidArgument naming both.
  std::string options;
  // Reads every stored tensor once after the weights are opened (before any
  // upload to a GPU) and fails the load with DataLoss naming the first tensor
  // (in name order) holding a NaN or an infinity, and the element's index. Off
  // by default: it touches every page of the checkpoint. Dummy weights made on
  // the device are not read (they are finite by construction).
  bool check_weights = false;
};

// Per-row token selection for Model::DecodeBatchSample (GPU sampling: greedy
// argmax with ties to the lower id, or temperature / top-k / top-p with a
// Philox stream keyed by (seed, step)).
struct DecodeSampling {
  float temperature = 0.f;  // 0: greedy
  int32_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  uint64_t seed = 0;
  uint64_t step = 0;        // the caller advances it each token
};

// A prefill chunk that rides along a decode step (Model::DecodeAndPrefill).
struct PrefillPart {
  std::span<const int32_t> tokens;  // appended to `state`
  SequenceState* state = nullptr;
  // With `sampling`, the token after the chunk's last position goes to
  // *out_token, selected as ForwardSample selects it.
  const DecodeSampling* sampling = nullptr;
  int32_t* out_token = nullptr;
  float* logits = nullptr;  // null, or [vocab] fp32 of the chunk's last position
};

// Thread-safety: a Model is immutable after load; Forward may run concurrently
// on different SequenceStates.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;

  // A fresh, empty state able to hold up to `max_tokens` tokens.
  virtual StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const = 0;

  // Appends `tokens` to the sequence in `state`. One token with a non-empty state
  // takes the single-token decode path (recurrent KDA, absorbed MLA); more tokens
  // take the chunked prefill path, continuing from the state.
  // `logits`: null for none; otherwise it receives [tokens.size(), vocab] fp32 when
  // `all_logits`, or [vocab] for the last token only.
  // On error the state is unchanged only for argument errors (bad token id,
  // over capacity), which are checked before any work.
  virtual Status Forward(std::span<const int32_t> tokens, SequenceState& state,
                         float* logits, bool all_logits) const = 0;

  // One decode step for B = tokens.size() different sequences: token b is
  // appended to states[b] (each state at most once per call). `logits`: null
  // for none, or [B, vocab] fp32. Same results as B single-token Forward
  // calls; the default does exactly that, the CUDA executor runs the batch as
  // one launch sequence (a CUDA graph per batch size). Argument errors (sizes,
  // token ids, capacity, a state given twice) are checked before any work.
  virtual Status DecodeBatch(std::span<const int32_t> tokens,
                             std::span<SequenceState* const> states, float* logits) const;

  // DecodeBatch followed by token selection, returning one token per row in
  // `out_tokens` [B] instead of the logits (on CUDA the logits never leave the
  // device). The default computes logits with DecodeBatch and supports greedy
  // rows only (Unimplemented otherwise).
  virtual Status DecodeBatchSample(std::span<const int32_t> tokens,
                                   std::span<SequenceState* const> states,
                                   std::span<const DecodeSampling> sampling,
                                   int32_t* out_tokens) const;

  // Forward followed by token selection at the last position: `out_token`
  // receives the token chosen by `sampling` (as DecodeBatchSample chooses a
  // row's), so the first token after a prefill is picked where the logits
  // are. `logits`: null, or [vocab] fp32 of the last position as Forward
  // gives them (for a caller that keeps them, e.g. a prefix-cache entry).
  // The default runs Forward into host memory and supports greedy selection
  // only (Unimplemented otherwise, before any work); the CUDA executor runs
  // the selection on the device and copies [vocab] logits only when asked.
  // Argument errors are Forward's, checked before any work.
  virtual Status ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                               const DecodeSampling& sampling, int32_t* out_token,
                               float* logits) const;

  // DecodeBatchSample on the decode rows and a prefill chunk of another
  // sequence in one call: the step of continuous batching. The GPU executor
  // runs the rows through one pass, so the weights the step reads serve both
  // (its decode rows then run without a CUDA graph). Results are those of
  // DecodeBatchSample followed by ForwardSample (or Forward without
  // `prefill.sampling`) up to the rounding of products over more rows; in
  // batch-invariant mode the GPU executor makes the two calls, bit for bit.
  // `prefill.state` must not be one of `states`. The default makes the two
  // calls in that order, so an error of the prefill's comes after the decode
  // rows ran; the GPU executor checks every argument of both before any work.
  virtual Status DecodeAndPrefill(std::span<const int32_t> tokens,
                                  std::span<SequenceState* const> states,
                                  std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                                  const PrefillPart& prefill) const;

  // Scheduling cost hook: how many earlier tokens one step of `new_tokens`
  // appended to `state` attends to, per attention layer, for the engine's
  // ordering of requests by effective cost. Linear-attention layers do not
  // depend on it (their cost is per token). Default: the context length
  // (dense attention); a sparse executor (DSA) reports its selected-token
  // count instead.
  virtual int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const {
    return state.num_tokens() + new_tokens;
  }

  // A checkpoint of `state` (Model-owned: only this model restores it).
  // ResourceExhausted when there is no room for its copy (host memory, or a
  // fixed pool the default's Clone draws from); FailedPrecondition for a
  // state moved to the host. The default wraps state.Clone().
  virtual StatusOr<std::unique_ptr<StateCheckpoint>> Checkpoint(const SequenceState& state) const;
  // Makes `state` (a state of this model, or null for a new one) hold
  // exactly what `checkpoint` froze, bit-exact: it continues as the state
  // the checkpoint was made from would have. The CUDA executor restores into
  // the same object and reuses its sequence slot, so a restore never needs a
  // second slot; the default replaces it with a clone of the checkpoint's
  // copy. On error `state` is unchanged (but for a device failure during the
  // copy, after which it must be Reset): ResourceExhausted when there is no
  // room (a slot for a null state, cache blocks), InvalidArgument for a
  // checkpoint or state of another model or a state too small for the
  // checkpoint's tokens, FailedPrecondition for a state moved to the host.
  virtual Status Restore(const StateCheckpoint& checkpoint,
                         std::unique_ptr<SequenceState>& state) const;

  // Checkpoints as bytes, the seam saved sessions (and the storage tiers
  // below the executor's memory) copy states through. SavedStateLayout describes
  // the regions SaveCheckpoint writes (their order, kind, element type and
  // size); bytes saved under one layout load only under the same, so
  // callers record it next to the bytes. Empty: checkpoints of this model
  // cannot be saved (SaveCheckpoint and LoadCheckpoint are Unimplemented).
  // LoadCheckpoint: a checkpoint whose restores hold up to `max_tokens`
  // tokens; DataLoss naming the offset when the bytes do not fit the layout,
  // OutOfRange when they hold more than `max_tokens` tokens. The defaults
  // go through SequenceState::SaveContents / LoadContents.
  virtual std::string SavedStateLayout() const { return {}; }
  virtual StatusOr<std::vector<uint8_t>> SaveCheckpoint(const StateCheckpoint& checkpoint) const;
  virtual StatusOr<std::unique_ptr<StateCheckpoint>> LoadCheckpoint(std::span<const uint8_t> bytes,
                                                                    int64_t max_tokens) const;

  // BENCHMARK-ONLY shortcut: makes `state` (empty) hold `num_tokens` tokens of
  // random cache and recurrent-state contents without running prefill, so
  // decode at a long context can be timed quickly. The contents are not those
  // of any token sequence. Unimplemented where not supported (the CPU).
  virtual Status FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                         uint64_t seed) const;
};

using ModelFactory = std::function<StatusOr<std::unique_ptr<Model>>(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options)>;

// Registers an adapter under its model_type; returns true (for static init).
bool RegisterModelArchitecture(const std::string& model_type, ModelFactory factory);
std::vector<std::string> RegisteredArchitectures();

// Reads <dir>/config.json, picks the adapter by model_type, opens the weights
// and builds the model. Errors name the file/field/tensor at fault; an unknown
// model_type lists the supported ones.
StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& model_dir,
                                           const LoadOptions& options = {});

}  // namespace strata

#endif  // STRATA_MODEL_MODEL_H_
