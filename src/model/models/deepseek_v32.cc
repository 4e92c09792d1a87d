// The deepseek_v32 architecture adapter on the CPU (DeepSeek-V3.2-Exp,
// model-spec §3): every layer is MLA with a low-rank query and YaRN rotary,
// restricted by the lightning indexer to the index_topk best past tokens
// (DeepSeek Sparse Attention); FFNs are dense SwiGLU for the first
// first_k_dense_replace layers, then sigmoid-routed MoE with group-limited
// selection and shared experts. Weights are bound by their checkpoint names;
// bf16/fp32 matrices stay in the mapped file, FP8 block-scaled ones are
// dequantised to fp32 at load. Activations are fp32 end to end.
//
// What this matches is transformers 5.17's eager DeepseekV32 path, which
// differs from DeepSeek's published inference code in ways that change
// numbers (model-spec §3.3.3, §8):
//   * the indexer scores in plain fp32: no Walsh-Hadamard rotation of q/k
//     (orthogonal, so exact dot products are unchanged) and no FP8
//     quantisation of q/k or of the indexer key cache (DeepSeek quantises
//     both, ue8m0 scales); top-k sets can differ near ties on long contexts;
//   * no FP8 simulation of the MLA latent cache (DeepSeek's later code
//     quantises/dequantises it per 128 values);
//   * FP8 weights: DeepSeek multiplies FP8 activations by FP8 weights; the
//     reference (and we) use the dequantised weights with fp32 activations;
//   * the indexer mask applies in prefill and decode alike; with fewer causal
//     keys than index_topk a query keeps all of them (dense attention), as
//     DeepSeek's code does too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/rope_yarn.h"
#include "base/thread_pool.h"
#include "model/config_reader.h"
#include "model/fp8_weights.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/models/deepseek_v32_config.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using cpu::WeightMatrix;

// Longest slice of tokens pushed through all layers at once. Longer prompts
// run as consecutive continuations (identical math), which bounds scratch.
constexpr int64_t kMaxSliceTokens = 512;
// q_a_layernorm / kv_a_layernorm keep DeepseekV32RMSNorm's default epsilon
// (transformers does not pass rms_norm_eps to them); the indexer's k_norm is
// a LayerNorm with eps 1e-6.
constexpr float kLatentNormEps = 1e-6f;
constexpr float kIndexerNormEps = 1e-6f;

struct AttentionWeights {
  WeightMatrix q_a;                // [qr, D]
  std::vector<float> q_a_norm;     // [qr]
  WeightMatrix q_b;                // [H·(dn+dr), qr]
  WeightMatrix kv_a;               // [r+dr, D]
  std::vector<float> kv_norm;      // [r]
  WeightMatrix kv_b;               // [H·(dn+dv), r]
  WeightMatrix o;                  // [D, H·dv]
  WeightMatrix index_q;            // indexer.wq_b [HI·dI, qr]
  WeightMatrix index_k;            // indexer.wk [dI, D]
  std::vector<float> index_k_norm_w, index_k_norm_b;  // [dI]
  WeightMatrix index_weights;      // indexer.weights_proj [HI, D]
};

struct Layer {
  std::vector<float> input_norm, post_norm;
  AttentionWeights attn;
  bool is_moe = false;
  cpu::SwiGluWeights dense;
  cpu::MoeWeights moe;
  std::vector<float> score_bias;
};

// 64-byte aligned view into a growable byte buffer.
void* Aligned(std::vector<uint8_t>& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
}

template <typename T>
T* Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Per-state scratch, grown on demand between kernel calls; never cloned.
struct Scratch {
  std::vector<float> h, xn, mix;
  std::vector<float> cos, sin;
  std::vector<float> cq, q, o, iq, iw, index;  // mixer intermediates
  std::vector<int32_t> selected, counts;
  std::vector<float> mm, attn;
  std::vector<uint8_t> moe_ws;
};

class DeepseekV32Model;

class DsaState final : public SequenceState {
 public:
  DsaState(const DeepseekV32Model* owner, int64_t max_tokens, int64_t layers)
      : owner_(owner), max_tokens_(max_tokens), latent_(layers), index_keys_(layers) {}
  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override {
    auto s = std::make_unique<DsaState>(owner_, max_tokens_, 0);
    s->tokens_ = tokens_;
    s->latent_ = latent_;
    s->index_keys_ = index_keys_;
    return s;
  }
  void Reset() override {
    tokens_ = 0;
    for (auto& v : latent_) v.clear();
    for (auto& v : index_keys_) v.clear();
  }

  const DeepseekV32Model* owner_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  // Per layer, growing with the sequence: the MLA rows [c (r) | rotated k_r
  // (dr)] and, beside them, the indexer's rotated, normalised keys [dI].
  std::vector<std::vector<float>> latent_;
  std::vector<std::vector<float>> index_keys_;
  Scratch scratch_;
};

class DeepseekV32Model final : public Model {
 public:
  static StatusOr<std::unique_ptr<DeepseekV32Model>> Create(
      std::shared_ptr<const WeightStore> weights, const DeepseekV32Config& config,
      const LoadOptions& options);
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;
  // min(context, index_topk): see DsaAttendedTokens.
  int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const override {
    return DsaAttendedTokens(cfg_, state.num_tokens() + new_tokens);
  }

 private:
  DeepseekV32Model(std::shared_ptr<const WeightStore> weights, DeepseekV32Config config,
                   ThreadPool* pool)
      : store_(std::move(weights)), cfg_(std::move(config)), pool_(pool) {}
  Status Bind(const LoadOptions& options);
  // A [rows, cols] matrix: a view of the mapped tensor, or for FP8 tensors a
  // view of its dequantised fp32 copy (kept alive by the model).
  StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);
  void ForwardSlice(const int32_t* tokens, int64_t T, DsaState& st, float* logits,
                    bool all_logits) const;
  void Attention(const Layer& layer, size_t index, const float* x, int64_t T, DsaState& st,
                 float* out) const;
  void Ffn(const Layer& layer, const float* x, int64_t T, DsaState& st, float* out) const;
  void Linear(const float* x, int64_t T, const WeightMatrix& w, float* y, Scratch& s) const;
  cpu::MlaDims MlaDims() const {
    cpu::MlaDims d{cfg_.num_heads, cfg_.qk_nope_dim, cfg_.qk_rope_dim, cfg_.v_head_dim,
                   cfg_.kv_lora_rank};
    d.softmax_scale = static_cast<float>(cfg_.softmax_scale);
    return d;
  }

  std::shared_ptr<const WeightStore> store_;
  DeepseekV32Config cfg_;
  ThreadPool* pool_;
  ModelInfo info_;
  std::vector<float> inv_freq_;  // [dr/2]
  float rope_attention_factor_ = 1.f;
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::deque<std::vector<float>> dequantized_;  // FP8 matrices as fp32
};

// ----------------------------------------------------------------------------
// Loading

StatusOr<WeightMatrix> DeepseekV32Model::Matrix(const std::string& name, int64_t rows,
                                                int64_t cols) {
  STRATA_ASSIGN_OR_RETURN(TensorView v, store_->Get(name));
  if (v.dtype == DType::kF8E4M3) {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> w,
                            LoadFp8BlockScaled(*store_, name, rows, cols, cfg_.fp8_block));
    dequantized_.push_back(std::move(w));
    return WeightMatrix{DType::kF32, dequantized_.back().data(), rows, cols};
  }
  STRATA_ASSIGN_OR_RETURN(v, store_->GetFloat(name, {rows, cols}));
  return WeightMatrix{v.dtype, v.data, rows, cols};
}

Status DeepseekV32Model::Bind(const LoadOptions& options) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  STRATA_ASSIGN_OR_RETURN(embed_, Matrix("model.embed_tokens.weight", V, D));
  if (cfg_.tie_word_embeddings && !ws.Has("lm_head.weight")) {
    lm_head_ = embed_;
  } else {
    STRATA_ASSIGN_OR_RETURN(lm_head_, Matrix("lm_head.weight", V, D));
  }
  STRATA_ASSIGN_OR_RETURN(final_norm_, ws.GetF32Copy("model.norm.weight", {D}));
  inv_freq_ = cpu::RopeInvFreq(cfg_.rope);
  rope_attention_factor_ = static_cast<float>(cpu::RopeAttentionFactor(cfg_.rope));

  const cpu::MlaDims md = MlaDims();
  const int64_t qr = cfg_.q_lora_rank, HI = cfg_.index_heads, dI = cfg_.index_head_dim;
  layers_.resize(static_cast<size_t>(cfg_.num_layers));
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "self_attn.";
    const std::string x = a + "indexer.";
    STRATA_ASSIGN_OR_RETURN(L.input_norm, ws.GetF32Copy(p + "input_layernorm.weight", {D}));
    STRATA_ASSIGN_OR_RETURN(L.post_norm, ws.GetF32Copy(p + "post_attention_layernorm.weight", {D}));
    AttentionWeights& w = L.attn;
    STRATA_ASSIGN_OR_RETURN(w.q_a, Matrix(a + "q_a_proj.weight", qr, D));
    STRATA_ASSIGN_OR_RETURN(w.q_a_norm, ws.GetF32Copy(a + "q_a_layernorm.weight", {qr}));
    STRATA_ASSIGN_OR_RETURN(w.q_b, Matrix(a + "q_b_proj.weight", md.num_heads * md.q_dim(), qr));
    STRATA_ASSIGN_OR_RETURN(w.kv_a, Matrix(a + "kv_a_proj_with_mqa.weight", md.cache_dim(), D));
    STRATA_ASSIGN_OR_RETURN(w.kv_norm, ws.GetF32Copy(a + "kv_a_layernorm.weight", {md.kv_rank}));
    STRATA_ASSIGN_OR_RETURN(w.kv_b, Matrix(a + "kv_b_proj.weight",
                                           md.num_heads * md.kv_b_rows_per_head(), md.kv_rank));
    STRATA_ASSIGN_OR_RETURN(w.o, Matrix(a + "o_proj.weight", D, md.num_heads * md.v_dim));
    STRATA_ASSIGN_OR_RETURN(w.index_q, Matrix(x + "wq_b.weight", HI * dI, qr));
    STRATA_ASSIGN_OR_RETURN(w.index_k, Matrix(x + "wk.weight", dI, D));
    STRATA_ASSIGN_OR_RETURN(w.index_k_norm_w, ws.GetF32Copy(x + "k_norm.weight", {dI}));
    STRATA_ASSIGN_OR_RETURN(w.index_k_norm_b, ws.GetF32Copy(x + "k_norm.bias", {dI}));
    STRATA_ASSIGN_OR_RETURN(w.index_weights, Matrix(x + "weights_proj.weight", HI, D));

    const std::string m = p + "mlp.";
    L.is_moe = cfg_.is_moe[static_cast<size_t>(i)];
    if (!L.is_moe) {
      const int64_t I = cfg_.intermediate_size;
      STRATA_ASSIGN_OR_RETURN(L.dense.gate, Matrix(m + "gate_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.up, Matrix(m + "up_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.down, Matrix(m + "down_proj.weight", D, I));
    } else {
      const int64_t E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
      cpu::MoeWeights& moe = L.moe;
      STRATA_ASSIGN_OR_RETURN(moe.router, Matrix(m + "gate.weight", E, D));
      STRATA_ASSIGN_OR_RETURN(L.score_bias, ws.GetF32Copy(m + "gate.e_score_correction_bias", {E}));
      moe.score_bias = L.score_bias.data();
      for (int64_t e = 0; e < E; ++e) {
        const std::string xe = absl::StrCat(m, "experts.", e, ".");
        cpu::SwiGluWeights sw;
        STRATA_ASSIGN_OR_RETURN(sw.gate, Matrix(xe + "gate_proj.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(sw.up, Matrix(xe + "up_proj.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(sw.down, Matrix(xe + "down_proj.weight", D, I));
        moe.experts.push_back(sw);
      }
      if (cfg_.num_shared_experts > 0) {
        const int64_t Is = I * cfg_.num_shared_experts;
        moe.has_shared = true;
        STRATA_ASSIGN_OR_RETURN(moe.shared.gate, Matrix(m + "shared_experts.gate_proj.weight", Is, D));
        STRATA_ASSIGN_OR_RETURN(moe.shared.up, Matrix(m + "shared_experts.up_proj.weight", Is, D));
        STRATA_ASSIGN_OR_RETURN(moe.shared.down,
                                Matrix(m + "shared_experts.down_proj.weight", D, Is));
      }
      moe.top_k = cfg_.experts_per_token;
      moe.renormalize = cfg_.norm_topk_prob;
      moe.routed_scaling = static_cast<float>(cfg_.routed_scaling_factor);
      moe.num_groups = cfg_.n_group;
      moe.topk_groups = cfg_.topk_group;
    }
    if (options.progress) {
      // LoadModel gives the weight store 90%; binding is the last 10% but one.
      const float f =
          0.9f + 0.09f * static_cast<float>(i + 1) / static_cast<float>(cfg_.num_layers);
      if (!options.progress(f)) {
        return absl::CancelledError(
            absl::StrCat(store_->dir(), ": load cancelled by the progress callback"));
      }
    }
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<DeepseekV32Model>> DeepseekV32Model::Create(
    std::shared_ptr<const WeightStore> weights, const DeepseekV32Config& config,
    const LoadOptions& options) {
  ThreadPool* pool = options.pool ? options.pool : ThreadPool::Default();
  std::unique_ptr<DeepseekV32Model> m(new DeepseekV32Model(std::move(weights), config, pool));
  STRATA_RETURN_IF_ERROR(m->Bind(options));

  const DeepseekV32Config& c = m->cfg_;
  ModelInfo& info = m->info_;
  info.architecture = "deepseek_v32";
  info.device = "cpu";
  info.num_layers = static_cast<int32_t>(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    info.layer_kinds.push_back(c.is_moe[static_cast<size_t>(i)] ? "dsa+moe" : "dsa+dense");
  }
  info.num_parameters = m->store_->TotalElements();
  info.parameter_bytes = m->store_->TotalBytes();
  info.vocab_size = static_cast<int32_t>(c.vocab_size);
  info.hidden_size = static_cast<int32_t>(c.hidden_size);
  info.max_context = c.max_context;
  const cpu::MlaDims md = m->MlaDims();
  info.state_bytes_per_token =
      static_cast<uint64_t>(c.num_layers * (md.cache_dim() + c.index_head_dim)) * sizeof(float);
  info.state_bytes_per_sequence = 0;
  info.bos_token_id = c.bos_token_id;
  info.eos_token_id = c.eos_token_id;
  return m;
}

// ----------------------------------------------------------------------------
// State

StatusOr<std::unique_ptr<SequenceState>> DeepseekV32Model::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (info_.max_context > 0 && max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("NewState: max_tokens ", max_tokens,
                                                   " exceeds the model's context of ",
                                                   info_.max_context));
  }
  // Caches grow with the sequence (up to max_tokens), so unused capacity
  // costs nothing.
  return std::unique_ptr<SequenceState>(
      std::make_unique<DsaState>(this, max_tokens, cfg_.num_layers));
}

// ----------------------------------------------------------------------------
// Forward

void DeepseekV32Model::Linear(const float* x, int64_t T, const WeightMatrix& w, float* y,
                              Scratch& s) const {
  float* mm = Grow(s.mm, cpu::MatMulScratchFloats(T, w.cols, pool_->num_threads()) + 1);
  cpu::MatMul(x, T, w, y, mm, pool_);
}

void DeepseekV32Model::Attention(const Layer& layer, size_t index, const float* x, int64_t T,
                                 DsaState& st, float* out) const {
  const AttentionWeights& w = layer.attn;
  Scratch& s = st.scratch_;
  const cpu::MlaDims md = MlaDims();
  const int64_t H = md.num_heads, qd = md.q_dim(), cd = md.cache_dim();
  const int64_t half = md.rope_dim / 2;
  const int64_t past = st.tokens_;
  const float* cos = s.cos.data();
  const float* sin = s.sin.data();

  // Query: q_b(RMSNorm(q_a x)); its rope part rotated (interleaved pairs).
  float* cq = Grow(s.cq, static_cast<size_t>(T * cfg_.q_lora_rank));
  float* q = Grow(s.q, static_cast<size_t>(T * H * qd));
  Linear(x, T, w.q_a, cq, s);
  cpu::RmsNorm(cq, T, cfg_.q_lora_rank, w.q_a_norm.data(), kLatentNormEps, cq, pool_);
  Linear(cq, T, w.q_b, q, s);
  cpu::ApplyRope(cpu::RopeLayout::kInterleaved, q, T, H, H * qd, qd, md.nope_dim, half, cos, sin,
                 pool_);

  // Append [RMSNorm(c_raw) | rotated k_r] for the new tokens to the latent cache.
  std::vector<float>& cache = st.latent_[index];
  cache.resize(static_cast<size_t>((past + T) * cd));
  float* rows = cache.data() + past * cd;
  Linear(x, T, w.kv_a, rows, s);
  cpu::ParallelRange(pool_, T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      cpu::RmsNorm(rows + t * cd, 1, md.kv_rank, w.kv_norm.data(), kLatentNormEps, rows + t * cd,
                   nullptr);
    }
  });
  cpu::ApplyRope(cpu::RopeLayout::kInterleaved, rows, T, 1, cd, 0, md.kv_rank, half, cos, sin,
                 pool_);

  // Indexer keys: LayerNorm(wk x), rotary part first and half-split. They are
  // cached for every token, also while the context is short enough that the
  // selection is everything.
  const int64_t dI = cfg_.index_head_dim, HI = cfg_.index_heads, K = cfg_.index_topk;
  std::vector<float>& keys = st.index_keys_[index];
  keys.resize(static_cast<size_t>((past + T) * dI));
  float* krows = keys.data() + past * dI;
  Linear(x, T, w.index_k, krows, s);
  cpu::LayerNorm(krows, T, dI, w.index_k_norm_w.data(), w.index_k_norm_b.data(), kIndexerNormEps,
                 krows, pool_);
  cpu::ApplyRope(cpu::RopeLayout::kHalfSplit, krows, T, 1, dI, 0, 0, half, cos, sin, pool_);

  // While no query has more than index_topk causal keys the selection is
  // every causal key, i.e. dense attention: skip scoring.
  cpu::MlaSelection selection;
  const bool sparse = past + T > K;
  if (sparse) {
    float* iq = Grow(s.iq, static_cast<size_t>(T * HI * dI));
    float* iw = Grow(s.iw, static_cast<size_t>(T * HI));
    Linear(cq, T, w.index_q, iq, s);
    cpu::ApplyRope(cpu::RopeLayout::kHalfSplit, iq, T, HI, HI * dI, dI, 0, half, cos, sin, pool_);
    Linear(x, T, w.index_weights, iw, s);
    const float head_scale = 1.f / std::sqrt(static_cast<float>(HI));
    for (int64_t i = 0; i < T * HI; ++i) iw[i] *= head_scale;
    int32_t* sel = Grow(s.selected, static_cast<size_t>(T * K));
    int32_t* counts = Grow(s.counts, static_cast<size_t>(T));
    float* scratch = Grow(s.index, cpu::IndexerScratchFloats(T, past + T, pool_->num_threads()));
    cpu::IndexerTopK({HI, dI, K}, iq, iw, T, keys.data(), past,
                     1.f / std::sqrt(static_cast<float>(dI)), sel, counts, nullptr, scratch,
                     pool_);
    selection = {sel, counts, K};
  }
  const cpu::MlaSelection* sel = sparse ? &selection : nullptr;
  const int64_t top_k = sparse ? K : 0;

  float* o = Grow(s.o, static_cast<size_t>(T * H * md.v_dim));
  // Decode always takes the absorbed form; a continuation takes whichever form
  // costs less (fresh prefill: expansion).
  const bool absorbed =
      past > 0 && (T == 1 || cpu::MlaAbsorbedCost(md, T, past, top_k) <
                                 cpu::MlaPrefillCost(md, T, past, top_k));
  if (absorbed) {
    float* scratch = Grow(s.attn, cpu::MlaAbsorbedScratchFloats(md, T));
    cpu::MlaAbsorbed(md, q, T, cache.data(), past, w.kv_b, o, scratch, pool_, sel);
  } else {
    float* scratch = Grow(s.attn, cpu::MlaPrefillScratchFloats(md, T, pool_->num_threads()));
    cpu::MlaPrefill(md, q, T, cache.data(), past, w.kv_b, o, scratch, pool_, sel);
  }
  Linear(o, T, w.o, out, s);
}

void DeepseekV32Model::Ffn(const Layer& layer, const float* x, int64_t T, DsaState& st,
                           float* out) const {
  Scratch& s = st.scratch_;
  const int threads = pool_->num_threads();
  if (layer.is_moe) {
    const size_t bytes = cpu::MoeScratchBytes(T, cfg_.hidden_size, layer.moe, threads);
    cpu::Moe(x, T, layer.moe, out, Aligned(s.moe_ws, bytes), pool_);
  } else {
    float* scratch =
        Grow(s.attn, cpu::SwiGluScratchFloats(T, cfg_.hidden_size, cfg_.intermediate_size, threads));
    cpu::SwiGlu(x, T, layer.dense, out, scratch, pool_);
  }
}

void DeepseekV32Model::ForwardSlice(const int32_t* tokens, int64_t T, DsaState& st, float* logits,
                                    bool all_logits) const {
  Scratch& s = st.scratch_;
  const int64_t D = cfg_.hidden_size;
  const size_t td = static_cast<size_t>(T * D);
  float* h = Grow(s.h, td);
  float* xn = Grow(s.xn, td);
  float* mix = Grow(s.mix, td);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  // One cos/sin table for the slice's positions, shared by every layer (MLA
  // and indexer use the same frequencies).
  const int64_t half = cfg_.qk_rope_dim / 2;
  cpu::RopeCosSin(inv_freq_.data(), half, st.tokens_, T, rope_attention_factor_,
                  Grow(s.cos, static_cast<size_t>(T * half)),
                  Grow(s.sin, static_cast<size_t>(T * half)));
  for (int64_t t = 0; t < T; ++t) cpu::RowToF32(embed_, tokens[t], h + t * D);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    cpu::RmsNorm(h, T, D, layer.input_norm.data(), eps, xn, pool_);
    Attention(layer, l, xn, T, st, mix);
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
    cpu::RmsNorm(h, T, D, layer.post_norm.data(), eps, xn, pool_);
    Ffn(layer, xn, T, st, mix);
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
  }
  st.tokens_ += T;
  if (logits == nullptr) return;
  if (all_logits) {
    cpu::RmsNorm(h, T, D, final_norm_.data(), eps, xn, pool_);
    Linear(xn, T, lm_head_, logits, s);
  } else {
    cpu::RmsNorm(h + (T - 1) * D, 1, D, final_norm_.data(), eps, xn, pool_);
    Linear(xn, 1, lm_head_, logits, s);
  }
}

Status DeepseekV32Model::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                 float* logits, bool all_logits) const {
  auto* st = dynamic_cast<DsaState*>(&state);
  if (st == nullptr || st->owner_ != this) {
    return absl::InvalidArgumentError(
        "Forward: the state was not created by this model's NewState");
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("Forward: no tokens");
  for (int64_t i = 0; i < T; ++i) {
    if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] >= cfg_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: token id ", tokens[static_cast<size_t>(i)], " at position ", i,
                       " is outside the vocabulary [0, ", cfg_.vocab_size, ")"));
    }
  }
  if (st->tokens_ + T > st->max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("Forward: ", T, " tokens on top of ", st->tokens_,
                                              " exceed the state's capacity of ", st->max_tokens_));
  }
  const int64_t V = cfg_.vocab_size;
  for (int64_t begin = 0; begin < T; begin += kMaxSliceTokens) {
    const int64_t n = std::min(kMaxSliceTokens, T - begin);
    const bool last = begin + n == T;
    float* slice_logits = nullptr;
    if (logits != nullptr && all_logits) slice_logits = logits + begin * V;
    if (logits != nullptr && !all_logits && last) slice_logits = logits;
    ForwardSlice(tokens.data() + begin, n, *st, slice_logits, all_logits);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateDeepseekV32Model(std::shared_ptr<const WeightStore> weights,
                                                        const std::string& config_path,
                                                        const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(DeepseekV32Config config, ParseDeepseekV32Config(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DeepseekV32Model> model,
                          DeepseekV32Model::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace strata
