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
  s.tokens = c.Take<int32_t>(R);
  s.step = c.Take<int32_t>(4 * B);
  s.block_table = c.Take<int32_t>((B + 1) * p.max_blocks);
  s.sampling = c.Take<cuda::GpuSamplingRow>(B);
  s.sampled = c.Take<int32_t>(B);
  s.h = c.Take<float>(R * g.D);
  s.xn = c.Take<bf16>(R * g.D);
  s.delta = c.Take<float>(R * g.D);
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
  if (g.gu_cols() > 0) {
    s.gu = c.Take<bf16>(R * g.gu_cols());
    s.act = c.Take<bf16>(R * g.gu_cols() / 2);
  }
  if (g.has_moe) {
    s.router_logits = c.Take<float>(R * g.E);
    s.moe_ws = c.Take<char>(static_cast<int64_t>(p.moe_ws));
  }
  s.logits = c.Take<float>(std::max(B, kLogitsChunkRows) * g.V);
  s.sample_ws = c.Take<char>(static_cast<int64_t>(p.sample_ws));
}

using cuda_exec::Uploader;

StatusOr<std::unique_ptr<KimiLinearCudaModel>> KimiLinearCudaModel::Create(
    std::shared_ptr<const WeightStore> weights, const KimiLinearConfig& config,
    const LoadOptions& options) {
  std::unique_ptr<KimiLinearCudaModel> m(new KimiLinearCudaModel);
  STRATA_RETURN_IF_ERROR(m->Setup(std::move(weights), config, options));
  return m;
}

Status KimiLinearCudaModel::Setup(std::shared_ptr<const WeightStore> weights,
                                  const KimiLinearConfig& config, const LoadOptions& options) {
  cfg_ = config;
  g_ = MakeGeometry(config);
  invariant_ = options.batch_invariant;
  STRATA_RETURN_IF_ERROR(ResolveTuning(options));
  const tuning::Scope tuned(tuning_);
  prefill_single_tokens_ = invariant_;
  const Geometry& g = g_;

  // --- the device -----------------------------------------------------------
  STRATA_ASSIGN_OR_RETURN(const cuda_exec::DeviceChoice dev, cuda_exec::SelectHopperDevice(options.device_index));
  device_ = dev.index;
  const std::string& dev_name = dev.name;

  // --- the plan -------------------------------------------------------------
  Plan& p = plan_;
  STRATA_RETURN_IF_ERROR(
      cuda_exec::PlanSequences(options, config.max_context, kPrefillSliceTokens, p));
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
  for (int64_t b = 1; b <= p.max_batch; ++b) {
    p.sample_ws = std::max(p.sample_ws, cuda::SampleWorkspaceBytes(b, g.V));
  }

  const bool separate_lm_head =
      !config.tie_word_embeddings || (weights != nullptr && weights->Has("lm_head.weight"));
  Carver weight_size(nullptr);
  CarveWeights(g, config, separate_lm_head, weight_size, w_);
  Carver scratch_size(nullptr);
  CarveScratch(g, p, scratch_size, s_);
  weight_bytes_ = weight_size.size();
  scratch_bytes_ = scratch_size.size();
  const size_t slot_bytes = static_cast<size_t>(g.num_kda * (g.kda_state + g.window)) * 4;
  const size_t block_bytes = static_cast<size_t>(g.num_mla * kBlockTokens * g.cd) * 2;

  // The stream and cuBLASLt (its workspace) first, so the free memory we plan
  // with is what is really left.
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  STRATA_ASSIGN_OR_RETURN(blas_, cuda::BlasContext::Create());
  size_t free_bytes = 0, total_bytes = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double budget = options.gpu_memory_fraction * static_cast<double>(free_bytes);
  const double fixed = static_cast<double>(weight_bytes_ + scratch_bytes_) +
                       static_cast<double>(slot_bytes) * static_cast<double>(p.max_sequences);
  const double one_sequence = static_cast<double>(block_bytes * static_cast<size_t>(p.max_blocks));
  if (fixed + one_sequence > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        dev_name, " has ", GiB(static_cast<double>(free_bytes)), " free (",
        static_cast<int>(100 * options.gpu_memory_fraction), "% usable) and the model needs ",
        GiB(fixed + one_sequence), ": weights ", GiB(static_cast<double>(weight_bytes_)),
        ", scratch ", GiB(static_cast<double>(scratch_bytes_)), ", ", p.max_sequences,
        " sequence slots and the cache of one ", p.max_ctx, "-token sequence"));
  }
  int64_t blocks = 0;
  if (g.num_mla > 0) {
    blocks = static_cast<int64_t>((budget - fixed) / static_cast<double>(block_bytes));
    blocks = std::min(blocks, p.max_sequences * p.max_blocks);
    // Block ids are int32 in the block tables.
    blocks = std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max());
  }
  pools_.slots = p.max_sequences;
  pools_.blocks = blocks;
  state_pool_bytes_ = slot_bytes * static_cast<size_t>(p.max_sequences);
  kv_pool_bytes_ = block_bytes * static_cast<size_t>(blocks);

  // --- allocation -------------------------------------------------------------
  auto alloc = [&](void** ptr, size_t bytes, const char* what) {
    return cuda_exec::DeviceAlloc(dev_name, ptr, bytes, what);
  };
  STRATA_RETURN_IF_ERROR(alloc(&weight_mem_, weight_bytes_, "weights"));
  {
    Carver c(static_cast<char*>(weight_mem_));
    CarveWeights(g, config, separate_lm_head, c, w_);
  }
  // Scratch, then the slot pools, then the cache, in one allocation.
  Carver runtime_size(nullptr);
  runtime_size.Take<char>(static_cast<int64_t>(scratch_bytes_));
  runtime_size.Take<float>(g.num_kda * p.max_sequences * g.kda_state);
  runtime_size.Take<float>(g.num_kda * p.max_sequences * g.window);
  runtime_size.Take<bf16>(g.num_mla * blocks * kBlockTokens * g.cd);
  STRATA_RETURN_IF_ERROR(alloc(&runtime_mem_, runtime_size.size(), "scratch and caches"));
  {
    Carver c(static_cast<char*>(runtime_mem_));
    CarveScratch(g, p, c, s_);
    pools_.kda_state = c.Take<float>(g.num_kda * p.max_sequences * g.kda_state);
    pools_.conv_window = c.Take<float>(g.num_kda * p.max_sequences * g.window);
    pools_.kv = c.Take<bf16>(g.num_mla * blocks * kBlockTokens * g.cd);
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(runtime_mem_, 0, runtime_size.size(), stream_));

  // What the shared host side (cuda_executor_base.h) works with.
  BindFrame(g, p, w_, s_, kLogitsChunkRows);
  BindStack(w_, s_, cuda_exec::FfnDims{g.D, g.I_dense, g.Is, 0, MoeShapeOf(g)}, p.moe_ws,
            invariant_);
  layout_.slot_regions = {
      {reinterpret_cast<char*>(pools_.kda_state), g.num_kda, pools_.slots,
       sizeof(float) * static_cast<size_t>(g.kda_state)},
      {reinterpret_cast<char*>(pools_.conv_window), g.num_kda, pools_.slots,
       sizeof(float) * static_cast<size_t>(g.window)}};
  layout_.block_regions = {{reinterpret_cast<char*>(pools_.kv), g.num_mla, pools_.blocks,
                            sizeof(bf16) * static_cast<size_t>(kBlockTokens * g.cd)}};
  benchmark_fill_ = true;
  // Pinned host memory: step inputs, block-table mirror, results, staging.
  STRATA_RETURN_IF_ERROR(InitRuntime(pools_.slots, pools_.blocks, options.cuda_graphs,
                                     cuda_exec::kStagingBytes, &h_staging_));

  // --- weights ---------------------------------------------------------------
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(*weights, options));
  }
  STRATA_RETURN_IF_ERROR(BuildTransposedUk());
  if (invariant_) {
    // From here on (the load-time check included) every GEMM is invariant.
    blas_->set_batch_invariant(true);
  }

  // --- info --------------------------------------------------------------------
  ModelInfo& info = info_;
  info.architecture = "kimi_linear";
  info.device = dev_name;
  info.tuning = tuning_.ToString();
  info.num_layers = static_cast<int32_t>(config.num_layers);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    info.layer_kinds.push_back(
        absl::StrCat(config.is_mla[static_cast<size_t>(i)] ? "mla" : "kda", "+",
                     config.is_moe[static_cast<size_t>(i)] ? "moe" : "dense"));
  }
  if (weights != nullptr) {
    info.num_parameters = weights->TotalElements();
  } else {
    for (const KimiTensorSpec& t : KimiLinearTensorSpecs(config)) info.num_parameters += t.NumElements();
  }
  info.parameter_bytes = weight_bytes_;
  info.vocab_size = static_cast<int32_t>(config.vocab_size);
  info.hidden_size = static_cast<int32_t>(config.hidden_size);
  // The planned context, not the architecture's: states cannot exceed it.
  info.max_context = p.max_ctx;
  info.state_bytes_per_token = static_cast<uint64_t>(g.num_mla * g.cd) * sizeof(bf16);
  info.state_bytes_per_sequence = slot_bytes;
  // NewState and Clone draw from the slot pool; sampling runs on the device.
  info.max_live_states = pools_.slots;
  info.device_sampling = true;
  info.bos_token_id = config.bos_token_id;
  info.eos_token_id = config.eos_token_id;

  return LoadTimeCheck(g_.V);
}

Status KimiLinearCudaModel::UploadWeights(const WeightStore& ws, const LoadOptions& options) {
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
    const std::string p = KimiLayerPrefix(i);
    const std::string a = p + "self_attn.";
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
    const FfnLayer& f = L.ffn;
    if (!L.is_moe) {
      const std::string d = KimiDenseMlpPrefix(ws, i);
      const int64_t I = g.I_dense;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "gate_proj.weight", {I, D}, f.gate_up.bf));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "up_proj.weight", {I, D}, f.gate_up.bf + I * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "down_proj.weight", {D, I}, f.down.bf));
    } else {
      const std::string m = p + "block_sparse_moe.";
      const int64_t E = g.E, I = g.I;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "gate.weight", {E, D}, f.router.bf));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> bias,
                              ws.GetF32Copy(m + "gate.e_score_correction_bias", {E}));
      STRATA_RETURN_IF_ERROR(up.Floats(bias, f.score_bias));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        bf16* w13 = f.w13.bf + e * 2 * I * D;
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w1.weight", {I, D}, w13));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w3.weight", {I, D}, w13 + I * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w2.weight", {D, I}, f.w2.bf + e * D * I));
      }
      if (g.Is > 0) {
        const int64_t Is = g.Is;
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, m + "shared_experts.gate_proj.weight", {Is, D}, f.gate_up.bf));
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, m + "shared_experts.up_proj.weight", {Is, D}, f.gate_up.bf + Is * D));
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, m + "shared_experts.down_proj.weight", {D, Is}, f.down.bf));
      }
    }
    if (options.progress) {
      const float frac = 0.05f + 0.9f * static_cast<float>(i + 1) / static_cast<float>(g.L);
      if (!options.progress(frac)) {
        up.Finish().IgnoreError();
        return absl::CancelledError(
            absl::StrCat(ws.dir(), ": load cancelled by the progress callback"));
      }
    }
  }
  return up.Finish();
}

Status KimiLinearCudaModel::MakeDummyWeights(uint64_t seed) {
  const Geometry& g = g_;
  // Padding rows of the fused matrices stay zero.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(weight_mem_, 0, weight_bytes_, stream_));
  uint64_t counter = 0;
  auto next = [&] { return seed * 0x9e3779b97f4a7c15ull + (++counter) * 0xbf58476d1ce4e5b9ull; };
  constexpr float kScale = 0.02f;
  auto mat = [&](bf16* p, int64_t n) { return cuda::FillRandomBf16(p, n, next(), kScale, stream_); };
  auto f32 = [&](float* p, int64_t n, float lo, float hi) {
    return cuda::FillRandomF32(p, n, next(), lo, hi, stream_);
  };
  STRATA_RETURN_IF_ERROR(mat(w_.embed, g.V * g.D));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(mat(w_.lm_head, g.V * g.D));
  STRATA_RETURN_IF_ERROR(f32(w_.final_norm, g.D, 1.f, 1.f));
  for (const Layer& L : w_.layers) {
    STRATA_RETURN_IF_ERROR(f32(L.input_norm, g.D, 1.f, 1.f));
    STRATA_RETURN_IF_ERROR(f32(L.post_norm, g.D, 1.f, 1.f));
    if (L.is_mla) {
      STRATA_RETURN_IF_ERROR(mat(L.mla.q, g.Hm * g.qd * g.D));
      STRATA_RETURN_IF_ERROR(mat(L.mla.kv_a, g.cd * g.D));
      STRATA_RETURN_IF_ERROR(f32(L.mla.kv_norm, g.r, 1.f, 1.f));
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
      STRATA_RETURN_IF_ERROR(f32(k.o_norm, g.dk, 1.f, 1.f));
    }
    const FfnLayer& f = L.ffn;
    if (!L.is_moe) {
      STRATA_RETURN_IF_ERROR(mat(f.gate_up.bf, 2 * g.I_dense * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.down.bf, g.D * g.I_dense));
    } else {
      STRATA_RETURN_IF_ERROR(mat(f.router.bf, g.E * g.D));
      STRATA_RETURN_IF_ERROR(f32(f.score_bias, g.E, -0.01f, 0.01f));
      STRATA_RETURN_IF_ERROR(mat(f.w13.bf, g.E * 2 * g.I * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.w2.bf, g.E * g.D * g.I));
      if (g.Is > 0) {
        STRATA_RETURN_IF_ERROR(mat(f.gate_up.bf, 2 * g.Is * g.D));
        STRATA_RETURN_IF_ERROR(mat(f.down.bf, g.D * g.Is));
      }
    }
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
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(KimiLinearConfig config, ParseKimiLinearConfig(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<kimi_cuda::KimiLinearCudaModel> model,
                          kimi_cuda::KimiLinearCudaModel::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

StatusOr<KimiCudaStats> GetKimiCudaStats(const Model& model) {
  const auto* m = dynamic_cast<const kimi_cuda::KimiLinearCudaModel*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a kimi_linear CUDA model");
  return m->ExecutorStats();
}

}  // namespace strata
