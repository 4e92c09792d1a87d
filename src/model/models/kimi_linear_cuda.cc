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
//   MLA: q = xn·W_qᵀ, [c|k_r] = xn·W_kvaᵀ, c = RMSNorm(c), rows → paged cache
//        prefill: gather latents, kv = kv_b(c) for all S keys, flash attention
//        decode:  q̃ = W_UKᵀ q_nope per head, attention over the latents,
//                 o = W_UV õ per head (absorbed: the cache is never expanded)
//        h += o_proj(o)
//   xn = RMSNorm(h)
//   dense: h += down(SiLU(gate)·up) with [gate|up] one GEMM
//   MoE:   router logits (fp32) → MoeForward → pending (added by the next norm),
//          h += shared expert
// then logits = lm_head(RMSNorm(h += pending)).
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
// Slots and blocks

uint64_t PoolBook::NextId() {
  std::lock_guard<std::mutex> lock(mu);
  return next_id++;
}

int32_t PoolBook::TakeSlot() {
  std::lock_guard<std::mutex> lock(mu);
  if (free_slots.empty()) return -1;
  const int32_t s = free_slots.back();
  free_slots.pop_back();
  return s;
}

int64_t PoolBook::FreeBlocks() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int64_t>(free_blocks.size());
}

bool PoolBook::TakeBlocks(int64_t n, std::vector<int32_t>& out) {
  std::lock_guard<std::mutex> lock(mu);
  if (n <= 0) return true;
  if (static_cast<int64_t>(free_blocks.size()) < n) return false;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(free_blocks.back());
    free_blocks.pop_back();
  }
  return true;
}

void PoolBook::GiveBackBlocks(std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu);
  // Reversed so the sequence's first block is on top again: the next taker
  // gets runs of consecutive blocks where it can.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free_blocks.push_back(*it);
  blocks.clear();
}

void PoolBook::GiveBack(int32_t slot, std::vector<int32_t>& blocks) {
  GiveBackBlocks(blocks);
  std::lock_guard<std::mutex> lock(mu);
  if (slot >= 0) free_slots.push_back(slot);
}

CudaState::~CudaState() { book_->GiveBack(slot_, blocks_); }

std::unique_ptr<SequenceState> CudaState::Clone() const { return owner_->CloneState(*this); }

void CudaState::Reset() { owner_->ResetState(*this); }

// ----------------------------------------------------------------------------
// Small helpers

Status KimiLinearCudaModel::Sync(const char* what) const {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return cuda::CudaError(e, what);
  return OkStatus();
}

Status KimiLinearCudaModel::ZeroSlot(int32_t slot) const {
  const Geometry& g = g_;
  for (int64_t l = 0; l < g.num_kda; ++l) {
    float* state = pools_.kda_state + (l * pools_.slots + slot) * g.kda_state;
    float* window = pools_.conv_window + (l * pools_.slots + slot) * g.window;
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(state, 0, sizeof(float) * static_cast<size_t>(g.kda_state), stream_));
    if (g.window > 0) {
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(window, 0, sizeof(float) * static_cast<size_t>(g.window), stream_));
    }
  }
  return OkStatus();
}

Status KimiLinearCudaModel::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m,
                               const bf16* w, int64_t n, int64_t k, void* y, ActType y_type,
                               int64_t ldy, float beta) const {
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
  a.alpha = 1.f;
  a.beta = beta;
  return cuda::Gemm(*blas_, a, stream_);
}

int64_t KimiLinearCudaModel::MlaBound(int64_t max_len) const {
  if (g_.num_mla == 0) return 0;
  int64_t b = kMinMlaBucket;
  while (b < max_len) b *= 2;
  return std::min(b, plan_.max_ctx);
}

Status KimiLinearCudaModel::CheckState(SequenceState* s, CudaState** out, const char* what) const {
  auto* st = dynamic_cast<CudaState*>(s);
  if (st == nullptr || st->owner_ != this) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the state was not created by this model's NewState"));
  }
  *out = st;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// States

StatusOr<std::unique_ptr<SequenceState>> KimiLinearCudaModel::NewState(int64_t max_tokens) const {
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
  cudaSetDevice(device_);
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("NewState: all ", pools_.slots,
                                                     " sequence slots are in use "
                                                     "(LoadOptions.max_sequences)"));
  }
  auto st = std::make_unique<CudaState>(this, book_, book_->NextId(), slot, max_tokens);
  STRATA_RETURN_IF_ERROR(ZeroSlot(slot));
  return std::unique_ptr<SequenceState>(std::move(st));
}

void KimiLinearCudaModel::ResetState(CudaState& st) const {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  book_->GiveBackBlocks(st.blocks_);
  st.tokens_ = 0;
  ++st.generation_;
  // Reset cannot report; a failure here resurfaces at the next Sync.
  ZeroSlot(st.slot_).IgnoreError();
}

std::unique_ptr<SequenceState> KimiLinearCudaModel::CloneState(const CudaState& src) const {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) return nullptr;
  auto st = std::make_unique<CudaState>(this, book_, book_->NextId(), slot, src.max_tokens_);
  if (!book_->TakeBlocks(static_cast<int64_t>(src.blocks_.size()), st->blocks_)) return nullptr;
  const Geometry& g = g_;
  auto copy = [&](void* dst, const void* from, size_t bytes) {
    return cudaMemcpyAsync(dst, from, bytes, cudaMemcpyDeviceToDevice, stream_) == cudaSuccess;
  };
  bool ok = true;
  for (int64_t l = 0; l < g.num_kda && ok; ++l) {
    const int64_t base = l * pools_.slots;
    ok = copy(pools_.kda_state + (base + slot) * g.kda_state,
              pools_.kda_state + (base + src.slot_) * g.kda_state,
              sizeof(float) * static_cast<size_t>(g.kda_state));
    if (ok && g.window > 0) {
      ok = copy(pools_.conv_window + (base + slot) * g.window,
                pools_.conv_window + (base + src.slot_) * g.window,
                sizeof(float) * static_cast<size_t>(g.window));
    }
  }
  const int64_t block_elems = kBlockTokens * g.cd;
  const int64_t nb = static_cast<int64_t>(src.blocks_.size());
  for (int64_t l = 0; l < g.num_mla && ok; ++l) {
    bf16* pool = pools_.kv + l * pools_.blocks * block_elems;
    // Runs of consecutive blocks on both sides go as one copy.
    for (int64_t j = 0; j < nb && ok;) {
      int64_t run = 1;
      while (j + run < nb && src.blocks_[j + run] == src.blocks_[j] + run &&
             st->blocks_[j + run] == st->blocks_[j] + run) {
        ++run;
      }
      ok = copy(pool + st->blocks_[j] * block_elems, pool + src.blocks_[j] * block_elems,
                sizeof(bf16) * static_cast<size_t>(run * block_elems));
      j += run;
    }
  }
  if (!ok || !Sync("Clone").ok()) {
    cudaGetLastError();
    return nullptr;
  }
  st->tokens_ = src.tokens_;
  return st;
}

Status KimiLinearCudaModel::EnsureBlocks(CudaState& st, int64_t tokens) const {
  if (g_.num_mla == 0) return OkStatus();
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

Status KimiLinearCudaModel::UploadPrefillTable(const CudaState& st, int64_t tokens) const {
  if (g_.num_mla == 0) return OkStatus();
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

Status KimiLinearCudaModel::KdaMixer(const Layer& L, int64_t n, const CudaState* ps) const {
  const Geometry& g = g_;
  const KdaLayer& k = L.kda;
  const bool decode = ps == nullptr;
  const int32_t* slots = s_.step + plan_.max_batch;
  float* windows = pools_.conv_window + L.index * pools_.slots * g.window;
  float* states = pools_.kda_state + L.index * pools_.slots * g.kda_state;
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, k.in_proj, g.n_in, g.D, s_.proj,
                            ActType::kBf16, g.n_in, 0.f));
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
  // Gate pre-activations in fp32 (they go through exp and a cumulative sum);
  // the output gate only through a sigmoid, bf16 is plenty.
  STRATA_RETURN_IF_ERROR(Mm(s_.proj + g.off_fa, ActType::kBf16, g.n_in, n, k.f_b, g.C, g.dk,
                            s_.graw, ActType::kF32, g.C, 0.f));
  STRATA_RETURN_IF_ERROR(Mm(s_.proj + g.off_ga, ActType::kBf16, g.n_in, n, k.g_b, g.C, g.dk,
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
    STRATA_RETURN_IF_ERROR(cuda::KdaPrefill(a, s_.kda_ws, plan_.kda_ws, stream_));
  }
  STRATA_RETURN_IF_ERROR(cuda::GatedRmsNormSigmoid(s_.o, ActType::kBf16, s_.gate, ActType::kBf16,
                                                   n * g.H, g.dk, k.o_norm, g.eps, s_.y, stream_));
  return Mm(s_.y, ActType::kBf16, g.C, n, k.o, g.D, g.C, s_.h, ActType::kF32, g.D, 1.f);
}

Status KimiLinearCudaModel::MlaMixer(const Layer& L, int64_t n, const CudaState* ps, int64_t past,
                                     int64_t mla_bound) const {
  const Geometry& g = g_;
  const MlaLayer& m = L.mla;
  const cuda::MlaShape shape = MlaShapeOf(g);
  const int64_t qcols = g.Hm * g.qd;
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, g.D, n, m.q, qcols, g.D, s_.q, ActType::kBf16, qcols, 0.f));
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, g.D, n, m.kv_a, g.cd, g.D, s_.kva, ActType::kBf16, g.cd, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::RmsNormRows(s_.kva, g.cd, s_.kva, g.cd, ActType::kBf16, n, g.r,
                                           m.kv_norm, kLatentNormEps, stream_));
  cuda::MlaCache cache;
  cache.pool = pools_.kv + L.index * pools_.blocks * kBlockTokens * g.cd;
  cache.max_blocks = plan_.max_blocks;
  const int64_t kvb_row = g.dn + g.dv;  // kv_b rows per head: W_UK (dn) then W_UV (dv)
  if (ps == nullptr) {
    const int32_t* positions = s_.step + 2 * plan_.max_batch;
    const int32_t* seq_lens = s_.step + 3 * plan_.max_batch;
    cache.block_table = s_.block_table;
    STRATA_RETURN_IF_ERROR(
        cuda::MlaCacheWrite(shape, cache, s_.kva, g.cd, n, 0, positions, stream_));
    // q̃_h = W_UK,hᵀ q_nope,h for every head at once: x_h = q[:, h, :dn],
    // W_h = kv_b rows h·(dn+dv) .. +dn−1 ([dn, r]), y_h = q_abs[:, h, :r].
    cuda::StridedBatchedGemmArgs uk;
    uk.g.m = n;
    uk.g.n = g.r;
    uk.g.k = g.dn;
    uk.g.x = s_.q;
    uk.g.x_type = ActType::kBf16;
    uk.g.ldx = qcols;
    uk.g.w = m.kv_b;
    uk.g.ldw = g.r;
    uk.g.y = s_.q_abs;
    uk.g.y_type = ActType::kBf16;
    uk.g.ldy = g.Hm * g.cd;
    uk.count = g.Hm;
    uk.stride_x = g.qd;
    uk.stride_w = kvb_row * g.r;
    uk.stride_y = g.cd;
    uk.transpose_w = true;
    STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(*blas_, uk, stream_));
    if (g.dr > 0) {
      // q_rope rides along unchanged: q_abs[:, h, r:] = q[:, h, dn:].
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          s_.q_abs + g.r, sizeof(bf16) * static_cast<size_t>(g.cd), s_.q + g.dn,
          sizeof(bf16) * static_cast<size_t>(g.qd), sizeof(bf16) * static_cast<size_t>(g.dr),
          static_cast<size_t>(n * g.Hm), cudaMemcpyDeviceToDevice, stream_));
    }
    cuda::MlaDecodeArgs a;
    a.shape = shape;
    a.batch = n;
    a.q_abs = s_.q_abs;
    a.cache = cache;
    a.seq_lens = seq_lens;
    a.max_seq_len = mla_bound;
    a.out_latent = s_.lat_o;
    a.out_type = ActType::kBf16;
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

Status KimiLinearCudaModel::Ffn(const Layer& L, int64_t n, const float** pending) const {
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
  a.w13 = f.w13;
  a.w2 = f.w2;
  a.y = s_.delta;
  STRATA_RETURN_IF_ERROR(cuda::MoeForward(a, s_.moe_ws, plan_.moe_ws, stream_));
  if (g.Is > 0) STRATA_RETURN_IF_ERROR(swiglu(g.Is));
  // The routed sum joins the residual in the next AddRmsNorm (one pass less).
  *pending = s_.delta;
  return OkStatus();
}

Status KimiLinearCudaModel::EnqueueLayers(int64_t n, const int32_t* tokens, const CudaState* ps,
                                          int64_t past, int64_t mla_bound,
                                          const float** pending) const {
  const Geometry& g = g_;
  STRATA_RETURN_IF_ERROR(cuda::EmbeddingGather(w_.embed, g.D, tokens, n, s_.h, stream_));
  const float* pend = nullptr;
  for (const Layer& L : w_.layers) {
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pend, ActType::kF32, n, g.D, L.input_norm, g.eps,
                                            s_.xn, stream_));
    pend = nullptr;
    if (L.is_mla) {
      STRATA_RETURN_IF_ERROR(MlaMixer(L, n, ps, past, mla_bound));
    } else {
      STRATA_RETURN_IF_ERROR(KdaMixer(L, n, ps));
    }
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, nullptr, ActType::kF32, n, g.D, L.post_norm,
                                            g.eps, s_.xn, stream_));
    STRATA_RETURN_IF_ERROR(Ffn(L, n, &pend));
  }
  *pending = pend;
  return OkStatus();
}

Status KimiLinearCudaModel::EnqueueDecode(int64_t batch, int64_t mla_bound, bool sample) const {
  const Geometry& g = g_;
  const float* pending = nullptr;
  STRATA_RETURN_IF_ERROR(EnqueueLayers(batch, s_.step, nullptr, 0, mla_bound, &pending));
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
// Decode steps and graphs

Status KimiLinearCudaModel::RunDecodeStep(int64_t batch, int64_t mla_bound, bool sample) const {
  auto eager = [&]() {
    ++eager_steps_;
    return EnqueueDecode(batch, mla_bound, sample);
  };
  if (!graphs_enabled_) return eager();
  GraphEntry& e = graphs_[GraphKey{batch, mla_bound, sample}];
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
  const Status enqueued = EnqueueDecode(batch, mla_bound, sample);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    // Something in the step cannot be captured (a host sync, an allocation):
    // run eagerly from now on; the eager run reports any real error.
    if (graph != nullptr) cudaGraphDestroy(graph);
    return give_up(absl::StrCat("stream capture failed: ", cudaGetErrorString(ended),
                                enqueued.ok() ? "" : absl::StrCat(" (", enqueued.message(), ")")));
  }
  if (!enqueued.ok()) {
    cudaGraphDestroy(graph);
    return enqueued;  // an op rejected its arguments; nothing was captured usefully
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

Status KimiLinearCudaModel::DecodeLocked(std::span<const int32_t> tokens,
                                         std::span<CudaState* const> states, float* logits,
                                         std::span<const DecodeSampling> sampling,
                                         int32_t* out_tokens) const {
  const Geometry& g = g_;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t B_max = plan_.max_batch;
  // Argument checks first, over the whole batch: on these errors nothing has
  // changed.
  for (int64_t b = 0; b < total; ++b) {
    const int32_t t = tokens[static_cast<size_t>(b)];
    if (t < 0 || t >= g.V) {
      return absl::InvalidArgumentError(absl::StrCat("decode: token id ", t, " in row ", b,
                                                     " is outside the vocabulary [0, ", g.V, ")"));
    }
    const CudaState& st = *states[static_cast<size_t>(b)];
    if (st.tokens_ + 1 > st.max_tokens_) {
      return absl::OutOfRangeError(absl::StrCat("decode: row ", b, ": 1 token on top of ",
                                                st.tokens_, " exceeds the state's capacity of ",
                                                st.max_tokens_));
    }
  }
  if (total > B_max) {
    // Larger batches run as consecutive steps of at most max_batch rows.
    const int64_t V = g_.V;
    for (int64_t b0 = 0; b0 < total; b0 += B_max) {
      const size_t n = static_cast<size_t>(std::min(B_max, total - b0));
      const size_t at = static_cast<size_t>(b0);
      STRATA_RETURN_IF_ERROR(DecodeLocked(
          tokens.subspan(at, n), states.subspan(at, n), logits ? logits + b0 * V : nullptr,
          sampling.empty() ? sampling : sampling.subspan(at, n),
          out_tokens ? out_tokens + b0 : nullptr));
    }
    return OkStatus();
  }
  const int64_t B = total;
  if (g.num_mla > 0) {
    int64_t need = 0;
    for (CudaState* st : states) {
      need += std::max<int64_t>(
          0, CeilDiv(st->tokens_ + 1, kBlockTokens) - static_cast<int64_t>(st->blocks_.size()));
    }
    if (need > book_->FreeBlocks()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the paged attention cache is full: ", need, " more blocks needed, ",
                       book_->FreeBlocks(), " of ", pools_.blocks, " free"));
    }
    for (CudaState* st : states) STRATA_RETURN_IF_ERROR(EnsureBlocks(*st, st->tokens_ + 1));
  }

  // Per-step inputs into the fixed device buffers the (captured) step reads.
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    CudaState& st = *states[static_cast<size_t>(b)];
    h_step_[b] = tokens[static_cast<size_t>(b)];
    h_step_[B_max + b] = st.slot_;
    h_step_[2 * B_max + b] = static_cast<int32_t>(st.tokens_);
    h_step_[3 * B_max + b] = static_cast<int32_t>(st.tokens_ + 1);
    max_len = std::max(max_len, st.tokens_ + 1);
    if (g.num_mla == 0) continue;
    RowOwner& ro = row_owner_[static_cast<size_t>(b)];
    const int64_t nb = static_cast<int64_t>(st.blocks_.size());
    int64_t from = ro.blocks;
    if (ro.id != st.id_ || ro.generation != st.generation_) from = 0;
    if (from < nb) {
      int32_t* row = h_block_table_ + b * plan_.max_blocks;
      std::memcpy(row + from, st.blocks_.data() + from, sizeof(int32_t) * static_cast<size_t>(nb - from));
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

  STRATA_RETURN_IF_ERROR(RunDecodeStep(B, MlaBound(max_len), sample));

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
  for (CudaState* st : states) ++st->tokens_;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Prefill

Status KimiLinearCudaModel::Prefill(std::span<const int32_t> tokens, CudaState& st, float* logits,
                                    bool all_logits) const {
  const Geometry& g = g_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  STRATA_RETURN_IF_ERROR(EnsureBlocks(st, st.tokens_ + T));
  STRATA_RETURN_IF_ERROR(UploadPrefillTable(st, st.tokens_ + T));
  const int64_t chunk_rows = std::max(plan_.max_batch, kLogitsChunkRows);
  for (int64_t begin = 0; begin < T; begin += plan_.slice) {
    const int64_t n = std::min(plan_.slice, T - begin);
    const bool last = begin + n == T;
    // Pageable source: the copy is staged before the call returns.
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.tokens, tokens.data() + begin,
                                                sizeof(int32_t) * static_cast<size_t>(n),
                                                cudaMemcpyHostToDevice, stream_));
    const float* pending = nullptr;
    STRATA_RETURN_IF_ERROR(EnqueueLayers(n, s_.tokens, &st, st.tokens_, 0, &pending));
    st.tokens_ += n;
    if (logits == nullptr || (!all_logits && !last)) continue;
    if (all_logits) {
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pending, ActType::kF32, n, g.D, w_.final_norm,
                                              g.eps, s_.xn, stream_));
      for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
        const int64_t m = std::min(chunk_rows, n - r0);
        STRATA_RETURN_IF_ERROR(Mm(s_.xn + r0 * g.D, ActType::kBf16, g.D, m, w_.lm_head, g.V, g.D,
                                  s_.logits, ActType::kF32, g.V, 0.f));
        // To pageable memory the copy completes before the call returns, so
        // the next chunk may reuse the device buffer.
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

Status KimiLinearCudaModel::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                    float* logits, bool all_logits) const {
  CudaState* st = nullptr;
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
    // One token takes the decode path (recurrent KDA, absorbed MLA) even on an
    // empty state: from a zero state it is the same math as chunked prefill.
    CudaState* const one[1] = {st};
    return DecodeLocked(tokens, std::span<CudaState* const>(one, 1), logits, {}, nullptr);
  }
  return Prefill(tokens, *st, logits, all_logits);
}

Status KimiLinearCudaModel::DecodeBatch(std::span<const int32_t> tokens,
                                        std::span<SequenceState* const> states,
                                        float* logits) const {
  if (tokens.size() != states.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeBatch: ", tokens.size(), " tokens for ",
                                                   states.size(), " states"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeBatch: no sequences");
  std::vector<CudaState*> cs(states.size());
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

Status KimiLinearCudaModel::DecodeBatchSample(std::span<const int32_t> tokens,
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
  std::vector<CudaState*> cs(states.size());
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

Status KimiLinearCudaModel::FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                                    uint64_t seed) const {
  CudaState* st = nullptr;
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
  const int64_t block_elems = kBlockTokens * g.cd;
  const int64_t nb = static_cast<int64_t>(st->blocks_.size());
  for (int64_t l = 0; l < g.num_mla; ++l) {
    bf16* pool = pools_.kv + l * pools_.blocks * block_elems;
    for (int64_t j = 0; j < nb;) {
      int64_t run = 1;
      while (j + run < nb && st->blocks_[j + run] == st->blocks_[j] + run) ++run;
      STRATA_RETURN_IF_ERROR(
          cuda::FillRandomBf16(pool + st->blocks_[j] * block_elems, run * block_elems, next(), 1.f,
                               stream_));
      j += run;
    }
  }
  for (int64_t l = 0; l < g.num_kda; ++l) {
    const int64_t at = l * pools_.slots + st->slot_;
    STRATA_RETURN_IF_ERROR(cuda::FillRandomF32(pools_.kda_state + at * g.kda_state, g.kda_state,
                                               next(), -0.1f, 0.1f, stream_));
    if (g.window > 0) {
      STRATA_RETURN_IF_ERROR(cuda::FillRandomF32(pools_.conv_window + at * g.window, g.window,
                                                 next(), -1.f, 1.f, stream_));
    }
  }
  STRATA_RETURN_IF_ERROR(Sync("FillContextForBenchmark"));
  st->tokens_ = num_tokens;
  return OkStatus();
}

KimiCudaStats KimiLinearCudaModel::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KimiCudaStats s;
  s.weight_bytes = weight_bytes_;
  s.scratch_bytes = scratch_bytes_;
  s.state_pool_bytes = state_pool_bytes_;
  s.kv_pool_bytes = kv_pool_bytes_;
  s.slots_total = pools_.slots;
  s.kv_blocks_total = pools_.blocks;
  {
    std::lock_guard<std::mutex> book_lock(book_->mu);
    s.slots_free = static_cast<int64_t>(book_->free_slots.size());
    s.kv_blocks_free = static_cast<int64_t>(book_->free_blocks.size());
  }
  s.max_batch = plan_.max_batch;
  s.max_context_tokens = plan_.max_ctx;
  s.prefill_slice_tokens = plan_.slice;
  s.graph_captures = graph_captures_;
  s.graph_launches = graph_launches_;
  s.eager_steps = eager_steps_;
  s.graph_error = graph_error_;
  return s;
}

}  // namespace kimi_cuda
}  // namespace strata
