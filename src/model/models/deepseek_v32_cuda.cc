// The deepseek_v32 executor on the GPU: the same Forward/NewState contract as
// the CPU adapter (deepseek_v32.cc, the reference), plus batched decode whose
// step is captured once per (batch, length bound, sparse) in a CUDA graph.
//
// Per layer (n rows: the tokens of one prefill slice at positions past.., or
// one token of each of B sequences at decode):
//   xn = RMSNorm(h += pending)
//   a = xn·[q_a | kv_a | wk]ᵀ                                one GEMM
//   c_q = RMSNorm(a_q); kv row = [RMSNorm(c) | rope_il(k_r)];
//   index key = rope_hs(LayerNorm(a_k))                      in place in a
//   q = c_q·q_bᵀ, rope_il on each head's last dr
//   kv row → MLA cache, index key → index cache (same block table)
//   dense (no query has more than index_topk causal keys):
//     prefill: gather latents, kv = kv_b(c), flash attention
//     decode:  absorbed attention over all cached latents
//   sparse: iq = c_q·wq_bᵀ (rope_hs), iw = H_I^-1/2 · xn·weights_projᵀ,
//     indexer top-k per query (fused, over the index cache), then absorbed
//     attention over the selected latents only (decode and prefill alike)
//   h += o_proj(o)
//   xn = RMSNorm(h); dense SwiGLU, or group-limited MoE → pending + shared experts
// then logits = lm_head(RMSNorm(h += pending)).
// rope_il: interleaved pairs written back [evens | odds] (transformers'
// apply_rotary_pos_emb_interleave), rope_hs: half-split pairs, both with the
// CPU's YaRN cos/sin table (attention factor folded in).
//
// Like the CPU adapter, a query attends densely while its causal keys number
// at most index_topk: the indexer would select all of them. A decode batch is
// sparse as a whole when any of its sequences is longer than index_topk; the
// shorter ones then select every key, which is the same attention.
// Batch-invariant mode (LoadOptions::batch_invariant) takes the sparse path
// for every query, prefill and decode: the dense and absorbed forms round
// differently, and which one a query got would otherwise depend on the
// length of its call or on the longest sequence of its batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope.h"
#include "model/models/deepseek_v32_cuda_impl.h"

namespace strata {
namespace dsv32_cuda {

using cuda::ActType;

// ----------------------------------------------------------------------------
// Small helpers and the decode step shape

Status DeepseekV32CudaModel::Rope(bool interleaved, bf16* x, int64_t n, int64_t heads,
                                  int64_t token_stride, int64_t head_stride, int64_t offset,
                                  int64_t pos0, bool decode) const {
  cuda::RopeArgs a;
  a.pairs = interleaved ? cuda::RopePairs::kInterleaved : cuda::RopePairs::kHalfSplit;
  a.x = x;
  a.num_tokens = n;
  a.num_heads = heads;
  a.token_stride = token_stride;
  a.head_stride = head_stride;
  a.offset = offset;
  a.half = g_.half;
  a.cos = s_.rope_cos;
  a.sin = s_.rope_sin;
  a.max_positions = plan_.max_ctx;
  a.positions = decode ? s_.step + 2 * plan_.max_batch : nullptr;
  a.pos0 = pos0;
  return cuda::ApplyRope(a, stream_);
}

DeepseekV32CudaModel::StepVariant DeepseekV32CudaModel::DecodeVariant(int64_t max_len) const {
  int64_t b = kMinMlaBucket;
  while (b < max_len) b *= 2;
  // Invariant mode: always sparse, so a sequence's path does not depend on
  // the longest sequence of its batch (the indexer selects all of a short
  // sequence's keys, in position order).
  const bool sparse = invariant_ || max_len > g_.K;
  ++(sparse ? sparse_decode_steps_ : dense_decode_steps_);
  return StepVariant{std::min(b, plan_.max_ctx), sparse};
}

// ----------------------------------------------------------------------------
// Enqueue-only passes (graph-safe: fixed pointers, host values only as shapes)

// decode: n = batch rows, positions/lengths/tables from s_.step; `bound` is
// the length bound of the step and `sparse_decode` its path. Prefill: one
// sequence (the last block-table row), tokens at past.., path by past + n.
Status DeepseekV32CudaModel::Attention(const Layer& L, int64_t l, int64_t n, int64_t past,
                                       int64_t bound, bool sparse_decode) const {
  const Geometry& g = g_;
  const AttnLayer& w = L.attn;
  const bool decode = bound > 0;
  const cuda::MlaShape shape = MlaShapeOf(g);
  const cuda::IndexerShape ishape = IndexerShapeOf(g);
  const int64_t qcols = g.H * g.qd;
  const int32_t* positions = decode ? s_.step + 2 * plan_.max_batch : nullptr;
  const int32_t* seq_lens = s_.step + 3 * plan_.max_batch;
  bf16* kv_rows = s_.a + g.off_kv;
  bf16* ik_rows = s_.a + g.off_ik;

  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, g.D, n, w.a, g.n_a, g.D, s_.a, ActType::kBf16, g.n_a, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(s_.a, g.n_a, s_.a, g.n_a, ActType::kBf16, n, g.qr,
                                           w.q_a_norm, kLatentNormEps, stream_));
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(kv_rows, g.n_a, kv_rows, g.n_a, ActType::kBf16, n, g.r,
                                           w.kv_norm, kLatentNormEps, stream_));
  STRATA_RETURN_IF_ERROR(Rope(true, kv_rows, n, 1, g.n_a, 0, g.r, past, decode));
  STRATA_RETURN_IF_ERROR(cuda::LayerNormRows(ik_rows, g.n_a, ik_rows, g.n_a, ActType::kBf16, n,
                                             g.dI, w.ik_norm_w, w.ik_norm_b, kIndexerNormEps,
                                             stream_));
  STRATA_RETURN_IF_ERROR(Rope(false, ik_rows, n, 1, g.n_a, 0, 0, past, decode));
  STRATA_RETURN_IF_ERROR(
      Mm(s_.a, ActType::kBf16, g.n_a, n, w.q_b, qcols, g.qr, s_.q, ActType::kBf16, qcols, 0.f));
  STRATA_RETURN_IF_ERROR(Rope(true, s_.q, n, g.H, qcols, g.qd, g.dn, past, decode));

  cuda::MlaCache cache;
  cache.pool = pools_.kv + l * pools_.blocks * kBlockTokens * g.cd;
  cache.max_blocks = plan_.max_blocks;
  cache.block_table =
      decode ? s_.block_table : s_.block_table + plan_.max_batch * plan_.max_blocks;
  cuda::IndexKeyCache icache;
  icache.pool = pools_.ik + l * pools_.blocks * kBlockTokens * g.dI;
  icache.block_table = cache.block_table;
  icache.max_blocks = plan_.max_blocks;
  STRATA_RETURN_IF_ERROR(
      cuda::MlaCacheWrite(shape, cache, kv_rows, g.n_a, n, decode ? 0 : past, positions, stream_));
  STRATA_RETURN_IF_ERROR(cuda::IndexKeyCacheWrite(g.dI, icache, ik_rows, g.n_a, n,
                                                  decode ? 0 : past, positions, stream_));

  // Invariant mode: every prefill on the sparse path, so a query's arithmetic
  // does not depend on how long the call is (a dense call would expand keys
  // where a longer call of the same prompt absorbs them).
  const bool sparse = decode ? sparse_decode : (invariant_ || past + n > g.K);
  if (!decode) ++(sparse ? sparse_prefill_layers_ : dense_prefill_layers_);
  const int64_t kvb_row = g.dn + g.dv;  // kv_b rows per head: W_UK (dn) then W_UV (dv)
  if (!decode && !sparse) {
    // Dense prefill: expand the (at most index_topk) cached latents.
    const int64_t S = past + n;
    STRATA_RETURN_IF_ERROR(cuda::MlaCacheGather(shape, cache, S, s_.lat, stream_));
    STRATA_RETURN_IF_ERROR(Mm(s_.lat, ActType::kBf16, g.cd, S, w.kv_b, g.H * kvb_row, g.r,
                              s_.kv_exp, ActType::kBf16, g.H * kvb_row, 0.f));
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
  } else {
    if (sparse) {
      const int64_t icols = g.HI * g.dI;
      STRATA_RETURN_IF_ERROR(Mm(s_.a, ActType::kBf16, g.n_a, n, w.iq, icols, g.qr, s_.iq,
                                ActType::kBf16, icols, 0.f));
      STRATA_RETURN_IF_ERROR(Rope(false, s_.iq, n, g.HI, icols, g.dI, 0, past, decode));
      // The CPU scales the head weights by H_I^-1/2 after the product.
      STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, w.iw, g.HI, g.D, s_.iw,
                                ActType::kF32, g.HI, 0.f,
                                1.f / std::sqrt(static_cast<float>(g.HI))));
      if (decode) {
        cuda::IndexerDecodeArgs a;
        a.shape = ishape;
        a.batch = n;
        a.q = s_.iq;
        a.ld_q = icols;
        a.weights = s_.iw;
        a.ld_w = g.HI;
        a.cache = icache;
        a.seq_lens = seq_lens;
        a.max_seq_len = bound;
        a.rows = s_.sel_rows;
        a.counts = s_.sel_counts;
        a.selected_total = s_.selected_total;
        STRATA_RETURN_IF_ERROR(cuda::IndexerDecode(a, s_.index_ws, plan_.index_ws, stream_));
      } else {
        cuda::IndexerPrefillArgs a;
        a.shape = ishape;
        a.num_tokens = n;
        a.past = past;
        a.q = s_.iq;
        a.ld_q = icols;
        a.weights = s_.iw;
        a.ld_w = g.HI;
        a.cache = icache;
        a.rows = s_.sel_rows;
        a.counts = s_.sel_counts;
        a.selected_total = s_.selected_total;
        STRATA_RETURN_IF_ERROR(cuda::IndexerPrefill(a, s_.index_ws, plan_.index_ws, stream_));
      }
    }
    // Absorbed form: q̃_h = W_UK,hᵀ q_nope,h for every head at once.
    cuda::StridedBatchedGemmArgs uk;
    uk.g.m = n;
    uk.g.n = g.r;
    uk.g.k = g.dn;
    uk.g.x = s_.q;
    uk.g.x_type = ActType::kBf16;
    uk.g.ldx = qcols;
    uk.g.w = w.kv_b;
    uk.g.ldw = g.r;
    uk.g.y = s_.q_abs;
    uk.g.y_type = ActType::kBf16;
    uk.g.ldy = g.H * g.cd;
    uk.count = g.H;
    uk.stride_x = g.qd;
    uk.stride_w = kvb_row * g.r;
    uk.stride_y = g.cd;
    uk.transpose_w = true;
    if (invariant_) {  // the same product on the pre-transposed copy, W_h = [r, dn]
      uk.g.w = w.uk_t;
      uk.g.ldw = g.dn;
      uk.stride_w = g.r * g.dn;
      uk.transpose_w = false;
    }
    STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*blas_, uk, stream_));
    // The rotated q_rope rides along: q_abs[:, h, r:] = q[:, h, dn:].
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        s_.q_abs + g.r, sizeof(bf16) * static_cast<size_t>(g.cd), s_.q + g.dn,
        sizeof(bf16) * static_cast<size_t>(g.qd), sizeof(bf16) * static_cast<size_t>(g.dr),
        static_cast<size_t>(n * g.H), cudaMemcpyDeviceToDevice, stream_));
    if (decode) {
      cuda::MlaDecodeArgs a;
      a.shape = shape;
      a.batch = n;
      a.q_abs = s_.q_abs;
      a.cache = cache;
      a.seq_lens = seq_lens;
      a.max_seq_len = sparse ? g.K : bound;
      a.out_latent = s_.lat_o;
      a.out_type = ActType::kBf16;
      if (sparse) {
        a.sparse.rows = s_.sel_rows;
        a.sparse.counts = s_.sel_counts;
        a.sparse.stride = g.K;
      }
      a.batch_invariant = invariant_;
      STRATA_RETURN_IF_ERROR(cuda::MlaDecode(a, s_.mla_ws, plan_.mla_ws, stream_));
    } else {
      cuda::MlaSparsePrefillArgs a;
      a.shape = shape;
      a.num_tokens = n;
      a.q_abs = s_.q_abs;
      a.cache = cache;
      a.rows = s_.sel_rows;
      a.counts = s_.sel_counts;
      a.top_k = g.K;
      a.out_latent = s_.lat_o;
      a.out_type = ActType::kBf16;
      a.batch_invariant = invariant_;
      STRATA_RETURN_IF_ERROR(cuda::MlaSparsePrefill(a, s_.mla_ws, plan_.mla_ws, stream_));
    }
    // o_h = W_UV,h õ_h.
    cuda::StridedBatchedGemmArgs uv;
    uv.g.m = n;
    uv.g.n = g.dv;
    uv.g.k = g.r;
    uv.g.x = s_.lat_o;
    uv.g.x_type = ActType::kBf16;
    uv.g.ldx = g.H * g.r;
    uv.g.w = w.kv_b + g.dn * g.r;
    uv.g.ldw = g.r;
    uv.g.y = s_.attn;
    uv.g.y_type = ActType::kBf16;
    uv.g.ldy = g.H * g.dv;
    uv.count = g.H;
    uv.stride_x = g.r;
    uv.stride_w = kvb_row * g.r;
    uv.stride_y = g.dv;
    uv.transpose_w = false;
    STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*blas_, uv, stream_));
  }
  return Mm(s_.attn, ActType::kBf16, g.H * g.dv, n, w.o, g.D, g.H * g.dv, s_.h, ActType::kF32,
            g.D, 1.f);
}

Status DeepseekV32CudaModel::EnqueueMixer(size_t layer, int64_t n, const DsaCudaState* ps,
                                          int64_t past, const StepVariant& v) const {
  return Attention(w_.layers[layer], static_cast<int64_t>(layer), n, past, v.bound, v.sparse);
}

int64_t DeepseekV32CudaModel::EffectiveAttendedTokens(const SequenceState& state,
                                                      int64_t new_tokens) const {
  return DsaAttendedTokens(cfg_, state.num_tokens() + new_tokens);
}

DeepseekV32CudaStats DeepseekV32CudaModel::Stats() const {
  DeepseekV32CudaStats s;
  static_cast<CudaExecutorStats&>(s) = ExecutorStats();
  std::lock_guard<std::mutex> lock(mu_);
  s.fp8_weight_bytes = fp8_.bytes;
  s.fp8_matrices = fp8_.matrices;
  s.index_topk = g_.K;
  s.sparse_prefill_layers = sparse_prefill_layers_;
  s.dense_prefill_layers = dense_prefill_layers_;
  s.sparse_decode_steps = sparse_decode_steps_;
  s.dense_decode_steps = dense_decode_steps_;
  unsigned long long selected = 0;
  // Every forward pass synchronises before returning, so the counter is final.
  if (cudaMemcpy(&selected, s_.selected_total, sizeof(selected), cudaMemcpyDeviceToHost) ==
      cudaSuccess) {
    s.selected_rows = selected;
  } else {
    cudaGetLastError();
  }
  return s;
}

}  // namespace dsv32_cuda
}  // namespace strata
