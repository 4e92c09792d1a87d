// Kimi Delta Attention on the CPU (model-spec §2.3): q/k/v projections through
// causal short convs + SiLU, the per-channel forget gate
// g = −exp(A_log)·softplus(f_b(f_a x) + dt_bias), the write strength
// β = sigmoid(b x), the delta-rule recurrence (chunked for prefill, one step
// for decode), then the gated RMSNorm with z = g_b(g_a x) and o_proj.
// State per sequence: S [H, dk, dk] and the q, k, v conv tails.
#include <cmath>

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

class KdaLayer final : public CpuLayerOf<KdaLayer, KdaSpec> {
 public:
  using CpuLayerOf::CpuLayerOf;
  std::vector<StateRegion> StateRegions() const override {
    return {{Heads() * s_.head_dim * s_.head_dim, false}, {3 * WindowFloats(), false}};
  }
  Status Bind(const std::string& a, WeightBinder& wb);
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override;

  struct Buffers {
    float *raw, *q, *k, *v, *g, *o, *small;
    void* workspace;
    size_t workspace_bytes;
  };
  Buffers Carve(ScratchArena& a, int64_t T, int64_t /*past*/, int threads) const {
    const size_t tc = static_cast<size_t>(T * Channels());
    Buffers b;
    b.raw = a.Take<float>(tc);
    b.q = a.Take<float>(tc);
    b.k = a.Take<float>(tc);
    b.v = a.Take<float>(tc);
    b.g = a.Take<float>(tc);
    b.o = a.Take<float>(tc);
    b.small = a.Take<float>(static_cast<size_t>(T * (s_.head_dim + s_.heads)));  // f_a / g_a, β
    b.workspace_bytes =
        cpu::KdaChunkedWorkspaceBytes(T, s_.heads, s_.head_dim, s_.head_dim, threads);
    b.workspace = a.TakeBytes(b.workspace_bytes);
    return b;
  }

 private:
  int64_t Heads() const { return s_.heads; }
  int64_t Channels() const { return s_.heads * s_.head_dim; }
  int64_t WindowFloats() const { return (s_.conv_kernel - 1) * Channels(); }

  cpu::WeightMatrix q_, k_, v_;                  // [H·dk, D]
  cpu::WeightMatrix f_a_, f_b_;                  // [dk, D], [H·dk, dk]
  cpu::WeightMatrix b_;                          // [H, D]
  cpu::WeightMatrix g_a_, g_b_;                  // [dk, D], [H·dk, dk]
  cpu::WeightMatrix o_;                          // [D, H·dk]
  std::vector<float> q_conv_, k_conv_, v_conv_;  // [C, K]
  std::vector<float> neg_exp_a_;                 // [H]: −exp(A_log)
  std::vector<float> dt_bias_;                   // [H·dk]
  std::vector<float> o_norm_;                    // [dk]
};

}  // namespace

LayerOrError MakeCpuLayer(const KdaSpec& spec, const LayerBind& bind) {
  return BindLayer<KdaLayer>(spec, bind);
}

Status KdaLayer::Bind(const std::string& a, WeightBinder& wb) {
  const int64_t H = s_.heads, dk = s_.head_dim, C = Channels(), K = s_.conv_kernel;
  STRATA_ASSIGN_OR_RETURN(q_, wb.Matrix(a + "q_proj.weight", C, hidden_));
  STRATA_ASSIGN_OR_RETURN(k_, wb.Matrix(a + "k_proj.weight", C, hidden_));
  STRATA_ASSIGN_OR_RETURN(v_, wb.Matrix(a + "v_proj.weight", C, hidden_));
  STRATA_ASSIGN_OR_RETURN(q_conv_, wb.Vector(a + "q_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(k_conv_, wb.Vector(a + "k_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(v_conv_, wb.Vector(a + "v_conv1d.weight", {C, 1, K}));
  STRATA_ASSIGN_OR_RETURN(f_a_, wb.Matrix(a + "f_a_proj.weight", dk, hidden_));
  STRATA_ASSIGN_OR_RETURN(f_b_, wb.Matrix(a + "f_b_proj.weight", C, dk));
  STRATA_ASSIGN_OR_RETURN(b_, wb.Matrix(a + "b_proj.weight", H, hidden_));
  // Exports differ in the unit dims of A_log and dt_bias.
  STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log,
                          wb.VectorOfShapes(a + "A_log", {{1, 1, H, 1}, {H}, {H, 1}}));
  for (float v : a_log) neg_exp_a_.push_back(-std::exp(v));
  STRATA_ASSIGN_OR_RETURN(dt_bias_, wb.VectorOfShapes(a + "dt_bias", {{C}, {H, dk}}));
  STRATA_ASSIGN_OR_RETURN(g_a_, wb.Matrix(a + "g_a_proj.weight", dk, hidden_));
  STRATA_ASSIGN_OR_RETURN(g_b_, wb.Matrix(a + "g_b_proj.weight", C, dk));
  STRATA_ASSIGN_OR_RETURN(o_norm_, wb.Vector(a + "o_norm.weight", {dk}));
  STRATA_ASSIGN_OR_RETURN(o_, wb.Matrix(a + "o_proj.weight", hidden_, C));
  return OkStatus();
}

Status KdaLayer::Run(const LayerRun& run, const float* x, int64_t T, float* out) const {
  ThreadPool* pool = run.pool;
  const int64_t H = s_.heads, dk = s_.head_dim, K = s_.conv_kernel, C = Channels();
  const Buffers b = Carve(*run.scratch, T, run.past, pool->num_threads());
  float* beta = b.small + T * dk;
  float* window = run.state[1].fixed;
  const int64_t wsize = WindowFloats();

  // q, k, v: projection, then causal conv + SiLU with the carried windows.
  Linear(run, x, T, q_, b.raw);
  cpu::CausalConv1dSilu(b.raw, T, C, q_conv_.data(), K, window, b.q, pool);
  Linear(run, x, T, k_, b.raw);
  cpu::CausalConv1dSilu(b.raw, T, C, k_conv_.data(), K, window + wsize, b.k, pool);
  Linear(run, x, T, v_, b.raw);
  cpu::CausalConv1dSilu(b.raw, T, C, v_conv_.data(), K, window + 2 * wsize, b.v, pool);

  // Forget gate in fp32.
  Linear(run, x, T, f_a_, b.small);
  Linear(run, b.small, T, f_b_, b.g);
  cpu::ParallelRange(pool, T * H, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t th = lo; th < hi; ++th) {
      const int64_t h = th % H;
      float* gr = b.g + th * dk;
      const float* bias = dt_bias_.data() + h * dk;
      for (int64_t d = 0; d < dk; ++d) {
        gr[d] = neg_exp_a_[static_cast<size_t>(h)] * Softplus(gr[d] + bias[d]);
      }
    }
  });
  Linear(run, x, T, b_, beta);
  for (int64_t i = 0; i < T * H; ++i) beta[i] = Sigmoid(beta[i]);

  // KdaArgs in field order: T, H, dk, dv, q, k, v, g, β, state, out.
  const cpu::KdaArgs args{T, H, dk, dk, b.q, b.k, b.v, b.g, beta, run.state[0].fixed, b.o};
  STRATA_RETURN_IF_ERROR(DeltaRule(run, args, b.workspace, b.workspace_bytes));

  // Output gate, gated RMSNorm per head, then o_proj.
  Linear(run, x, T, g_a_, b.small);
  Linear(run, b.small, T, g_b_, b.raw);
  cpu::GatedRmsNormSigmoid(b.o, b.raw, T * H, dk, o_norm_.data(), s_.norm_eps, b.o, pool);
  Linear(run, b.o, T, o_, out);
  return OkStatus();
}

}  // namespace strata::exec
