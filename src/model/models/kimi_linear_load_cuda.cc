// Loading of the kimi_linear CUDA executor: the device check, the memory plan
// (weights, scratch, state pools, paged cache), the fused weight upload (or
// dummy weights made on the device) and a load-time self-check that runs one
// prefill and one decode step so that shapes the kernels reject fall back to
// the CPU at load rather than fail in the middle of a request.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/elementwise.h"
#include "base/dtype.h"
#include "model/config_reader.h"
#include "model/models/arch_descriptions.h"
#include "model/models/builtin.h"
#include "model/models/kimi_linear_cuda_impl.h"
#include "model/models/kimi_linear_weights.h"
#include "model/weight_store.h"

namespace strata {
namespace kimi_cuda {

Geometry MakeGeometry(const KimiLinearConfig& c) {
  Geometry g;
  g.D = c.hidden_size;
  g.V = c.vocab_size;
  g.L = c.num_layers;
  g.eps = static_cast<float>(c.rms_norm_eps);
  g.H = c.kda_heads;
  g.dk = c.kda_head_dim;
  g.C = g.H * g.dk;
  g.K = c.conv_kernel;
  g.off_fa = Pad8(3 * g.C);
  g.off_ga = g.off_fa + Pad8(g.dk);
  g.off_b = g.off_ga + Pad8(g.dk);
  g.n_in = g.off_b + Pad8(g.H);
  g.window = (g.K - 1) * 3 * g.C;
  g.kda_state = g.H * g.dk * g.dk;
  g.Hm = c.mla_heads;
  g.dn = c.qk_nope_dim;
  g.dr = c.qk_rope_dim;
  g.dv = c.v_head_dim;
  g.r = c.kv_lora_rank;
  g.qd = g.dn + g.dr;
  g.cd = g.r + g.dr;
  g.I_dense = c.intermediate_size;
  g.I = c.moe_intermediate_size;
  g.E = c.num_experts;
  g.top_k = c.experts_per_token;
  g.Is = c.moe_intermediate_size * c.num_shared_experts;
  g.moe_renormalize = c.moe_renormalize;
  g.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  g.num_kda = c.NumKdaLayers();
  g.num_mla = c.NumMlaLayers();
  for (bool m : c.is_moe) (m ? g.has_moe : g.has_dense) = true;
  if (!g.has_moe) g.Is = 0;
  if (!g.has_dense) g.I_dense = 0;
  return g;
}

void CarveWeights(const Geometry& g, const KimiLinearConfig& cfg, bool separate_lm_head, Carver& c,
                  Weights& w) {
  w.embed = c.Take<bf16>(g.V * g.D);
  w.lm_head = separate_lm_head ? c.Take<bf16>(g.V * g.D) : w.embed;
  w.final_norm = c.Take<float>(g.D);
  w.layers.assign(static_cast<size_t>(g.L), Layer{});
  int64_t kda = 0, mla = 0;
  for (int64_t i = 0; i < g.L; ++i) {
    Layer& L = w.layers[static_cast<size_t>(i)];
    L.is_mla = cfg.is_mla[static_cast<size_t>(i)];
    L.is_moe = cfg.is_moe[static_cast<size_t>(i)];
    L.input_norm = c.Take<float>(g.D);
    L.post_norm = c.Take<float>(g.D);
    if (L.is_mla) {
      L.index = mla++;
      L.mla.q = c.Take<bf16>(g.Hm * g.qd * g.D);
      L.mla.kv_a = c.Take<bf16>(g.cd * g.D);
      L.mla.kv_norm = c.Take<float>(g.r);
      L.mla.kv_b = c.Take<bf16>(g.Hm * (g.dn + g.dv) * g.r);
      L.mla.o = c.Take<bf16>(g.D * g.Hm * g.dv);
      L.mla.uk_t = c.Take<bf16>(g.Hm * g.r * g.dn);
    } else {
      L.index = kda++;
      L.kda.in_proj = c.Take<bf16>(g.n_in * g.D);
      L.kda.f_b = c.Take<bf16>(g.C * g.dk);
      L.kda.g_b = c.Take<bf16>(g.C * g.dk);
      L.kda.o = c.Take<bf16>(g.D * g.C);
      L.kda.conv = c.Take<float>(3 * g.C * g.K);
      L.kda.neg_exp_a = c.Take<float>(g.H);
      L.kda.dt_bias = c.Take<float>(g.C);
      L.kda.o_norm = c.Take<float>(g.dk);
    }
    if (!L.is_moe) {
      L.ffn.gate_up.bf = c.Take<bf16>(2 * g.I_dense * g.D);
      L.ffn.down.bf = c.Take<bf16>(g.D * g.I_dense);
    } else {
      L.ffn.router.bf = c.Take<bf16>(g.E * g.D);
      L.ffn.score_bias = c.Take<float>(g.E);
      L.ffn.w13.bf = c.Take<bf16>(g.E * 2 * g.I * g.D);
      L.ffn.w2.bf = c.Take<bf16>(g.E * g.D * g.I);
      if (g.Is > 0) {
        L.ffn.gate_up.bf = c.Take<bf16>(2 * g.Is * g.D);
        L.ffn.down.bf = c.Take<bf16>(g.D * g.Is);
      }
    }
  }
}

void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s) {
  const int64_t R = p.rows, B = p.max_batch;
  cuda_exec::CarveStepScratch(p, g.D, g.V, g.gu_cols(), g.has_moe ? g.E : 0, p.moe_ws, c, s);
  if (g.num_kda > 0) {
    s.proj = c.Take<bf16>(R * g.n_in);
    s.qkv = c.Take<bf16>(R * 3 * g.C);
    s.graw = c.Take<float>(R * g.C);
    s.gate = c.Take<bf16>(R * g.C);
    s.o = c.Take<bf16>(R * g.C);
    s.y = c.Take<bf16>(R * g.C);
    s.kda_ws = c.Take<char>(static_cast<int64_t>(p.kda_ws));
  }
  if (g.num_mla > 0) {
    s.q = c.Take<bf16>(R * g.Hm * g.qd);
    s.kva = c.Take<bf16>(R * g.cd);
    s.q_abs = c.Take<bf16>(B * g.Hm * g.cd);
    s.lat_o = c.Take<bf16>(B * g.Hm * g.r);
    s.attn = c.Take<bf16>(R * g.Hm * g.dv);
    s.lat = c.Take<bf16>(p.max_ctx * g.cd);
    s.kv_exp = c.Take<bf16>(p.max_ctx * g.Hm * (g.dn + g.dv));
    s.mla_ws = c.Take<char>(static_cast<int64_t>(p.mla_ws));
  }
}

using cuda_exec::Uploader;

Status KimiLinearCudaModel::Setup(std::shared_ptr<const WeightStore> weights,
                                  const KimiLinearConfig& config, const LoadOptions& options) {
  cfg_ = config;
  g_ = MakeGeometry(config);
  STRATA_RETURN_IF_ERROR(ReadOptions(options));
  const tuning::Scope tuned(tuning_);
  const Geometry& g = g_;

  Plan& p = plan_;
  STRATA_ASSIGN_OR_RETURN(const std::string dev_name,
                          BeginLoad(options, g.V, config.max_context, kPrefillSliceTokens, p));
  if (g.num_kda > 0) p.kda_ws = cuda::KdaPrefillWorkspaceBytes(KdaShapeOf(g), p.slice);
  if (g.num_mla > 0) {
    // Sized for every (batch, length bound) a decode graph may use.
    for (int64_t b = 1; b <= p.max_batch; ++b) {
      for (int64_t len = kMinMlaBucket;; len *= 2) {
        const int64_t bound = std::min(len, p.max_ctx);
        p.mla_ws = std::max(
            p.mla_ws, cuda::MlaDecodeWorkspaceBytes(MlaShapeOf(g), b, bound, invariant_));
        if (bound == p.max_ctx) break;
      }
    }
  }
  if (g.has_moe) p.moe_ws = cuda::MoeWorkspaceBytes(MoeShapeOf(g), p.rows, invariant_);

  const bool separate_lm_head =
      !config.tie_word_embeddings || (weights != nullptr && weights->Has("lm_head.weight"));
  MemoryPlan memory;
  memory.carve_weights = [&](Carver& c) { CarveWeights(g, config, separate_lm_head, c, w_); };
  memory.carve_scratch = [&](Carver& c) { CarveScratch(g, p, c, s_); };
  memory.slot_arrays = {{g.num_kda, sizeof(float) * static_cast<size_t>(g.kda_state)},
                        {g.num_kda, sizeof(float) * static_cast<size_t>(g.window)}};
  memory.block_arrays = {{g.num_mla, sizeof(bf16) * static_cast<size_t>(kBlockTokens * g.cd)}};
  STRATA_ASSIGN_OR_RETURN(const int64_t blocks,
                          AllocateMemory(dev_name, p, options.gpu_memory_fraction, memory));
  pools_.slots = p.max_sequences;
  pools_.blocks = blocks;
  pools_.kda_state = reinterpret_cast<float*>(layout_.slot_regions[0].base);
  pools_.conv_window = reinterpret_cast<float*>(layout_.slot_regions[1].base);
  pools_.kv = reinterpret_cast<bf16*>(layout_.block_regions[0].base);

  // What the shared host side (cuda_executor_base.h) works with.
  BindFrame(g, p, w_, s_, kLogitsChunkRows);
  BindStack(w_, s_, cuda_exec::FfnDims{g.D, g.I_dense, g.Is, 0, MoeShapeOf(g)}, p.moe_ws,
            invariant_);
  benchmark_fill_ = true;
  // Pinned host memory: step inputs, block-table mirror, results, staging.
  STRATA_RETURN_IF_ERROR(InitRuntime(pools_.slots, pools_.blocks, options.cuda_graphs,
                                     cuda_exec::kStagingBytes, &h_staging_));

  // --- weights ---------------------------------------------------------------
  const exec::ArchSpec spec = DescribeKimiLinear(config, weights.get());
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(spec, options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(spec, *weights, options));
  }
  STRATA_RETURN_IF_ERROR(BuildTransposedUk());
  if (invariant_) {
    // From here on (the load-time check included) every GEMM is invariant.
    blas_->set_batch_invariant(true);
  }
  DescribeModel(spec, dev_name, weights.get(), p);
  if (weights == nullptr) {
    for (const KimiTensorSpec& t : KimiLinearTensorSpecs(config)) {
      info_.num_parameters += t.NumElements();
    }
  }
  return LoadTimeCheck(g_.V);
}

Status KimiLinearCudaModel::UploadWeights(const exec::ArchSpec& spec, const WeightStore& ws,
                                          const LoadOptions& options) {
  const Geometry& g = g_;
  Uploader up(stream_, h_staging_, cuda_exec::kStagingBytes);
  STRATA_RETURN_IF_ERROR(up.Init());
  const int64_t D = g.D, V = g.V;
  STRATA_RETURN_IF_ERROR(up.Matrix(ws, "model.embed_tokens.weight", {V, D}, w_.embed));
  if (w_.lm_head != w_.embed) {
    STRATA_RETURN_IF_ERROR(up.Matrix(ws, "lm_head.weight", {V, D}, w_.lm_head));
  }
  auto norm = [&](const std::string& name, int64_t n, float* dst) -> Status {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> v, ws.GetF32Copy(name, {n}));
    return up.Floats(v, dst);
  };
  STRATA_RETURN_IF_ERROR(norm("model.norm.weight", D, w_.final_norm));

  const int64_t H = g.H, dk = g.dk, C = g.C, K = g.K;
  for (int64_t i = 0; i < g.L; ++i) {
    const Layer& L = w_.layers[static_cast<size_t>(i)];
    const exec::LayerSpec& layer = spec.layers[static_cast<size_t>(i)];
    const std::string& p = layer.prefix;
    const std::string& a = layer.mixer_prefix;
    STRATA_RETURN_IF_ERROR(norm(p + "input_layernorm.weight", D, L.input_norm));
    STRATA_RETURN_IF_ERROR(norm(p + "post_attention_layernorm.weight", D, L.post_norm));
    if (L.is_mla) {
      const MlaLayer& m = L.mla;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "q_proj.weight", {g.Hm * g.qd, D}, m.q));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "kv_a_proj_with_mqa.weight", {g.cd, D}, m.kv_a));
      STRATA_RETURN_IF_ERROR(norm(a + "kv_a_layernorm.weight", g.r, m.kv_norm));
      STRATA_RETURN_IF_ERROR(
          up.Matrix(ws, a + "kv_b_proj.weight", {g.Hm * (g.dn + g.dv), g.r}, m.kv_b));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "o_proj.weight", {D, g.Hm * g.dv}, m.o));
    } else {
      const KdaLayer& k = L.kda;
      // One [q|k|v|f_a|g_a|b] matrix: the layer's input is read once.
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "q_proj.weight", {C, D}, k.in_proj));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "k_proj.weight", {C, D}, k.in_proj + C * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "v_proj.weight", {C, D}, k.in_proj + 2 * C * D));
      STRATA_RETURN_IF_ERROR(
          up.Matrix(ws, a + "f_a_proj.weight", {dk, D}, k.in_proj + g.off_fa * D));
      STRATA_RETURN_IF_ERROR(
          up.Matrix(ws, a + "g_a_proj.weight", {dk, D}, k.in_proj + g.off_ga * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "b_proj.weight", {H, D}, k.in_proj + g.off_b * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "f_b_proj.weight", {C, dk}, k.f_b));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "g_b_proj.weight", {C, dk}, k.g_b));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "o_proj.weight", {D, C}, k.o));
      // Conv taps of q, k, v stacked in the fused channel order.
      const char* convs[3] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
      for (int j = 0; j < 3; ++j) {
        STRATA_ASSIGN_OR_RETURN(std::vector<float> taps, ws.GetF32Copy(a + convs[j], {C, 1, K}));
        STRATA_RETURN_IF_ERROR(up.Floats(taps, k.conv + j * C * K));
      }
      STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log,
                              KimiGetSmallF32(ws, a + "A_log", KimiALogShapes(H)));
      for (float& v : a_log) v = -std::exp(v);
      STRATA_RETURN_IF_ERROR(up.Floats(a_log, k.neg_exp_a));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> dt,
                              KimiGetSmallF32(ws, a + "dt_bias", KimiDtBiasShapes(H, dk)));
      STRATA_RETURN_IF_ERROR(up.Floats(dt, k.dt_bias));
      STRATA_RETURN_IF_ERROR(norm(a + "o_norm.weight", dk, k.o_norm));
    }
    STRATA_RETURN_IF_ERROR(UploadFfnWeights(layer, D, L.ffn, up.Sink(ws)));
    STRATA_RETURN_IF_ERROR(cuda_exec::LayerLoaded(options, ws, i, g.L));
  }
  return up.Finish();
}

Status KimiLinearCudaModel::MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed) {
  const Geometry& g = g_;
  cuda_exec::DummyFill fill(seed, stream_);
  auto mat = [&](bf16* p, int64_t n) { return fill.Matrix(p, n); };
  auto f32 = [&](float* p, int64_t n, float lo, float hi) { return fill.Uniform(p, n, lo, hi); };
  STRATA_RETURN_IF_ERROR(mat(w_.embed, g.V * g.D));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(mat(w_.lm_head, g.V * g.D));
  STRATA_RETURN_IF_ERROR(fill.Ones(w_.final_norm, g.D));
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const Layer& L = w_.layers[i];
    STRATA_RETURN_IF_ERROR(fill.Ones(L.input_norm, g.D));
    STRATA_RETURN_IF_ERROR(fill.Ones(L.post_norm, g.D));
    if (L.is_mla) {
      STRATA_RETURN_IF_ERROR(mat(L.mla.q, g.Hm * g.qd * g.D));
      STRATA_RETURN_IF_ERROR(mat(L.mla.kv_a, g.cd * g.D));
      STRATA_RETURN_IF_ERROR(fill.Ones(L.mla.kv_norm, g.r));
      STRATA_RETURN_IF_ERROR(mat(L.mla.kv_b, g.Hm * (g.dn + g.dv) * g.r));
      STRATA_RETURN_IF_ERROR(mat(L.mla.o, g.D * g.Hm * g.dv));
    } else {
      const KdaLayer& k = L.kda;
      STRATA_RETURN_IF_ERROR(mat(k.in_proj, 3 * g.C * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.in_proj + g.off_fa * g.D, g.dk * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.in_proj + g.off_ga * g.D, g.dk * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.in_proj + g.off_b * g.D, g.H * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.f_b, g.C * g.dk));
      STRATA_RETURN_IF_ERROR(mat(k.g_b, g.C * g.dk));
      STRATA_RETURN_IF_ERROR(mat(k.o, g.D * g.C));
      STRATA_RETURN_IF_ERROR(f32(k.conv, 3 * g.C * g.K, -0.5f, 0.5f));
      // −exp(A_log) with A_log = log U[1, 16] (the usual init), and dt_bias
      // with softplus(dt_bias) in about [0.001, 0.1]: decays like a trained KDA.
      STRATA_RETURN_IF_ERROR(f32(k.neg_exp_a, g.H, -16.f, -1.f));
      STRATA_RETURN_IF_ERROR(f32(k.dt_bias, g.C, -6.9f, -2.3f));
      STRATA_RETURN_IF_ERROR(fill.Ones(k.o_norm, g.dk));
    }
    STRATA_RETURN_IF_ERROR(FillDummyFfnWeights(spec.layers[i], g.D, L.ffn, fill));
  }
  return Sync("dummy weights");
}

Status KimiLinearCudaModel::BuildTransposedUk() {
  const Geometry& g = g_;
  std::vector<std::pair<const bf16*, bf16*>> layers;
  for (const Layer& L : w_.layers) {
    if (L.is_mla) layers.emplace_back(L.mla.kv_b, L.mla.uk_t);
  }
  return cuda_exec::TransposeUkPerHead(*blas_, layers, g.Hm, g.dn, g.dv, g.r, stream_);
}

}  // namespace kimi_cuda

StatusOr<std::unique_ptr<Model>> CreateKimiLinearCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  return cuda_exec::CreateCudaExecutor<kimi_cuda::KimiLinearCudaModel, KimiLinearConfig>(
      std::move(weights), config_path, options, ParseKimiLinearConfig);
}

StatusOr<KimiCudaStats> GetKimiCudaStats(const Model& model) {
  const auto* m = dynamic_cast<const kimi_cuda::KimiLinearCudaModel*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a kimi_linear CUDA model");
  return m->ExecutorStats();
}

}  // namespace strata
