// The strata_hybrid architecture adapter on the CPU: Strata's own demo model.
// Each decoder layer mixes with either Kimi Delta Attention (linear, a fixed
// recurrent state per sequence) or DeepSeek Sparse Attention (MLA with a
// low-rank query whose keys the lightning indexer narrows to index_topk past
// tokens), then a dense SwiGLU or a sigmoid-routed MoE with shared experts.
// Every piece is an existing CPU operator, composed exactly as the
// kimi_linear (KDA) and deepseek_v32 (DSA, MoE) adapters compose them; the
// parity reference is tools/demo_model/strata_hybrid.py, which builds the
// layers from transformers' own KimiLinearDeltaAttention, DeepseekV32Attention
// and DeepseekV32MoE/MLP modules. Weights are bound by the checkpoint names
// that script writes (Moonshot's for KDA, DeepSeek's for DSA and the FFNs).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/kda.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/rope_yarn.h"
#include "base/thread_pool.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/models/strata_hybrid_config.h"
#include "model/weight_store.h"

namespace strata {
namespace {

using cpu::WeightMatrix;

// Longest slice of tokens pushed through all layers at once; longer prompts
// run as consecutive continuations (identical math), which bounds scratch.
constexpr int64_t kMaxSliceTokens = 512;
// DeepseekV32RMSNorm's default epsilon for q_a_layernorm / kv_a_layernorm
// (the reference does not pass rms_norm_eps to them) and the indexer's
// LayerNorm epsilon.
constexpr float kLatentNormEps = 1e-6f;
constexpr float kIndexerNormEps = 1e-6f;

struct KdaWeights {
  WeightMatrix q, k, v;                       // [H·dk, D]
  WeightMatrix f_a, f_b;                      // [dk, D], [H·dk, dk]
  WeightMatrix b;                             // [H, D]
  WeightMatrix g_a, g_b;                      // [dk, D], [H·dk, dk]
  WeightMatrix o;                             // [D, H·dk]
  std::vector<float> q_conv, k_conv, v_conv;  // [C, K]
  std::vector<float> neg_exp_a;               // [H]: −exp(A_log)
  std::vector<float> dt_bias;                 // [H·dk]
  std::vector<float> o_norm;                  // [dk]
};

struct DsaWeights {
  WeightMatrix q_a;             // [qr, D]
  std::vector<float> q_a_norm;  // [qr]
  WeightMatrix q_b;             // [H·(dn+dr), qr]
  WeightMatrix kv_a;            // [r+dr, D]
  std::vector<float> kv_norm;   // [r]
  WeightMatrix kv_b;            // [H·(dn+dv), r]
  WeightMatrix o;               // [D, H·dv]
  WeightMatrix index_q;         // indexer.wq_b [HI·dI, qr]
  WeightMatrix index_k;         // indexer.wk [dI, D]
  std::vector<float> index_k_norm_w, index_k_norm_b;  // [dI]
  WeightMatrix index_weights;   // indexer.weights_proj [HI, D]
};

struct Layer {
  bool is_dsa = false;
  int slot = 0;  // index among the layers of its kind (state arrays)
  std::vector<float> input_norm, post_norm;
  KdaWeights kda;
  DsaWeights dsa;
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
  std::vector<float> a, b, c, d, e, f, o;  // mixer intermediates
  std::vector<float> cq, iq, iw, index;    // DSA query latent, indexer
  std::vector<int32_t> selected, counts;
  std::vector<float> mm, attn;
  std::vector<uint8_t> kda_ws, moe_ws;
};

class StrataHybridModel;

class HybridState final : public SequenceState {
 public:
  HybridState(const StrataHybridModel* owner, int64_t max_tokens)
      : owner_(owner), max_tokens_(max_tokens) {}
  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override {
    auto s = std::make_unique<HybridState>(owner_, max_tokens_);
    s->tokens_ = tokens_;
    s->kda_state_ = kda_state_;
    s->conv_window_ = conv_window_;
    s->latent_ = latent_;
    s->index_keys_ = index_keys_;
    return s;
  }
  void Reset() override {
    tokens_ = 0;
    for (auto& v : kda_state_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : conv_window_) std::fill(v.begin(), v.end(), 0.f);
    for (auto& v : latent_) v.clear();
    for (auto& v : index_keys_) v.clear();
  }

  const StrataHybridModel* owner_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> kda_state_;    // per KDA layer [H, dk, dk]
  std::vector<std::vector<float>> conv_window_;  // per KDA layer [3][K−1, H·dk] (q, k, v)
  // Per DSA layer, growing with the sequence: MLA rows [c (r) | rotated k_r
  // (dr)] and the indexer's rotated, normalised keys [dI].
  std::vector<std::vector<float>> latent_;
  std::vector<std::vector<float>> index_keys_;
  Scratch scratch_;
};

class StrataHybridModel final : public Model {
 public:
  static StatusOr<std::unique_ptr<StrataHybridModel>> Create(
      std::shared_ptr<const WeightStore> weights, const StrataHybridConfig& config,
      const LoadOptions& options);
  const ModelInfo& info() const override { return info_; }
  StatusOr<std::unique_ptr<SequenceState>> NewState(int64_t max_tokens) const override;
  Status Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                 bool all_logits) const override;

 private:
  StrataHybridModel(std::shared_ptr<const WeightStore> weights, StrataHybridConfig config,
                    ThreadPool* pool)
      : store_(std::move(weights)), cfg_(std::move(config)), pool_(pool) {}
  Status Bind(const LoadOptions& options);
  Status BindKda(const std::string& a, KdaWeights& k);
  Status BindDsa(const std::string& a, DsaWeights& w);
  Status BindFfn(const std::string& p, Layer& L);
  StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) const;
  Status ForwardSlice(const int32_t* tokens, int64_t T, HybridState& st, float* logits,
                      bool all_logits) const;
  Status Kda(const Layer& layer, const float* x, int64_t T, HybridState& st, float* out) const;
  void Dsa(const Layer& layer, const float* x, int64_t T, HybridState& st, float* out) const;
  void Ffn(const Layer& layer, const float* x, int64_t T, HybridState& st, float* out) const;
  // y[T, w.rows] = x · wᵀ using the state's matmul scratch.
  void Linear(const float* x, int64_t T, const WeightMatrix& w, float* y, Scratch& s) const;
  cpu::MlaDims MlaDims() const {
    cpu::MlaDims d{cfg_.num_heads, cfg_.qk_nope_dim, cfg_.qk_rope_dim, cfg_.v_head_dim,
                   cfg_.kv_lora_rank};
    d.softmax_scale = 1.f / std::sqrt(static_cast<float>(cfg_.qk_nope_dim + cfg_.qk_rope_dim));
    return d;
  }

  std::shared_ptr<const WeightStore> store_;
  StrataHybridConfig cfg_;
  ThreadPool* pool_;
  ModelInfo info_;
  std::vector<float> inv_freq_;  // [dr/2]
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
};

// ----------------------------------------------------------------------------
// Loading

StatusOr<WeightMatrix> StrataHybridModel::Matrix(const std::string& name, int64_t rows,
                                                 int64_t cols) const {
  STRATA_ASSIGN_OR_RETURN(TensorView v, store_->GetFloat(name, {rows, cols}));
  return WeightMatrix{v.dtype, v.data, rows, cols};
}

Status StrataHybridModel::BindKda(const std::string& a, KdaWeights& k) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size, H = cfg_.kda_heads, dk = cfg_.kda_head_dim;
  const int64_t C = H * dk, K = cfg_.conv_kernel;
  STRATA_ASSIGN_OR_RETURN(k.q, Matrix(a + "q_proj.weight", C, D));
  STRATA_ASSIGN_OR_RETURN(k.k, Matrix(a + "k_proj.weight", C, D));
  STRATA_ASSIGN_OR_RETURN(k.v, Matrix(a + "v_proj.weight", C, D));
  STRATA_ASSIGN_OR_RETURN(k.q_conv, ws.GetF32Copy(a + "q_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(k.k_conv, ws.GetF32Copy(a + "k_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(k.v_conv, ws.GetF32Copy(a + "v_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(k.f_a, Matrix(a + "f_a_proj.weight", dk, D));
  STRATA_ASSIGN_OR_RETURN(k.f_b, Matrix(a + "f_b_proj.weight", C, dk));
  STRATA_ASSIGN_OR_RETURN(k.b, Matrix(a + "b_proj.weight", H, D));
  STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log, ws.GetF32Copy(a + "A_log", {1, 1, H, 1}));
  for (float v : a_log) k.neg_exp_a.push_back(-std::exp(v));
  STRATA_ASSIGN_OR_RETURN(k.dt_bias, ws.GetF32Copy(a + "dt_bias", {C}));
  STRATA_ASSIGN_OR_RETURN(k.g_a, Matrix(a + "g_a_proj.weight", dk, D));
  STRATA_ASSIGN_OR_RETURN(k.g_b, Matrix(a + "g_b_proj.weight", C, dk));
  STRATA_ASSIGN_OR_RETURN(k.o_norm, ws.GetF32Copy(a + "o_norm.weight", {dk}));
  STRATA_ASSIGN_OR_RETURN(k.o, Matrix(a + "o_proj.weight", D, C));
  return OkStatus();
}

Status StrataHybridModel::BindDsa(const std::string& a, DsaWeights& w) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size, qr = cfg_.q_lora_rank;
  const int64_t HI = cfg_.index_heads, dI = cfg_.index_head_dim;
  const cpu::MlaDims md = MlaDims();
  const std::string x = a + "indexer.";
  STRATA_ASSIGN_OR_RETURN(w.q_a, Matrix(a + "q_a_proj.weight", qr, D));
  STRATA_ASSIGN_OR_RETURN(w.q_a_norm, ws.GetF32Copy(a + "q_a_layernorm.weight", {qr}));
  STRATA_ASSIGN_OR_RETURN(w.q_b, Matrix(a + "q_b_proj.weight", md.num_heads * md.q_dim(), qr));
  STRATA_ASSIGN_OR_RETURN(w.kv_a, Matrix(a + "kv_a_proj_with_mqa.weight", md.cache_dim(), D));
  STRATA_ASSIGN_OR_RETURN(w.kv_norm, ws.GetF32Copy(a + "kv_a_layernorm.weight", {md.kv_rank}));
  STRATA_ASSIGN_OR_RETURN(
      w.kv_b, Matrix(a + "kv_b_proj.weight", md.num_heads * md.kv_b_rows_per_head(), md.kv_rank));
  STRATA_ASSIGN_OR_RETURN(w.o, Matrix(a + "o_proj.weight", D, md.num_heads * md.v_dim));
  STRATA_ASSIGN_OR_RETURN(w.index_q, Matrix(x + "wq_b.weight", HI * dI, qr));
  STRATA_ASSIGN_OR_RETURN(w.index_k, Matrix(x + "wk.weight", dI, D));
  STRATA_ASSIGN_OR_RETURN(w.index_k_norm_w, ws.GetF32Copy(x + "k_norm.weight", {dI}));
  STRATA_ASSIGN_OR_RETURN(w.index_k_norm_b, ws.GetF32Copy(x + "k_norm.bias", {dI}));
  STRATA_ASSIGN_OR_RETURN(w.index_weights, Matrix(x + "weights_proj.weight", HI, D));
  return OkStatus();
}

Status StrataHybridModel::BindFfn(const std::string& p, Layer& L) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size;
  const std::string m = p + "mlp.";
  if (!L.is_moe) {
    const int64_t I = cfg_.intermediate_size;
    STRATA_ASSIGN_OR_RETURN(L.dense.gate, Matrix(m + "gate_proj.weight", I, D));
    STRATA_ASSIGN_OR_RETURN(L.dense.up, Matrix(m + "up_proj.weight", I, D));
    STRATA_ASSIGN_OR_RETURN(L.dense.down, Matrix(m + "down_proj.weight", D, I));
    return OkStatus();
  }
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
    STRATA_ASSIGN_OR_RETURN(moe.shared.down, Matrix(m + "shared_experts.down_proj.weight", D, Is));
  }
  moe.top_k = cfg_.experts_per_token;
  moe.renormalize = cfg_.norm_topk_prob;
  moe.routed_scaling = static_cast<float>(cfg_.routed_scaling_factor);
  moe.num_groups = cfg_.n_group;
  moe.topk_groups = cfg_.topk_group;
  return OkStatus();
}

Status StrataHybridModel::Bind(const LoadOptions& options) {
  const WeightStore& ws = *store_;
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  STRATA_ASSIGN_OR_RETURN(embed_, Matrix("model.embed_tokens.weight", V, D));
  if (cfg_.tie_word_embeddings && !ws.Has("lm_head.weight")) {
    lm_head_ = embed_;
  } else {
    STRATA_ASSIGN_OR_RETURN(lm_head_, Matrix("lm_head.weight", V, D));
  }
  STRATA_ASSIGN_OR_RETURN(final_norm_, ws.GetF32Copy("model.norm.weight", {D}));
  if (cfg_.NumDsaLayers() > 0) {
    cpu::RopeParams rope;
    rope.theta = cfg_.rope_theta;
    rope.dim = cfg_.qk_rope_dim;
    inv_freq_ = cpu::RopeInvFreq(rope);
  }
  int kda_slot = 0, dsa_slot = 0;
  layers_.resize(static_cast<size_t>(cfg_.num_layers));
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    STRATA_ASSIGN_OR_RETURN(L.input_norm, ws.GetF32Copy(p + "input_layernorm.weight", {D}));
    STRATA_ASSIGN_OR_RETURN(L.post_norm, ws.GetF32Copy(p + "post_attention_layernorm.weight", {D}));
    L.is_dsa = cfg_.is_dsa[static_cast<size_t>(i)];
    L.is_moe = cfg_.is_moe[static_cast<size_t>(i)];
    if (L.is_dsa) {
      L.slot = dsa_slot++;
      STRATA_RETURN_IF_ERROR(BindDsa(p + "self_attn.", L.dsa));
    } else {
      L.slot = kda_slot++;
      STRATA_RETURN_IF_ERROR(BindKda(p + "self_attn.", L.kda));
    }
    STRATA_RETURN_IF_ERROR(BindFfn(p, L));
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

StatusOr<std::unique_ptr<StrataHybridModel>> StrataHybridModel::Create(
    std::shared_ptr<const WeightStore> weights, const StrataHybridConfig& config,
    const LoadOptions& options) {
  ThreadPool* pool = options.pool ? options.pool : ThreadPool::Default();
  std::unique_ptr<StrataHybridModel> m(new StrataHybridModel(std::move(weights), config, pool));
  STRATA_RETURN_IF_ERROR(m->Bind(options));

  const StrataHybridConfig& c = m->cfg_;
  ModelInfo& info = m->info_;
  info.architecture = "strata_hybrid";
  info.device = "cpu";
  info.num_layers = static_cast<int32_t>(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    info.layer_kinds.push_back(absl::StrCat(c.is_dsa[static_cast<size_t>(i)] ? "dsa" : "kda", "+",
                                            c.is_moe[static_cast<size_t>(i)] ? "moe" : "dense"));
  }
  info.num_parameters = m->store_->TotalElements();
  info.parameter_bytes = m->store_->TotalBytes();
  info.vocab_size = static_cast<int32_t>(c.vocab_size);
  info.hidden_size = static_cast<int32_t>(c.hidden_size);
  info.max_context = c.max_context;
  const int64_t per_token = c.kv_lora_rank + c.qk_rope_dim + c.index_head_dim;
  info.state_bytes_per_token = static_cast<uint64_t>(c.NumDsaLayers() * per_token) * sizeof(float);
  const int64_t kda_fixed = c.kda_heads * c.kda_head_dim * c.kda_head_dim +          // S
                            3 * c.kda_heads * c.kda_head_dim * (c.conv_kernel - 1);  // windows
  info.state_bytes_per_sequence = static_cast<uint64_t>(c.NumKdaLayers() * kda_fixed) * sizeof(float);
  info.bos_token_id = c.bos_token_id;
  info.eos_token_id = c.eos_token_id;
  return m;
}

// ----------------------------------------------------------------------------
// State

StatusOr<std::unique_ptr<SequenceState>> StrataHybridModel::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (info_.max_context > 0 && max_tokens > info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("NewState: max_tokens ", max_tokens,
                                                   " exceeds the model's context of ",
                                                   info_.max_context));
  }
  auto st = std::make_unique<HybridState>(this, max_tokens);
  const int64_t H = cfg_.kda_heads, dk = cfg_.kda_head_dim;
  for (int64_t i = 0; i < cfg_.NumKdaLayers(); ++i) {
    st->kda_state_.emplace_back(static_cast<size_t>(H * dk * dk), 0.f);
    st->conv_window_.emplace_back(static_cast<size_t>(3 * (cfg_.conv_kernel - 1) * H * dk), 0.f);
  }
  // DSA caches grow with the sequence (up to max_tokens): unused capacity
  // costs nothing.
  st->latent_.resize(static_cast<size_t>(cfg_.NumDsaLayers()));
  st->index_keys_.resize(static_cast<size_t>(cfg_.NumDsaLayers()));
  return std::unique_ptr<SequenceState>(std::move(st));
}

// ----------------------------------------------------------------------------
// Forward

void StrataHybridModel::Linear(const float* x, int64_t T, const WeightMatrix& w, float* y,
                               Scratch& s) const {
  float* mm = Grow(s.mm, cpu::MatMulScratchFloats(T, w.cols, pool_->num_threads()) + 1);
  cpu::MatMul(x, T, w, y, mm, pool_);
}

inline float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

Status StrataHybridModel::Kda(const Layer& layer, const float* x, int64_t T, HybridState& st,
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
    STRATA_RETURN_IF_ERROR(cpu::KdaChunked(args, Aligned(s.kda_ws, bytes), bytes, pool_));
  }

  // Output gate z = g_b(g_a x), gated RMSNorm per head, then o_proj.
  Linear(x, T, w.g_a, small, s);
  Linear(small, T, w.g_b, raw, s);
  cpu::GatedRmsNormSigmoid(o, raw, T * H, dk, w.o_norm.data(),
                           static_cast<float>(cfg_.rms_norm_eps), o, pool_);
  Linear(o, T, w.o, out, s);
  return OkStatus();
}

void StrataHybridModel::Dsa(const Layer& layer, const float* x, int64_t T, HybridState& st,
                            float* out) const {
  const DsaWeights& w = layer.dsa;
  Scratch& s = st.scratch_;
  const cpu::MlaDims md = MlaDims();
  const int64_t H = md.num_heads, qd = md.q_dim(), cd = md.cache_dim();
  const int64_t half = md.rope_dim / 2;
  const int64_t past = st.tokens_;
  const float* cos = s.cos.data();
  const float* sin = s.sin.data();

  // Query: q_b(RMSNorm(q_a x)); its rope part rotated (interleaved pairs).
  float* cq = Grow(s.cq, static_cast<size_t>(T * cfg_.q_lora_rank));
  float* q = Grow(s.a, static_cast<size_t>(T * H * qd));
  Linear(x, T, w.q_a, cq, s);
  cpu::RmsNorm(cq, T, cfg_.q_lora_rank, w.q_a_norm.data(), kLatentNormEps, cq, pool_);
  Linear(cq, T, w.q_b, q, s);
  cpu::ApplyRope(cpu::RopeLayout::kInterleaved, q, T, H, H * qd, qd, md.nope_dim, half, cos, sin,
                 pool_);

  // Append [RMSNorm(c_raw) | rotated k_r] for the new tokens to the latent cache.
  std::vector<float>& cache = st.latent_[static_cast<size_t>(layer.slot)];
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

  // Indexer keys LayerNorm(wk x), rotary part first and half-split; cached
  // for every token, also while the selection is still everything.
  const int64_t dI = cfg_.index_head_dim, HI = cfg_.index_heads, K = cfg_.index_topk;
  std::vector<float>& keys = st.index_keys_[static_cast<size_t>(layer.slot)];
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

void StrataHybridModel::Ffn(const Layer& layer, const float* x, int64_t T, HybridState& st,
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

Status StrataHybridModel::ForwardSlice(const int32_t* tokens, int64_t T, HybridState& st,
                                       float* logits, bool all_logits) const {
  Scratch& s = st.scratch_;
  const int64_t D = cfg_.hidden_size;
  const size_t td = static_cast<size_t>(T * D);
  float* h = Grow(s.h, td);
  float* xn = Grow(s.xn, td);
  float* mix = Grow(s.mix, td);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (!inv_freq_.empty()) {
    // One cos/sin table for the slice's positions, shared by every DSA layer
    // (MLA and indexer use the same frequencies).
    const int64_t half = cfg_.qk_rope_dim / 2;
    cpu::RopeCosSin(inv_freq_.data(), half, st.tokens_, T, 1.f,
                    Grow(s.cos, static_cast<size_t>(T * half)),
                    Grow(s.sin, static_cast<size_t>(T * half)));
  }
  for (int64_t t = 0; t < T; ++t) cpu::RowToF32(embed_, tokens[t], h + t * D);
  for (const Layer& layer : layers_) {
    cpu::RmsNorm(h, T, D, layer.input_norm.data(), eps, xn, pool_);
    if (layer.is_dsa) {
      Dsa(layer, xn, T, st, mix);
    } else {
      STRATA_RETURN_IF_ERROR(Kda(layer, xn, T, st, mix));
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

Status StrataHybridModel::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                  float* logits, bool all_logits) const {
  auto* st = dynamic_cast<HybridState*>(&state);
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

StatusOr<std::unique_ptr<Model>> CreateStrataHybridModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(StrataHybridConfig config, ParseStrataHybridConfig(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StrataHybridModel> model,
                          StrataHybridModel::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace strata
