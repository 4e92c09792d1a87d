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
// Slots and blocks

CudaState::~CudaState() { book_->GiveBack(slot_, blocks_); }

std::unique_ptr<SequenceState> CudaState::Clone() const { return owner_->CloneState(*this); }

void CudaState::Reset() { owner_->ResetState(*this); }

// ----------------------------------------------------------------------------
// Small helpers

Status Qwen3NextCudaModel::Sync(const char* what) const {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return cuda::CudaError(e, what);
  return OkStatus();
}

Status Qwen3NextCudaModel::ZeroSlot(int32_t slot) const {
  const Geometry& g = g_;
  for (int64_t l = 0; l < g.num_gdn; ++l) {
    float* state = pools_.state + (l * pools_.slots + slot) * g.state;
    float* window = pools_.window + (l * pools_.slots + slot) * g.window;
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(state, 0, sizeof(float) * static_cast<size_t>(g.state), stream_));
    if (g.window > 0) {
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(window, 0, sizeof(float) * static_cast<size_t>(g.window), stream_));
    }
  }
  return OkStatus();
}

Status Qwen3NextCudaModel::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m,
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

Status Qwen3NextCudaModel::CheckState(SequenceState* s, CudaState** out, const char* what) const {
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

StatusOr<std::unique_ptr<SequenceState>> Qwen3NextCudaModel::NewState(int64_t max_tokens) const {
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

void Qwen3NextCudaModel::ResetState(CudaState& st) const {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  book_->GiveBackBlocks(st.blocks_);
  st.tokens_ = 0;
  ++st.generation_;
  // Reset cannot report; a failure here resurfaces at the next Sync.
  ZeroSlot(st.slot_).IgnoreError();
}

std::unique_ptr<SequenceState> Qwen3NextCudaModel::CloneState(const CudaState& src) const {
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
  for (int64_t l = 0; l < g.num_gdn && ok; ++l) {
    const int64_t base = l * pools_.slots;
    ok = copy(pools_.state + (base + slot) * g.state, pools_.state + (base + src.slot_) * g.state,
              sizeof(float) * static_cast<size_t>(g.state));
    if (ok && g.window > 0) {
      ok = copy(pools_.window + (base + slot) * g.window,
                pools_.window + (base + src.slot_) * g.window,
                sizeof(float) * static_cast<size_t>(g.window));
    }
  }
  const int64_t block_elems = pools_.block_elems;
  const int64_t nb = static_cast<int64_t>(src.blocks_.size());
  for (int64_t l = 0; l < 2 * g.num_attn && ok; ++l) {
    // Every layer's K pool, then every layer's V pool.
    bf16* pool = (l < g.num_attn ? pools_.k : pools_.v) +
                 (l % g.num_attn) * pools_.blocks * block_elems;
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

Status Qwen3NextCudaModel::EnsureBlocks(CudaState& st, int64_t tokens) const {
  if (g_.num_attn == 0) return OkStatus();
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

Status Qwen3NextCudaModel::UploadPrefillTable(const CudaState& st, int64_t tokens) const {
  if (g_.num_attn == 0) return OkStatus();
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

Status Qwen3NextCudaModel::Ffn(const Layer& L, int64_t n, const float** pending) const {
  const Geometry& g = g_;
  const FfnLayer& f = L.ffn;
  auto swiglu = [&](int64_t inter, float* y, float beta) -> Status {
    STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, f.gate_up, 2 * inter, g.D, s_.gu,
                              ActType::kBf16, 2 * inter, 0.f));
    STRATA_RETURN_IF_ERROR(cuda::SiluMul(s_.gu, ActType::kBf16, n, inter, s_.act, stream_));
    return Mm(s_.act, ActType::kBf16, inter, n, f.down, g.D, inter, y, ActType::kF32, g.D, beta);
  };
  if (!L.is_moe) return swiglu(g.I_dense, s_.h, 1.f);
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, f.router, g.E, g.D, s_.router_logits,
                            ActType::kF32, g.E, 0.f));
  cuda::MoeArgs a;
  a.shape = MoeShapeOf(g);
  a.num_tokens = n;
  a.x = s_.xn;
  a.router_logits = s_.router_logits;
  a.score_bias = nullptr;
  a.w13 = f.w13;
  a.w2 = f.w2;
  a.y = s_.delta;
  STRATA_RETURN_IF_ERROR(cuda::MoeForward(a, s_.moe_ws, plan_.moe_ws, stream_));
  // Shared expert, scaled per token by sigmoid(xn·w_sg) (column 0 of the
  // padded 8-row gate product).
  STRATA_RETURN_IF_ERROR(swiglu(g.Is, s_.shared, 0.f));
  STRATA_RETURN_IF_ERROR(Mm(s_.xn, ActType::kBf16, g.D, n, f.shared_gate, kSharedGateRows, g.D,
                            s_.sgate, ActType::kF32, kSharedGateRows, 0.f));
  STRATA_RETURN_IF_ERROR(
      cuda::AddSigmoidScaledRows(s_.h, s_.shared, s_.sgate, kSharedGateRows, n, g.D, stream_));
  // The routed sum joins the residual in the next AddRmsNorm (one pass less).
  *pending = s_.delta;
  return OkStatus();
}

Status Qwen3NextCudaModel::EnqueueLayers(int64_t n, const int32_t* tokens, const CudaState* ps,
                                         int64_t past, const float** pending) const {
  const Geometry& g = g_;
  STRATA_RETURN_IF_ERROR(cuda::EmbeddingGather(w_.embed, g.D, tokens, n, s_.h, stream_));
  const float* pend = nullptr;
  for (const Layer& L : w_.layers) {
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pend, ActType::kF32, n, g.D, L.input_norm, g.eps,
                                            s_.xn, stream_));
    pend = nullptr;
    if (L.is_attn) {
      STRATA_RETURN_IF_ERROR(AttnMixer(L, n, ps, past));
    } else {
      STRATA_RETURN_IF_ERROR(GdnMixer(L, n, ps));
    }
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, nullptr, ActType::kF32, n, g.D, L.post_norm,
                                            g.eps, s_.xn, stream_));
    STRATA_RETURN_IF_ERROR(Ffn(L, n, &pend));
  }
  *pending = pend;
  return OkStatus();
}

Status Qwen3NextCudaModel::EnqueueDecode(int64_t batch, bool sample) const {
  const Geometry& g = g_;
  const float* pending = nullptr;
  STRATA_RETURN_IF_ERROR(EnqueueLayers(batch, s_.step, nullptr, 0, &pending));
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

Status Qwen3NextCudaModel::RunDecodeStep(int64_t batch, bool sample) const {
  auto eager = [&]() {
    ++eager_steps_;
    return EnqueueDecode(batch, sample);
  };
  if (!graphs_enabled_) return eager();
  GraphEntry& e = graphs_[GraphKey{batch, sample}];
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
  const Status enqueued = EnqueueDecode(batch, sample);
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

Status Qwen3NextCudaModel::DecodeLocked(std::span<const int32_t> tokens,
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
  if (g.num_attn > 0) {
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
  for (int64_t b = 0; b < B; ++b) {
    CudaState& st = *states[static_cast<size_t>(b)];
    h_step_[b] = tokens[static_cast<size_t>(b)];
    h_step_[B_max + b] = st.slot_;
    h_step_[2 * B_max + b] = static_cast<int32_t>(st.tokens_);
    h_step_[3 * B_max + b] = static_cast<int32_t>(st.tokens_ + 1);
    if (g.num_attn == 0) continue;
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

  STRATA_RETURN_IF_ERROR(RunDecodeStep(B, sample));

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

Status Qwen3NextCudaModel::Prefill(std::span<const int32_t> tokens, CudaState& st, float* logits,
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
    STRATA_RETURN_IF_ERROR(EnqueueLayers(n, s_.tokens, &st, st.tokens_, &pending));
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

Status Qwen3NextCudaModel::Forward(std::span<const int32_t> tokens, SequenceState& state,
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
    // One token takes the decode path (recurrent GDN, cached attention) even on an
    // empty state: from a zero state it is the same math as chunked prefill.
    CudaState* const one[1] = {st};
    return DecodeLocked(tokens, std::span<CudaState* const>(one, 1), logits, {}, nullptr);
  }
  return Prefill(tokens, *st, logits, all_logits);
}

Status Qwen3NextCudaModel::DecodeBatch(std::span<const int32_t> tokens,
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

Status Qwen3NextCudaModel::DecodeBatchSample(std::span<const int32_t> tokens,
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

Qwen3NextCudaStats Qwen3NextCudaModel::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Qwen3NextCudaStats s;
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

}  // namespace qwen3next_cuda
}  // namespace strata
