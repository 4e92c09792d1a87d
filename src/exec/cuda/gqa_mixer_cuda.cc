// Gated grouped-query attention on the GPU (model-spec §4.4;
// exec/cpu/gqa_layer.cc is the reference for the math):
//   [q|gate|k|v] = xn·Wᵀ; q, k RMSNorm + partial rotary, k/v → paged cache
//   o = softmax attention over the cache ⊙ σ(gate); h += o_proj(o)
// q_proj's rows per head are [query | gate]; the upload splits them into all
// queries then all gates, so one product gives [q | gate | k | v]. Decode
// takes GqaAttention's split form (gqa.split_decode) unless batch-invariant.
// State: 64-token blocks of bf16 K and V rows [64, Hkv, hd] per layer.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/gqa.h"
#include "exec/cuda/cuda_mixer.h"

namespace strata {
namespace cuda_exec {
namespace {

using cuda::ActType;

class GqaMixer final : public CudaMixer {
 public:
  GqaMixer(const exec::GqaSpec& s, const MixerContext& ctx) : CudaMixer(ctx), s_(s) {
    qw_ = s.heads * s.head_dim;
    kvw_ = s.kv_heads * s.head_dim;
    n_ = 2 * qw_ + 2 * kvw_;
    shape_.num_heads = s.heads;
    shape_.num_kv_heads = s.kv_heads;
    shape_.head_dim = s.head_dim;
    shape_.rotary_dim = s.rotary_dim;
  }

  int64_t PreferredSlice() const override { return 4096; }
  void Plan(const SequencePlan& p) override {
    // The split form's partials grow with the bound up to kGqaMaxSplits ranges.
    ws_bytes_ = cuda::GqaDecodeWorkspaceBytes(shape_, p.max_batch, p.max_ctx);
  }
  void CarveShared(WeightCarver& c) override {
    inv_freq_ = c.Take<float>(std::max<int64_t>(s_.rotary_dim / 2, 1));
  }
  void CarveMember(size_t i, WeightCarver& c) override;
  void CarveScratch(const SequencePlan& p, Carver& c) override {
    proj_ = c.Take<bf16>(p.rows * n_);
    out_ = c.Take<bf16>(p.rows * qw_);
    ws_ = c.Take<char>(static_cast<int64_t>(ws_bytes_));
  }
  std::vector<PoolArray> BlockArrays() const override {
    const int64_t n = static_cast<int64_t>(size());
    const size_t unit = sizeof(bf16) * static_cast<size_t>(kBlockTokens * kvw_);
    // Every layer's K pool, then every layer's V pool.
    return {{n, unit}, {n, unit}};
  }
  void BindPools(std::span<const StateRegion>, std::span<const StateRegion> blocks) override {
    k_ = blocks[0];
    v_ = blocks[1];
  }
  Status UploadShared(const TensorSink& sink) override {
    if (s_.rotary_dim == 0) return OkStatus();
    return sink.Values(cpu::RopeInverseFrequencies(s_.rotary_dim, s_.rope_theta), inv_freq_);
  }
  Status UploadMember(size_t i, const TensorSink& sink) override;
  Status FillDummyShared(DummyFill& fill) override {
    if (s_.rotary_dim == 0) return OkStatus();
    return fill.Values(cpu::RopeInverseFrequencies(s_.rotary_dim, s_.rope_theta), inv_freq_);
  }
  Status FillDummyMember(size_t i, DummyFill& fill) override;
  Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                 const MixerPass& pass) const override;
  // The split form cuts the keys by it.
  int64_t DecodeLengthBound(int64_t max_len, int64_t max_ctx) const override {
    return LengthBucket(max_len, max_ctx);
  }

 private:
  struct Weights {
    bf16* qkv = nullptr;      // [2·H·hd + 2·Hkv·hd, D]: q | gate | k | v
    bf16* o = nullptr;        // [D, H·hd]
    float* q_norm = nullptr;  // [hd]
    float* k_norm = nullptr;  // [hd]
  };

  exec::GqaSpec s_;
  int64_t qw_ = 0, kvw_ = 0, n_ = 0;
  cuda::GqaShape shape_;
  float* inv_freq_ = nullptr;  // [rotary_dim / 2]
  std::vector<Weights> w_;
  bf16* proj_ = nullptr;  // [rows, n_]
  bf16* out_ = nullptr;   // [rows, H·hd] gated attention output
  void* ws_ = nullptr;    // the split decode's partials
  size_t ws_bytes_ = 0;
  StateRegion k_, v_;
};

void GqaMixer::CarveMember(size_t i, WeightCarver& c) {
  if (w_.size() <= i) w_.resize(i + 1);
  Weights& w = w_[i];
  w.qkv = c.Take<bf16>(n_ * ctx_.hidden);
  w.o = c.Take<bf16>(ctx_.hidden * qw_);
  w.q_norm = c.Take<float>(s_.head_dim);
  w.k_norm = c.Take<float>(s_.head_dim);
}

Status GqaMixer::UploadMember(size_t i, const TensorSink& sink) {
  const Weights& w = w_[i];
  const std::string& a = prefix(i);
  const int64_t D = ctx_.hidden, H = s_.heads, hd = s_.head_dim;
  // q_proj rows per head are [query (hd) | gate (hd)]: queries to the first
  // H·hd rows, gates to the next H·hd.
  for (int64_t h = 0; h < H; ++h) {
    STRATA_RETURN_IF_ERROR(
        sink.Part(a + "q_proj.weight", 2 * qw_, D, 2 * h * hd, hd, w.qkv, h * hd));
    STRATA_RETURN_IF_ERROR(
        sink.Part(a + "q_proj.weight", 2 * qw_, D, (2 * h + 1) * hd, hd, w.qkv, (H + h) * hd));
  }
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "k_proj.weight", kvw_, D, Mat{.bf = w.qkv}, 2 * qw_));
  STRATA_RETURN_IF_ERROR(
      sink.matrix(a + "v_proj.weight", kvw_, D, Mat{.bf = w.qkv}, 2 * qw_ + kvw_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "o_proj.weight", D, qw_, Mat{.bf = w.o}, 0));
  STRATA_RETURN_IF_ERROR(sink.Norm(a + "q_norm.weight", hd, w.q_norm));
  return sink.Norm(a + "k_norm.weight", hd, w.k_norm);
}

Status GqaMixer::FillDummyMember(size_t i, DummyFill& fill) {
  const Weights& w = w_[i];
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.qkv, n_ * ctx_.hidden));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.o, ctx_.hidden * qw_));
  STRATA_RETURN_IF_ERROR(fill.Ones(w.q_norm, s_.head_dim));
  return fill.Ones(w.k_norm, s_.head_dim);
}

Status GqaMixer::Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, D = ctx_.hidden, layer = static_cast<int64_t>(i);
  STRATA_RETURN_IF_ERROR(
      ops.Mm(ops.stream, f.xn, ActType::kBf16, D, n, w.qkv, n_, D, proj_, ActType::kBf16, n_, 0.f));
  cuda::GqaCacheArgs cache;
  cache.k_cache = reinterpret_cast<bf16*>(k_.At(layer, 0));
  cache.v_cache = reinterpret_cast<bf16*>(v_.At(layer, 0));
  cache.table_stride = f.max_blocks;
  if (pass.decode) {
    cache.block_table = f.block_table;
    cache.per_token_rows = true;
    cache.positions = f.positions();
  } else {
    cache.block_table = f.prefill_table();
    cache.pos0 = pass.past;
  }
  cuda::GqaAppendArgs ap;
  ap.shape = shape_;
  ap.num_tokens = n;
  ap.q = proj_;
  ap.ldq = n_;
  ap.k = proj_ + 2 * qw_;
  ap.v = proj_ + 2 * qw_ + kvw_;
  ap.ldkv = n_;
  ap.q_norm = w.q_norm;
  ap.k_norm = w.k_norm;
  ap.eps = s_.norm_eps;
  ap.inv_freq = inv_freq_;
  ap.cache = cache;
  STRATA_RETURN_IF_ERROR(cuda::GqaAppend(ap, ops.stream));
  cuda::GqaAttentionArgs at;
  at.shape = shape_;
  at.num_tokens = n;
  at.q = proj_;
  at.ldq = n_;
  at.gate = proj_ + qw_;
  at.ldg = n_;
  at.cache = cache;
  at.out = out_;
  at.ldo = qw_;
  if (pass.decode && !ctx_.invariant && ops.On(tuning::Key::kGqaSplitDecode)) {
    at.max_seq_len = pass.bound;
    at.workspace = ws_;
    at.workspace_bytes = ws_bytes_;
  }
  STRATA_RETURN_IF_ERROR(cuda::GqaAttention(at, ops.stream));
  return ops.Mm(ops.stream, out_, ActType::kBf16, qw_, n, w.o, D, qw_, f.h, ActType::kF32, D, 1.f);
}

}  // namespace

std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::GqaSpec& spec, const MixerContext& ctx) {
  return std::make_unique<GqaMixer>(spec, ctx);
}

}  // namespace cuda_exec
}  // namespace strata
