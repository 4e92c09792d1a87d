// Gated DeltaNet on the CPU (model-spec §4.3). It runs on the KDA delta-rule
// core (backend/cpu/kda.h) with one decay per value head; GVA (more value
// than key heads) repeats q/k per value-head group. State per sequence: S
// [Hv, dk, dv] and the conv tail over q ‖ k ‖ v.
#include <cmath>
#include <cstring>

#include "backend/cpu/conv.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/delta_rule.h"
#include "exec/cpu/gates.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class GdnLayer final : public CpuLayerOf<GdnLayer, GdnSpec> {
 public:
  using CpuLayerOf::CpuLayerOf;
  Status Bind(const std::string& a, WeightBinder& wb);
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override;
  std::vector<StateRegion> StateRegions() const override {
    return {{s_.value_heads * s_.key_dim * s_.value_dim, false},
            {(s_.conv_kernel - 1) * Channels(), false}};
  }

  struct Buffers {
    float *proj, *mixed, *conv, *z, *q, *k, *o, *small;
    void* workspace;
    size_t workspace_bytes;
  };
  Buffers Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int threads) const {
    const int64_t Hv = s_.value_heads;
    Buffers b;
    b.proj = a.Take<float>(static_cast<size_t>(T * qkvz_.rows));
    b.mixed = a.Take<float>(static_cast<size_t>(T * Channels()));
    b.conv = a.Take<float>(static_cast<size_t>(T * Channels()));
    b.z = a.Take<float>(static_cast<size_t>(T * ValueWidth()));
    b.q = a.Take<float>(static_cast<size_t>(T * Hv * s_.key_dim));
    b.k = a.Take<float>(static_cast<size_t>(T * Hv * s_.key_dim));
    b.o = a.Take<float>(static_cast<size_t>(T * ValueWidth()));
    b.small = a.Take<float>(static_cast<size_t>(T * 4 * Hv));  // ba, then β and g
    b.workspace_bytes = cpu::KdaChunkedWorkspaceBytes(T, Hv, s_.key_dim, s_.value_dim, threads);
    b.workspace = a.TakeBytes(b.workspace_bytes);
    return b;
  }

 private:
  int64_t KeyWidth() const { return s_.key_heads * s_.key_dim; }
  int64_t ValueWidth() const { return s_.value_heads * s_.value_dim; }
  int64_t Channels() const { return 2 * KeyWidth() + ValueWidth(); }

  cpu::WeightMatrix qkvz_;        // [2·Hk·dk + 2·Hv·dv, D], grouped per key head
  cpu::WeightMatrix ba_;          // [2·Hv, D], grouped per key head
  std::vector<float> conv_;       // [Hk·dk·2 + Hv·dv, K] over q ‖ k ‖ v
  std::vector<float> neg_exp_a_;  // [Hv]: −exp(A_log)
  std::vector<float> dt_bias_;    // [Hv]
  std::vector<float> norm_;       // [dv] gated RMSNorm weight (plain, not 1 + w)
  cpu::WeightMatrix out_;         // [D, Hv·dv]
};

}  // namespace

LayerOrError MakeCpuLayer(const GdnSpec& spec, const LayerBind& bind) {
  return BindLayer<GdnLayer>(spec, bind);
}

Status GdnLayer::Bind(const std::string& a, WeightBinder& wb) {
  const int64_t Hv = s_.value_heads;
  STRATA_ASSIGN_OR_RETURN(
      qkvz_, wb.Matrix(a + "in_proj_qkvz.weight", 2 * KeyWidth() + 2 * ValueWidth(), hidden_));
  STRATA_ASSIGN_OR_RETURN(ba_, wb.Matrix(a + "in_proj_ba.weight", 2 * Hv, hidden_));
  STRATA_ASSIGN_OR_RETURN(conv_, wb.Vector(a + "conv1d.weight", {Channels(), 1, s_.conv_kernel}));
  STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log, wb.Vector(a + "A_log", {Hv}));
  for (float v : a_log) neg_exp_a_.push_back(-std::exp(v));
  STRATA_ASSIGN_OR_RETURN(dt_bias_, wb.Vector(a + "dt_bias", {Hv}));
  STRATA_ASSIGN_OR_RETURN(norm_, wb.Vector(a + "norm.weight", {s_.value_dim}));
  STRATA_ASSIGN_OR_RETURN(out_, wb.Matrix(a + "out_proj.weight", hidden_, ValueWidth()));
  return OkStatus();
}

Status GdnLayer::Run(const LayerRun& run, const float* x, int64_t T, float* out) const {
  ThreadPool* pool = run.pool;
  const int64_t Hk = s_.key_heads, Hv = s_.value_heads;
  const int64_t dk = s_.key_dim, dv = s_.value_dim;
  const int64_t rho = Hv / Hk;  // value heads per key head
  const int64_t kw = KeyWidth(), vw = ValueWidth(), C = Channels();
  const int64_t R = qkvz_.rows;  // 2·kw + 2·vw
  const int64_t group = R / Hk;  // 2·dk + 2·ρ·dv
  const Buffers b = Carve(*run.scratch, T, run.past, pool->num_threads());
  float* beta = b.small + T * 2 * Hv;
  float* gate = beta + T * Hv;

  Linear(run, x, T, qkvz_, b.proj);
  Linear(run, x, T, ba_, b.small);
  // De-group (transformers' fix_query_key_value_ordering): key head g's slice
  // of a token's projection is [q_g | k_g | v of value heads ρg..ρg+ρ−1 | z of
  // the same]; of in_proj_ba, [b of those value heads | a of them]. The conv
  // runs over q ‖ k ‖ v with heads in order.
  cpu::ParallelRange(pool, T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* pt = b.proj + t * R;
      float* mt = b.mixed + t * C;
      float* zt = b.z + t * vw;
      for (int64_t g = 0; g < Hk; ++g) {
        const float* src = pt + g * group;
        std::memcpy(mt + g * dk, src, sizeof(float) * dk);
        std::memcpy(mt + kw + g * dk, src + dk, sizeof(float) * dk);
        std::memcpy(mt + 2 * kw + g * rho * dv, src + 2 * dk, sizeof(float) * rho * dv);
        std::memcpy(zt + g * rho * dv, src + 2 * dk + rho * dv, sizeof(float) * rho * dv);
      }
      const float* bat = b.small + t * 2 * Hv;
      for (int64_t g = 0; g < Hk; ++g) {
        for (int64_t j = 0; j < rho; ++j) {
          const int64_t h = g * rho + j;
          const float bv = bat[g * 2 * rho + j];
          const float av = bat[g * 2 * rho + rho + j];
          beta[t * Hv + h] = Sigmoid(bv);
          // g = −exp(A_log)·softplus(a + dt_bias), one scalar per value head, fp32.
          gate[t * Hv + h] =
              neg_exp_a_[static_cast<size_t>(h)] * Softplus(av + dt_bias_[static_cast<size_t>(h)]);
        }
      }
    }
  });
  cpu::CausalConv1dSilu(b.mixed, T, C, conv_.data(), s_.conv_kernel, run.state[1].fixed, b.conv,
                        pool);
  // q, k: value head h reads key head h / ρ (repeat_interleave); v is already
  // [T, Hv, dv] inside the conv output rows.
  cpu::ParallelRange(pool, T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* ct = b.conv + t * C;
      for (int64_t h = 0; h < Hv; ++h) {
        std::memcpy(b.q + (t * Hv + h) * dk, ct + (h / rho) * dk, sizeof(float) * dk);
        std::memcpy(b.k + (t * Hv + h) * dk, ct + kw + (h / rho) * dk, sizeof(float) * dk);
      }
      std::memcpy(b.mixed + t * vw, ct + 2 * kw, sizeof(float) * vw);  // v, compacted
    }
  });

  // KdaArgs in field order: T, Hv, dk, dv, q, k, v, g, β, state, out, scale
  // (default), one decay per head.
  const cpu::KdaArgs args{T,   Hv,  dk,  dv, b.q, b.k, b.mixed, gate, beta, run.state[0].fixed,
                          b.o, 0.f, true};
  STRATA_RETURN_IF_ERROR(DeltaRule(run, args, b.workspace, b.workspace_bytes));

  // y_h = RMSNorm(o_h)·w ⊙ silu(z_h) per value head, then out_proj.
  cpu::GatedRmsNormSilu(b.o, b.z, T * Hv, dv, norm_.data(), s_.norm_eps, b.o, pool);
  Linear(run, b.o, T, out_, out);
  return OkStatus();
}

}  // namespace strata::exec
