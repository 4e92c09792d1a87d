// Gated DeltaNet on the GPU (model-spec §4.3; exec/cpu/gdn_layer.cc is the
// reference for the math):
//   [q|k|v] = xn·W_inᵀ, z = xn·W_zᵀ, [b|a] = xn·W_baᵀ (fp32)
//   qkv = SiLU(conv(q|k|v))                     window carried per slot
//   o = delta rule(q, k, v, g = −exp(A)·softplus(a + dt), β = σ(b))
//   h += out_proj(RMSNorm(o)·w ⊙ SiLU(z))
// Weights are regrouped at upload so that no kernel de-interleaves: in_proj
// [q (Hk·dk) | k (Hk·dk) | v (Hv·dv) | z (Hv·dv)] with heads in order
// (transformers' fix_query_key_value_ordering done once), ba [b (Hv) | a (Hv)].
// State per sequence slot and layer: the delta-rule state [Hv, dk, dv] and
// the conv window [K−1, C] (fp32).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/norm.h"
#include "exec/cuda/delta_rule_mixer.h"

namespace strata {
namespace cuda_exec {
namespace {

using cuda::ActType;

// The KDA kernels' shape of GDN: Hv state heads over Hk q/k heads.
cuda::KdaShape ShapeOf(const exec::GdnSpec& s) {
  cuda::KdaShape shape;
  shape.num_heads = s.value_heads;
  shape.key_dim = s.key_dim;
  shape.value_dim = s.value_dim;
  shape.num_qk_heads = s.key_heads;
  return shape;
}

class GdnMixer final : public DeltaRuleMixer {
 public:
  GdnMixer(const exec::GdnSpec& s, const MixerContext& ctx)
      : DeltaRuleMixer(ctx, ShapeOf(s), (s.conv_kernel - 1) * Channels(s)), s_(s) {
    kw_ = s.key_heads * s.key_dim;
    vw_ = s.value_heads * s.value_dim;
    C_ = Channels(s);
  }

  int64_t PreferredSlice() const override { return 4096; }
  void CarveMember(size_t i, WeightCarver& c) override;
  void CarveScratch(const SequencePlan& p, Carver& c) override;
  Status UploadMember(size_t i, const TensorSink& sink) override;
  Status FillDummyMember(size_t i, DummyFill& fill) override;
  Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                 const MixerPass& pass) const override;

 private:
  struct Weights {
    bf16* in_proj = nullptr;     // [C + vw, D]
    bf16* ba = nullptr;          // [2·Hv, D]
    bf16* out = nullptr;         // [D, vw]
    float* conv = nullptr;       // [C, K]
    float* neg_exp_a = nullptr;  // [Hv]
    float* dt_bias = nullptr;    // [Hv]
    float* norm = nullptr;       // [dv]
  };
  struct Scratch {
    bf16* proj = nullptr;  // [rows, C] q|k|v before the conv
    bf16* z = nullptr;     // [rows, vw]
    float* gba = nullptr;  // [rows, 2·Hv] b | a
    bf16* qkv = nullptr;   // [rows, C] conv + SiLU output
    bf16* o = nullptr;     // [rows, vw] delta-rule output
    bf16* y = nullptr;     // [rows, vw] gated-norm output
    void* ws = nullptr;
  };

  // Conv channels: q ‖ k ‖ v.
  static int64_t Channels(const exec::GdnSpec& s) {
    return 2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim;
  }

  exec::GdnSpec s_;
  int64_t kw_ = 0, vw_ = 0, C_ = 0;
  std::vector<Weights> w_;
  Scratch x_;
};

void GdnMixer::CarveMember(size_t i, WeightCarver& c) {
  if (w_.size() <= i) w_.resize(i + 1);
  Weights& w = w_[i];
  const int64_t D = ctx_.hidden, Hv = s_.value_heads;
  w.in_proj = c.Take<bf16>((C_ + vw_) * D);
  w.ba = c.Take<bf16>(2 * Hv * D);
  w.out = c.Take<bf16>(D * vw_);
  w.conv = c.Take<float>(C_ * s_.conv_kernel);
  w.neg_exp_a = c.Take<float>(Hv);
  w.dt_bias = c.Take<float>(Hv);
  w.norm = c.Take<float>(s_.value_dim);
}

void GdnMixer::CarveScratch(const SequencePlan& p, Carver& c) {
  const int64_t R = p.rows;
  x_.proj = c.Take<bf16>(R * C_);
  x_.z = c.Take<bf16>(R * vw_);
  x_.gba = c.Take<float>(R * 2 * s_.value_heads);
  x_.qkv = c.Take<bf16>(R * C_);
  x_.o = c.Take<bf16>(R * vw_);
  x_.y = c.Take<bf16>(R * vw_);
  x_.ws = c.Take<char>(static_cast<int64_t>(ws_bytes_));
}

Status GdnMixer::UploadMember(size_t i, const TensorSink& sink) {
  const Weights& w = w_[i];
  const std::string& a = prefix(i);
  const int64_t D = ctx_.hidden, Hk = s_.key_heads, Hv = s_.value_heads;
  const int64_t dk = s_.key_dim, dv = s_.value_dim, rho = Hv / Hk;
  // De-group in_proj_qkvz: key head j's rows are [q_j | k_j | v of value
  // heads ρj..ρj+ρ−1 | z of the same]; they go to [q | k | v | z] with heads
  // in order.
  const int64_t group = 2 * dk + 2 * rho * dv;
  const std::string qkvz = a + "in_proj_qkvz.weight";
  for (int64_t j = 0; j < Hk; ++j) {
    const int64_t src = j * group;
    STRATA_RETURN_IF_ERROR(sink.Part(qkvz, Hk * group, D, src, dk, w.in_proj, j * dk));
    STRATA_RETURN_IF_ERROR(sink.Part(qkvz, Hk * group, D, src + dk, dk, w.in_proj, kw_ + j * dk));
    STRATA_RETURN_IF_ERROR(
        sink.Part(qkvz, Hk * group, D, src + 2 * dk, rho * dv, w.in_proj, 2 * kw_ + j * rho * dv));
    STRATA_RETURN_IF_ERROR(sink.Part(qkvz, Hk * group, D, src + 2 * dk + rho * dv, rho * dv,
                                     w.in_proj, C_ + j * rho * dv));
  }
  // in_proj_ba: key head j's rows are [b of its ρ value heads | a of them].
  const std::string ba = a + "in_proj_ba.weight";
  for (int64_t j = 0; j < Hk; ++j) {
    STRATA_RETURN_IF_ERROR(sink.Part(ba, 2 * Hv, D, j * 2 * rho, rho, w.ba, j * rho));
    STRATA_RETURN_IF_ERROR(sink.Part(ba, 2 * Hv, D, j * 2 * rho + rho, rho, w.ba, Hv + j * rho));
  }
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "out_proj.weight", D, vw_, Mat{.bf = w.out}, 0));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "conv1d.weight", {{C_, 1, s_.conv_kernel}}, w.conv));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "A_log", {{Hv}}, w.neg_exp_a, [](std::vector<float>& v) {
    for (float& x : v) x = -std::exp(x);
  }));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "dt_bias", {{Hv}}, w.dt_bias));
  // The output norm's weight is plain, zero-centred checkpoint or not.
  return sink.Floats(a + "norm.weight", {{dv}}, w.norm);
}

Status GdnMixer::FillDummyMember(size_t i, DummyFill& fill) {
  const Weights& w = w_[i];
  const int64_t D = ctx_.hidden, Hv = s_.value_heads;
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.in_proj, (C_ + vw_) * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.ba, 2 * Hv * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.out, D * vw_));
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.conv, C_ * s_.conv_kernel, -0.5f, 0.5f));
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.neg_exp_a, Hv, -16.f, -1.f));
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.dt_bias, Hv, -6.9f, -2.3f));
  return fill.Ones(w.norm, s_.value_dim);
}

Status GdnMixer::Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, D = ctx_.hidden, Hv = s_.value_heads, K = s_.conv_kernel;
  cudaStream_t st = ops.stream;
  // in_proj rows [q|k|v] then z: two products on consecutive weight rows.
  STRATA_RETURN_IF_ERROR(
      ops.Mm(st, f.xn, ActType::kBf16, D, n, w.in_proj, C_, D, x_.proj, ActType::kBf16, C_, 0.f));
  STRATA_RETURN_IF_ERROR(ops.Mm(st, f.xn, ActType::kBf16, D, n, w.in_proj + C_ * D, vw_, D, x_.z,
                                ActType::kBf16, vw_, 0.f));
  // b and a in fp32: a goes through softplus, exp and the chunk's cumulative sum.
  STRATA_RETURN_IF_ERROR(
      ops.Mm(st, f.xn, ActType::kBf16, D, n, w.ba, 2 * Hv, D, x_.gba, ActType::kF32, 2 * Hv, 0.f));
  if (pass.decode) {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluDecode(x_.proj, ActType::kBf16, C_, n, C_, w.conv, K,
                                                      Windows(i), f.slots(), x_.qkv, st));
  } else {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluPrefill(x_.proj, ActType::kBf16, C_, n, C_, w.conv,
                                                       K, Windows(i, pass.slot), x_.qkv, st));
  }
  cuda::KdaGates gates;
  gates.g_raw = x_.gba + Hv;
  gates.g_type = ActType::kF32;
  gates.ld_g = 2 * Hv;
  gates.beta_raw = x_.gba;
  gates.beta_type = ActType::kF32;
  gates.ld_beta = 2 * Hv;
  gates.neg_exp_a = w.neg_exp_a;
  gates.dt_bias = w.dt_bias;
  gates.per_head = true;
  STRATA_RETURN_IF_ERROR(Step(ops, i, pass, f.slots(), x_.qkv, kw_, C_, gates, x_.o, x_.ws));
  STRATA_RETURN_IF_ERROR(cuda::GatedRmsNormSilu(x_.o, ActType::kBf16, x_.z, ActType::kBf16, n * Hv,
                                                s_.value_dim, w.norm, s_.norm_eps, x_.y, st));
  return ops.Mm(st, x_.y, ActType::kBf16, vw_, n, w.out, D, vw_, f.h, ActType::kF32, D, 1.f);
}

}  // namespace

std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::GdnSpec& spec, const MixerContext& ctx) {
  return std::make_unique<GdnMixer>(spec, ctx);
}

}  // namespace cuda_exec
}  // namespace strata
