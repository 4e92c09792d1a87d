#include "backend/cuda/elementwise.h"
#include "exec/cuda/delta_rule_mixer.h"

namespace strata {
namespace cuda_exec {

Status DeltaRuleMixer::Step(const CudaOps& ops, size_t i, const MixerPass& pass,
                            const int32_t* slots, const bf16* qkv, int64_t kv_off, int64_t ld,
                            const cuda::KdaGates& gates, bf16* out, void* ws) const {
  if (pass.decode) {
    cuda::KdaDecodeArgs a;
    a.shape = shape_;
    a.batch = pass.n;
    a.q = qkv;
    a.k = qkv + kv_off;
    a.v = qkv + 2 * kv_off;
    a.ld_qkv = ld;
    a.gates = gates;
    a.state_pool = States(i);
    a.slots = slots;
    a.out = out;
    a.out_type = cuda::ActType::kBf16;
    return cuda::KdaDecode(a, ops.stream);
  }
  cuda::KdaPrefillArgs a;
  a.shape = shape_;
  a.num_tokens = pass.n;
  a.q = qkv;
  a.k = qkv + kv_off;
  a.v = qkv + 2 * kv_off;
  a.ld_qkv = ld;
  a.gates = gates;
  a.state = States(i, pass.slot);
  a.out = out;
  a.out_type = cuda::ActType::kBf16;
  a.recurrent = ctx_.invariant;
  return cuda::KdaPrefill(a, ws, ws_bytes_, ops.stream);
}

Status DeltaRuleMixer::FillSlotForBenchmark(int64_t slot, const std::function<uint64_t()>& next,
                                            cudaStream_t stream) const {
  for (size_t m = 0; m < size(); ++m) {
    STRATA_RETURN_IF_ERROR(
        cuda::FillRandomF32(States(m, slot), state_, next(), -0.1f, 0.1f, stream));
    if (window_ > 0) {
      STRATA_RETURN_IF_ERROR(
          cuda::FillRandomF32(Windows(m, slot), window_, next(), -1.f, 1.f, stream));
    }
  }
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
