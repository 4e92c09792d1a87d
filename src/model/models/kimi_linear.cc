// The kimi_linear architecture adapter on the CPU (model-spec §2): KDA linear
// attention and NoPE MLA mixers, dense SwiGLU / sigmoid-routed MoE FFNs.
// Weights are bound by their original checkpoint names; matrices stay in the
// mapped file, small vectors are copied to fp32. Activations are fp32 end to
// end (the parity reference runs transformers in fp32 on the same weights).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/kda.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/kimi_linear_weights.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using cpu::WeightMatrix;

// Longest slice of tokens pushed through all layers at once. Longer prompts
// run as consecutive continuations (identical math), which bounds scratch.
constexpr int64_t kMaxSliceTokens = 512;
// MLA kv_a_layernorm epsilon: fixed in the reference, not rms_norm_eps (§8 item 8).
constexpr float kLatentNormEps = 1e-6f;

struct KdaWeights {
  WeightMatrix q, k, v;                       // [H·dk, D]
  WeightMatrix f_a, f_b;                      // [dk, D], [H·dk, dk]
  WeightMatrix b;                             // [H, D]
  WeightMatrix g_a, g_b;                      // [dv, D], [H·dv, dv]
  WeightMatrix o;                             // [D, H·dv]
  std::vector<float> q_conv, k_conv, v_conv;  // [C, K]
  std::vector<float> neg_exp_a;               // [H]: −exp(A_log)
  std::vector<float> dt_bias;                 // [H·dk]
  std::vector<float> o_norm;                  // [dv]
};

struct MlaWeights {
  WeightMatrix q;              // [H·(dn+dr), D]
  WeightMatrix kv_a;           // [r+dr, D]
  WeightMatrix kv_b;           // [H·(dn+dv), r]
  WeightMatrix o;              // [D, H·dv]
  std::vector<float> kv_norm;  // [r]
};

struct Layer {
  bool is_mla = false;
  int slot = 0;  // index among the layers of its kind (state arrays)
  std::vector<float> input_norm, post_norm;
  KdaWeights kda;
  MlaWeights mla;
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

float* Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Per-state scratch, grown on demand between kernel calls; never cloned.
struct Scratch {
  std::vector<float> h, xn, mix, ffn;
  std::vector<float> a, b, c, d, e, f, g, o;  // mixer intermediates
  std::vector<float> mm;                      // matmul tiles
  std::vector<float> attn;
  std::vector<uint8_t> kda_ws, moe_ws;
  std::vector<float> logits_rows;
};

class KimiLinearModel;

class KimiState final : public SequenceState {
 public:
  KimiState(const KimiLinearModel* owner, int64_t max_tokens)
      : owner_(owner), max_tokens_(max_tokens) {}
  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override {
    auto s = std::make_unique<KimiState>(owner_, max_tokens_);
    s->tokens_ = tokens_;
    s->kda_state_ = kda_state_;
    s->conv_window_ = conv_window_;
    s->mla_cache_ = mla_cache_;
    return s;
  }
  void Reset() override {
    tokens_ = 0;
    for (auto& v : kda_state_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : conv_window_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : mla_cache_) v.clear();
  }

  const KimiLinearModel* owner_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> kda_state_;    // per KDA layer [H, dk, dv]
  std::vector<std::vector<float>> conv_window_;  // per KDA layer [3][K−1, H·dk] (q, k, v)
  std::vector<std::vector<float>> mla_cache_;    // per MLA layer [tokens, r+dr], grows
  Scratch scratch_;
};

class KimiLinearModel final : public Model {
 public:
  static StatusOr<std::unique_ptr<KimiLinearModel>> Create(
      std::shared_ptr<const WeightStore> weights, const KimiLinearConfig& config,
      const LoadOptions& options);
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;

 private:
  KimiLinearModel(std::shared_ptr<const WeightStore> weights, KimiLinearConfig config,
                  ThreadPool* pool)
      : store_(std::move(weights)), cfg_(std::move(config)), pool_(pool) {}
  Status Bind(const LoadOptions& options);
  Status ForwardSlice(const int32_t* tokens, int64_t T, KimiState& st, float* logits,
                      bool all_logits) const;
  Status KdaMixer(const Layer& layer, const float* x, int64_t T, KimiState& st, float* out) const;
  void MlaMixer(const Layer& layer, const float* x, int64_t T, KimiState& st, float* out) const;
  void Ffn(const Layer& layer, const float* x, int64_t T, KimiState& st, float* out) const;
  // y[T, w.rows] = x · wᵀ using the state's matmul scratch.
  void Linear(const float* x, int64_t T, const WeightMatrix& w, float* y, Scratch& s) const;
  cpu::MlaDims MlaDims() const {
    return {cfg_.mla_heads, cfg_.qk_nope_dim, cfg_.qk_rope_dim, cfg_.v_head_dim, cfg_.kv_lora_rank};
  }

  std::shared_ptr<const WeightStore> store_;
  KimiLinearConfig cfg_;
  ThreadPool* pool_;
  ModelInfo info_;
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
};

// ----------------------------------------------------------------------------
// Loading

WeightMatrix AsMatrix(const TensorView& v) {
  return {v.dtype, v.data, v.dim(0), v.rank() > 1 ? v.dim(1) : 1};
}

Status KimiLinearModel::Bind(const LoadOptions& options) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> StatusOr<WeightMatrix> {
    STRATA_ASSIGN_OR_RETURN(TensorView v, ws.GetFloat(name, {rows, cols}));
    return AsMatrix(v);
  };
  STRATA_ASSIGN_OR_RETURN(embed_, matrix("model.embed_tokens.weight", V, D));
  if (cfg_.tie_word_embeddings && !ws.Has("lm_head.weight")) {
    lm_head_ = embed_;
  } else {
    STRATA_ASSIGN_OR_RETURN(lm_head_, matrix("lm_head.weight", V, D));
  }
  STRATA_ASSIGN_OR_RETURN(final_norm_, ws.GetF32Copy("model.norm.weight", {D}));

  const int64_t H = cfg_.kda_heads, dk = cfg_.kda_head_dim, K = cfg_.conv_kernel;
  const cpu::MlaDims md = MlaDims();
  int kda_slot = 0, mla_slot = 0;
  layers_.resize(static_cast<size_t>(cfg_.num_layers));
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "self_attn.";
    STRATA_ASSIGN_OR_RETURN(L.input_norm, ws.GetF32Copy(p + "input_layernorm.weight", {D}));
    STRATA_ASSIGN_OR_RETURN(L.post_norm, ws.GetF32Copy(p + "post_attention_layernorm.weight", {D}));
    L.is_mla = cfg_.is_mla[static_cast<size_t>(i)];
    if (L.is_mla) {
      L.slot = mla_slot++;
      MlaWeights& m = L.mla;
      STRATA_ASSIGN_OR_RETURN(m.q, matrix(a + "q_proj.weight", md.num_heads * md.q_dim(), D));
      STRATA_ASSIGN_OR_RETURN(m.kv_a, matrix(a + "kv_a_proj_with_mqa.weight", md.cache_dim(), D));
      STRATA_ASSIGN_OR_RETURN(m.kv_norm, ws.GetF32Copy(a + "kv_a_layernorm.weight", {md.kv_rank}));
      STRATA_ASSIGN_OR_RETURN(m.kv_b, matrix(a + "kv_b_proj.weight",
                                             md.num_heads * md.kv_b_rows_per_head(), md.kv_rank));
      STRATA_ASSIGN_OR_RETURN(m.o, matrix(a + "o_proj.weight", D, md.num_heads * md.v_dim));
    } else {
      L.slot = kda_slot++;
      KdaWeights& k = L.kda;
      STRATA_ASSIGN_OR_RETURN(k.q, matrix(a + "q_proj.weight", H * dk, D));
      STRATA_ASSIGN_OR_RETURN(k.k, matrix(a + "k_proj.weight", H * dk, D));
      STRATA_ASSIGN_OR_RETURN(k.v, matrix(a + "v_proj.weight", H * dk, D));
      STRATA_ASSIGN_OR_RETURN(k.q_conv, ws.GetF32Copy(a + "q_conv1d.weight", {H * dk, 1, K}));
      STRATA_ASSIGN_OR_RETURN(k.k_conv, ws.GetF32Copy(a + "k_conv1d.weight", {H * dk, 1, K}));
      STRATA_ASSIGN_OR_RETURN(k.v_conv, ws.GetF32Copy(a + "v_conv1d.weight", {H * dk, 1, K}));
      STRATA_ASSIGN_OR_RETURN(k.f_a, matrix(a + "f_a_proj.weight", dk, D));
      STRATA_ASSIGN_OR_RETURN(k.f_b, matrix(a + "f_b_proj.weight", H * dk, dk));
      STRATA_ASSIGN_OR_RETURN(k.b, matrix(a + "b_proj.weight", H, D));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log,
                              KimiGetSmallF32(ws, a + "A_log", KimiALogShapes(H)));
      for (float v : a_log) k.neg_exp_a.push_back(-std::exp(v));
      STRATA_ASSIGN_OR_RETURN(k.dt_bias,
                              KimiGetSmallF32(ws, a + "dt_bias", KimiDtBiasShapes(H, dk)));
      STRATA_ASSIGN_OR_RETURN(k.g_a, matrix(a + "g_a_proj.weight", dk, D));
      STRATA_ASSIGN_OR_RETURN(k.g_b, matrix(a + "g_b_proj.weight", H * dk, dk));
      STRATA_ASSIGN_OR_RETURN(k.o_norm, ws.GetF32Copy(a + "o_norm.weight", {dk}));
      STRATA_ASSIGN_OR_RETURN(k.o, matrix(a + "o_proj.weight", D, H * dk));
    }
    L.is_moe = cfg_.is_moe[static_cast<size_t>(i)];
    if (!L.is_moe) {
      // The published checkpoint names the dense MLP `mlp.`; transformers'
      // save_pretrained writes it under `block_sparse_moe.` (it reverses the
      // rename for every layer). Accept both; errors name the checkpoint form.
      const int64_t I = cfg_.intermediate_size;
      const std::string d = KimiDenseMlpPrefix(ws, i);
      STRATA_ASSIGN_OR_RETURN(L.dense.gate, matrix(d + "gate_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.up, matrix(d + "up_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.down, matrix(d + "down_proj.weight", D, I));
    } else {
      const std::string m = p + "block_sparse_moe.";
      const int64_t E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
      cpu::MoeWeights& moe = L.moe;
      STRATA_ASSIGN_OR_RETURN(moe.router, matrix(m + "gate.weight", E, D));
      STRATA_ASSIGN_OR_RETURN(L.score_bias, ws.GetF32Copy(m + "gate.e_score_correction_bias", {E}));
      moe.score_bias = L.score_bias.data();
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        cpu::SwiGluWeights w;
        STRATA_ASSIGN_OR_RETURN(w.gate, matrix(x + "w1.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(w.up, matrix(x + "w3.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(w.down, matrix(x + "w2.weight", D, I));
        moe.experts.push_back(w);
      }
      if (cfg_.num_shared_experts > 0) {
        const int64_t Is = I * cfg_.num_shared_experts;
        moe.has_shared = true;
        STRATA_ASSIGN_OR_RETURN(moe.shared.gate,
                                matrix(m + "shared_experts.gate_proj.weight", Is, D));
        STRATA_ASSIGN_OR_RETURN(moe.shared.up, matrix(m + "shared_experts.up_proj.weight", Is, D));
        STRATA_ASSIGN_OR_RETURN(moe.shared.down,
                                matrix(m + "shared_experts.down_proj.weight", D, Is));
      }
      moe.top_k = cfg_.experts_per_token;
      moe.renormalize = cfg_.moe_renormalize;
      moe.routed_scaling = static_cast<float>(cfg_.routed_scaling_factor);
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

StatusOr<std::unique_ptr<KimiLinearModel>> KimiLinearModel::Create(
    std::shared_ptr<const WeightStore> weights, const KimiLinearConfig& config,
    const LoadOptions& options) {
  ThreadPool* pool = options.pool ? options.pool : ThreadPool::Default();
  std::unique_ptr<KimiLinearModel> m(new KimiLinearModel(std::move(weights), config, pool));
  STRATA_RETURN_IF_ERROR(m->Bind(options));

  const KimiLinearConfig& c = m->cfg_;
  ModelInfo& info = m->info_;
  info.architecture = "kimi_linear";
  info.device = "cpu";
  info.num_layers = static_cast<int32_t>(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    info.layer_kinds.push_back(absl::StrCat(c.is_mla[static_cast<size_t>(i)] ? "mla" : "kda", "+",
                                            c.is_moe[static_cast<size_t>(i)] ? "moe" : "dense"));
  }
  info.num_parameters = m->store_->TotalElements();
  info.parameter_bytes = m->store_->TotalBytes();
  info.vocab_size = static_cast<int32_t>(c.vocab_size);
  info.hidden_size = static_cast<int32_t>(c.hidden_size);
  info.max_context = c.max_context;
  const cpu::MlaDims md = m->MlaDims();
  info.state_bytes_per_token =
      static_cast<uint64_t>(c.NumMlaLayers() * md.cache_dim()) * sizeof(float);
  const int64_t kda_fixed = c.kda_heads * c.kda_head_dim * c.kda_head_dim +          // S
                            3 * c.kda_heads * c.kda_head_dim * (c.conv_kernel - 1);  // windows
  info.state_bytes_per_sequence =
      static_cast<uint64_t>(c.NumKdaLayers() * kda_fixed) * sizeof(float);
  info.bos_token_id = c.bos_token_id;
  info.eos_token_id = c.eos_token_id;
  return m;
}

// ----------------------------------------------------------------------------
// State

StatusOr<std::unique_ptr<SequenceState>> KimiLinearModel::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (info_.max_context > 0 && max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("NewState: max_tokens ", max_tokens,
                                                   " exceeds the model's context of ",
                                                   info_.max_context));
  }
  auto st = std::make_unique<KimiState>(this, max_tokens);
  const int64_t H = cfg_.kda_heads, dk = cfg_.kda_head_dim;
  for (int64_t i = 0; i < cfg_.NumKdaLayers(); ++i) {
    st->kda_state_.emplace_back(static_cast<size_t>(H * dk * dk), 0.f);
    st->conv_window_.emplace_back(static_cast<size_t>(3 * (cfg_.conv_kernel - 1) * H * dk), 0.f);
  }
  // Latent caches grow with the sequence (up to max_tokens), so an unused
  // capacity costs nothing.
  st->mla_cache_.resize(static_cast<size_t>(cfg_.NumMlaLayers()));
  return std::unique_ptr<SequenceState>(std::move(st));
}

// ----------------------------------------------------------------------------
// Forward

void KimiLinearModel::Linear(const float* x, int64_t T, const WeightMatrix& w, float* y,
                             Scratch& s) const {
  float* mm = Grow(s.mm, cpu::MatMulScratchFloats(T, w.cols, pool_->num_threads()) + 1);
  cpu::MatMul(x, T, w, y, mm, pool_);
}

inline float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

Status KimiLinearModel::KdaMixer(const Layer& layer, const float* x, int64_t T, KimiState& st,
                                 float* out) const {
  const KdaWeights& w = layer.kda;
  Scratch& s = st.scratch_;
  const int64_t H = cfg_.kda_heads, dk = cfg_.kda_head_dim, K = cfg_.conv_kernel;
  const int64_t C = H * dk;
  const size_t tc = static_cast<size_t>(T * C);
  float* raw = Grow(s.a, tc);
  float* q = Grow(s.b, tc);
  float* k = Grow(s.c, tc);
  float* v = Grow(s.d, tc);
  float* g = Grow(s.e, tc);
  float* o = Grow(s.o, tc);
  float* small = Grow(s.f, static_cast<size_t>(T * (dk + H)));  // f_a / g_a output, then β
  float* beta = small + T * dk;
  float* window = st.conv_window_[static_cast<size_t>(layer.slot)].data();
  const int64_t wsize = (K - 1) * C;

  // q, k, v: projection, then causal conv + SiLU with the carried windows.
  Linear(x, T, w.q, raw, s);
  cpu::CausalConv1dSilu(raw, T, C, w.q_conv.data(), K, window, q, pool_);
  Linear(x, T, w.k, raw, s);
  cpu::CausalConv1dSilu(raw, T, C, w.k_conv.data(), K, window + wsize, k, pool_);
  Linear(x, T, w.v, raw, s);
  cpu::CausalConv1dSilu(raw, T, C, w.v_conv.data(), K, window + 2 * wsize, v, pool_);

  // Forget gate g = −exp(A_log)·softplus(f_b(f_a x) + dt_bias), in fp32.
  Linear(x, T, w.f_a, small, s);
  Linear(small, T, w.f_b, g, s);
  cpu::ParallelRange(pool_, T * H, 16, [&](int64_t b, int64_t e) {
    for (int64_t th = b; th < e; ++th) {
      const int64_t h = th % H;
      float* gr = g + th * dk;
      const float* bias = w.dt_bias.data() + h * dk;
      for (int64_t d = 0; d < dk; ++d)
        gr[d] = w.neg_exp_a[static_cast<size_t>(h)] * Softplus(gr[d] + bias[d]);
    }
  });
  Linear(x, T, w.b, beta, s);
  for (int64_t i = 0; i < T * H; ++i) beta[i] = Sigmoid(beta[i]);

  cpu::KdaArgs args;
  args.num_tokens = T;
  args.num_heads = H;
  args.key_dim = dk;
  args.value_dim = dk;
  args.q = q;
  args.k = k;
  args.v = v;
  args.g = g;
  args.beta = beta;
  args.state = st.kda_state_[static_cast<size_t>(layer.slot)].data();
  args.out = o;
  if (T == 1 && st.tokens_ > 0) {
    STRATA_RETURN_IF_ERROR(cpu::KdaRecurrent(args, pool_));
  } else {
    const size_t bytes = cpu::KdaChunkedWorkspaceBytes(T, H, dk, dk, pool_->num_threads());
    void* ws = Aligned(s.kda_ws, bytes);
    STRATA_RETURN_IF_ERROR(cpu::KdaChunked(args, ws, bytes, pool_));
  }

  // Output gate z = g_b(g_a x), gated RMSNorm per head, then o_proj.
  Linear(x, T, w.g_a, small, s);
  Linear(small, T, w.g_b, raw, s);
  cpu::GatedRmsNormSigmoid(o, raw, T * H, dk, w.o_norm.data(),
                           static_cast<float>(cfg_.rms_norm_eps), o, pool_);
  Linear(o, T, w.o, out, s);
  return OkStatus();
}

void KimiLinearModel::MlaMixer(const Layer& layer, const float* x, int64_t T, KimiState& st,
                               float* out) const {
  const MlaWeights& w = layer.mla;
  Scratch& s = st.scratch_;
  const cpu::MlaDims md = MlaDims();
  const int64_t H = md.num_heads, cd = md.cache_dim();
  const int64_t past = st.tokens_;
  float* q = Grow(s.a, static_cast<size_t>(T * H * md.q_dim()));
  float* o = Grow(s.o, static_cast<size_t>(T * H * md.v_dim));
  Linear(x, T, w.q, q, s);
  // Append [RMSNorm(c_raw) | k_r] for the new tokens straight into the cache.
  std::vector<float>& cache = st.mla_cache_[static_cast<size_t>(layer.slot)];
  cache.resize(static_cast<size_t>((past + T) * cd));
  float* rows = cache.data() + past * cd;
  Linear(x, T, w.kv_a, rows, s);
  cpu::ParallelRange(pool_, T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      cpu::RmsNorm(rows + t * cd, 1, md.kv_rank, w.kv_norm.data(), kLatentNormEps, rows + t * cd,
                   nullptr);
    }
  });
  // Decode always takes the absorbed form; a continuation takes whichever form
  // costs less (fresh prefill: expansion).
  const bool absorbed =
      past > 0 && (T == 1 || cpu::MlaAbsorbedCost(md, T, past) < cpu::MlaPrefillCost(md, T, past));
  if (absorbed) {
    float* scratch = Grow(s.attn, cpu::MlaAbsorbedScratchFloats(md, T));
    cpu::MlaAbsorbed(md, q, T, cache.data(), past, w.kv_b, o, scratch, pool_);
  } else {
    float* scratch = Grow(s.attn, cpu::MlaPrefillScratchFloats(md, T, pool_->num_threads()));
    cpu::MlaPrefill(md, q, T, cache.data(), past, w.kv_b, o, scratch, pool_);
  }
  Linear(o, T, w.o, out, s);
}

void KimiLinearModel::Ffn(const Layer& layer, const float* x, int64_t T, KimiState& st,
                          float* out) const {
  Scratch& s = st.scratch_;
  const int threads = pool_->num_threads();
  if (layer.is_moe) {
    const size_t bytes = cpu::MoeScratchBytes(T, cfg_.hidden_size, layer.moe, threads);
    cpu::Moe(x, T, layer.moe, out, Aligned(s.moe_ws, bytes), pool_);
  } else {
    float* scratch =
        Grow(s.a, cpu::SwiGluScratchFloats(T, cfg_.hidden_size, cfg_.intermediate_size, threads));
    cpu::SwiGlu(x, T, layer.dense, out, scratch, pool_);
  }
}

Status KimiLinearModel::ForwardSlice(const int32_t* tokens, int64_t T, KimiState& st, float* logits,
                                     bool all_logits) const {
  Scratch& s = st.scratch_;
  const int64_t D = cfg_.hidden_size;
  const size_t td = static_cast<size_t>(T * D);
  float* h = Grow(s.h, td);
  float* xn = Grow(s.xn, td);
  float* mix = Grow(s.mix, td);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < T; ++t) {
    cpu::RowToF32(embed_, tokens[t], h + t * D);
  }
  for (const Layer& layer : layers_) {
    cpu::RmsNorm(h, T, D, layer.input_norm.data(), eps, xn, pool_);
    if (layer.is_mla) {
      MlaMixer(layer, xn, T, st, mix);
    } else {
      STRATA_RETURN_IF_ERROR(KdaMixer(layer, xn, T, st, mix));
    }
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
    cpu::RmsNorm(h, T, D, layer.post_norm.data(), eps, xn, pool_);
    Ffn(layer, xn, T, st, mix);
    for (size_t i = 0; i < td; ++i) h[i] += mix[i];
  }
  st.tokens_ += T;
  if (logits == nullptr) return OkStatus();
  if (all_logits) {
    cpu::RmsNorm(h, T, D, final_norm_.data(), eps, xn, pool_);
    Linear(xn, T, lm_head_, logits, s);
  } else {
    cpu::RmsNorm(h + (T - 1) * D, 1, D, final_norm_.data(), eps, xn, pool_);
    Linear(xn, 1, lm_head_, logits, s);
  }
  return OkStatus();
}

Status KimiLinearModel::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                float* logits, bool all_logits) const {
  auto* st = dynamic_cast<KimiState*>(&state);
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
    STRATA_RETURN_IF_ERROR(ForwardSlice(tokens.data() + begin, n, *st, slice_logits, all_logits));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> CreateKimiLinearModel(std::shared_ptr<const WeightStore> weights,
                                                       const std::string& config_path,
                                                       const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(KimiLinearConfig config, ParseKimiLinearConfig(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<KimiLinearModel> model,
                          KimiLinearModel::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace strata
