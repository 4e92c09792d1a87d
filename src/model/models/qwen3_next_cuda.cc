// The qwen3_next executor on the GPU: the same Forward/NewState contract as
// the CPU model (qwen3_next.cc, the reference), plus batched decode whose step
// is captured once per batch size in a CUDA graph. Structure and host side
// follow kimi_linear_cuda.cc.
//
// Per layer (n rows: the tokens of one prefill slice, or one token of each of
// B sequences at decode):
//   xn = RMSNorm(h += pending)                         AddRmsNorm (fp32 h)
//   GDN: [q|k|v] = xn·W_inᵀ, z = xn·W_zᵀ, [b|a] = xn·W_baᵀ (fp32)
//        qkv = SiLU(conv(q|k|v))                      window carried per slot
//        o = delta rule(q, k, v, g = −exp(A)·softplus(a + dt), β = σ(b))
//        h += out_proj(RMSNorm(o)·w ⊙ silu(z))
//   attention: [q|gate|k|v] = xn·Wᵀ; q, k RMSNorm + partial rope, k/v → cache
//        o = softmax attention over the cache ⊙ σ(gate); h += o_proj(o)
//   xn = RMSNorm(h)
//   dense: h += down(SiLU(gate)·up)
//   MoE: softmax top-k routing → MoeForward → pending (added by the next norm),
//        h += σ(xn·w_sg) · shared_expert(xn)
// then logits = lm_head(RMSNorm(h += pending)).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/gqa.h"
#include "model/models/qwen3_next_cuda_impl.h"

namespace strata {
namespace qwen3next_cuda {

using cuda::ActType;

// ----------------------------------------------------------------------------
// Enqueue-only passes (graph-safe: fixed pointers, host values only as shapes)

Status Qwen3NextCudaModel::GdnMixer(const Layer& L, int64_t n, const CudaState* ps) const {
  const Geometry& g = g_;
  const GdnLayer& k = L.gdn;
  const bool decode = ps == nullptr;
  const int32_t* slots = s_.step + plan_.max_batch;
  float* windows = pools_.window + L.index * pools_.slots * g.window;
  float* states = pools_.state + L.index * pools_.slots * g.state;
  // in_proj rows [q|k|v] then z: two products on consecutive weight rows.
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, g.D, n, k.in_proj, g.C, g.D, s_.proj, ActType::kBf16, g.C, 0.f));
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, k.in_proj + g.C * g.D, g.vw, g.D, s_.z,
                            ActType::kBf16, g.vw, 0.f));
  // b and a in fp32: a goes through softplus, exp and the chunk's cumulative sum.
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, k.ba, 2 * g.Hv, g.D, s_.gba,
                            ActType::kF32, 2 * g.Hv, 0.f));
  if (decode) {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluDecode(s_.proj, ActType::kBf16, g.C, n, g.C, k.conv,
                                                      g.K, windows, slots, s_.qkv, stream_));
  } else {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluPrefill(s_.proj, ActType::kBf16, g.C, n, g.C,
                                                       k.conv, g.K, windows + ps->slot_ * g.window,
                                                       s_.qkv, stream_));
  }
  cuda::KdaGates gates;
  gates.g_raw = s_.gba + g.Hv;
  gates.g_type = ActType::kF32;
  gates.ld_g = 2 * g.Hv;
  gates.beta_raw = s_.gba;
  gates.beta_type = ActType::kF32;
  gates.ld_beta = 2 * g.Hv;
  gates.neg_exp_a = k.neg_exp_a;
  gates.dt_bias = k.dt_bias;
  gates.per_head = true;
  if (decode) {
    cuda::KdaDecodeArgs a;
    a.shape = KdaShapeOf(g);
    a.batch = n;
    a.q = s_.qkv;
    a.k = s_.qkv + g.kw;
    a.v = s_.qkv + 2 * g.kw;
    a.ld_qkv = g.C;
    a.gates = gates;
    a.state_pool = states;
    a.slots = slots;
    a.out = s_.o;
    a.out_type = ActType::kBf16;
    STRATA_RETURN_IF_ERROR(cuda::KdaDecode(a, stream_));
  } else {
    cuda::KdaPrefillArgs a;
    a.shape = KdaShapeOf(g);
    a.num_tokens = n;
    a.q = s_.qkv;
    a.k = s_.qkv + g.kw;
    a.v = s_.qkv + 2 * g.kw;
    a.ld_qkv = g.C;
    a.gates = gates;
    a.state = states + ps->slot_ * g.state;
    a.out = s_.o;
    a.out_type = ActType::kBf16;
    // Invariant mode: the token recurrence (the decode kernel's arithmetic), so
    // the state does not depend on where the prompt was cut into slices.
    a.recurrent = invariant_;
    STRATA_RETURN_IF_ERROR(cuda::KdaPrefill(a, s_.kda_ws, plan_.kda_ws, stream_));
  }
  STRATA_RETURN_IF_ERROR(cuda::GatedRmsNormSilu(s_.o, ActType::kBf16, s_.z, ActType::kBf16,
                                                n * g.Hv, g.dv, k.norm, g.eps, s_.y, stream_));
  return Mm(s_.y, ActType::kBf16, g.vw, n, k.out, g.D, g.vw, s_.h, ActType::kF32, g.D, 1.f);
}

Status Qwen3NextCudaModel::AttnMixer(const Layer& L, int64_t n, const CudaState* ps,
                                     int64_t past) const {
  const Geometry& g = g_;
  const AttnLayer& m = L.attn;
  const int64_t qw = g.H * g.hd, kvw = g.Hkv * g.hd;
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, m.qkv, g.n_attn, g.D, s_.aproj,
                            ActType::kBf16, g.n_attn, 0.f));
  cuda::GqaCacheArgs cache;
  cache.k_cache = pools_.k + L.index * pools_.blocks * pools_.block_elems;
  cache.v_cache = pools_.v + L.index * pools_.blocks * pools_.block_elems;
  cache.table_stride = plan_.max_blocks;
  if (ps == nullptr) {
    cache.block_table = s_.block_table;
    cache.per_token_rows = true;
    cache.positions = s_.step + 2 * plan_.max_batch;
  } else {
    cache.block_table = s_.block_table + plan_.max_batch * plan_.max_blocks;
    cache.pos0 = past;
  }
  cuda::GqaAppendArgs ap;
  ap.shape = GqaShapeOf(g);
  ap.num_tokens = n;
  ap.q = s_.aproj;
  ap.ldq = g.n_attn;
  ap.k = s_.aproj + 2 * qw;
  ap.v = s_.aproj + 2 * qw + kvw;
  ap.ldkv = g.n_attn;
  ap.q_norm = m.q_norm;
  ap.k_norm = m.k_norm;
  ap.eps = g.eps;
  ap.inv_freq = w_.inv_freq;
  ap.cache = cache;
  STRATA_RETURN_IF_ERROR(cuda::GqaAppend(ap, stream_));
  cuda::GqaAttentionArgs at;
  at.shape = GqaShapeOf(g);
  at.num_tokens = n;
  at.q = s_.aproj;
  at.ldq = g.n_attn;
  at.gate = s_.aproj + qw;
  at.ldg = g.n_attn;
  at.cache = cache;
  at.out = s_.y;
  at.ldo = qw;
  STRATA_RETURN_IF_ERROR(cuda::GqaAttention(at, stream_));
  return Mm(s_.y, ActType::kBf16, qw, n, m.o, g.D, qw, s_.h, ActType::kF32, g.D, 1.f);
}

Status Qwen3NextCudaModel::EnqueueMixer(size_t layer, int64_t n, const CudaState* ps, int64_t past,
                                        const StepVariant& v) const {
  const Layer& L = w_.layers[layer];
  return L.is_attn ? AttnMixer(L, n, ps, past) : GdnMixer(L, n, ps);
}

}  // namespace qwen3next_cuda
}  // namespace strata
