// The contract between the CPU executor and its layer modules (one per mixer
// and per FFN kind, src/exec/cpu/*_layer.cc). A module owns its weight view,
// declares the per-sequence state regions it keeps and plans its scratch; Run
// appends a slice of tokens to one sequence, choosing its prefill or decode
// path from how many tokens the slice has and how many came before.
#ifndef STRATA_EXEC_CPU_CPU_LAYER_H_
#define STRATA_EXEC_CPU_CPU_LAYER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/status.h"
#include "exec/arch_spec.h"
#include "exec/cpu/scratch_arena.h"

namespace strata {
class ThreadPool;
}

namespace strata::exec {

class WeightBinder;

// One piece of a sequence's state, in fp32. Fixed regions (recurrent
// matrices, conv tails) start as zeros; per-token regions (attention rows)
// hold `floats` per consumed token and grow with the sequence.
struct StateRegion {
  int64_t floats = 0;
  bool per_token = false;
};

// What a module's Run works with besides its input.
struct LayerRun {
  ThreadPool* pool = nullptr;
  float* matmul_scratch = nullptr;  // sized for any bound matrix at this slice
  ScratchArena* scratch = nullptr;  // the module's own scratch, as it planned
  int64_t past = 0;                 // tokens already in the sequence
  // The module's regions, in StateRegions() order. Per-token regions already
  // hold room for past + num_tokens rows.
  std::span<std::vector<float>> state;
};

// y[T, w.rows] = x · wᵀ with the run's shared matmul scratch.
void Linear(const LayerRun& run, const float* x, int64_t num_tokens, const cpu::WeightMatrix& w,
            float* y);

class CpuLayer {
 public:
  virtual ~CpuLayer() = default;
  virtual std::vector<StateRegion> StateRegions() const { return {}; }
  // Scratch bytes Run carves for a slice of `num_tokens` tokens after `past`.
  virtual size_t ScratchBytes(int64_t num_tokens, int64_t past, int num_threads) const = 0;
  // out[T, D] for input x[T, D]; updates the state regions.
  virtual Status Run(const LayerRun& run, const float* x, int64_t num_tokens, float* out) const = 0;
  // Earlier rows one token at `context` tokens reads (scheduling cost): 0
  // for linear mixers and FFNs, the context for dense attention.
  virtual int64_t AttendedTokens(int64_t context) const { return 0; }
};

// Implements ScratchBytes with the module's own `Carve(ScratchArena&, T,
// past, threads)`, the function its Run carves with.
template <typename Self>
class CarvingLayer : public CpuLayer {
 public:
  size_t ScratchBytes(int64_t num_tokens, int64_t past, int num_threads) const final {
    ScratchArena plan;
    static_cast<const Self*>(this)->Carve(plan, num_tokens, past, num_threads);
    return plan.used();
  }
};

// The module for a mixer or FFN description, its weights bound under
// `prefix` (the full tensor-name prefix). `hidden` is the model width D.
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMixer(const MixerSpec& spec, const std::string& prefix,
                                                 int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuFfn(const FfnSpec& spec, const std::string& prefix,
                                               int64_t hidden, WeightBinder& weights);

// One factory per module kind (their own files).
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuKdaLayer(const KdaSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuGdnLayer(const GdnSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMlaLayer(const MlaSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuGqaLayer(const GqaSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMlpLayer(const MlpSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);
StatusOr<std::unique_ptr<CpuLayer>> MakeCpuMoeLayer(const MoeSpec& spec, const std::string& prefix,
                                                    int64_t hidden, WeightBinder& weights);

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_LAYER_H_
