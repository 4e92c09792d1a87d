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
};

// Everything one sequence carries between Forward calls (KV caches, recurrent
// states, conv tails). Owned by a session; not thread-safe.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t num_tokens() const = 0;  // tokens consumed so far
  virtual std::unique_ptr<SequenceState> Clone() const = 0;
  virtual void Reset() = 0;  // back to an empty sequence
};

struct LoadOptions {
  ThreadPool* pool = nullptr;  // null: ThreadPool::Default()
  // Called with a fraction in [0,1]; returning false cancels the load (Cancelled).
  std::function<bool(float)> progress;
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
