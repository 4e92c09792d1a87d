// Gated grouped-query attention on the CPU (model-spec §4.4): q_proj rows per
// head are [query | output gate]; q and k get per-head RMSNorms and a partial
// half-split rotary; the attention output is scaled by sigmoid(gate) before
// o_proj. State per sequence: the K and V rows [tokens, Hkv, hd].
#include <cmath>
#include <cstring>

#include "backend/cpu/gqa_attention.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/rope.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/gates.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class GqaLayer final : public CpuLayerOf<GqaLayer, GqaSpec> {
 public:
  using CpuLayerOf::CpuLayerOf;
  int64_t AttendedTokens(int64_t context) const override { return context; }
  Status Bind(const std::string& a, WeightBinder& wb);
  std::vector<StateRegion> StateRegions() const override {
    return {{RowFloats(), true}, {RowFloats(), true}};
  }
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override;

  struct Buffers {
    float *qg, *q, *gate, *o, *k_new, *v_new;
  };
  Buffers Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int /*threads*/) const {
    const size_t n = static_cast<size_t>(T * s_.heads * s_.head_dim);
    const size_t rows = static_cast<size_t>(T * RowFloats());
    Buffers b;
    b.qg = a.Take<float>(2 * n);
    b.q = a.Take<float>(n);
    b.gate = a.Take<float>(n);
    b.o = a.Take<float>(n);
    b.k_new = a.Take<float>(rows);
    b.v_new = a.Take<float>(rows);
    return b;
  }

 private:
  int64_t RowFloats() const { return s_.kv_heads * s_.head_dim; }

  std::vector<float> inv_freq_;         // [rotary_dim / 2]
  cpu::WeightMatrix q_;                 // [H·2·hd, D]: per head [query (hd) | gate (hd)]
  cpu::WeightMatrix k_, v_;             // [Hkv·hd, D]
  cpu::WeightMatrix o_;                 // [D, H·hd]
  std::vector<float> q_norm_, k_norm_;  // [hd]
};

}  // namespace

LayerOrError MakeCpuLayer(const GqaSpec& spec, const LayerBind& bind) {
  return BindLayer<GqaLayer>(spec, bind);
}

Status GqaLayer::Bind(const std::string& a, WeightBinder& wb) {
  const int64_t H = s_.heads, hd = s_.head_dim;
  STRATA_ASSIGN_OR_RETURN(q_, wb.Matrix(a + "q_proj.weight", H * 2 * hd, hidden_));
  STRATA_ASSIGN_OR_RETURN(k_, wb.Matrix(a + "k_proj.weight", RowFloats(), hidden_));
  STRATA_ASSIGN_OR_RETURN(v_, wb.Matrix(a + "v_proj.weight", RowFloats(), hidden_));
  STRATA_ASSIGN_OR_RETURN(o_, wb.Matrix(a + "o_proj.weight", hidden_, H * hd));
  STRATA_ASSIGN_OR_RETURN(q_norm_, wb.NormWeight(a + "q_norm.weight", hd));
  STRATA_ASSIGN_OR_RETURN(k_norm_, wb.NormWeight(a + "k_norm.weight", hd));
  inv_freq_ = cpu::RopeInverseFrequencies(s_.rotary_dim, s_.rope_theta);
  return OkStatus();
}

Status GqaLayer::Run(const LayerRun& run, const float* x, int64_t T, float* out) const {
  ThreadPool* pool = run.pool;
  const int64_t H = s_.heads, Hkv = s_.kv_heads, hd = s_.head_dim, past = run.past;
  const Buffers b = Carve(*run.scratch, T, past, pool->num_threads());
  Linear(run, x, T, q_, b.qg);
  for (int64_t th = 0; th < T * H; ++th) {
    std::memcpy(b.q + th * hd, b.qg + th * 2 * hd, sizeof(float) * hd);
    std::memcpy(b.gate + th * hd, b.qg + th * 2 * hd + hd, sizeof(float) * hd);
  }
  cpu::RmsNorm(b.q, T * H, hd, q_norm_.data(), s_.norm_eps, b.q, pool);
  cpu::ApplyRopeHalfSplit(b.q, T, H, hd, s_.rotary_dim, past, inv_freq_.data(), pool);

  // Append the new tokens' normalised, rotated keys and their values.
  const RegionView &k_cache = run.state[0], &v_cache = run.state[1];
  Linear(run, x, T, k_, b.k_new);
  cpu::RmsNorm(b.k_new, T * Hkv, hd, k_norm_.data(), s_.norm_eps, b.k_new, pool);
  cpu::ApplyRopeHalfSplit(b.k_new, T, Hkv, hd, s_.rotary_dim, past, inv_freq_.data(), pool);
  Linear(run, x, T, v_, b.v_new);
  k_cache.Write(past, T, b.k_new);
  v_cache.Write(past, T, b.v_new);

  STRATA_RETURN_IF_ERROR(cpu::GqaAttention({H, Hkv, hd}, b.q, T, k_cache.rows, v_cache.rows,
                                           past, 1.f / std::sqrt(static_cast<float>(hd)), b.o,
                                           pool));
  cpu::ParallelRange(pool, T * H * hd, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) b.o[i] *= Sigmoid(b.gate[i]);
  });
  Linear(run, b.o, T, o_, out);
  return OkStatus();
}

}  // namespace strata::exec
