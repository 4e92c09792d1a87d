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

DsaCudaState::~DsaCudaState() { book_->GiveBack(slot_, blocks_); }

std::unique_ptr<SequenceState> DsaCudaState::Clone() const { return owner_->CloneState(*this); }

void DsaCudaState::Reset() { owner_->ResetState(*this); }

// ----------------------------------------------------------------------------
// Small helpers

Status DeepseekV32CudaModel::Sync(const char* what) const {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return cuda::CudaError(e, what);
  return OkStatus();
}

Status DeepseekV32CudaModel::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m,
                                const bf16* w, int64_t n, int64_t k, void* y, ActType y_type,
                                int64_t ldy, float beta, float alpha) const {
  cuda::GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = x;
  a.x_type = x_type;
  a.ldx = ldx;
  a.w = w;
  a.ldw = k;
  a.y = y;
  a.y_type = y_type;
  a.ldy = ldy;
  a.alpha = alpha;
  a.beta = beta;
  return cuda::Gemm(*blas_, a, stream_);
}

Status DeepseekV32CudaModel::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m,
                                const Mat& w, int64_t n, int64_t k, void* y, ActType y_type,
                                int64_t ldy, float beta, float alpha) const {
  if (!w.is_fp8()) {
    return Mm(x, x_type, ldx, m, static_cast<const bf16*>(w.bf), n, k, y, y_type, ldy, beta, alpha);
  }
  if (x_type != ActType::kBf16) {
    return absl::InternalError("deepseek_v32 CUDA: FP8 weights take bf16 activations only");
  }
  cuda::Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = static_cast<const bf16*>(x);
  a.ldx = ldx;
  a.w.w = w.fp8;
  a.w.ldw = k;
  a.w.scale = w.scale;
  a.w.ld_scale = CeilDiv(k, w.block_cols);
  a.w.block_rows = kFp8ScaleRows;
  a.w.block_cols = w.block_cols;
  a.y = y;
  a.y_type = y_type;
  a.ldy = ldy;
  a.alpha = alpha;
  a.beta = beta;
  a.tile = s_.fp8_tile;
  a.tile_elems = plan_.fp8_tile;
  return cuda::Fp8Gemm(*blas_, a, stream_);
}

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

int64_t DeepseekV32CudaModel::LengthBound(int64_t max_len) const {
  int64_t b = kMinMlaBucket;
  while (b < max_len) b *= 2;
  return std::min(b, plan_.max_ctx);
}

Status DeepseekV32CudaModel::CheckState(SequenceState* s, DsaCudaState** out,
                                        const char* what) const {
  auto* st = dynamic_cast<DsaCudaState*>(s);
  if (st == nullptr || st->owner_ != this) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the state was not created by this model's NewState"));
  }
  *out = st;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// States

StatusOr<std::unique_ptr<SequenceState>> DeepseekV32CudaModel::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (max_tokens > plan_.max_ctx) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NewState: max_tokens ", max_tokens, " exceeds the model's context of ", plan_.max_ctx,
        " (the CUDA plan; raise LoadOptions.max_context_tokens)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("NewState: all ", pools_.slots,
                                                     " sequence slots are in use "
                                                     "(LoadOptions.max_sequences)"));
  }
  return std::unique_ptr<SequenceState>(
      std::make_unique<DsaCudaState>(this, book_, book_->NextId(), slot, max_tokens));
}

void DeepseekV32CudaModel::ResetState(DsaCudaState& st) const {
  std::lock_guard<std::mutex> lock(mu_);
  book_->GiveBackBlocks(st.blocks_);
  st.tokens_ = 0;
  ++st.generation_;
}

std::unique_ptr<SequenceState> DeepseekV32CudaModel::CloneState(const DsaCudaState& src) const {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) return nullptr;
  auto st = std::make_unique<DsaCudaState>(this, book_, book_->NextId(), slot, src.max_tokens_);
  if (!book_->TakeBlocks(static_cast<int64_t>(src.blocks_.size()), st->blocks_)) return nullptr;
  const Geometry& g = g_;
  bool ok = true;
  const int64_t nb = static_cast<int64_t>(src.blocks_.size());
  // Both caches of every layer, runs of consecutive blocks as one copy.
  for (int pool = 0; pool < 2 && ok; ++pool) {
    const int64_t row = pool == 0 ? g.cd : g.dI;
    const int64_t block_elems = kBlockTokens * row;
    for (int64_t l = 0; l < g.L && ok; ++l) {
      bf16* base = (pool == 0 ? pools_.kv : pools_.ik) + l * pools_.blocks * block_elems;
      for (int64_t j = 0; j < nb && ok;) {
        int64_t run = 1;
        while (j + run < nb && src.blocks_[j + run] == src.blocks_[j] + run &&
               st->blocks_[j + run] == st->blocks_[j] + run) {
          ++run;
        }
        ok = cudaMemcpyAsync(base + st->blocks_[j] * block_elems,
                             base + src.blocks_[j] * block_elems,
                             sizeof(bf16) * static_cast<size_t>(run * block_elems),
                             cudaMemcpyDeviceToDevice, stream_) == cudaSuccess;
        j += run;
      }
    }
  }
  if (!ok || !Sync("Clone").ok()) {
    cudaGetLastError();
    return nullptr;
  }
  st->tokens_ = src.tokens_;
  return st;
}

Status DeepseekV32CudaModel::EnsureBlocks(DsaCudaState& st, int64_t tokens) const {
  const int64_t need = CeilDiv(tokens, kBlockTokens) - static_cast<int64_t>(st.blocks_.size());
  if (need <= 0) return OkStatus();
  if (!book_->TakeBlocks(need, st.blocks_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the paged attention cache is full: ", need, " more blocks of ", kBlockTokens,
        " tokens needed, ", book_->FreeBlocks(), " of ", pools_.blocks,
        " free (the cache gets LoadOptions.gpu_memory_fraction of the device's free memory "
        "after weights and scratch)"));
  }
  return OkStatus();
}

Status DeepseekV32CudaModel::UploadPrefillTable(const DsaCudaState& st, int64_t tokens) const {
  const int64_t n = CeilDiv(tokens, kBlockTokens);
  const int64_t off = plan_.max_batch * plan_.max_blocks;
  std::memcpy(h_block_table_ + off, st.blocks_.data(), sizeof(int32_t) * static_cast<size_t>(n));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.block_table + off, h_block_table_ + off,
                                              sizeof(int32_t) * static_cast<size_t>(n),
                                              cudaMemcpyHostToDevice, stream_));
  return OkStatus();
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

  const bool sparse = decode ? sparse_decode : past + n > g.K;
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

Status DeepseekV32CudaModel::Ffn(const Layer& L, int64_t n, const float** pending) const {
  const Geometry& g = g_;
  const FfnLayer& f = L.ffn;
  auto swiglu = [&](int64_t inter) -> Status {
    STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, f.gate_up, 2 * inter, g.D, s_.gu,
                              ActType::kBf16, 2 * inter, 0.f));
    STRATA_RETURN_IF_ERROR(cuda::SiluMul(s_.gu, ActType::kBf16, n, inter, s_.act, stream_));
    return Mm(s_.act, ActType::kBf16, inter, n, f.down, g.D, inter, s_.h, ActType::kF32, g.D, 1.f);
  };
  if (!L.is_moe) return swiglu(g.I_dense);
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, f.router, g.E, g.D, s_.router_logits,
                            ActType::kF32, g.E, 0.f));
  cuda::MoeArgs a;
  a.shape = MoeShapeOf(g);
  a.num_tokens = n;
  a.x = s_.xn;
  a.router_logits = s_.router_logits;
  a.score_bias = f.score_bias;
  if (f.w13.is_fp8()) {
    a.shape.fp8_experts = true;
    a.fp8.w13 = f.w13.fp8;
    a.fp8.w13_scale = f.w13.scale;
    a.fp8.w2 = f.w2.fp8;
    a.fp8.w2_scale = f.w2.scale;
    a.fp8.block_rows = kFp8ScaleRows;
    a.fp8.block_cols = f.w13.block_cols;
  } else {
    a.w13 = f.w13.bf;
    a.w2 = f.w2.bf;
  }
  a.y = s_.delta;
  STRATA_RETURN_IF_ERROR(cuda::MoeForward(a, s_.moe_ws, plan_.moe_ws, stream_));
  if (g.Is > 0) STRATA_RETURN_IF_ERROR(swiglu(g.Is));
  // The routed sum joins the residual in the next AddRmsNorm.
  *pending = s_.delta;
  return OkStatus();
}

Status DeepseekV32CudaModel::EnqueueLayers(int64_t n, const int32_t* tokens, int64_t past,
                                           int64_t bound, bool sparse_decode,
                                           const float** pending) const {
  const Geometry& g = g_;
  STRATA_RETURN_IF_ERROR(cuda::EmbeddingGather(w_.embed, g.D, tokens, n, s_.h, stream_));
  const float* pend = nullptr;
  for (int64_t l = 0; l < g.L; ++l) {
    const Layer& L = w_.layers[static_cast<size_t>(l)];
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pend, ActType::kF32, n, g.D, L.input_norm, g.eps,
                                            s_.xn, stream_));
    pend = nullptr;
    STRATA_RETURN_IF_ERROR(Attention(L, l, n, past, bound, sparse_decode));
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, nullptr, ActType::kF32, n, g.D, L.post_norm,
                                            g.eps, s_.xn, stream_));
    STRATA_RETURN_IF_ERROR(Ffn(L, n, &pend));
  }
  *pending = pend;
  return OkStatus();
}

Status DeepseekV32CudaModel::EnqueueDecode(int64_t batch, int64_t bound, bool sample,
                                           bool sparse) const {
  const Geometry& g = g_;
  const float* pending = nullptr;
  STRATA_RETURN_IF_ERROR(EnqueueLayers(batch, s_.step, 0, bound, sparse, &pending));
  STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pending, ActType::kF32, batch, g.D, w_.final_norm,
                                          g.eps, s_.xn, stream_));
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, batch, w_.lm_head, g.V, g.D, s_.logits,
                            ActType::kF32, g.V, 0.f));
  if (sample) {
    STRATA_RETURN_IF_ERROR(cuda::SampleTokens(s_.logits, batch, g.V, s_.sampling, s_.sampled,
                                              s_.sample_ws, plan_.sample_ws, stream_));
  }
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Decode steps and graphs (the kimi_linear executor's scheme)

Status DeepseekV32CudaModel::RunDecodeStep(int64_t batch, int64_t bound, bool sample,
                                           bool sparse) const {
  auto eager = [&]() {
    ++eager_steps_;
    return EnqueueDecode(batch, bound, sample, sparse);
  };
  if (!graphs_enabled_) return eager();
  GraphEntry& e = graphs_[GraphKey{batch, bound, sample, sparse}];
  if (e.exec != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(e.exec, stream_));
    ++graph_launches_;
    return OkStatus();
  }
  if (e.eager_runs++ == 0) return eager();  // load the kernels outside a capture

  auto give_up = [&](const std::string& why) {
    cudaGetLastError();
    graphs_enabled_ = false;
    graph_error_ = why;
    return eager();
  };
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueDecode(batch, bound, sample, sparse);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return give_up(absl::StrCat("stream capture failed: ", cudaGetErrorString(ended),
                                enqueued.ok() ? "" : absl::StrCat(" (", enqueued.message(), ")")));
  }
  if (!enqueued.ok()) {
    cudaGraphDestroy(graph);
    return enqueued;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    return give_up(absl::StrCat("cudaGraphInstantiate failed: ", cudaGetErrorString(inst)));
  }
  e.exec = exec;
  ++graph_captures_;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));
  ++graph_launches_;
  return OkStatus();
}

Status DeepseekV32CudaModel::DecodeLocked(std::span<const int32_t> tokens,
                                          std::span<DsaCudaState* const> states, float* logits,
                                          std::span<const DecodeSampling> sampling,
                                          int32_t* out_tokens) const {
  const Geometry& g = g_;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t B_max = plan_.max_batch;
  for (int64_t b = 0; b < total; ++b) {
    const int32_t t = tokens[static_cast<size_t>(b)];
    if (t < 0 || t >= g.V) {
      return absl::InvalidArgumentError(absl::StrCat("decode: token id ", t, " in row ", b,
                                                     " is outside the vocabulary [0, ", g.V, ")"));
    }
    const DsaCudaState& st = *states[static_cast<size_t>(b)];
    if (st.tokens_ + 1 > st.max_tokens_) {
      return absl::OutOfRangeError(absl::StrCat("decode: row ", b, ": 1 token on top of ",
                                                st.tokens_, " exceeds the state's capacity of ",
                                                st.max_tokens_));
    }
  }
  if (total > B_max) {
    for (int64_t b0 = 0; b0 < total; b0 += B_max) {
      const size_t n = static_cast<size_t>(std::min(B_max, total - b0));
      const size_t at = static_cast<size_t>(b0);
      STRATA_RETURN_IF_ERROR(DecodeLocked(
          tokens.subspan(at, n), states.subspan(at, n), logits ? logits + b0 * g.V : nullptr,
          sampling.empty() ? sampling : sampling.subspan(at, n),
          out_tokens ? out_tokens + b0 : nullptr));
    }
    return OkStatus();
  }
  const int64_t B = total;
  int64_t need = 0;
  for (DsaCudaState* st : states) {
    need += std::max<int64_t>(
        0, CeilDiv(st->tokens_ + 1, kBlockTokens) - static_cast<int64_t>(st->blocks_.size()));
  }
  if (need > book_->FreeBlocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the paged attention cache is full: ", need, " more blocks needed, ",
                     book_->FreeBlocks(), " of ", pools_.blocks, " free"));
  }
  for (DsaCudaState* st : states) STRATA_RETURN_IF_ERROR(EnsureBlocks(*st, st->tokens_ + 1));

  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    DsaCudaState& st = *states[static_cast<size_t>(b)];
    h_step_[b] = tokens[static_cast<size_t>(b)];
    h_step_[B_max + b] = st.slot_;
    h_step_[2 * B_max + b] = static_cast<int32_t>(st.tokens_);
    h_step_[3 * B_max + b] = static_cast<int32_t>(st.tokens_ + 1);
    max_len = std::max(max_len, st.tokens_ + 1);
    RowOwner& ro = row_owner_[static_cast<size_t>(b)];
    const int64_t nb = static_cast<int64_t>(st.blocks_.size());
    int64_t from = ro.blocks;
    if (ro.id != st.id_ || ro.generation != st.generation_) from = 0;
    if (from < nb) {
      int32_t* row = h_block_table_ + b * plan_.max_blocks;
      std::memcpy(row + from, st.blocks_.data() + from,
                  sizeof(int32_t) * static_cast<size_t>(nb - from));
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          s_.block_table + b * plan_.max_blocks + from, row + from,
          sizeof(int32_t) * static_cast<size_t>(nb - from), cudaMemcpyHostToDevice, stream_));
    }
    ro = RowOwner{st.id_, st.generation_, nb};
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.step, h_step_,
                                              sizeof(int32_t) * static_cast<size_t>(4 * B_max),
                                              cudaMemcpyHostToDevice, stream_));
  const bool sample = !sampling.empty();
  if (sample) {
    for (int64_t b = 0; b < B; ++b) {
      const DecodeSampling& d = sampling[static_cast<size_t>(b)];
      cuda::GpuSamplingRow& row = h_sampling_[b];
      row.temperature = d.temperature;
      row.top_k = d.top_k;
      row.top_p = d.top_p;
      row.seed = d.seed;
      row.step = d.step;
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.sampling, h_sampling_,
                                                sizeof(cuda::GpuSamplingRow) * static_cast<size_t>(B),
                                                cudaMemcpyHostToDevice, stream_));
  }

  const bool sparse = max_len > g.K;
  ++(sparse ? sparse_decode_steps_ : dense_decode_steps_);
  STRATA_RETURN_IF_ERROR(RunDecodeStep(B, LengthBound(max_len), sample, sparse));

  if (logits != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_logits_, s_.logits,
                                                sizeof(float) * static_cast<size_t>(B * g.V),
                                                cudaMemcpyDeviceToHost, stream_));
  }
  if (sample) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_sampled_, s_.sampled,
                                                sizeof(int32_t) * static_cast<size_t>(B),
                                                cudaMemcpyDeviceToHost, stream_));
  }
  STRATA_RETURN_IF_ERROR(Sync("decode step"));
  if (logits != nullptr) {
    std::memcpy(logits, h_logits_, sizeof(float) * static_cast<size_t>(B * g.V));
  }
  if (sample && out_tokens != nullptr) {
    std::memcpy(out_tokens, h_sampled_, sizeof(int32_t) * static_cast<size_t>(B));
  }
  for (DsaCudaState* st : states) ++st->tokens_;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Prefill

Status DeepseekV32CudaModel::Prefill(std::span<const int32_t> tokens, DsaCudaState& st,
                                     float* logits, bool all_logits) const {
  const Geometry& g = g_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  STRATA_RETURN_IF_ERROR(EnsureBlocks(st, st.tokens_ + T));
  STRATA_RETURN_IF_ERROR(UploadPrefillTable(st, st.tokens_ + T));
  const int64_t chunk_rows = std::max(plan_.max_batch, kLogitsChunkRows);
  for (int64_t begin = 0; begin < T; begin += plan_.slice) {
    const int64_t n = std::min(plan_.slice, T - begin);
    const bool last = begin + n == T;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.tokens, tokens.data() + begin,
                                                sizeof(int32_t) * static_cast<size_t>(n),
                                                cudaMemcpyHostToDevice, stream_));
    const float* pending = nullptr;
    STRATA_RETURN_IF_ERROR(EnqueueLayers(n, s_.tokens, st.tokens_, 0, false, &pending));
    st.tokens_ += n;
    if (logits == nullptr || (!all_logits && !last)) continue;
    if (all_logits) {
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pending, ActType::kF32, n, g.D, w_.final_norm,
                                              g.eps, s_.xn, stream_));
      for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
        const int64_t m = std::min(chunk_rows, n - r0);
        STRATA_RETURN_IF_ERROR(Mm(s_.xn + r0 * g.D, ActType::kBf16, g.D, m, w_.lm_head, g.V, g.D,
                                  s_.logits, ActType::kF32, g.V, 0.f));
        // To pageable memory the copy completes before the call returns.
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
            logits + (begin + r0) * g.V, s_.logits, sizeof(float) * static_cast<size_t>(m * g.V),
            cudaMemcpyDeviceToHost, stream_));
      }
    } else {
      const int64_t at = (n - 1) * g.D;
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h + at, pending ? pending + at : nullptr,
                                              ActType::kF32, 1, g.D, w_.final_norm, g.eps, s_.xn,
                                              stream_));
      STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, 1, w_.lm_head, g.V, g.D, s_.logits,
                                ActType::kF32, g.V, 0.f));
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, s_.logits,
                                                  sizeof(float) * static_cast<size_t>(g.V),
                                                  cudaMemcpyDeviceToHost, stream_));
    }
  }
  return Sync("prefill");
}

// ----------------------------------------------------------------------------
// Model interface

Status DeepseekV32CudaModel::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                     float* logits, bool all_logits) const {
  DsaCudaState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckState(&state, &st, "Forward"));
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("Forward: no tokens");
  for (int64_t i = 0; i < T; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= g_.V) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: token id ", t, " at position ", i,
                                                     " is outside the vocabulary [0, ", g_.V, ")"));
    }
  }
  if (st->tokens_ + T > st->max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("Forward: ", T, " tokens on top of ", st->tokens_,
                                              " exceed the state's capacity of ", st->max_tokens_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  if (T == 1) {
    // One token takes the decode path (absorbed attention) even on an empty
    // state: the same math as a one-token prefill.
    DsaCudaState* const one[1] = {st};
    return DecodeLocked(tokens, std::span<DsaCudaState* const>(one, 1), logits, {}, nullptr);
  }
  return Prefill(tokens, *st, logits, all_logits);
}

Status DeepseekV32CudaModel::DecodeBatch(std::span<const int32_t> tokens,
                                         std::span<SequenceState* const> states,
                                         float* logits) const {
  if (tokens.size() != states.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeBatch: ", tokens.size(), " tokens for ",
                                                   states.size(), " states"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeBatch: no sequences");
  std::vector<DsaCudaState*> cs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    if (states[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeBatch: states[", b, "] is null"));
    }
    STRATA_RETURN_IF_ERROR(CheckState(states[b], &cs[b], "DecodeBatch"));
    for (size_t j = 0; j < b; ++j) {
      if (cs[j] == cs[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("DecodeBatch: states[", b, "] appears twice in the batch"));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  return DecodeLocked(tokens, cs, logits, {}, nullptr);
}

Status DeepseekV32CudaModel::DecodeBatchSample(std::span<const int32_t> tokens,
                                               std::span<SequenceState* const> states,
                                               std::span<const DecodeSampling> sampling,
                                               int32_t* out_tokens) const {
  if (tokens.size() != states.size() || sampling.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeBatchSample: ", tokens.size(), " tokens, ", states.size(),
                     " states and ", sampling.size(), " sampling rows (must be equal)"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeBatchSample: no sequences");
  if (out_tokens == nullptr) {
    return absl::InvalidArgumentError("DecodeBatchSample: out_tokens is null");
  }
  std::vector<DsaCudaState*> cs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    if (states[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeBatchSample: states[", b, "] is null"));
    }
    STRATA_RETURN_IF_ERROR(CheckState(states[b], &cs[b], "DecodeBatchSample"));
    for (size_t j = 0; j < b; ++j) {
      if (cs[j] == cs[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("DecodeBatchSample: states[", b, "] appears twice in the batch"));
      }
    }
    const DecodeSampling& d = sampling[b];
    if (!(d.temperature >= 0.f) || d.top_k < 0 || !(d.top_p > 0.f && d.top_p <= 1.f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DecodeBatchSample: sampling[", b, "] needs temperature >= 0, top_k >= 0 and top_p in "
          "(0, 1]"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  return DecodeLocked(tokens, cs, nullptr, sampling, out_tokens);
}

Status DeepseekV32CudaModel::FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                                     uint64_t seed) const {
  DsaCudaState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckState(&state, &st, "FillContextForBenchmark"));
  if (st->tokens_ != 0) {
    return absl::FailedPreconditionError("FillContextForBenchmark: the state must be empty");
  }
  if (num_tokens < 0 || num_tokens > st->max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("FillContextForBenchmark: ", num_tokens,
                                              " tokens do not fit the state's capacity of ",
                                              st->max_tokens_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  const Geometry& g = g_;
  STRATA_RETURN_IF_ERROR(EnsureBlocks(*st, num_tokens));
  ++st->generation_;
  uint64_t counter = 0;
  auto next = [&] { return seed * 0x9e3779b97f4a7c15ull + (++counter) * 0xd1b54a32d192ed03ull; };
  const int64_t nb = static_cast<int64_t>(st->blocks_.size());
  for (int pool = 0; pool < 2; ++pool) {
    const int64_t block_elems = kBlockTokens * (pool == 0 ? g.cd : g.dI);
    for (int64_t l = 0; l < g.L; ++l) {
      bf16* base = (pool == 0 ? pools_.kv : pools_.ik) + l * pools_.blocks * block_elems;
      for (int64_t j = 0; j < nb;) {
        int64_t run = 1;
        while (j + run < nb && st->blocks_[j + run] == st->blocks_[j] + run) ++run;
        STRATA_RETURN_IF_ERROR(cuda::FillRandomBf16(base + st->blocks_[j] * block_elems,
                                                    run * block_elems, next(), 1.f, stream_));
        j += run;
      }
    }
  }
  STRATA_RETURN_IF_ERROR(Sync("FillContextForBenchmark"));
  st->tokens_ = num_tokens;
  return OkStatus();
}

int64_t DeepseekV32CudaModel::EffectiveAttendedTokens(const SequenceState& state,
                                                      int64_t new_tokens) const {
  return DsaAttendedTokens(cfg_, state.num_tokens() + new_tokens);
}

DeepseekV32CudaStats DeepseekV32CudaModel::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DeepseekV32CudaStats s;
  s.weight_bytes = weight_bytes_;
  s.scratch_bytes = scratch_bytes_;
  s.kv_pool_bytes = kv_pool_bytes_;
  s.fp8_weight_bytes = fp8_.bytes;
  s.fp8_matrices = fp8_.matrices;
  s.kv_blocks_total = pools_.blocks;
  {
    std::lock_guard<std::mutex> book_lock(book_->mu);
    s.kv_blocks_free = static_cast<int64_t>(book_->free_blocks.size());
  }
  s.max_batch = plan_.max_batch;
  s.max_context_tokens = plan_.max_ctx;
  s.prefill_slice_tokens = plan_.slice;
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
  s.graph_captures = graph_captures_;
  s.graph_launches = graph_launches_;
  s.eager_steps = eager_steps_;
  s.graph_error = graph_error_;
  return s;
}

}  // namespace dsv32_cuda
}  // namespace strata
