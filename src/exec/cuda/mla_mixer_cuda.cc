// Multi-head latent attention on the GPU (model-spec §2.4, §3.3;
// exec/cpu/mla_layer.cc is the reference), in both forms the MlaSpec allows:
// Kimi's (q from the hidden state, NoPE keys) and DeepSeek Sparse Attention
// (a low-rank query, YaRN rotary keys, the lightning indexer).
//   Kimi: q = xn·W_qᵀ, [c|k_r] = xn·W_kvaᵀ
//   DSA:  a = xn·[q_a | kv_a | wk]ᵀ (one product; segments padded to 8 rows
//         so each starts 16-byte aligned and on its own FP8 scale rows),
//         c_q = RMSNorm(a_q), q = c_q·W_qbᵀ, index key = rope_hs(LayerNorm(a_k))
//   c = RMSNorm(c), rope_il on k_r and on each head's last dr of q; the row
//   [c | k_r] → paged latent cache (the index key → the index cache, same
//   block table)
//   dense (no query with more than index_topk causal keys; always without
//   an indexer):
//     prefill: gather latents, kv = kv_b(c) for all S keys, flash attention
//     decode:  q̃ = W_UKᵀ q_nope per head, attention over the latents (q_rope
//              read in place from q), o = W_UV õ per head (absorbed: the
//              cache is never expanded)
//   sparse: iq = rope_hs(c_q·wq_bᵀ), iw = H_I^-1/2 · xn·weights_projᵀ, the
//     indexer's top-k per query over the index cache, then the absorbed
//     attention over the selected latents only (prefill and decode alike)
//   h += o_proj(o)
// rope_il: interleaved pairs written back [evens | odds] (transformers'
// apply_rotary_pos_emb_interleave), rope_hs: half-split pairs; both read the
// CPU's cos/sin table (attention factor folded in).
//
// As on the CPU, a query attends densely while its causal keys number at
// most index_topk (the indexer would select all of them). A decode step is
// sparse as a whole when any of its sequences is longer; the shorter ones
// then select every key, which is the same attention. Batch-invariant mode
// takes the sparse path for every query: the dense and absorbed forms round
// differently, and which one a query got would otherwise depend on the
// length of its call or on the longest sequence of its batch.
//
// Decode steps of few rows branch onto the side stream (CudaOps::Branching):
// Kimi's latent row (kv_a, its norm, the cache write) beside the query path;
// DSA's indexer (its query, head weights and top-k) beside q_b and the
// absorption.
// State: 64-token blocks of bf16 latent rows [64, r + dr] per layer, and of
// index keys [64, dI] with the indexer.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/rope_yarn.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/rope.h"
#include "exec/cuda/cuda_load_helpers.h"
#include "exec/cuda/cuda_mixer.h"

namespace strata {
namespace cuda_exec {
namespace {

using cuda::ActType;

// One operand of a per-head product: head h's matrix at p + h·head_stride,
// rows ld elements apart.
struct Heads {
  const void* p = nullptr;
  int64_t ld = 0, head_stride = 0;
};

// y_h = x_h·W_hᵀ for each of `heads` heads (bf16 in and out; x_h [m, k],
// W_h [n, k], y_h [m, n]): the absorbed form's products, one strided batched
// GEMM. early_trigger: GemmArgs'.
Status PerHead(cuda::BlasContext& blas, int64_t heads, int64_t m, int64_t n, int64_t k, Heads x,
               Heads w, Heads y, bool early_trigger, cudaStream_t stream) {
  cuda::StridedBatchedGemmArgs a;
  a.g.m = m;
  a.g.n = n;
  a.g.k = k;
  a.g.x = x.p;
  a.g.x_type = ActType::kBf16;
  a.g.ldx = x.ld;
  a.g.w = static_cast<const bf16*>(w.p);
  a.g.ldw = w.ld;
  a.g.y = const_cast<void*>(y.p);
  a.g.y_type = ActType::kBf16;
  a.g.ldy = y.ld;
  a.g.early_trigger = early_trigger;
  a.count = heads;
  a.stride_x = x.head_stride;
  a.stride_w = w.head_stride;
  a.stride_y = y.head_stride;
  return cuda::StridedBatchedGemm(blas, a, stream);
}

// For each (kv_b, uk_t) pair fills uk_t [heads, r, dn] with W_UK,hᵀ, W_UK,h
// being kv_b's rows h·(dn+dv) .. +dn−1 ([dn, r]), so the absorption is a
// plain x·Wᵀ product (the streaming GEMV and the invariant GEMMs have no
// transposed-W variant). Computed as I_r · W_UK,hᵀ: a product with the
// identity is exact (one nonzero term per output), so the copy is bit for
// bit the checkpoint's. Synchronises.
Status TransposeUkPerHead(cuda::BlasContext& blas,
                          const std::vector<std::pair<const bf16*, bf16*>>& layers, int64_t heads,
                          int64_t dn, int64_t dv, int64_t r, cudaStream_t stream) {
  if (layers.empty()) return OkStatus();
  std::vector<uint16_t> eye(static_cast<size_t>(r * r), 0);
  for (int64_t i = 0; i < r; ++i) eye[static_cast<size_t>(i * r + i)] = 0x3F80;  // bf16 1.0
  void* d_eye = nullptr;
  const size_t bytes = eye.size() * sizeof(uint16_t);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_eye, bytes));
  Status st = [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_eye, eye.data(), bytes, cudaMemcpyHostToDevice, stream));
    for (const auto& [kv_b, uk_t] : layers) {
      STRATA_RETURN_IF_ERROR(PerHead(blas, heads, r, dn, r, {d_eye, r, 0}, {kv_b, r, (dn + dv) * r},
                                     {uk_t, dn, r * dn}, false, stream));
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return OkStatus();
  }();
  cudaFree(d_eye);
  return st;
}

// Sparse prefill runs in the absorbed form, whose per-token buffers (q̃
// [H, r+dr] and the latent output [H, r], ~0.28 MB per token at the
// published shapes) are what the slice multiplies.
constexpr int64_t kDsaSliceTokens = 2048;
constexpr int64_t kMlaSliceTokens = 8192;

class MlaMixer final : public CudaMixer {
 public:
  MlaMixer(const exec::MlaSpec& s, const MixerContext& ctx) : CudaMixer(ctx), s_(s) {
    qd_ = s.nope_dim + s.rope_dim;
    cd_ = s.kv_lora_rank + s.rope_dim;
    lora_ = s.q_lora_rank > 0;
    if (s.indexer.has_value()) {
      idx_ = *s.indexer;
      ishape_.num_heads = idx_.heads;
      ishape_.head_dim = idx_.head_dim;
      ishape_.top_k = idx_.top_k;
    }
    // [q_a | kv_a | wk] with a q LoRA, else kv_a alone.
    off_kv_ = lora_ ? Pad8(s.q_lora_rank) : 0;
    off_ik_ = off_kv_ + (lora_ ? Pad8(cd_) : cd_);
    n_a_ = off_ik_ + (indexed() ? Pad8(idx_.head_dim) : 0);
    shape_.num_heads = s.heads;
    shape_.nope_dim = s.nope_dim;
    shape_.rope_dim = s.rope_dim;
    shape_.v_dim = s.v_dim;
    shape_.kv_rank = s.kv_lora_rank;
    shape_.scale = s.softmax_scale;
  }

  int64_t PreferredSlice() const override { return indexed() ? kDsaSliceTokens : kMlaSliceTokens; }
  void Plan(const SequencePlan& p) override;
  void CarveMember(size_t i, WeightCarver& c) override;
  void CarveScratch(const SequencePlan& p, Carver& c) override;
  std::vector<PoolArray> BlockArrays() const override;
  void BindPools(std::span<const StateRegion>, std::span<const StateRegion> blocks) override {
    cache_ = blocks[0];
    if (indexed()) index_cache_ = blocks[1];
  }
  Status UploadMember(size_t i, const TensorSink& sink) override;
  Status FillDummyMember(size_t i, DummyFill& fill) override;
  // uk_t from kv_b; the rotary tables.
  Status Finalize(const CudaOps& ops) override;
  int64_t DecodeLengthBound(int64_t max_len, int64_t max_ctx) const override {
    return LengthBucket(max_len, max_ctx);
  }
  bool SparseDecode(int64_t max_len) const override;
  int64_t AttendedTokens(int64_t context) const override {
    return indexed() ? std::min(context, idx_.top_k) : context;
  }
  Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                 const MixerPass& pass) const override;
  void AddCounters(std::map<std::string, uint64_t>& counters) const override;
  Status ClearCounters(cudaStream_t stream) override;

 private:
  struct Weights {
    Mat q;                     // [H·qd, D] q_proj, or [H·qd, qr] q_b_proj with a q LoRA
    Mat a;                     // [n_a, D]: q_a (qr), kv_a (cd), index wk (dI) at 0, off_kv, off_ik
    float* q_norm = nullptr;   // [qr] q_a_layernorm
    float* kv_norm = nullptr;  // [r]
    float* ik_norm_w = nullptr;  // [dI] the index key's LayerNorm
    float* ik_norm_b = nullptr;
    bf16* kv_b = nullptr;  // [H·(dn+dv), r]
    Mat o;                 // [D, H·dv]
    Mat iq;                // [HI·dI, qr] indexer wq_b
    Mat iw;                // [HI, D] indexer weights_proj
    // W_UK,h transposed per head, [H, r, dn] (made at load from kv_b), so the
    // absorption q̃_h = W_UK,hᵀ q_nope,h is a plain x·Wᵀ product: the
    // streaming GEMV takes it, and so do the invariant kernels (no
    // transposed-W variant).
    bf16* uk_t = nullptr;
  };
  struct Scratch {
    float* rope_cos = nullptr;  // [max_ctx, dr/2]
    float* rope_sin = nullptr;
    bf16* a = nullptr;                       // [rows, n_a]
    bf16* q = nullptr;                       // [rows, H·qd]
    bf16* q_abs = nullptr;                   // [absorbed rows, H, cd]
    bf16* lat_o = nullptr;                   // [absorbed rows, H, r]
    bf16* attn = nullptr;                    // [rows, H·dv]
    bf16* lat = nullptr;                     // [dense_ctx, cd] gathered latents (dense prefill)
    bf16* kv_exp = nullptr;                  // [dense_ctx, H·(dn+dv)] expanded keys/values
    bf16* iq = nullptr;                      // [rows, HI·dI]
    float* iw = nullptr;                     // [rows, HI]
    int32_t* sel_rows = nullptr;             // [rows, top_k]
    int32_t* sel_counts = nullptr;           // [rows]
    unsigned long long* selected = nullptr;  // Σ indexer selections, all layers and passes
    void* ws = nullptr;
    void* index_ws = nullptr;
  };

  bool indexed() const { return idx_.top_k > 0; }
  bool rotary() const { return s_.rotary || indexed(); }
  // Rotates `heads` vectors per row of the pass (rows token_stride apart,
  // heads head_stride apart) from element `offset` on, at the rows' positions.
  Status Rope(cudaStream_t stream, bool interleaved, bf16* x, int64_t heads, int64_t token_stride,
              int64_t head_stride, int64_t offset, const MixerFrame& f,
              const MixerPass& pass) const;
  Status Indexer(const CudaOps& ops, cudaStream_t stream, const Weights& w, const MixerFrame& f,
                 const MixerPass& pass, const cuda::IndexKeyCache& icache) const;
  Status DensePrefill(const CudaOps& ops, const Weights& w, const MixerPass& pass,
                      const cuda::MlaCache& cache) const;
  // q̃ → latent attention (decode, or a sparse prefill) → o = W_UV õ.
  Status Absorbed(const CudaOps& ops, const Weights& w, const MixerFrame& f, const MixerPass& pass,
                  const cuda::MlaCache& cache, bool sparse, bool branch) const;

  exec::MlaSpec s_;
  exec::IndexerSpec idx_{};  // top_k 0: no indexer
  bool lora_ = false;
  int64_t qd_ = 0, cd_ = 0, n_a_ = 0, off_kv_ = 0, off_ik_ = 0;
  int64_t max_ctx_ = 0, dense_ctx_ = 0, absorbed_rows_ = 0;
  cuda::MlaShape shape_;
  cuda::IndexerShape ishape_;
  size_t ws_bytes_ = 0, index_ws_bytes_ = 0;
  std::vector<Weights> w_;
  Scratch x_;
  StateRegion cache_, index_cache_;
  mutable int64_t sparse_prefill_layers_ = 0, dense_prefill_layers_ = 0;
  mutable int64_t sparse_decode_steps_ = 0, dense_decode_steps_ = 0;
};

void MlaMixer::Plan(const SequencePlan& p) {
  const bool inv = ctx_.invariant;
  const int64_t K = idx_.top_k;
  max_ctx_ = p.max_ctx;
  dense_ctx_ = indexed() ? std::min(p.max_ctx, K) : p.max_ctx;
  // A sparse prefill absorbs every row of its slice; decode only the batch.
  absorbed_rows_ = indexed() ? p.rows : p.max_batch;
  // Sized for every (batch, length bound) a decode graph may use, dense or
  // sparse (bound index_topk), and for a sparse prefill slice. Invariant
  // mode decodes on the sparse path only when there is an indexer.
  for (int64_t b = 1; b <= p.max_batch; ++b) {
    for (int64_t len = kMinLengthBucket;; len *= 2) {
      const int64_t bound = std::min(len, p.max_ctx);
      if (!indexed() || !inv) {
        ws_bytes_ = std::max(ws_bytes_, cuda::MlaDecodeWorkspaceBytes(shape_, b, bound, inv));
      }
      // Either split plan (indexer.split_decode is read at enqueue).
      for (bool small : {false, true}) {
        if (!indexed()) break;
        index_ws_bytes_ =
            std::max(index_ws_bytes_, cuda::IndexerDecodeWorkspaceBytes(ishape_, b, bound, small));
      }
      if (bound == p.max_ctx) break;
    }
    if (indexed())
      ws_bytes_ = std::max(ws_bytes_, cuda::MlaDecodeWorkspaceBytes(shape_, b, K, inv));
  }
  if (indexed()) {
    ws_bytes_ = std::max(ws_bytes_, cuda::MlaSparsePrefillWorkspaceBytes(shape_, p.slice, K, inv));
    index_ws_bytes_ =
        std::max(index_ws_bytes_, cuda::IndexerPrefillWorkspaceBytes(
                                      ishape_, p.slice, std::max<int64_t>(0, p.max_ctx - p.slice)));
  }
}

void MlaMixer::CarveMember(size_t i, WeightCarver& c) {
  if (w_.size() <= i) w_.resize(i + 1);
  Weights& w = w_[i];
  const std::string& a = prefix(i);
  const std::string x = a + "indexer.";
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank, qr = s_.q_lora_rank;
  std::vector<std::string> fused;
  if (lora_) fused.push_back(a + "q_a_proj.weight");
  fused.push_back(a + "kv_a_proj_with_mqa.weight");
  if (indexed()) fused.push_back(x + "wk.weight");
  w.a = c.Matrix(n_a_, D, fused);
  if (lora_) w.q_norm = c.Take<float>(qr);
  w.kv_norm = c.Take<float>(r);
  if (indexed()) {
    w.ik_norm_w = c.Take<float>(idx_.head_dim);
    w.ik_norm_b = c.Take<float>(idx_.head_dim);
  }
  w.q = c.Matrix(H * qd_, lora_ ? qr : D, {a + (lora_ ? "q_b_proj.weight" : "q_proj.weight")});
  w.kv_b = c.Take<bf16>(H * (s_.nope_dim + s_.v_dim) * r);
  w.uk_t = c.Take<bf16>(H * r * s_.nope_dim);
  w.o = c.Matrix(D, H * s_.v_dim, {a + "o_proj.weight"});
  if (indexed()) {
    w.iq = c.Matrix(idx_.heads * idx_.head_dim, qr, {x + "wq_b.weight"});
    w.iw = c.Matrix(idx_.heads, D, {x + "weights_proj.weight"});
  }
}

void MlaMixer::CarveScratch(const SequencePlan& p, Carver& c) {
  const int64_t R = p.rows, A = absorbed_rows_, H = s_.heads;
  if (rotary()) {
    x_.rope_cos = c.Take<float>(p.max_ctx * s_.rope_dim / 2);
    x_.rope_sin = c.Take<float>(p.max_ctx * s_.rope_dim / 2);
  }
  x_.a = c.Take<bf16>(R * n_a_);
  x_.q = c.Take<bf16>(R * H * qd_);
  x_.q_abs = c.Take<bf16>(A * H * cd_);
  x_.lat_o = c.Take<bf16>(A * H * s_.kv_lora_rank);
  x_.attn = c.Take<bf16>(R * H * s_.v_dim);
  x_.lat = c.Take<bf16>(dense_ctx_ * cd_);
  x_.kv_exp = c.Take<bf16>(dense_ctx_ * H * (s_.nope_dim + s_.v_dim));
  if (indexed()) {
    x_.iq = c.Take<bf16>(R * idx_.heads * idx_.head_dim);
    x_.iw = c.Take<float>(R * idx_.heads);
    x_.sel_rows = c.Take<int32_t>(R * idx_.top_k);
    x_.sel_counts = c.Take<int32_t>(R);
    x_.selected = c.Take<unsigned long long>(1);
    x_.index_ws = c.Take<char>(static_cast<int64_t>(index_ws_bytes_));
  }
  x_.ws = c.Take<char>(static_cast<int64_t>(ws_bytes_));
}

std::vector<PoolArray> MlaMixer::BlockArrays() const {
  const int64_t L = static_cast<int64_t>(size());
  std::vector<PoolArray> arrays = {{L, sizeof(bf16) * static_cast<size_t>(kBlockTokens * cd_)}};
  if (indexed()) {
    arrays.push_back({L, sizeof(bf16) * static_cast<size_t>(kBlockTokens * idx_.head_dim)});
  }
  return arrays;
}

Status MlaMixer::UploadMember(size_t i, const TensorSink& sink) {
  const Weights& w = w_[i];
  const std::string& a = prefix(i);
  const std::string x = a + "indexer.";
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank, qr = s_.q_lora_rank;
  const int64_t dI = idx_.head_dim;
  if (lora_) {
    STRATA_RETURN_IF_ERROR(sink.matrix(a + "q_a_proj.weight", qr, D, w.a, 0));
    STRATA_RETURN_IF_ERROR(sink.Floats(a + "q_a_layernorm.weight", {{qr}}, w.q_norm));
  }
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "kv_a_proj_with_mqa.weight", cd_, D, w.a, off_kv_));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "kv_a_layernorm.weight", {{r}}, w.kv_norm));
  if (indexed()) {
    STRATA_RETURN_IF_ERROR(sink.matrix(x + "wk.weight", dI, D, w.a, off_ik_));
    STRATA_RETURN_IF_ERROR(sink.Floats(x + "k_norm.weight", {{dI}}, w.ik_norm_w));
    STRATA_RETURN_IF_ERROR(sink.Floats(x + "k_norm.bias", {{dI}}, w.ik_norm_b));
    STRATA_RETURN_IF_ERROR(sink.matrix(x + "wq_b.weight", idx_.heads * dI, qr, w.iq, 0));
    STRATA_RETURN_IF_ERROR(sink.matrix(x + "weights_proj.weight", idx_.heads, D, w.iw, 0));
  }
  STRATA_RETURN_IF_ERROR(sink.matrix(a + (lora_ ? "q_b_proj.weight" : "q_proj.weight"), H * qd_,
                                     lora_ ? qr : D, w.q, 0));
  STRATA_RETURN_IF_ERROR(
      sink.matrix(a + "kv_b_proj.weight", H * (s_.nope_dim + s_.v_dim), r, Mat{.bf = w.kv_b}, 0));
  return sink.matrix(a + "o_proj.weight", D, H * s_.v_dim, w.o, 0);
}

Status MlaMixer::FillDummyMember(size_t i, DummyFill& fill) {
  const Weights& w = w_[i];
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank, qr = s_.q_lora_rank;
  const int64_t dI = idx_.head_dim;
  if (lora_) {
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.a.bf, qr * D));
  } else {
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.q.bf, H * qd_ * D));
  }
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.a.bf + off_kv_ * D, cd_ * D));
  if (indexed()) STRATA_RETURN_IF_ERROR(fill.Matrix(w.a.bf + off_ik_ * D, dI * D));
  if (lora_) STRATA_RETURN_IF_ERROR(fill.Ones(w.q_norm, qr));
  STRATA_RETURN_IF_ERROR(fill.Ones(w.kv_norm, r));
  if (indexed()) {
    STRATA_RETURN_IF_ERROR(fill.Ones(w.ik_norm_w, dI));
    STRATA_RETURN_IF_ERROR(fill.Uniform(w.ik_norm_b, dI, 0.f, 0.f));
  }
  if (lora_) STRATA_RETURN_IF_ERROR(fill.Matrix(w.q.bf, H * qd_ * qr));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.kv_b, H * (s_.nope_dim + s_.v_dim) * r));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.o.bf, D * H * s_.v_dim));
  if (indexed()) {
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.iq.bf, idx_.heads * dI * qr));
    STRATA_RETURN_IF_ERROR(fill.Matrix(w.iw.bf, idx_.heads * D));
  }
  return OkStatus();
}

Status MlaMixer::Finalize(const CudaOps& ops) {
  std::vector<std::pair<const bf16*, bf16*>> layers;
  for (const Weights& w : w_) layers.emplace_back(w.kv_b, w.uk_t);
  STRATA_RETURN_IF_ERROR(TransposeUkPerHead(*ops.blas, layers, s_.heads, s_.nope_dim, s_.v_dim,
                                            s_.kv_lora_rank, ops.stream));
  if (!rotary()) return OkStatus();
  // The CPU's table, for every position of the plan.
  const int64_t half = s_.rope_dim / 2;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(s_.rope);
  if (static_cast<int64_t>(inv_freq.size()) != half) {
    return absl::InternalError(absl::StrCat("MLA rotary: ", inv_freq.size(),
                                            " frequencies for qk_rope_head_dim ", s_.rope_dim));
  }
  const float factor = static_cast<float>(cpu::RopeAttentionFactor(s_.rope));
  std::vector<float> cos(static_cast<size_t>(max_ctx_ * half)), sin(cos.size());
  cpu::RopeCosSin(inv_freq.data(), half, 0, max_ctx_, factor, cos.data(), sin.data());
  // Synchronous: the host vectors go out of scope.
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(x_.rope_cos, cos.data(), sizeof(float) * cos.size(), cudaMemcpyHostToDevice));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(x_.rope_sin, sin.data(), sizeof(float) * sin.size(), cudaMemcpyHostToDevice));
  return OkStatus();
}

bool MlaMixer::SparseDecode(int64_t max_len) const {
  if (!indexed()) return false;
  // Invariant mode: always sparse, so a sequence's path does not depend on
  // the longest sequence of its batch (the indexer selects all of a short
  // sequence's keys, in position order).
  const bool sparse = ctx_.invariant || max_len > idx_.top_k;
  ++(sparse ? sparse_decode_steps_ : dense_decode_steps_);
  return sparse;
}

Status MlaMixer::Rope(cudaStream_t stream, bool interleaved, bf16* x, int64_t heads,
                      int64_t token_stride, int64_t head_stride, int64_t offset,
                      const MixerFrame& f, const MixerPass& pass) const {
  cuda::RopeArgs a;
  a.pairs = interleaved ? cuda::RopePairs::kInterleaved : cuda::RopePairs::kHalfSplit;
  a.x = x;
  a.num_tokens = pass.n;
  a.num_heads = heads;
  a.token_stride = token_stride;
  a.head_stride = head_stride;
  a.offset = offset;
  a.half = s_.rope_dim / 2;
  a.cos = x_.rope_cos;
  a.sin = x_.rope_sin;
  a.max_positions = max_ctx_;
  a.positions = pass.decode ? f.positions() : nullptr;
  a.pos0 = pass.decode ? 0 : pass.past;
  return cuda::ApplyRope(a, stream);
}

Status MlaMixer::Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, D = ctx_.hidden, H = s_.heads, qcols = H * qd_;
  const int64_t r = s_.kv_lora_rank, dn = s_.nope_dim;
  const bool sparse =
      indexed() && (pass.decode ? pass.sparse : ctx_.invariant || pass.past + n > idx_.top_k);
  if (indexed() && !pass.decode) ++(sparse ? sparse_prefill_layers_ : dense_prefill_layers_);
  // Decode branches: Kimi's latent row beside the query path; DSA's indexer
  // beside q_b and the absorption (a dense DSA step has nothing to branch).
  const bool branch = pass.decode && ops.Branching(n) && (!lora_ || sparse);
  cudaStream_t kv_stream = branch && !lora_ ? ops.side : ops.stream;
  bf16* kv_rows = x_.a + off_kv_;
  bf16* ik_rows = x_.a + off_ik_;
  if (branch && !lora_) STRATA_RETURN_IF_ERROR(ops.Fork());
  if (!lora_) {
    STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, f.xn, ActType::kBf16, D, n, w.q, qcols, D, x_.q,
                                  ActType::kBf16, qcols, 0.f));
  }
  STRATA_RETURN_IF_ERROR(
      ops.Mm(kv_stream, f.xn, ActType::kBf16, D, n, w.a, n_a_, D, x_.a, ActType::kBf16, n_a_, 0.f));
  if (lora_) {
    STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(x_.a, n_a_, x_.a, n_a_, ActType::kBf16, n,
                                             s_.q_lora_rank, w.q_norm, s_.latent_norm_eps,
                                             ops.stream));
  }
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(kv_rows, n_a_, kv_rows, n_a_, ActType::kBf16, n, r,
                                           w.kv_norm, s_.latent_norm_eps, kv_stream));
  if (rotary()) {
    STRATA_RETURN_IF_ERROR(Rope(kv_stream, true, kv_rows, 1, n_a_, 0, r, f, pass));
  }
  cuda::MlaCache cache;
  cache.pool = reinterpret_cast<bf16*>(cache_.At(static_cast<int64_t>(i), 0));
  cache.max_blocks = f.max_blocks;
  cache.block_table = pass.decode ? f.block_table : f.prefill_table();
  const int64_t first = pass.decode ? 0 : pass.past;
  const int32_t* positions = pass.decode ? f.positions() : nullptr;
  STRATA_RETURN_IF_ERROR(
      cuda::MlaCacheWrite(shape_, cache, kv_rows, n_a_, n, first, positions, kv_stream));
  cuda::IndexKeyCache icache;
  if (indexed()) {
    STRATA_RETURN_IF_ERROR(cuda::LayerNormRows(ik_rows, n_a_, ik_rows, n_a_, ActType::kBf16, n,
                                               idx_.head_dim, w.ik_norm_w, w.ik_norm_b,
                                               idx_.norm_eps, kv_stream));
    STRATA_RETURN_IF_ERROR(Rope(kv_stream, false, ik_rows, 1, n_a_, 0, 0, f, pass));
    icache.pool = reinterpret_cast<bf16*>(index_cache_.At(static_cast<int64_t>(i), 0));
    icache.block_table = cache.block_table;
    icache.max_blocks = f.max_blocks;
    STRATA_RETURN_IF_ERROR(cuda::IndexKeyCacheWrite(idx_.head_dim, icache, ik_rows, n_a_, n, first,
                                                    positions, kv_stream));
  }
  if (lora_) {
    if (branch) STRATA_RETURN_IF_ERROR(ops.Fork());
    STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, x_.a, ActType::kBf16, n_a_, n, w.q, qcols,
                                  s_.q_lora_rank, x_.q, ActType::kBf16, qcols, 0.f));
  }
  if (rotary()) STRATA_RETURN_IF_ERROR(Rope(ops.stream, true, x_.q, H, qcols, qd_, dn, f, pass));
  if (sparse) {
    STRATA_RETURN_IF_ERROR(Indexer(ops, branch ? ops.side : ops.stream, w, f, pass, icache));
  }
  if (!pass.decode && !sparse) {
    STRATA_RETURN_IF_ERROR(DensePrefill(ops, w, pass, cache));
  } else {
    STRATA_RETURN_IF_ERROR(Absorbed(ops, w, f, pass, cache, sparse, branch));
  }
  return ops.Mm(ops.stream, x_.attn, ActType::kBf16, H * s_.v_dim, n, w.o, D, H * s_.v_dim, f.h,
                ActType::kF32, D, 1.f);
}

Status MlaMixer::Indexer(const CudaOps& ops, cudaStream_t stream, const Weights& w,
                         const MixerFrame& f, const MixerPass& pass,
                         const cuda::IndexKeyCache& icache) const {
  const int64_t n = pass.n, HI = idx_.heads, icols = HI * idx_.head_dim;
  STRATA_RETURN_IF_ERROR(ops.Mm(stream, x_.a, ActType::kBf16, n_a_, n, w.iq, icols, s_.q_lora_rank,
                                x_.iq, ActType::kBf16, icols, 0.f));
  STRATA_RETURN_IF_ERROR(Rope(stream, false, x_.iq, HI, icols, idx_.head_dim, 0, f, pass));
  // The CPU scales the head weights by H_I^-1/2 after the product.
  STRATA_RETURN_IF_ERROR(ops.Mm(stream, f.xn, ActType::kBf16, ctx_.hidden, n, w.iw, HI, ctx_.hidden,
                                x_.iw, ActType::kF32, HI, 0.f,
                                1.f / std::sqrt(static_cast<float>(HI))));
  // What the decode and prefill forms take alike.
  auto common = [&](auto& a) {
    a.shape = ishape_;
    a.q = x_.iq;
    a.ld_q = icols;
    a.weights = x_.iw;
    a.ld_w = HI;
    a.cache = icache;
    a.rows = x_.sel_rows;
    a.counts = x_.sel_counts;
    a.selected_total = x_.selected;
  };
  if (pass.decode) {
    cuda::IndexerDecodeArgs a;
    common(a);
    a.batch = n;
    a.seq_lens = f.seq_lens();
    a.max_seq_len = pass.bound;
    a.small_splits = ops.On(tuning::Key::kIndexerSplitDecode);
    return cuda::IndexerDecode(a, x_.index_ws, index_ws_bytes_, stream);
  }
  cuda::IndexerPrefillArgs a;
  common(a);
  a.num_tokens = n;
  a.past = pass.past;
  return cuda::IndexerPrefill(a, x_.index_ws, index_ws_bytes_, stream);
}

Status MlaMixer::Absorbed(const CudaOps& ops, const Weights& w, const MixerFrame& f,
                          const MixerPass& pass, const cuda::MlaCache& cache, bool sparse,
                          bool branch) const {
  const int64_t n = pass.n, H = s_.heads, r = s_.kv_lora_rank, dn = s_.nope_dim;
  const int64_t dv = s_.v_dim, kvb_row = dn + dv;  // kv_b rows per head: W_UK (dn) then W_UV (dv)
  // q̃_h = W_UK,hᵀ q_nope,h for every head at once: x_h = q[:, h, :dn],
  // W_h = uk_t[h] ([r, dn], W_UK,h transposed), y_h = q_abs[:, h, :r].
  STRATA_RETURN_IF_ERROR(PerHead(*ops.blas, H, n, r, dn, {x_.q, H * qd_, qd_},
                                 {w.uk_t, dn, r * dn}, {x_.q_abs, H * cd_, cd_}, false,
                                 ops.stream));
  if (branch) STRATA_RETURN_IF_ERROR(ops.Join());
  if (pass.decode) {
    cuda::MlaDecodeArgs a;
    a.shape = shape_;
    a.batch = n;
    a.q_abs = x_.q_abs;
    // q_rope rides along unchanged: the decode kernel reads it from q (no
    // copy into q_abs[:, h, r:], which would be a graph node outside the
    // PDL chain).
    if (s_.rope_dim > 0) {
      a.q_rope = x_.q + dn;
      a.q_rope_stride = qd_;
    }
    a.cache = cache;
    a.seq_lens = f.seq_lens();
    a.max_seq_len = sparse ? idx_.top_k : pass.bound;
    a.out_latent = x_.lat_o;
    a.out_type = ActType::kBf16;
    if (sparse) {
      a.sparse.rows = x_.sel_rows;
      a.sparse.counts = x_.sel_counts;
      a.sparse.stride = idx_.top_k;
    }
    a.batch_invariant = ctx_.invariant;
    // Only this step's MlaCacheWrite touches the cache (the newest row), and
    // the lengths and block table were uploaded before the step's first
    // kernel finished.
    a.cache_before_wait = true;
    STRATA_RETURN_IF_ERROR(cuda::MlaDecode(a, x_.ws, ws_bytes_, ops.stream));
  } else {
    // The rotated q_rope rides along: q_abs[:, h, r:] = q[:, h, dn:].
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        x_.q_abs + r, sizeof(bf16) * static_cast<size_t>(cd_), x_.q + dn,
        sizeof(bf16) * static_cast<size_t>(qd_), sizeof(bf16) * static_cast<size_t>(s_.rope_dim),
        static_cast<size_t>(n * H), cudaMemcpyDeviceToDevice, ops.stream));
    cuda::MlaSparsePrefillArgs a;
    a.shape = shape_;
    a.num_tokens = n;
    a.q_abs = x_.q_abs;
    a.cache = cache;
    a.rows = x_.sel_rows;
    a.counts = x_.sel_counts;
    a.top_k = idx_.top_k;
    a.out_latent = x_.lat_o;
    a.out_type = ActType::kBf16;
    a.batch_invariant = ctx_.invariant;
    STRATA_RETURN_IF_ERROR(cuda::MlaSparsePrefill(a, x_.ws, ws_bytes_, ops.stream));
  }
  // o_h = W_UV,h õ_h: W_h = kv_b rows h·(dn+dv)+dn .. +dv−1 ([dv, r]).
  // o_proj may launch before W_UV's wait, while the merge (short and
  // latency-bound) still runs, so its CTAs start loading weights one kernel
  // earlier (mla.uv_early; same results).
  const bool early = pass.decode && ops.On(tuning::Key::kMlaUvEarly);
  return PerHead(*ops.blas, H, n, dv, r, {x_.lat_o, H * r, r}, {w.kv_b + dn * r, r, kvb_row * r},
                 {x_.attn, H * dv, dv}, early, ops.stream);
}

Status MlaMixer::DensePrefill(const CudaOps& ops, const Weights& w, const MixerPass& pass,
                              const cuda::MlaCache& cache) const {
  const int64_t n = pass.n, H = s_.heads, r = s_.kv_lora_rank;
  const int64_t kvb_row = s_.nope_dim + s_.v_dim;
  // Expansion: kv = kv_b(c) for every cached token (cheaper than the
  // absorbed form whenever the slice is long, which prefill slices are).
  const int64_t S = pass.past + n;
  STRATA_RETURN_IF_ERROR(cuda::MlaCacheGather(shape_, cache, S, x_.lat, ops.stream));
  STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, x_.lat, ActType::kBf16, cd_, S, w.kv_b, H * kvb_row, r,
                                x_.kv_exp, ActType::kBf16, H * kvb_row, 0.f));
  cuda::MlaPrefillArgs a;
  a.shape = shape_;
  a.num_tokens = n;
  a.past = pass.past;
  a.q = x_.q;
  a.ld_q = H * qd_;
  a.kv = x_.kv_exp;
  a.k_rope = x_.lat + r;
  a.ld_krope = cd_;
  a.out = x_.attn;
  return cuda::MlaPrefill(a, ops.stream);
}

void MlaMixer::AddCounters(std::map<std::string, uint64_t>& counters) const {
  if (!indexed()) return;
  counters["dsa.index_topk"] = static_cast<uint64_t>(idx_.top_k);
  counters["dsa.sparse_prefill_layers"] += static_cast<uint64_t>(sparse_prefill_layers_);
  counters["dsa.dense_prefill_layers"] += static_cast<uint64_t>(dense_prefill_layers_);
  counters["dsa.sparse_decode_steps"] += static_cast<uint64_t>(sparse_decode_steps_);
  counters["dsa.dense_decode_steps"] += static_cast<uint64_t>(dense_decode_steps_);
  unsigned long long selected = 0;
  // Every forward pass synchronises before returning, so the count is final.
  if (cudaMemcpy(&selected, x_.selected, sizeof(selected), cudaMemcpyDeviceToHost) == cudaSuccess) {
    counters["dsa.selected_rows"] += selected;
  } else {
    cudaGetLastError();
  }
}

Status MlaMixer::ClearCounters(cudaStream_t stream) {
  sparse_prefill_layers_ = dense_prefill_layers_ = 0;
  sparse_decode_steps_ = dense_decode_steps_ = 0;
  if (!indexed()) return OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x_.selected, 0, sizeof(unsigned long long), stream));
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<CudaMixer>> MakeCudaMixer(const exec::MlaSpec& spec,
                                                   const MixerContext& ctx) {
  if (spec.indexer.has_value() && spec.q_lora_rank <= 0) {
    return absl::UnimplementedError("the GPU MLA module runs the DSA indexer with a q LoRA only");
  }
  const bool rotary = spec.rotary || spec.indexer.has_value();
  if (rotary && (spec.rope_dim < 2 || spec.rope_dim % 2 != 0 || spec.rope_dim / 2 > 256)) {
    return absl::UnimplementedError(absl::StrCat("qk_rope_head_dim ", spec.rope_dim,
                                                 " is not supported by the CUDA rotary kernel "
                                                 "(even, 2..512)"));
  }
  if (spec.indexer.has_value() && spec.indexer->head_dim < spec.rope_dim) {
    return absl::UnimplementedError(absl::StrCat("index_head_dim ", spec.indexer->head_dim,
                                                 " is below qk_rope_head_dim ", spec.rope_dim));
  }
  return std::unique_ptr<CudaMixer>(std::make_unique<MlaMixer>(spec, ctx));
}

}  // namespace cuda_exec
}  // namespace strata
