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
#include <variant>
#include <vector>

#include "backend/cpu/cache_rows.h"
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
// hold `floats` per consumed token and grow with the sequence, in blocks of
// kStateBlockRows tokens that states and checkpoints share (cpu_state.h).
struct StateRegion {
  int64_t floats = 0;
  bool per_token = false;
};

// Tokens per block of the per-token regions: 1 << kStateBlockShift.
constexpr int kStateBlockShift = 6;
constexpr int64_t kStateBlockRows = int64_t{1} << kStateBlockShift;

// A module's view of one of its state regions during a Run.
struct RegionView {
  float* fixed = nullptr;  // a fixed region: its floats
  cpu::CacheRows rows;     // a per-token region: its rows, in the state's blocks

  // The state owns the blocks, so a module may write the rows it appends.
  float* row(int64_t s) const { return const_cast<float*>(rows.row(s)); }
  // Copies `n` rows of rows.stride floats from `src` to rows first .. first+n−1.
  void Write(int64_t first, int64_t n, const float* src) const;
};

// What a module's Run works with besides its input.
struct LayerRun {
  ThreadPool* pool = nullptr;
  float* matmul_scratch = nullptr;  // sized for any bound matrix at this slice
  ScratchArena* scratch = nullptr;  // the module's own scratch, as it planned
  int64_t past = 0;                 // tokens already in the sequence
  // The module's regions, in StateRegions() order. Per-token regions already
  // hold room for past + num_tokens rows.
  std::span<const RegionView> state;
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

// The base of every module: keeps its description and the model width, and
// implements ScratchBytes with the module's own `Carve(ScratchArena&, T,
// past, threads)`, the function its Run carves with.
template <typename Self, typename Spec>
class CpuLayerOf : public CpuLayer {
 public:
  CpuLayerOf(const Spec& spec, int64_t hidden) : s_(spec), hidden_(hidden) {}
  size_t ScratchBytes(int64_t num_tokens, int64_t past, int num_threads) const final {
    ScratchArena plan;
    static_cast<const Self*>(this)->Carve(plan, num_tokens, past, num_threads);
    return plan.used();
  }

 protected:
  Spec s_;
  int64_t hidden_;  // D
};

// What a module binds its weights with: the full tensor-name prefix of its
// tensors, the model width D and the binder.
struct LayerBind {
  std::string prefix;
  int64_t hidden = 0;
  WeightBinder* weights = nullptr;
};

using LayerOrError = StatusOr<std::unique_ptr<CpuLayer>>;

// One per module kind, in its own file (kda_layer.cc, ...).
LayerOrError MakeCpuLayer(const KdaSpec& spec, const LayerBind& bind);
LayerOrError MakeCpuLayer(const GdnSpec& spec, const LayerBind& bind);
LayerOrError MakeCpuLayer(const MlaSpec& spec, const LayerBind& bind);
LayerOrError MakeCpuLayer(const GqaSpec& spec, const LayerBind& bind);
LayerOrError MakeCpuLayer(const MlpSpec& spec, const LayerBind& bind);
LayerOrError MakeCpuLayer(const MoeSpec& spec, const LayerBind& bind);

// The module for a mixer or FFN description (MixerSpec, FfnSpec).
template <typename... Specs>
LayerOrError MakeCpuLayer(const std::variant<Specs...>& spec, const LayerBind& bind) {
  return std::visit([&](const auto& s) { return MakeCpuLayer(s, bind); }, spec);
}

// Module type `L`, built as L(spec, hidden) and bound with L::Bind(prefix,
// weights).
template <typename L, typename Spec>
LayerOrError BindLayer(const Spec& spec, const LayerBind& bind) {
  auto layer = std::make_unique<L>(spec, bind.hidden);
  STRATA_RETURN_IF_ERROR(layer->Bind(bind.prefix, *bind.weights));
  return LayerOrError(std::move(layer));
}

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_LAYER_H_
