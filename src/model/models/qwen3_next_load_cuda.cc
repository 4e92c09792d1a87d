// Loading of the qwen3_next CUDA executor: the device check, the memory plan
// (weights, scratch, state pools, paged K/V cache), the regrouped weight
// upload (or dummy weights made on the device) and a load-time self-check,
// as kimi_linear_load_cuda.cc does for Kimi-Linear.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/elementwise.h"
#include "base/dtype.h"
#include "model/config_reader.h"
#include "model/models/arch_descriptions.h"
#include "model/models/builtin.h"
#include "model/models/qwen3_next_cuda_impl.h"
#include "model/weight_store.h"

namespace strata {
namespace qwen3next_cuda {

using cuda_exec::GiB;

Geometry MakeGeometry(const Qwen3NextConfig& c) {
  Geometry g;
  g.D = c.hidden_size;
  g.V = c.vocab_size;
  g.L = c.num_layers;
  g.eps = static_cast<float>(c.rms_norm_eps);
  g.Hk = c.linear_key_heads;
  g.Hv = c.linear_value_heads;
  g.dk = c.linear_key_dim;
  g.dv = c.linear_value_dim;
  g.kw = c.LinearKeyWidth();
  g.vw = c.LinearValueWidth();
  g.C = c.ConvChannels();
  g.K = c.conv_kernel;
  g.n_in = g.C + g.vw;
  g.window = (g.K - 1) * g.C;
  g.state = g.Hv * g.dk * g.dv;
  g.H = c.num_heads;
  g.Hkv = c.num_kv_heads;
  g.hd = c.head_dim;
  g.rot = c.rotary_dim;
  g.n_attn = 2 * g.H * g.hd + 2 * g.Hkv * g.hd;
  g.I_dense = c.intermediate_size;
  g.I = c.moe_intermediate_size;
  g.E = c.num_experts;
  g.top_k = c.experts_per_token;
  g.Is = c.shared_intermediate_size;
  g.renormalize = c.norm_topk_prob;
  g.num_attn = c.NumAttentionLayers();
  g.num_gdn = c.NumLinearLayers();
  for (bool m : c.is_moe) (m ? g.has_moe : g.has_dense) = true;
  if (!g.has_moe) g.Is = 0;
  if (!g.has_dense) g.I_dense = 0;
  return g;
}

void CarveWeights(const Geometry& g, const Qwen3NextConfig& cfg, bool separate_lm_head, Carver& c,
                  Weights& w) {
  w.embed = c.Take<bf16>(g.V * g.D);
  w.lm_head = separate_lm_head ? c.Take<bf16>(g.V * g.D) : w.embed;
  w.final_norm = c.Take<float>(g.D);
  w.inv_freq = c.Take<float>(std::max<int64_t>(g.rot / 2, 1));
  w.layers.assign(static_cast<size_t>(g.L), Layer{});
  int64_t gdn = 0, attn = 0;
  for (int64_t i = 0; i < g.L; ++i) {
    Layer& L = w.layers[static_cast<size_t>(i)];
    L.is_attn = cfg.is_attention[static_cast<size_t>(i)];
    L.is_moe = cfg.is_moe[static_cast<size_t>(i)];
    L.input_norm = c.Take<float>(g.D);
    L.post_norm = c.Take<float>(g.D);
    if (L.is_attn) {
      L.index = attn++;
      L.attn.qkv = c.Take<bf16>(g.n_attn * g.D);
      L.attn.o = c.Take<bf16>(g.D * g.H * g.hd);
      L.attn.q_norm = c.Take<float>(g.hd);
      L.attn.k_norm = c.Take<float>(g.hd);
    } else {
      L.index = gdn++;
      L.gdn.in_proj = c.Take<bf16>(g.n_in * g.D);
      L.gdn.ba = c.Take<bf16>(2 * g.Hv * g.D);
      L.gdn.out = c.Take<bf16>(g.D * g.vw);
      L.gdn.conv = c.Take<float>(g.C * g.K);
      L.gdn.neg_exp_a = c.Take<float>(g.Hv);
      L.gdn.dt_bias = c.Take<float>(g.Hv);
      L.gdn.norm = c.Take<float>(g.dv);
    }
    if (!L.is_moe) {
      L.ffn.gate_up.bf = c.Take<bf16>(2 * g.I_dense * g.D);
      L.ffn.down.bf = c.Take<bf16>(g.D * g.I_dense);
    } else {
      L.ffn.router.bf = c.Take<bf16>(g.E * g.D);
      L.ffn.w13.bf = c.Take<bf16>(g.E * 2 * g.I * g.D);
      L.ffn.w2.bf = c.Take<bf16>(g.E * g.D * g.I);
      L.ffn.gate_up.bf = c.Take<bf16>(2 * g.Is * g.D);
      L.ffn.down.bf = c.Take<bf16>(g.D * g.Is);
      L.ffn.shared_gate = c.Take<bf16>(kSharedGateRows * g.D);
    }
  }
}

void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s) {
  const int64_t R = p.rows;
  cuda_exec::CarveStepScratch(p, g.D, g.V, g.gu_cols(), g.has_moe ? g.E : 0, p.moe_ws, c, s);
  s.y = c.Take<bf16>(R * std::max(g.vw, g.H * g.hd));
  if (g.num_gdn > 0) {
    s.proj = c.Take<bf16>(R * g.C);
    s.z = c.Take<bf16>(R * g.vw);
    s.gba = c.Take<float>(R * 2 * g.Hv);
    s.qkv = c.Take<bf16>(R * g.C);
    s.o = c.Take<bf16>(R * g.vw);
    s.kda_ws = c.Take<char>(static_cast<int64_t>(p.kda_ws));
  }
  if (g.num_attn > 0) s.aproj = c.Take<bf16>(R * g.n_attn);
  if (g.has_moe) {
    s.shared = c.Take<float>(R * g.D);
    s.sgate = c.Take<float>(R * kSharedGateRows);
  }
}

using cuda_exec::Uploader;

Status Qwen3NextCudaModel::Setup(std::shared_ptr<const WeightStore> weights,
                                  const Qwen3NextConfig& config, const LoadOptions& options) {
  cfg_ = config;
  g_ = MakeGeometry(config);
  STRATA_RETURN_IF_ERROR(ReadOptions(options));
  const tuning::Scope tuned(tuning_);
  const Geometry& g = g_;

  Plan& p = plan_;
  STRATA_ASSIGN_OR_RETURN(const std::string dev_name,
                          BeginLoad(options, g.V, config.max_context, kPrefillSliceTokens, p));
  if (g.num_gdn > 0) p.kda_ws = cuda::KdaPrefillWorkspaceBytes(KdaShapeOf(g), p.slice);
  if (g.has_moe) p.moe_ws = cuda::MoeWorkspaceBytes(MoeShapeOf(g), p.rows, invariant_);

  const bool separate_lm_head =
      !config.tie_word_embeddings || (weights != nullptr && weights->Has("lm_head.weight"));
  pools_.block_elems = kBlockTokens * g.Hkv * g.hd;
  const size_t block_unit = sizeof(bf16) * static_cast<size_t>(pools_.block_elems);
  // Every layer's K pool, then every layer's V pool.
  MemoryPlan memory;
  memory.carve_weights = [&](Carver& c) { CarveWeights(g, config, separate_lm_head, c, w_); };
  memory.carve_scratch = [&](Carver& c) { CarveScratch(g, p, c, s_); };
  memory.slot_arrays = {{g.num_gdn, sizeof(float) * static_cast<size_t>(g.state)},
                        {g.num_gdn, sizeof(float) * static_cast<size_t>(g.window)}};
  memory.block_arrays = {{g.num_attn, block_unit}, {g.num_attn, block_unit}};
  STRATA_ASSIGN_OR_RETURN(const int64_t blocks,
                          AllocateMemory(dev_name, p, options.gpu_memory_fraction, memory));
  pools_.slots = p.max_sequences;
  pools_.blocks = blocks;
  pools_.state = reinterpret_cast<float*>(layout_.slot_regions[0].base);
  pools_.window = reinterpret_cast<float*>(layout_.slot_regions[1].base);
  pools_.k = reinterpret_cast<bf16*>(layout_.block_regions[0].base);
  pools_.v = reinterpret_cast<bf16*>(layout_.block_regions[1].base);

  // What the shared host side (cuda_executor_base.h) works with.
  BindFrame(g, p, w_, s_, kLogitsChunkRows);
  BindStack(w_, s_, cuda_exec::FfnDims{g.D, g.I_dense, g.Is, kSharedGateRows, MoeShapeOf(g)},
            p.moe_ws, invariant_, s_.shared, s_.sgate);
  // Pinned host memory: step inputs, block-table mirror, results, staging.
  STRATA_RETURN_IF_ERROR(InitRuntime(pools_.slots, pools_.blocks, options.cuda_graphs,
                                     cuda_exec::kStagingBytes, &h_staging_));

  // --- weights ---------------------------------------------------------------
  const exec::ArchSpec spec = DescribeQwen3Next(config, weights.get());
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(spec, options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(spec, *weights, options));
  }
  // From here on (the load-time check included) every GEMM is row-invariant.
  // No product here takes a transposed W, which the invariant kernels lack.
  if (invariant_) blas_->set_batch_invariant(true);
  DescribeModel(spec, dev_name, weights.get(), p);
  return LoadTimeCheck(g_.V);
}

Status Qwen3NextCudaModel::UploadWeights(const exec::ArchSpec& spec, const WeightStore& ws,
                                         const LoadOptions& options) {
  const Geometry& g = g_;
  Uploader up(stream_, h_staging_, cuda_exec::kStagingBytes);
  STRATA_RETURN_IF_ERROR(up.Init());
  const int64_t D = g.D, V = g.V;
  STRATA_RETURN_IF_ERROR(up.Matrix(ws, "model.embed_tokens.weight", {V, D}, w_.embed));
  if (w_.lm_head != w_.embed) {
    STRATA_RETURN_IF_ERROR(up.Matrix(ws, "lm_head.weight", {V, D}, w_.lm_head));
  }
  // Qwen3-Next's zero-centred norms scale by (1 + w), formed in fp32 as the
  // reference does; the GDN output norm is a plain weight.
  auto norm = [&](const std::string& name, int64_t n, float* dst, bool one_plus) -> Status {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> v, ws.GetF32Copy(name, {n}));
    if (one_plus) {
      for (float& x : v) x = 1.f + x;
    }
    return up.Floats(v, dst);
  };
  STRATA_RETURN_IF_ERROR(norm("model.norm.weight", D, w_.final_norm, true));
  if (g.rot > 0) {
    STRATA_RETURN_IF_ERROR(up.Floats(cpu::RopeInverseFrequencies(g.rot, cfg_.rope_theta),
                                     w_.inv_freq));
  }

  const int64_t Hk = g.Hk, Hv = g.Hv, dk = g.dk, dv = g.dv, rho = g.Hv / g.Hk;
  const int64_t H = g.H, Hkv = g.Hkv, hd = g.hd;
  for (int64_t i = 0; i < g.L; ++i) {
    const Layer& L = w_.layers[static_cast<size_t>(i)];
    const exec::LayerSpec& layer = spec.layers[static_cast<size_t>(i)];
    const std::string& p = layer.prefix;
    const std::string& a = layer.mixer_prefix;
    STRATA_RETURN_IF_ERROR(norm(p + "input_layernorm.weight", D, L.input_norm, true));
    STRATA_RETURN_IF_ERROR(norm(p + "post_attention_layernorm.weight", D, L.post_norm, true));
    if (L.is_attn) {
      const AttnLayer& m = L.attn;
      // q_proj rows per head are [query (hd) | gate (hd)]: queries to the
      // first H·hd rows, gates to the next H·hd.
      const std::vector<int64_t> qshape = {H * 2 * hd, D};
      for (int64_t h = 0; h < H; ++h) {
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, a + "q_proj.weight", qshape, m.qkv + h * hd * D, h * 2 * hd * D, hd * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "q_proj.weight", qshape,
                                         m.qkv + (H + h) * hd * D, (h * 2 + 1) * hd * D, hd * D));
      }
      STRATA_RETURN_IF_ERROR(
          up.Matrix(ws, a + "k_proj.weight", {Hkv * hd, D}, m.qkv + 2 * H * hd * D));
      STRATA_RETURN_IF_ERROR(
          up.Matrix(ws, a + "v_proj.weight", {Hkv * hd, D}, m.qkv + (2 * H + Hkv) * hd * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "o_proj.weight", {D, H * hd}, m.o));
      STRATA_RETURN_IF_ERROR(norm(a + "q_norm.weight", hd, m.q_norm, true));
      STRATA_RETURN_IF_ERROR(norm(a + "k_norm.weight", hd, m.k_norm, true));
    } else {
      const GdnLayer& k = L.gdn;
      // De-group in_proj_qkvz (transformers' fix_query_key_value_ordering):
      // key head j's rows are [q_j | k_j | v of value heads ρj..ρj+ρ−1 | z of
      // the same]; they go to [q | k | v | z] with heads in order.
      const int64_t group = 2 * dk + 2 * rho * dv;
      const std::vector<int64_t> qkvz_shape = {Hk * group, D};
      const std::string qkvz = a + "in_proj_qkvz.weight";
      for (int64_t j = 0; j < Hk; ++j) {
        const int64_t src = j * group * D;
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, qkvz, qkvz_shape, k.in_proj + j * dk * D, src, dk * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, qkvz, qkvz_shape, k.in_proj + (g.kw + j * dk) * D,
                                         src + dk * D, dk * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, qkvz, qkvz_shape,
                                         k.in_proj + (2 * g.kw + j * rho * dv) * D,
                                         src + 2 * dk * D, rho * dv * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, qkvz, qkvz_shape,
                                         k.in_proj + (g.C + j * rho * dv) * D,
                                         src + (2 * dk + rho * dv) * D, rho * dv * D));
      }
      // in_proj_ba: key head j's rows are [b of its ρ value heads | a of them].
      const std::vector<int64_t> ba_shape = {2 * Hv, D};
      for (int64_t j = 0; j < Hk; ++j) {
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "in_proj_ba.weight", ba_shape,
                                         k.ba + j * rho * D, j * 2 * rho * D, rho * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "in_proj_ba.weight", ba_shape,
                                         k.ba + (Hv + j * rho) * D, (j * 2 + 1) * rho * D,
                                         rho * D));
      }
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, a + "out_proj.weight", {D, g.vw}, k.out));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> taps,
                              ws.GetF32Copy(a + "conv1d.weight", {g.C, 1, g.K}));
      STRATA_RETURN_IF_ERROR(up.Floats(taps, k.conv));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> a_log, ws.GetF32Copy(a + "A_log", {Hv}));
      for (float& v : a_log) v = -std::exp(v);
      STRATA_RETURN_IF_ERROR(up.Floats(a_log, k.neg_exp_a));
      STRATA_RETURN_IF_ERROR(norm(a + "dt_bias", Hv, k.dt_bias, false));
      STRATA_RETURN_IF_ERROR(norm(a + "norm.weight", dv, k.norm, false));
    }
    STRATA_RETURN_IF_ERROR(UploadFfnWeights(layer, D, L.ffn, up.Sink(ws)));
    STRATA_RETURN_IF_ERROR(cuda_exec::LayerLoaded(options, ws, i, g.L));
  }
  return up.Finish();
}

Status Qwen3NextCudaModel::MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed) {
  const Geometry& g = g_;
  cuda_exec::DummyFill fill(seed, stream_);
  auto mat = [&](bf16* p, int64_t n) { return fill.Matrix(p, n); };
  auto f32 = [&](float* p, int64_t n, float lo, float hi) { return fill.Uniform(p, n, lo, hi); };
  STRATA_RETURN_IF_ERROR(mat(w_.embed, g.V * g.D));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(mat(w_.lm_head, g.V * g.D));
  STRATA_RETURN_IF_ERROR(fill.Ones(w_.final_norm, g.D));
  if (g.rot > 0) {
    const std::vector<float> inv = cpu::RopeInverseFrequencies(g.rot, cfg_.rope_theta);
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(w_.inv_freq, inv.data(),
                                                sizeof(float) * inv.size(),
                                                cudaMemcpyHostToDevice, stream_));
  }
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const Layer& L = w_.layers[i];
    STRATA_RETURN_IF_ERROR(fill.Ones(L.input_norm, g.D));
    STRATA_RETURN_IF_ERROR(fill.Ones(L.post_norm, g.D));
    if (L.is_attn) {
      STRATA_RETURN_IF_ERROR(mat(L.attn.qkv, g.n_attn * g.D));
      STRATA_RETURN_IF_ERROR(mat(L.attn.o, g.D * g.H * g.hd));
      STRATA_RETURN_IF_ERROR(fill.Ones(L.attn.q_norm, g.hd));
      STRATA_RETURN_IF_ERROR(fill.Ones(L.attn.k_norm, g.hd));
    } else {
      const GdnLayer& k = L.gdn;
      STRATA_RETURN_IF_ERROR(mat(k.in_proj, g.n_in * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.ba, 2 * g.Hv * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.out, g.D * g.vw));
      STRATA_RETURN_IF_ERROR(f32(k.conv, g.C * g.K, -0.5f, 0.5f));
      STRATA_RETURN_IF_ERROR(f32(k.neg_exp_a, g.Hv, -16.f, -1.f));
      STRATA_RETURN_IF_ERROR(f32(k.dt_bias, g.Hv, -6.9f, -2.3f));
      STRATA_RETURN_IF_ERROR(fill.Ones(k.norm, g.dv));
    }
    STRATA_RETURN_IF_ERROR(FillDummyFfnWeights(spec.layers[i], g.D, L.ffn, fill));
  }
  return Sync("dummy weights");
}

}  // namespace qwen3next_cuda

StatusOr<std::unique_ptr<Model>> CreateQwen3NextCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  return cuda_exec::CreateCudaExecutor<qwen3next_cuda::Qwen3NextCudaModel, Qwen3NextConfig>(
      std::move(weights), config_path, options, ParseQwen3NextConfig);
}

StatusOr<Qwen3NextCudaStats> GetQwen3NextCudaStats(const Model& model) {
  const auto* m = dynamic_cast<const qwen3next_cuda::Qwen3NextCudaModel*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a qwen3_next CUDA model");
  return m->ExecutorStats();
}

}  // namespace strata
