// What the two delta-rule mixers (KDA, GDN) share: they run on the KDA
// kernels (kda.h) with one shape, plan the chunked prefill's workspace alike
// and keep the same slot state: per member and sequence slot, the delta-rule
// state [H, dk, dv] and the conv window of `window` floats (fp32), one slot
// array each.
#ifndef STRATA_EXEC_CUDA_DELTA_RULE_MIXER_H_
#define STRATA_EXEC_CUDA_DELTA_RULE_MIXER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/cuda/kda.h"
#include "exec/cuda/cuda_mixer.h"

namespace strata {
namespace cuda_exec {

class DeltaRuleMixer : public CudaMixer {
 public:
  DeltaRuleMixer(const MixerContext& ctx, const cuda::KdaShape& shape, int64_t window)
      : CudaMixer(ctx),
        shape_(shape),
        state_(shape.num_heads * shape.key_dim * shape.value_dim),
        window_(window) {}

  void Plan(const SequencePlan& p) final {
    ws_bytes_ = cuda::KdaPrefillWorkspaceBytes(shape_, p.slice);
  }
  std::vector<PoolArray> SlotArrays() const final {
    const int64_t n = static_cast<int64_t>(size());
    return {{n, sizeof(float) * static_cast<size_t>(state_)},
            {n, sizeof(float) * static_cast<size_t>(window_)}};
  }
  void BindPools(std::span<const StateRegion> slots, std::span<const StateRegion>) final {
    states_ = slots[0];
    windows_ = slots[1];
  }
  // Random states (±0.1) and windows (±1) of slot `slot` in every member.
  Status FillSlotForBenchmark(int64_t slot, const std::function<uint64_t()>& next,
                              cudaStream_t stream) const final;

 protected:
  // Member i's delta-rule step for one pass on ops.stream: q, k and v at qkv,
  // qkv + kv_off and qkv + 2·kv_off, rows `ld` apart; the output [n, H, dv]
  // in bf16 into `out`. Decode runs the recurrent kernel over the slots'
  // states; prefill the chunked kernel with `ws` (ws_bytes_), or in
  // batch-invariant mode the token recurrence (the decode kernel's
  // arithmetic), so the state does not depend on where the prompt was cut.
  Status Step(const CudaOps& ops, size_t i, const MixerPass& pass, const int32_t* slots,
              const bf16* qkv, int64_t kv_off, int64_t ld, const cuda::KdaGates& gates, bf16* out,
              void* ws) const;
  // Member m's pools, indexed by slot; then one slot's part of them.
  float* States(size_t m, int64_t slot = 0) const { return At(states_, m, slot); }
  float* Windows(size_t m, int64_t slot = 0) const { return At(windows_, m, slot); }

  const cuda::KdaShape shape_;
  size_t ws_bytes_ = 0;  // the chunked prefill's workspace

 private:
  static float* At(const StateRegion& r, size_t m, int64_t slot) {
    return reinterpret_cast<float*>(r.At(static_cast<int64_t>(m), slot));
  }

  const int64_t state_, window_;
  StateRegion states_, windows_;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_DELTA_RULE_MIXER_H_
