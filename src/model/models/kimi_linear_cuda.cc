// The kimi_linear executor on the GPU: the same Forward/NewState contract as
// the CPU model (kimi_linear.cc, the reference), plus batched decode whose
// step is captured once per (batch, length bound) in a CUDA graph.
//
// Per layer (n rows: the tokens of one prefill slice, or one token of each of
// B sequences at decode):
//   xn = RMSNorm(h += pending)                         AddRmsNorm (fp32 h)
//   KDA: proj = xn·[q|k|v|f_a|g_a|b]ᵀ                  one GEMM
//        qkv = SiLU(conv(proj[:, :3C]))               window carried per slot
//        g = f_b(f_a), z = g_b(g_a)                   rank-dk GEMMs on proj's columns
//        o = KDA(q, k, v, g, β)                       chunked prefill / recurrent decode
//        h += o_proj(GatedRMSNorm(o, z))              GEMM accumulating into h
//        (decode of ≤ kFusedKdaMaxBatch rows: conv through the norm is one
//        kernel, KdaDecodeFused)
//   MLA: q = xn·W_qᵀ, [c|k_r] = xn·W_kvaᵀ, c = RMSNorm(c), rows → paged cache
//        prefill: gather latents, kv = kv_b(c) for all S keys, flash attention
//        decode:  q̃ = W_UKᵀ q_nope per head, attention over the latents
//                 (q_rope read in place from q), o = W_UV õ per head
//                 (absorbed: the cache is never expanded)
//        h += o_proj(o)
//   xn = RMSNorm(h)
//   dense: h += down(SiLU(gate)·up) with [gate|up] one GEMM
//   MoE:   router logits (fp32) → MoeForward → pending (added by the next norm),
//          h += shared expert; one token (batch-1 decode) takes MoeForward's
//          planless path: router+route (one kernel, gemm.h GemvRoute) →
//          gate|up → down+combine, with the shared
//          expert folded into those two kernels (MoeArgs::shared_w13; its
//          weights load while routing runs) and the sum added into h by
//          the down kernel (MoeArgs::accumulate; no pending)
// then logits = lm_head(RMSNorm(h += pending)).
// At decode (≤ 16 rows) pieces run on a second stream beside the main chain
// (CudaExecutorBase::Branching): f_b/g_b beside the conv and the KDA step
// (when the KDA mixer is not fused), MLA's latent row beside its query path,
// and, above one row, the shared expert beside routing and the routed
// experts. At one row the folded shared expert has no stream of its own:
// 7 forks per step instead of 33, which the kernels around them had paid
// for (docs/dev/journal/performance.md).
//
// Cost at the production shapes (Kimi-Linear-48B-A3B, H200: 4.27 TB/s copy,
// ~686 TFLOP/s bf16; the numbers come from the cost model in
// kimi_linear_weights.h, which `strata bench` reports against):
//  * batch-1 decode at 4K context must move 6.34 GB: non-expert weights and
//    lm_head 3.27 GB, 8 experts × 26 MoE layers × 14.2 MB = 2.94 GB, KDA
//    states read and written (20 layers × 2 × 2.2 MB) and the 7 MLA layers'
//    latent rows (1152 B per cached token each) 0.12 GB → 1.48 ms at the
//    bandwidth limit; the target is ≥ 70% of it (≤ 2.1 ms);
//  * batch 64 at 4K touches ~222 of 256 experts per layer: ~93 GB per step →
//    ~22 ms per step, 0.34 ms per token;
//  * prefill of 32K tokens: 2.6e14 FLOPs (2 × 3.1e9 per token minus the
//    per-token lm_head, plus 7 layers of causal MLA attention) → 0.38 s at
//    peak; target ≥ 40% of peak (≤ 0.95 s).
// The executor itself adds only launches (a graph replays a decode step) and
// small host↔device copies of per-step inputs; the time goes to the kernels.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "model/models/kimi_linear_cuda_impl.h"

namespace strata {
namespace kimi_cuda {
using cuda::ActType;

// ----------------------------------------------------------------------------
// Decode step shape

KimiLinearCudaModel::StepVariant KimiLinearCudaModel::DecodeVariant(int64_t max_len) const {
  if (g_.num_mla == 0) return StepVariant{};
  int64_t b = kMinMlaBucket;
  while (b < max_len) b *= 2;
  return StepVariant{std::min(b, plan_.max_ctx), false};
}

// ----------------------------------------------------------------------------
// Enqueue-only passes (graph-safe: fixed pointers, host values only as shapes)

Status KimiLinearCudaModel::KdaMixer(const Layer& L, int64_t n, const CudaState* ps) const {
  const Geometry& g = g_;
  const KdaLayer& k = L.kda;
  const bool decode = ps == nullptr;
  const int32_t* slots = s_.step + plan_.max_batch;
  float* windows = pools_.conv_window + L.index * pools_.slots * g.window;
  float* states = pools_.kda_state + L.index * pools_.slots * g.kda_state;
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, k.in_proj, g.n_in, g.D, s_.proj,
                            ActType::kBf16, g.n_in, 0.f));
  bool fused = false;
  if (decode) STRATA_RETURN_IF_ERROR(TryFusedKdaDecode(L, n, windows, states, slots, &fused));
  if (!fused) STRATA_RETURN_IF_ERROR(KdaChain(L, n, ps, windows, states, slots));
  return Mm(s_.y, ActType::kBf16, g.C, n, k.o, g.D, g.C, s_.h, ActType::kF32, g.D, 1.f);
}

// Decode: KDA's mixer from proj to y in one kernel where it applies; *done
// says whether it ran (else KdaChain does the work).
Status KimiLinearCudaModel::TryFusedKdaDecode(const Layer& L, int64_t n, float* windows,
                                              float* states, const int32_t* slots,
                                              bool* done) const {
  const Geometry& g = g_;
  const KdaLayer& k = L.kda;
  // Small-batch decode: conv, gate products, token step and output norm in
  // one kernel (KdaDecodeFused) where the shape allows. Against the chain
  // with its side branches it wins at batch 1 and 2, breaks even at 4 and
  // loses at 8 (each row's CTAs re-read the gate weights and the step has no
  // branch left to overlap; docs/dev/journal/performance.md), hence
  // kFusedKdaMaxBatch. Batch-invariant
  // mode keeps KdaChain, whose rounding the prefill's recurrent form
  // reproduces.
  *done = false;
  if (!invariant_ && tuning_.On(tuning::Key::kKdaFusedDecode) && n <= kFusedKdaMaxBatch) {
    cuda::KdaDecodeFusedArgs f;
    f.shape = KdaShapeOf(g);
    f.batch = n;
    f.proj = s_.proj;
    f.ld_proj = g.n_in;
    f.off_fa = g.off_fa;
    f.off_ga = g.off_ga;
    f.off_beta = g.off_b;
    f.rank = g.dk;
    f.conv_w = k.conv;
    f.conv_kernel = g.K;
    f.window_pool = windows;
    f.f_b = k.f_b;
    f.g_b = k.g_b;
    f.dt_bias = k.dt_bias;
    f.neg_exp_a = k.neg_exp_a;
    f.o_norm = k.o_norm;
    f.eps = g.eps;
    f.state_pool = states;
    f.slots = slots;
    f.out = s_.y;
    f.state_before_wait = true;  // the kernel before it is in_proj's GEMM (KdaMixer)
    if (cuda::KdaDecodeFusedSupported(f)) {
      STRATA_RETURN_IF_ERROR(cuda::KdaDecodeFused(f, stream_));
      *done = true;
    }
  }
  return OkStatus();
}

// conv, gates, the KDA step (decode or prefill) and the gated output norm:
// proj → y.
Status KimiLinearCudaModel::KdaChain(const Layer& L, int64_t n, const CudaState* ps, float* windows,
                                     float* states, const int32_t* slots) const {
  const Geometry& g = g_;
  const KdaLayer& k = L.kda;
  const bool decode = ps == nullptr;
  // Decode branches (Branching): the rank-dk gate products run on side_
  // beside the conv (f_b) and beside the recurrent step (g_b, needed only by
  // the output norm).
  const bool branch = decode && Branching(n);
  cudaStream_t aux = branch ? side_ : stream_;
  if (branch) STRATA_RETURN_IF_ERROR(Fork());
  // Gate pre-activations in fp32 (they go through exp and a cumulative sum);
  // the output gate only through a sigmoid, bf16 is plenty.
  STRATA_RETURN_IF_ERROR(MmOn(aux, s_.proj + g.off_fa, ActType::kBf16, g.n_in, n, k.f_b, g.C, g.dk,
                              s_.graw, ActType::kF32, g.C, 0.f));
  if (decode) {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluDecode(s_.proj, ActType::kBf16, g.n_in, n, 3 * g.C,
                                                      k.conv, g.K, windows, slots, s_.qkv,
                                                      stream_));
  } else {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluPrefill(s_.proj, ActType::kBf16, g.n_in, n,
                                                       3 * g.C, k.conv, g.K,
                                                       windows + ps->slot_ * g.window, s_.qkv,
                                                       stream_));
  }
  if (branch) STRATA_RETURN_IF_ERROR(Join());
  STRATA_RETURN_IF_ERROR(MmOn(aux, s_.proj + g.off_ga, ActType::kBf16, g.n_in, n, k.g_b, g.C, g.dk,
                              s_.gate, ActType::kBf16, g.C, 0.f));
  cuda::KdaGates gates;
  gates.g_raw = s_.graw;
  gates.g_type = ActType::kF32;
  gates.ld_g = g.C;
  gates.beta_raw = s_.proj + g.off_b;
  gates.beta_type = ActType::kBf16;
  gates.ld_beta = g.n_in;
  gates.neg_exp_a = k.neg_exp_a;
  gates.dt_bias = k.dt_bias;
  if (decode) {
    cuda::KdaDecodeArgs a;
    a.shape = KdaShapeOf(g);
    a.batch = n;
    a.q = s_.qkv;
    a.k = s_.qkv + g.C;
    a.v = s_.qkv + 2 * g.C;
    a.ld_qkv = 3 * g.C;
    a.gates = gates;
    a.state_pool = states;
    a.slots = slots;
    a.out = s_.o;
    a.out_type = ActType::kBf16;
    STRATA_RETURN_IF_ERROR(cuda::KdaDecode(a, stream_));
    if (branch) STRATA_RETURN_IF_ERROR(Join());
  } else {
    cuda::KdaPrefillArgs a;
    a.shape = KdaShapeOf(g);
    a.num_tokens = n;
    a.q = s_.qkv;
    a.k = s_.qkv + g.C;
    a.v = s_.qkv + 2 * g.C;
    a.ld_qkv = 3 * g.C;
    a.gates = gates;
    a.state = states + ps->slot_ * g.kda_state;
    a.out = s_.o;
    a.out_type = ActType::kBf16;
    // Invariant mode: the token recurrence (the decode kernel's arithmetic), so
    // the state does not depend on where the prompt was cut into slices.
    a.recurrent = invariant_;
    STRATA_RETURN_IF_ERROR(cuda::KdaPrefill(a, s_.kda_ws, plan_.kda_ws, stream_));
  }
  STRATA_RETURN_IF_ERROR(cuda::GatedRmsNormSigmoid(s_.o, ActType::kBf16, s_.gate, ActType::kBf16,
                                                   n * g.H, g.dk, k.o_norm, g.eps, s_.y, stream_));
  return OkStatus();
}

Status KimiLinearCudaModel::MlaMixer(const Layer& L, int64_t n, const CudaState* ps, int64_t past,
                                     int64_t mla_bound) const {
  const Geometry& g = g_;
  const MlaLayer& m = L.mla;
  const cuda::MlaShape shape = MlaShapeOf(g);
  const int64_t qcols = g.Hm * g.qd;
  // Decode branches: the latent row (kv_a, its norm, the cache write) is made
  // on side_ beside the query path (q, its absorption).
  const bool branch = ps == nullptr && Branching(n);
  cudaStream_t aux = branch ? side_ : stream_;
  if (branch) STRATA_RETURN_IF_ERROR(Fork());
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, g.D, n, m.q, qcols, g.D, s_.q, ActType::kBf16, qcols, 0.f));
  STRATA_RETURN_IF_ERROR(MmOn(aux, s_.xn, ActType::kBf16, g.D, n, m.kv_a, g.cd, g.D, s_.kva,
                              ActType::kBf16, g.cd, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(s_.kva, g.cd, s_.kva, g.cd, ActType::kBf16, n, g.r,
                                           m.kv_norm, kLatentNormEps, aux));
  cuda::MlaCache cache;
  cache.pool = pools_.kv + L.index * pools_.blocks * kBlockTokens * g.cd;
  cache.max_blocks = plan_.max_blocks;
  const int64_t kvb_row = g.dn + g.dv;  // kv_b rows per head: W_UK (dn) then W_UV (dv)
  if (ps == nullptr) {
    const int32_t* positions = s_.step + 2 * plan_.max_batch;
    const int32_t* seq_lens = s_.step + 3 * plan_.max_batch;
    cache.block_table = s_.block_table;
    STRATA_RETURN_IF_ERROR(cuda::MlaCacheWrite(shape, cache, s_.kva, g.cd, n, 0, positions, aux));

    // q̃_h = W_UK,hᵀ q_nope,h for every head at once: x_h = q[:, h, :dn],
    // W_h = uk_t[h] ([r, dn], W_UK,h transposed), y_h = q_abs[:, h, :r].
    cuda::StridedBatchedGemmArgs uk;
    uk.g.m = n;
    uk.g.n = g.r;
    uk.g.k = g.dn;
    uk.g.x = s_.q;
    uk.g.x_type = ActType::kBf16;
    uk.g.ldx = qcols;
    // On the pre-transposed copy, W_h = [r, dn] (see MlaLayer::uk_t).
    uk.g.w = m.uk_t;
    uk.g.ldw = g.dn;
    uk.g.y = s_.q_abs;
    uk.g.y_type = ActType::kBf16;
    uk.g.ldy = g.Hm * g.cd;
    uk.count = g.Hm;
    uk.stride_x = g.qd;
    uk.stride_w = g.r * g.dn;
    uk.stride_y = g.cd;
    STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*blas_, uk, stream_));
    if (branch) STRATA_RETURN_IF_ERROR(Join());
    cuda::MlaDecodeArgs a;
    a.shape = shape;
    a.batch = n;
    a.q_abs = s_.q_abs;
    // q_rope rides along unchanged: the decode kernel reads it from q (no
    // copy into q_abs[:, h, r:], which would be a graph node outside the
    // PDL chain).
    if (g.dr > 0) {
      a.q_rope = s_.q + g.dn;
      a.q_rope_stride = g.qd;
    }
    a.cache = cache;
    a.seq_lens = seq_lens;
    a.max_seq_len = mla_bound;
    a.out_latent = s_.lat_o;
    a.out_type = ActType::kBf16;
    a.batch_invariant = invariant_;
    // Only this step's MlaCacheWrite touches the cache (the newest row), and
    // the lengths and block table were uploaded before the step's first
    // kernel finished.
    a.cache_before_wait = true;
    STRATA_RETURN_IF_ERROR(cuda::MlaDecode(a, s_.mla_ws, plan_.mla_ws, stream_));
    // o_h = W_UV,h õ_h: W_h = kv_b rows h·(dn+dv)+dn .. +dv−1 ([dv, r]).
    cuda::StridedBatchedGemmArgs uv;
    uv.g.m = n;
    uv.g.n = g.dv;
    uv.g.k = g.r;
    uv.g.x = s_.lat_o;
    uv.g.x_type = ActType::kBf16;
    uv.g.ldx = g.Hm * g.r;
    uv.g.w = m.kv_b + g.dn * g.r;
    uv.g.ldw = g.r;
    uv.g.y = s_.attn;
    uv.g.y_type = ActType::kBf16;
    uv.g.ldy = g.Hm * g.dv;
    uv.count = g.Hm;
    uv.stride_x = g.r;
    uv.stride_w = kvb_row * g.r;
    uv.stride_y = g.dv;
    uv.transpose_w = false;
    // o_proj may launch before W_UV's wait, while the merge (short and
    // latency-bound) still runs, so its CTAs start loading weights one kernel
    // earlier. mla.uv_early=0 turns it off (same results).
    uv.g.early_trigger = tuning_.On(tuning::Key::kMlaUvEarly);
    STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*blas_, uv, stream_));
  } else {
    cache.block_table = s_.block_table + plan_.max_batch * plan_.max_blocks;
    STRATA_RETURN_IF_ERROR(
        cuda::MlaCacheWrite(shape, cache, s_.kva, g.cd, n, past, nullptr, stream_));
    // Expansion: kv = kv_b(c) for every cached token (cheaper than the
    // absorbed form whenever the slice is long, which prefill slices are).
    const int64_t S = past + n;
    STRATA_RETURN_IF_ERROR(cuda::MlaCacheGather(shape, cache, S, s_.lat, stream_));
    STRATA_RETURN_IF_ERROR(Mm(s_.lat, ActType::kBf16, g.cd, S, m.kv_b, g.Hm * kvb_row, g.r,
                              s_.kv_exp, ActType::kBf16, g.Hm * kvb_row, 0.f));
    cuda::MlaPrefillArgs a;
    a.shape = shape;
    a.num_tokens = n;
    a.past = past;
    a.q = s_.q;
    a.ld_q = qcols;
    a.kv = s_.kv_exp;
    a.k_rope = s_.lat + g.r;
    a.ld_krope = g.cd;
    a.out = s_.attn;
    STRATA_RETURN_IF_ERROR(cuda::MlaPrefill(a, stream_));
  }
  return Mm(s_.attn, ActType::kBf16, g.Hm * g.dv, n, m.o, g.D, g.Hm * g.dv, s_.h, ActType::kF32,
            g.D, 1.f);
}

Status KimiLinearCudaModel::EnqueueMixer(size_t layer, int64_t n, const CudaState* ps, int64_t past,
                                         const StepVariant& v) const {
  const Layer& L = w_.layers[layer];
  return L.is_mla ? MlaMixer(L, n, ps, past, v.bound) : KdaMixer(L, n, ps);
}

// ----------------------------------------------------------------------------
// Benchmark fill and stats (the Model interface is CudaExecutorBase's)

Status KimiLinearCudaModel::FillSlotForBenchmark(const CudaState& st,
                                                 const std::function<uint64_t()>& next) const {
  const Geometry& g = g_;
  for (int64_t l = 0; l < g.num_kda; ++l) {
    const int64_t at = l * pools_.slots + st.slot_;
    STRATA_RETURN_IF_ERROR(cuda::FillRandomF32(pools_.kda_state + at * g.kda_state, g.kda_state,
                                               next(), -0.1f, 0.1f, stream_));
    if (g.window > 0) {
      STRATA_RETURN_IF_ERROR(cuda::FillRandomF32(pools_.conv_window + at * g.window, g.window,
                                                 next(), -1.f, 1.f, stream_));
    }
  }
  return OkStatus();
}

}  // namespace kimi_cuda
}  // namespace strata
