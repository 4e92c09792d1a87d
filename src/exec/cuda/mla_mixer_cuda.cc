// Multi-head latent attention on the GPU, Kimi's form (model-spec §2.4: q from
// the hidden state, NoPE keys; exec/cpu/mla_layer.cc is the reference):
//   q = xn·W_qᵀ, [c|k_r] = xn·W_kvaᵀ, c = RMSNorm(c), rows → paged latent cache
//   prefill: gather latents, kv = kv_b(c) for all S keys, flash attention
//   decode:  q̃ = W_UKᵀ q_nope per head, attention over the latents (q_rope
//            read in place from q), o = W_UV õ per head (absorbed: the cache
//            is never expanded)
//   h += o_proj(o)
// Decode steps of few rows make the latent row (kv_a, its norm, the cache
// write) on the side stream beside the query path (CudaOps::Branching).
// State: 64-token blocks of bf16 latent rows [64, r + dr] per layer.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/norm.h"
#include "exec/cuda/cuda_load_helpers.h"
#include "exec/cuda/cuda_mixer.h"

namespace strata {
namespace cuda_exec {
namespace {

using cuda::ActType;

class MlaMixer final : public CudaMixer {
 public:
  MlaMixer(const exec::MlaSpec& s, const MixerContext& ctx) : CudaMixer(ctx), s_(s) {
    qd_ = s.nope_dim + s.rope_dim;
    cd_ = s.kv_lora_rank + s.rope_dim;
    shape_.num_heads = s.heads;
    shape_.nope_dim = s.nope_dim;
    shape_.rope_dim = s.rope_dim;
    shape_.v_dim = s.v_dim;
    shape_.kv_rank = s.kv_lora_rank;
    shape_.scale = s.softmax_scale;
  }

  int64_t PreferredSlice() const override { return 8192; }
  void Plan(const SequencePlan& p) override;
  void CarveMember(size_t i, Carver& c) override;
  void CarveScratch(const SequencePlan& p, Carver& c) override;
  std::vector<PoolArray> BlockArrays() const override {
    return {{static_cast<int64_t>(size()), sizeof(bf16) * static_cast<size_t>(kBlockTokens * cd_)}};
  }
  void BindPools(std::span<const StateRegion>, std::span<const StateRegion> blocks) override {
    cache_ = blocks[0];
  }
  Status UploadMember(size_t i, const TensorSink& sink) override;
  Status FillDummyMember(size_t i, DummyFill& fill) override;
  // uk_t from kv_b.
  Status Finalize(const CudaOps& ops) override;
  int64_t DecodeLengthBound(int64_t max_len, int64_t max_ctx) const override {
    return LengthBucket(max_len, max_ctx);
  }
  Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                 const MixerPass& pass) const override;

 private:
  struct Weights {
    bf16* q = nullptr;         // [H·qd, D]
    bf16* kv_a = nullptr;      // [cd, D]
    float* kv_norm = nullptr;  // [r]
    bf16* kv_b = nullptr;      // [H·(dn+dv), r]
    bf16* o = nullptr;         // [D, H·dv]
    // W_UK,h transposed per head, [H, r, dn] (made at load from kv_b), so the
    // decode absorption q̃_h = W_UK,hᵀ q_nope,h is a plain x·Wᵀ product: the
    // streaming GEMV takes it, and so do the invariant kernels (no
    // transposed-W variant).
    bf16* uk_t = nullptr;
  };
  struct Scratch {
    bf16* q = nullptr;       // [rows, H·qd]
    bf16* kva = nullptr;     // [rows, cd]
    bf16* q_abs = nullptr;   // [max_batch, H, cd]
    bf16* lat_o = nullptr;   // [max_batch, H, r]
    bf16* attn = nullptr;    // [rows, H·dv]
    bf16* lat = nullptr;     // [max_ctx, cd] gathered latents (prefill)
    bf16* kv_exp = nullptr;  // [max_ctx, H·(dn+dv)] expanded keys/values
    void* ws = nullptr;
  };

  Status Decode(const CudaOps& ops, const Weights& w, const MixerFrame& f, const MixerPass& pass,
                const cuda::MlaCache& cache, cudaStream_t aux, bool branch) const;
  Status Prefill(const CudaOps& ops, const Weights& w, const MixerPass& pass,
                 const cuda::MlaCache& cache) const;

  exec::MlaSpec s_;
  int64_t qd_ = 0, cd_ = 0;
  cuda::MlaShape shape_;
  size_t ws_bytes_ = 0;
  std::vector<Weights> w_;
  Scratch x_;
  StateRegion cache_;
};

void MlaMixer::Plan(const SequencePlan& p) {
  // Sized for every (batch, length bound) a decode graph may use.
  for (int64_t b = 1; b <= p.max_batch; ++b) {
    for (int64_t len = kMinLengthBucket;; len *= 2) {
      const int64_t bound = std::min(len, p.max_ctx);
      ws_bytes_ =
          std::max(ws_bytes_, cuda::MlaDecodeWorkspaceBytes(shape_, b, bound, ctx_.invariant));
      if (bound == p.max_ctx) break;
    }
  }
}

void MlaMixer::CarveMember(size_t i, Carver& c) {
  if (w_.size() <= i) w_.resize(i + 1);
  Weights& w = w_[i];
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank;
  w.q = c.Take<bf16>(H * qd_ * D);
  w.kv_a = c.Take<bf16>(cd_ * D);
  w.kv_norm = c.Take<float>(r);
  w.kv_b = c.Take<bf16>(H * (s_.nope_dim + s_.v_dim) * r);
  w.o = c.Take<bf16>(D * H * s_.v_dim);
  w.uk_t = c.Take<bf16>(H * r * s_.nope_dim);
}

void MlaMixer::CarveScratch(const SequencePlan& p, Carver& c) {
  const int64_t R = p.rows, B = p.max_batch, H = s_.heads;
  x_.q = c.Take<bf16>(R * H * qd_);
  x_.kva = c.Take<bf16>(R * cd_);
  x_.q_abs = c.Take<bf16>(B * H * cd_);
  x_.lat_o = c.Take<bf16>(B * H * s_.kv_lora_rank);
  x_.attn = c.Take<bf16>(R * H * s_.v_dim);
  x_.lat = c.Take<bf16>(p.max_ctx * cd_);
  x_.kv_exp = c.Take<bf16>(p.max_ctx * H * (s_.nope_dim + s_.v_dim));
  x_.ws = c.Take<char>(static_cast<int64_t>(ws_bytes_));
}

Status MlaMixer::UploadMember(size_t i, const TensorSink& sink) {
  const Weights& w = w_[i];
  const std::string& a = prefix(i);
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank;
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "q_proj.weight", H * qd_, D, Mat{.bf = w.q}, 0));
  STRATA_RETURN_IF_ERROR(
      sink.matrix(a + "kv_a_proj_with_mqa.weight", cd_, D, Mat{.bf = w.kv_a}, 0));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "kv_a_layernorm.weight", {{r}}, w.kv_norm));
  STRATA_RETURN_IF_ERROR(
      sink.matrix(a + "kv_b_proj.weight", H * (s_.nope_dim + s_.v_dim), r, Mat{.bf = w.kv_b}, 0));
  return sink.matrix(a + "o_proj.weight", D, H * s_.v_dim, Mat{.bf = w.o}, 0);
}

Status MlaMixer::FillDummyMember(size_t i, DummyFill& fill) {
  const Weights& w = w_[i];
  const int64_t D = ctx_.hidden, H = s_.heads, r = s_.kv_lora_rank;
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.q, H * qd_ * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.kv_a, cd_ * D));
  STRATA_RETURN_IF_ERROR(fill.Ones(w.kv_norm, r));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.kv_b, H * (s_.nope_dim + s_.v_dim) * r));
  return fill.Matrix(w.o, D * H * s_.v_dim);
}

Status MlaMixer::Finalize(const CudaOps& ops) {
  std::vector<std::pair<const bf16*, bf16*>> layers;
  for (const Weights& w : w_) layers.emplace_back(w.kv_b, w.uk_t);
  return TransposeUkPerHead(*ops.blas, layers, s_.heads, s_.nope_dim, s_.v_dim, s_.kv_lora_rank,
                            ops.stream);
}

Status MlaMixer::Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, D = ctx_.hidden, H = s_.heads, qcols = H * qd_;
  // Decode branches: the latent row (kv_a, its norm, the cache write) is made
  // on the side stream beside the query path (q, its absorption).
  const bool branch = pass.decode && ops.Branching(n);
  cudaStream_t aux = branch ? ops.side : ops.stream;
  if (branch) STRATA_RETURN_IF_ERROR(ops.Fork());
  STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, f.xn, ActType::kBf16, D, n, w.q, qcols, D, x_.q,
                                ActType::kBf16, qcols, 0.f));
  STRATA_RETURN_IF_ERROR(
      ops.Mm(aux, f.xn, ActType::kBf16, D, n, w.kv_a, cd_, D, x_.kva, ActType::kBf16, cd_, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(x_.kva, cd_, x_.kva, cd_, ActType::kBf16, n,
                                           s_.kv_lora_rank, w.kv_norm, s_.latent_norm_eps, aux));
  cuda::MlaCache cache;
  cache.pool = reinterpret_cast<bf16*>(cache_.At(static_cast<int64_t>(i), 0));
  cache.max_blocks = f.max_blocks;
  if (pass.decode) {
    cache.block_table = f.block_table;
    STRATA_RETURN_IF_ERROR(Decode(ops, w, f, pass, cache, aux, branch));
  } else {
    cache.block_table = f.prefill_table();
    STRATA_RETURN_IF_ERROR(Prefill(ops, w, pass, cache));
  }
  return ops.Mm(ops.stream, x_.attn, ActType::kBf16, H * s_.v_dim, n, w.o, D, H * s_.v_dim, f.h,
                ActType::kF32, D, 1.f);
}

Status MlaMixer::Decode(const CudaOps& ops, const Weights& w, const MixerFrame& f,
                        const MixerPass& pass, const cuda::MlaCache& cache, cudaStream_t aux,
                        bool branch) const {
  const int64_t n = pass.n, H = s_.heads, r = s_.kv_lora_rank, dn = s_.nope_dim;
  const int64_t dv = s_.v_dim, kvb_row = dn + dv;  // kv_b rows per head: W_UK (dn) then W_UV (dv)
  STRATA_RETURN_IF_ERROR(cuda::MlaCacheWrite(shape_, cache, x_.kva, cd_, n, 0, f.positions(), aux));
  // q̃_h = W_UK,hᵀ q_nope,h for every head at once: x_h = q[:, h, :dn],
  // W_h = uk_t[h] ([r, dn], W_UK,h transposed), y_h = q_abs[:, h, :r].
  cuda::StridedBatchedGemmArgs uk;
  uk.g.m = n;
  uk.g.n = r;
  uk.g.k = dn;
  uk.g.x = x_.q;
  uk.g.x_type = ActType::kBf16;
  uk.g.ldx = H * qd_;
  uk.g.w = w.uk_t;
  uk.g.ldw = dn;
  uk.g.y = x_.q_abs;
  uk.g.y_type = ActType::kBf16;
  uk.g.ldy = H * cd_;
  uk.count = H;
  uk.stride_x = qd_;
  uk.stride_w = r * dn;
  uk.stride_y = cd_;
  STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*ops.blas, uk, ops.stream));
  if (branch) STRATA_RETURN_IF_ERROR(ops.Join());
  cuda::MlaDecodeArgs a;
  a.shape = shape_;
  a.batch = n;
  a.q_abs = x_.q_abs;
  // q_rope rides along unchanged: the decode kernel reads it from q (no copy
  // into q_abs[:, h, r:], which would be a graph node outside the PDL chain).
  if (s_.rope_dim > 0) {
    a.q_rope = x_.q + dn;
    a.q_rope_stride = qd_;
  }
  a.cache = cache;
  a.seq_lens = f.seq_lens();
  a.max_seq_len = pass.bound;
  a.out_latent = x_.lat_o;
  a.out_type = ActType::kBf16;
  a.batch_invariant = ctx_.invariant;
  // Only this step's MlaCacheWrite touches the cache (the newest row), and
  // the lengths and block table were uploaded before the step's first
  // kernel finished.
  a.cache_before_wait = true;
  STRATA_RETURN_IF_ERROR(cuda::MlaDecode(a, x_.ws, ws_bytes_, ops.stream));
  // o_h = W_UV,h õ_h: W_h = kv_b rows h·(dn+dv)+dn .. +dv−1 ([dv, r]).
  cuda::StridedBatchedGemmArgs uv;
  uv.g.m = n;
  uv.g.n = dv;
  uv.g.k = r;
  uv.g.x = x_.lat_o;
  uv.g.x_type = ActType::kBf16;
  uv.g.ldx = H * r;
  uv.g.w = w.kv_b + dn * r;
  uv.g.ldw = r;
  uv.g.y = x_.attn;
  uv.g.y_type = ActType::kBf16;
  uv.g.ldy = H * dv;
  uv.count = H;
  uv.stride_x = r;
  uv.stride_w = kvb_row * r;
  uv.stride_y = dv;
  uv.transpose_w = false;
  // o_proj may launch before W_UV's wait, while the merge (short and
  // latency-bound) still runs, so its CTAs start loading weights one kernel
  // earlier (mla.uv_early; same results).
  uv.g.early_trigger = ops.On(tuning::Key::kMlaUvEarly);
  return cuda::StridedBatchedGemm(*ops.blas, uv, ops.stream);
}

Status MlaMixer::Prefill(const CudaOps& ops, const Weights& w, const MixerPass& pass,
                         const cuda::MlaCache& cache) const {
  const int64_t n = pass.n, H = s_.heads, r = s_.kv_lora_rank;
  const int64_t kvb_row = s_.nope_dim + s_.v_dim;
  STRATA_RETURN_IF_ERROR(
      cuda::MlaCacheWrite(shape_, cache, x_.kva, cd_, n, pass.past, nullptr, ops.stream));
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

}  // namespace

StatusOr<std::unique_ptr<CudaMixer>> MakeCudaMixer(const exec::MlaSpec& spec,
                                                   const MixerContext& ctx) {
  if (spec.q_lora_rank > 0 || spec.rotary || spec.indexer.has_value()) {
    return absl::UnimplementedError(
        "the GPU layer executor runs MLA without a q LoRA, rotary keys or the DSA indexer only");
  }
  return std::unique_ptr<CudaMixer>(std::make_unique<MlaMixer>(spec, ctx));
}

}  // namespace cuda_exec
}  // namespace strata
