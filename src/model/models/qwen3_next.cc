// The qwen3_next architecture adapter on the CPU (model-spec §4): Gated
// DeltaNet and gated full-attention mixers, softmax-routed MoE with a
// sigmoid-gated shared expert (or dense SwiGLU) FFNs, "1 + w" RMSNorms.
// Weights are bound by their original checkpoint names; matrices stay in the
// mapped file, small vectors are copied to fp32. Activations are fp32 end to
// end (the parity reference runs transformers in fp32 on the same weights).
//
// GDN runs on the KDA delta-rule core (backend/cpu/kda.h) with one decay per
// head; GVA (more value than key heads) repeats q/k per value-head group.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/conv.h"
#include "backend/cpu/gqa_attention.h"
#include "backend/cpu/kda.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/rope.h"
#include "base/thread_pool.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/models/qwen3_next_config.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using cpu::WeightMatrix;

// Longest slice of tokens pushed through all layers at once. Longer prompts
// run as consecutive continuations (identical math), which bounds scratch.
constexpr int64_t kMaxSliceTokens = 512;

struct GdnWeights {
  WeightMatrix qkvz;             // [2·Hk·dk + 2·Hv·dv, D], grouped per key head
  WeightMatrix ba;               // [2·Hv, D], grouped per key head
  std::vector<float> conv;       // [Hk·dk·2 + Hv·dv, K] over q ‖ k ‖ v
  std::vector<float> neg_exp_a;  // [Hv]: −exp(A_log)
  std::vector<float> dt_bias;    // [Hv]
  std::vector<float> norm;       // [dv] gated RMSNorm weight (plain, not 1 + w)
  WeightMatrix out;              // [D, Hv·dv]
};

struct AttentionWeights {
  WeightMatrix q;                     // [H·2·hd, D]: per head [query (hd) | gate (hd)]
  WeightMatrix k, v;                  // [Hkv·hd, D]
  WeightMatrix o;                     // [D, H·hd]
  std::vector<float> q_norm, k_norm;  // [hd], stored offset already turned into 1 + w
};

struct Layer {
  bool is_attention = false;
  int slot = 0;                              // index among the layers of its kind (state arrays)
  std::vector<float> input_norm, post_norm;  // 1 + w
  GdnWeights gdn;
  AttentionWeights attn;
  bool is_moe = false;
  cpu::SwiGluWeights dense;
  cpu::MoeWeights moe;
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
  std::vector<float> h, xn, mix;
  std::vector<float> a, b, c, d, e, f, g, o;  // mixer intermediates
  std::vector<float> mm;                      // matmul tiles
  std::vector<uint8_t> delta_ws, moe_ws;
};

class Qwen3NextModel;

class Qwen3NextState final : public SequenceState {
 public:
  Qwen3NextState(const Qwen3NextModel* owner, int64_t max_tokens)
      : owner_(owner), max_tokens_(max_tokens) {}
  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override {
    auto s = std::make_unique<Qwen3NextState>(owner_, max_tokens_);
    s->tokens_ = tokens_;
    s->delta_state_ = delta_state_;
    s->conv_window_ = conv_window_;
    s->k_cache_ = k_cache_;
    s->v_cache_ = v_cache_;
    return s;
  }
  void Reset() override {
    tokens_ = 0;
    for (auto& v : delta_state_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : conv_window_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : k_cache_) v.clear();
    for (auto& v : v_cache_) v.clear();
  }

  const Qwen3NextModel* owner_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> delta_state_;  // per GDN layer [Hv, dk, dv]
  std::vector<std::vector<float>> conv_window_;  // per GDN layer [K−1, conv channels]
  std::vector<std::vector<float>> k_cache_;      // per attention layer [tokens, Hkv, hd], grows
  std::vector<std::vector<float>> v_cache_;      // per attention layer [tokens, Hkv, hd], grows
  Scratch scratch_;
};

class Qwen3NextModel final : public Model {
 public:
  static StatusOr<std::unique_ptr<Qwen3NextModel>> Create(
      std::shared_ptr<const WeightStore> weights, const Qwen3NextConfig& config,
      const LoadOptions& options);
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;

 private:
  Qwen3NextModel(std::shared_ptr<const WeightStore> weights, Qwen3NextConfig config,
                 ThreadPool* pool)
      : store_(std::move(weights)), cfg_(std::move(config)), pool_(pool) {}
  Status Bind(const LoadOptions& options);
  Status ForwardSlice(const int32_t* tokens, int64_t T, Qwen3NextState& st, float* logits,
                      bool all_logits) const;
  Status GdnMixer(const Layer& layer, const float* x, int64_t T, Qwen3NextState& st,
                  float* out) const;
  Status AttentionMixer(const Layer& layer, const float* x, int64_t T, Qwen3NextState& st,
                        float* out) const;
  void Ffn(const Layer& layer, const float* x, int64_t T, Qwen3NextState& st, float* out) const;
  // y[T, w.rows] = x · wᵀ using the state's matmul scratch.
  void Linear(const float* x, int64_t T, const WeightMatrix& w, float* y, Scratch& s) const;

  std::shared_ptr<const WeightStore> store_;
  Qwen3NextConfig cfg_;
  ThreadPool* pool_;
  ModelInfo info_;
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;  // 1 + w
  std::vector<float> inv_freq_;    // [rotary_dim / 2]
  std::vector<Layer> layers_;
};

// ----------------------------------------------------------------------------
// Loading

WeightMatrix AsMatrix(const TensorView& v) {
  return {v.dtype, v.data, v.dim(0), v.rank() > 1 ? v.dim(1) : 1};
}

// Qwen3-Next's zero-centred RMSNorms store w and scale by (1 + w), formed in
// fp32 as the reference does; folding it at load leaves a plain RMSNorm.
StatusOr<std::vector<float>> OnePlus(const WeightStore& ws, const std::string& name, int64_t dim) {
  STRATA_ASSIGN_OR_RETURN(std::vector<float> w, ws.GetF32Copy(name, {dim}));
  for (float& x : w) x = 1.f + x;
  return w;
}

Status Qwen3NextModel::Bind(const LoadOptions& options) {
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
  STRATA_ASSIGN_OR_RETURN(final_norm_, OnePlus(ws, "model.norm.weight", D));
  if (cfg_.NumAttentionLayers() > 0) {
    inv_freq_ = cpu::RopeInverseFrequencies(cfg_.rotary_dim, cfg_.rope_theta);
  }

  const int64_t Hv = cfg_.linear_value_heads;
  const int64_t dv = cfg_.linear_value_dim, K = cfg_.conv_kernel;
  const int64_t kw = cfg_.LinearKeyWidth(), vw = cfg_.LinearValueWidth();
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  int gdn_slot = 0, attn_slot = 0;
  layers_.resize(static_cast<size_t>(cfg_.num_layers));
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    STRATA_ASSIGN_OR_RETURN(L.input_norm, OnePlus(ws, p + "input_layernorm.weight", D));
    STRATA_ASSIGN_OR_RETURN(L.post_norm, OnePlus(ws, p + "post_attention_layernorm.weight", D));
    L.is_attention = cfg_.is_attention[static_cast<size_t>(i)];
    if (L.is_attention) {
      L.slot = attn_slot++;
      const std::string a = p + "self_attn.";
      AttentionWeights& w = L.attn;
      STRATA_ASSIGN_OR_RETURN(w.q, matrix(a + "q_proj.weight", H * 2 * hd, D));
      STRATA_ASSIGN_OR_RETURN(w.k, matrix(a + "k_proj.weight", Hkv * hd, D));
      STRATA_ASSIGN_OR_RETURN(w.v, matrix(a + "v_proj.weight", Hkv * hd, D));
      STRATA_ASSIGN_OR_RETURN(w.o, matrix(a + "o_proj.weight", D, H * hd));
      STRATA_ASSIGN_OR_RETURN(w.q_norm, OnePlus(ws, a + "q_norm.weight", hd));
      STRATA_ASSIGN_OR_RETURN(w.k_norm, OnePlus(ws, a + "k_norm.weight", hd));
    } else {
      L.slot = gdn_slot++;
      const std::string a = p + "linear_attn.";
      GdnWeights& w = L.gdn;
      STRATA_ASSIGN_OR_RETURN(w.qkvz, matrix(a + "in_proj_qkvz.weight", 2 * kw + 2 * vw, D));
      STRATA_ASSIGN_OR_RETURN(w.ba, matrix(a + "in_proj_ba.weight", 2 * Hv, D));
      STRATA_ASSIGN_OR_RETURN(w.conv,
                              ws.GetF32Copy(a + "conv1d.weight", {cfg_.ConvChannels(), 1, K}));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log, ws.GetF32Copy(a + "A_log", {Hv}));
      for (float v : a_log) w.neg_exp_a.push_back(-std::exp(v));
      STRATA_ASSIGN_OR_RETURN(w.dt_bias, ws.GetF32Copy(a + "dt_bias", {Hv}));
      STRATA_ASSIGN_OR_RETURN(w.norm, ws.GetF32Copy(a + "norm.weight", {dv}));
      STRATA_ASSIGN_OR_RETURN(w.out, matrix(a + "out_proj.weight", D, vw));
    }
    L.is_moe = cfg_.is_moe[static_cast<size_t>(i)];
    const std::string m = p + "mlp.";
    if (!L.is_moe) {
      const int64_t I = cfg_.intermediate_size;
      STRATA_ASSIGN_OR_RETURN(L.dense.gate, matrix(m + "gate_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.up, matrix(m + "up_proj.weight", I, D));
      STRATA_ASSIGN_OR_RETURN(L.dense.down, matrix(m + "down_proj.weight", D, I));
    } else {
      const int64_t E = cfg_.num_experts, I = cfg_.moe_intermediate_size;
      const int64_t Is = cfg_.shared_intermediate_size;
      cpu::MoeWeights& moe = L.moe;
      moe.routing = cpu::MoeRouting::kSoftmax;
      STRATA_ASSIGN_OR_RETURN(moe.router, matrix(m + "gate.weight", E, D));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        cpu::SwiGluWeights w;
        STRATA_ASSIGN_OR_RETURN(w.gate, matrix(x + "gate_proj.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(w.up, matrix(x + "up_proj.weight", I, D));
        STRATA_ASSIGN_OR_RETURN(w.down, matrix(x + "down_proj.weight", D, I));
        moe.experts.push_back(w);
      }
      moe.has_shared = true;
      STRATA_ASSIGN_OR_RETURN(moe.shared.gate, matrix(m + "shared_expert.gate_proj.weight", Is, D));
      STRATA_ASSIGN_OR_RETURN(moe.shared.up, matrix(m + "shared_expert.up_proj.weight", Is, D));
      STRATA_ASSIGN_OR_RETURN(moe.shared.down, matrix(m + "shared_expert.down_proj.weight", D, Is));
      STRATA_ASSIGN_OR_RETURN(moe.shared_gate, matrix(m + "shared_expert_gate.weight", 1, D));
      moe.top_k = cfg_.experts_per_token;
      moe.renormalize = cfg_.norm_topk_prob;
      moe.routed_scaling = 1.f;
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

StatusOr<std::unique_ptr<Qwen3NextModel>> Qwen3NextModel::Create(
    std::shared_ptr<const WeightStore> weights, const Qwen3NextConfig& config,
    const LoadOptions& options) {
  ThreadPool* pool = options.pool ? options.pool : ThreadPool::Default();
  std::unique_ptr<Qwen3NextModel> m(new Qwen3NextModel(std::move(weights), config, pool));
  STRATA_RETURN_IF_ERROR(m->Bind(options));

  const Qwen3NextConfig& c = m->cfg_;
  ModelInfo& info = m->info_;
  info.architecture = "qwen3_next";
  info.device = "cpu";
  info.num_layers = static_cast<int32_t>(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    info.layer_kinds.push_back(
        absl::StrCat(c.is_attention[static_cast<size_t>(i)] ? "attention" : "gdn", "+",
                     c.is_moe[static_cast<size_t>(i)] ? "moe" : "dense"));
  }
  info.num_parameters = m->store_->TotalElements();
  info.parameter_bytes = m->store_->TotalBytes();
  info.vocab_size = static_cast<int32_t>(c.vocab_size);
  info.hidden_size = static_cast<int32_t>(c.hidden_size);
  info.max_context = c.max_context;
  // fp32 K and V rows; fp32 delta-rule states and conv windows (K − 1 inputs).
  info.state_bytes_per_token =
      static_cast<uint64_t>(c.NumAttentionLayers() * 2 * c.num_kv_heads * c.head_dim) *
      sizeof(float);
  const int64_t gdn_fixed = c.linear_value_heads * c.linear_key_dim * c.linear_value_dim +  // S
                            c.ConvChannels() * (c.conv_kernel - 1);  // window
  info.state_bytes_per_sequence =
      static_cast<uint64_t>(c.NumLinearLayers() * gdn_fixed) * sizeof(float);
  info.bos_token_id = c.bos_token_id;
  info.eos_token_id = c.eos_token_id;
  return m;
}

// ----------------------------------------------------------------------------
// State

StatusOr<std::unique_ptr<SequenceState>> Qwen3NextModel::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (info_.max_context > 0 && max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("NewState: max_tokens ", max_tokens,
                                                   " exceeds the model's context of ",
                                                   info_.max_context));
  }
  auto st = std::make_unique<Qwen3NextState>(this, max_tokens);
  const size_t state_floats =
      static_cast<size_t>(cfg_.linear_value_heads * cfg_.linear_key_dim * cfg_.linear_value_dim);
  const size_t window_floats = static_cast<size_t>((cfg_.conv_kernel - 1) * cfg_.ConvChannels());
  for (int64_t i = 0; i < cfg_.NumLinearLayers(); ++i) {
    st->delta_state_.emplace_back(state_floats, 0.f);
    st->conv_window_.emplace_back(window_floats, 0.f);
  }
  // K/V caches grow with the sequence (up to max_tokens), so an unused
  // capacity costs nothing.
  st->k_cache_.resize(static_cast<size_t>(cfg_.NumAttentionLayers()));
  st->v_cache_.resize(static_cast<size_t>(cfg_.NumAttentionLayers()));
  return std::unique_ptr<SequenceState>(std::move(st));
}

// ----------------------------------------------------------------------------
// Forward

void Qwen3NextModel::Linear(const float* x, int64_t T, const WeightMatrix& w, float* y,
                            Scratch& s) const {
  float* mm = Grow(s.mm, cpu::MatMulScratchFloats(T, w.cols, pool_->num_threads()) + 1);
  cpu::MatMul(x, T, w, y, mm, pool_);
}

inline float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// Gated DeltaNet (model-spec §4.3).
Status Qwen3NextModel::GdnMixer(const Layer& layer, const float* x, int64_t T, Qwen3NextState& st,
                                float* out) const {
  const GdnWeights& w = layer.gdn;
  Scratch& s = st.scratch_;
  const int64_t Hk = cfg_.linear_key_heads, Hv = cfg_.linear_value_heads;
  const int64_t dk = cfg_.linear_key_dim, dv = cfg_.linear_value_dim;
  const int64_t rho = Hv / Hk;  // value heads per key head
  const int64_t kw = cfg_.LinearKeyWidth(), vw = cfg_.LinearValueWidth();
  const int64_t C = cfg_.ConvChannels();
  const int64_t R = w.qkvz.rows;  // 2·kw + 2·vw
  const int64_t group = R / Hk;   // 2·dk + 2·ρ·dv
  float* proj = Grow(s.a, static_cast<size_t>(T * R));
  float* mixed = Grow(s.b, static_cast<size_t>(T * C));
  float* conv = Grow(s.c, static_cast<size_t>(T * C));
  float* z = Grow(s.d, static_cast<size_t>(T * vw));
  float* q = Grow(s.e, static_cast<size_t>(T * Hv * dk));
  float* k = Grow(s.f, static_cast<size_t>(T * Hv * dk));
  float* o = Grow(s.o, static_cast<size_t>(T * vw));
  float* small = Grow(s.g, static_cast<size_t>(T * 4 * Hv));  // ba, then β and g
  float* beta = small + T * 2 * Hv;
  float* gate = beta + T * Hv;

  Linear(x, T, w.qkvz, proj, s);
  Linear(x, T, w.ba, small, s);
  // De-group (transformers' fix_query_key_value_ordering): key head g's slice
  // of a token's projection is [q_g | k_g | v of value heads ρg..ρg+ρ−1 | z of
  // the same]; of in_proj_ba, [b of those value heads | a of them]. The conv
  // runs over q ‖ k ‖ v with heads in order.
  cpu::ParallelRange(pool_, T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* pt = proj + t * R;
      float* mt = mixed + t * C;
      float* zt = z + t * vw;
      for (int64_t g = 0; g < Hk; ++g) {
        const float* src = pt + g * group;
        std::memcpy(mt + g * dk, src, sizeof(float) * dk);
        std::memcpy(mt + kw + g * dk, src + dk, sizeof(float) * dk);
        std::memcpy(mt + 2 * kw + g * rho * dv, src + 2 * dk, sizeof(float) * rho * dv);
        std::memcpy(zt + g * rho * dv, src + 2 * dk + rho * dv, sizeof(float) * rho * dv);
      }
      const float* bat = small + t * 2 * Hv;
      for (int64_t g = 0; g < Hk; ++g) {
        for (int64_t j = 0; j < rho; ++j) {
          const int64_t h = g * rho + j;
          const float bv = bat[g * 2 * rho + j];
          const float av = bat[g * 2 * rho + rho + j];
          beta[t * Hv + h] = Sigmoid(bv);
          // g = −exp(A_log)·softplus(a + dt_bias), one scalar per value head, fp32.
          gate[t * Hv + h] = w.neg_exp_a[static_cast<size_t>(h)] *
                             Softplus(av + w.dt_bias[static_cast<size_t>(h)]);
        }
      }
    }
  });
  float* window = st.conv_window_[static_cast<size_t>(layer.slot)].data();
  cpu::CausalConv1dSilu(mixed, T, C, w.conv.data(), cfg_.conv_kernel, window, conv, pool_);
  // q, k: value head h reads key head h / ρ (repeat_interleave); v is already
  // [T, Hv, dv] inside the conv output rows.
  cpu::ParallelRange(pool_, T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* ct = conv + t * C;
      for (int64_t h = 0; h < Hv; ++h) {
        std::memcpy(q + (t * Hv + h) * dk, ct + (h / rho) * dk, sizeof(float) * dk);
        std::memcpy(k + (t * Hv + h) * dk, ct + kw + (h / rho) * dk, sizeof(float) * dk);
      }
      std::memcpy(mixed + t * vw, ct + 2 * kw, sizeof(float) * vw);  // v, compacted
    }
  });
  const float* v = mixed;

  cpu::KdaArgs args;
  args.num_tokens = T;
  args.num_heads = Hv;
  args.key_dim = dk;
  args.value_dim = dv;
  args.q = q;
  args.k = k;
  args.v = v;
  args.g = gate;
  args.g_per_head = true;
  args.beta = beta;
  args.state = st.delta_state_[static_cast<size_t>(layer.slot)].data();
  args.out = o;
  if (T == 1 && st.tokens_ > 0) {
    STRATA_RETURN_IF_ERROR(cpu::KdaRecurrent(args, pool_));
  } else {
    const size_t bytes = cpu::KdaChunkedWorkspaceBytes(T, Hv, dk, dv, pool_->num_threads());
    void* ws = Aligned(s.delta_ws, bytes);
    STRATA_RETURN_IF_ERROR(cpu::KdaChunked(args, ws, bytes, pool_));
  }

  // y_h = RMSNorm(o_h)·w ⊙ silu(z_h) per value head, then out_proj.
  cpu::GatedRmsNormSilu(o, z, T * Hv, dv, w.norm.data(), static_cast<float>(cfg_.rms_norm_eps), o,
                        pool_);
  Linear(o, T, w.out, out, s);
  return OkStatus();
}

// Gated softmax attention (model-spec §4.4).
Status Qwen3NextModel::AttentionMixer(const Layer& layer, const float* x, int64_t T,
                                      Qwen3NextState& st, float* out) const {
  const AttentionWeights& w = layer.attn;
  Scratch& s = st.scratch_;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  const int64_t past = st.tokens_;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  float* qg = Grow(s.a, static_cast<size_t>(T * H * 2 * hd));
  float* q = Grow(s.b, static_cast<size_t>(T * H * hd));
  float* gate = Grow(s.c, static_cast<size_t>(T * H * hd));
  float* o = Grow(s.o, static_cast<size_t>(T * H * hd));
  Linear(x, T, w.q, qg, s);
  // q_proj rows per head: [query (hd) | output gate (hd)].
  for (int64_t th = 0; th < T * H; ++th) {
    std::memcpy(q + th * hd, qg + th * 2 * hd, sizeof(float) * hd);
    std::memcpy(gate + th * hd, qg + th * 2 * hd + hd, sizeof(float) * hd);
  }
  cpu::RmsNorm(q, T * H, hd, w.q_norm.data(), eps, q, pool_);
  cpu::ApplyRopeHalfSplit(q, T, H, hd, cfg_.rotary_dim, past, inv_freq_.data(), pool_);

  // Append the new tokens' normalised, rotated keys and their values.
  const int64_t row = Hkv * hd;
  std::vector<float>& kc = st.k_cache_[static_cast<size_t>(layer.slot)];
  std::vector<float>& vc = st.v_cache_[static_cast<size_t>(layer.slot)];
  kc.resize(static_cast<size_t>((past + T) * row));
  vc.resize(static_cast<size_t>((past + T) * row));
  float* k_new = kc.data() + past * row;
  Linear(x, T, w.k, k_new, s);
  cpu::RmsNorm(k_new, T * Hkv, hd, w.k_norm.data(), eps, k_new, pool_);
  cpu::ApplyRopeHalfSplit(k_new, T, Hkv, hd, cfg_.rotary_dim, past, inv_freq_.data(), pool_);
  Linear(x, T, w.v, vc.data() + past * row, s);

  const cpu::GqaDims dims{H, Hkv, hd};
  STRATA_RETURN_IF_ERROR(cpu::GqaAttention(dims, q, T, kc.data(), vc.data(), past,
                                           1.f / std::sqrt(static_cast<float>(hd)), o, pool_));
  // Output gate: o ⊙ sigmoid(gate), elementwise over [T, H·hd].
  cpu::ParallelRange(pool_, T * H * hd, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] *= Sigmoid(gate[i]);
  });
  Linear(o, T, w.o, out, s);
  return OkStatus();
}

void Qwen3NextModel::Ffn(const Layer& layer, const float* x, int64_t T, Qwen3NextState& st,
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

Status Qwen3NextModel::ForwardSlice(const int32_t* tokens, int64_t T, Qwen3NextState& st,
                                    float* logits, bool all_logits) const {
  Scratch& s = st.scratch_;
  const int64_t D = cfg_.hidden_size;
  const size_t td = static_cast<size_t>(T * D);
  float* h = Grow(s.h, td);
  float* xn = Grow(s.xn, td);
  float* mix = Grow(s.mix, td);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t t = 0; t < T; ++t) cpu::RowToF32(embed_, tokens[t], h + t * D);
  for (const Layer& layer : layers_) {
    cpu::RmsNorm(h, T, D, layer.input_norm.data(), eps, xn, pool_);
    if (layer.is_attention) {
      STRATA_RETURN_IF_ERROR(AttentionMixer(layer, xn, T, st, mix));
    } else {
      STRATA_RETURN_IF_ERROR(GdnMixer(layer, xn, T, st, mix));
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

Status Qwen3NextModel::Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                               bool all_logits) const {
  auto* st = dynamic_cast<Qwen3NextState*>(&state);
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

StatusOr<std::unique_ptr<Model>> CreateQwen3NextModel(std::shared_ptr<const WeightStore> weights,
                                                      const std::string& config_path,
                                                      const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(Qwen3NextConfig config, ParseQwen3NextConfig(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Qwen3NextModel> model,
                          Qwen3NextModel::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace strata
