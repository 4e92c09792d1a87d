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
  const int64_t R = p.rows, B = p.max_batch;
  s.tokens = c.Take<int32_t>(R);
  s.step = c.Take<int32_t>(4 * B);
  s.block_table = c.Take<int32_t>((B + 1) * p.max_blocks);
  s.sampling = c.Take<cuda::GpuSamplingRow>(B);
  s.sampled = c.Take<int32_t>(B);
  s.h = c.Take<float>(R * g.D);
  s.xn = c.Take<bf16>(R * g.D);
  s.delta = c.Take<float>(R * g.D);
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
  if (g.gu_cols() > 0) {
    s.gu = c.Take<bf16>(R * g.gu_cols());
    s.act = c.Take<bf16>(R * g.gu_cols() / 2);
  }
  if (g.has_moe) {
    s.shared = c.Take<float>(R * g.D);
    s.sgate = c.Take<float>(R * kSharedGateRows);
    s.router_logits = c.Take<float>(R * g.E);
    s.moe_ws = c.Take<char>(static_cast<int64_t>(p.moe_ws));
  }
  s.logits = c.Take<float>(std::max(B, kLogitsChunkRows) * g.V);
  s.sample_ws = c.Take<char>(static_cast<int64_t>(p.sample_ws));
}

using cuda_exec::Uploader;

StatusOr<std::unique_ptr<Qwen3NextCudaModel>> Qwen3NextCudaModel::Create(
    std::shared_ptr<const WeightStore> weights, const Qwen3NextConfig& config,
    const LoadOptions& options) {
  std::unique_ptr<Qwen3NextCudaModel> m(new Qwen3NextCudaModel);
  STRATA_RETURN_IF_ERROR(m->Setup(std::move(weights), config, options));
  return m;
}

Status Qwen3NextCudaModel::Setup(std::shared_ptr<const WeightStore> weights,
                                  const Qwen3NextConfig& config, const LoadOptions& options) {
  cfg_ = config;
  g_ = MakeGeometry(config);
  invariant_ = options.batch_invariant;
  STRATA_RETURN_IF_ERROR(ResolveTuning(options));
  const tuning::Scope tuned(tuning_);
  // The GDN prefill (recurrent or chunked) and decode kernels round
  // differently: a prompt cut one token before its end must still compute
  // that token on the prefill kernels.
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
  if (g.num_gdn > 0) p.kda_ws = cuda::KdaPrefillWorkspaceBytes(KdaShapeOf(g), p.slice);
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
  const size_t slot_bytes = static_cast<size_t>(g.num_gdn * (g.state + g.window)) * 4;
  pools_.block_elems = kBlockTokens * g.Hkv * g.hd;
  const size_t block_bytes = static_cast<size_t>(g.num_attn * 2 * pools_.block_elems) * 2;

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
  if (g.num_attn > 0) {
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
  // Padding rows (the shared-expert gate's) must read as zero.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(weight_mem_, 0, weight_bytes_, stream_));
  // Scratch, then the slot pools, then the cache, in one allocation.
  Carver runtime_size(nullptr);
  runtime_size.Take<char>(static_cast<int64_t>(scratch_bytes_));
  runtime_size.Take<float>(g.num_gdn * p.max_sequences * g.state);
  runtime_size.Take<float>(g.num_gdn * p.max_sequences * g.window);
  runtime_size.Take<bf16>(g.num_attn * blocks * pools_.block_elems);
  runtime_size.Take<bf16>(g.num_attn * blocks * pools_.block_elems);
  STRATA_RETURN_IF_ERROR(alloc(&runtime_mem_, runtime_size.size(), "scratch and caches"));
  {
    Carver c(static_cast<char*>(runtime_mem_));
    CarveScratch(g, p, c, s_);
    pools_.state = c.Take<float>(g.num_gdn * p.max_sequences * g.state);
    pools_.window = c.Take<float>(g.num_gdn * p.max_sequences * g.window);
    pools_.k = c.Take<bf16>(g.num_attn * blocks * pools_.block_elems);
    pools_.v = c.Take<bf16>(g.num_attn * blocks * pools_.block_elems);
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(runtime_mem_, 0, runtime_size.size(), stream_));

  // What the shared host side (cuda_executor_base.h) works with.
  BindFrame(g, p, w_, s_, kLogitsChunkRows);
  BindStack(w_, s_, cuda_exec::FfnDims{g.D, g.I_dense, g.Is, kSharedGateRows, MoeShapeOf(g)},
            p.moe_ws, invariant_, s_.shared, s_.sgate);
  layout_.slot_regions = {
      {reinterpret_cast<char*>(pools_.state), g.num_gdn, pools_.slots,
       sizeof(float) * static_cast<size_t>(g.state)},
      {reinterpret_cast<char*>(pools_.window), g.num_gdn, pools_.slots,
       sizeof(float) * static_cast<size_t>(g.window)}};
  // Every layer's K pool, then every layer's V pool.
  layout_.block_regions = {
      {reinterpret_cast<char*>(pools_.k), g.num_attn, pools_.blocks,
       sizeof(bf16) * static_cast<size_t>(pools_.block_elems)},
      {reinterpret_cast<char*>(pools_.v), g.num_attn, pools_.blocks,
       sizeof(bf16) * static_cast<size_t>(pools_.block_elems)}};
  // Pinned host memory: step inputs, block-table mirror, results, staging.
  STRATA_RETURN_IF_ERROR(InitRuntime(pools_.slots, pools_.blocks, options.cuda_graphs,
                                     cuda_exec::kStagingBytes, &h_staging_));

  // --- weights ---------------------------------------------------------------
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(*weights, options));
  }
  // From here on (the load-time check included) every GEMM is row-invariant.
  // No product here takes a transposed W, which the invariant kernels lack.
  if (invariant_) blas_->set_batch_invariant(true);

  // --- info --------------------------------------------------------------------
  ModelInfo& info = info_;
  info.architecture = "qwen3_next";
  info.device = dev_name;
  info.tuning = tuning_.ToString();
  info.num_layers = static_cast<int32_t>(config.num_layers);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    info.layer_kinds.push_back(
        absl::StrCat(config.is_attention[static_cast<size_t>(i)] ? "attention" : "gdn", "+",
                     config.is_moe[static_cast<size_t>(i)] ? "moe" : "dense"));
  }
  info.num_parameters = weights != nullptr ? weights->TotalElements() : 0;
  info.parameter_bytes = weight_bytes_;
  info.vocab_size = static_cast<int32_t>(config.vocab_size);
  info.hidden_size = static_cast<int32_t>(config.hidden_size);
  // The planned context, not the architecture's: states cannot exceed it.
  info.max_context = p.max_ctx;
  info.state_bytes_per_token = static_cast<uint64_t>(g.num_attn * 2 * g.Hkv * g.hd) * sizeof(bf16);
  info.state_bytes_per_sequence = slot_bytes;
  // NewState and Clone draw from the slot pool; sampling runs on the device.
  info.max_live_states = pools_.slots;
  info.device_sampling = true;
  info.bos_token_id = config.bos_token_id;
  info.eos_token_id = config.eos_token_id;

  return LoadTimeCheck(g_.V);
}

Status Qwen3NextCudaModel::UploadWeights(const WeightStore& ws, const LoadOptions& options) {
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
    const std::string p = absl::StrCat("model.layers.", i, ".");
    STRATA_RETURN_IF_ERROR(norm(p + "input_layernorm.weight", D, L.input_norm, true));
    STRATA_RETURN_IF_ERROR(norm(p + "post_attention_layernorm.weight", D, L.post_norm, true));
    if (L.is_attn) {
      const std::string a = p + "self_attn.";
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
      const std::string a = p + "linear_attn.";
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
    const FfnLayer& f = L.ffn;
    const std::string m = p + "mlp.";
    if (!L.is_moe) {
      const int64_t I = g.I_dense;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "gate_proj.weight", {I, D}, f.gate_up.bf));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "up_proj.weight", {I, D}, f.gate_up.bf + I * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "down_proj.weight", {D, I}, f.down.bf));
    } else {
      const int64_t E = g.E, I = g.I, Is = g.Is;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "gate.weight", {E, D}, f.router.bf));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        bf16* w13 = f.w13.bf + e * 2 * I * D;
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "gate_proj.weight", {I, D}, w13));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "up_proj.weight", {I, D}, w13 + I * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "down_proj.weight", {D, I}, f.w2.bf + e * D * I));
      }
      const std::string sh = m + "shared_expert.";
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, sh + "gate_proj.weight", {Is, D}, f.gate_up.bf));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, sh + "up_proj.weight", {Is, D}, f.gate_up.bf + Is * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, sh + "down_proj.weight", {D, Is}, f.down.bf));
      // Rows 1..7 of the padded gate stay zero (the allocation was cleared).
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "shared_expert_gate.weight", {1, D}, f.shared_gate));
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

Status Qwen3NextCudaModel::MakeDummyWeights(uint64_t seed) {
  const Geometry& g = g_;
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
  if (g.rot > 0) {
    const std::vector<float> inv = cpu::RopeInverseFrequencies(g.rot, cfg_.rope_theta);
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(w_.inv_freq, inv.data(),
                                                sizeof(float) * inv.size(),
                                                cudaMemcpyHostToDevice, stream_));
  }
  for (const Layer& L : w_.layers) {
    STRATA_RETURN_IF_ERROR(f32(L.input_norm, g.D, 1.f, 1.f));
    STRATA_RETURN_IF_ERROR(f32(L.post_norm, g.D, 1.f, 1.f));
    if (L.is_attn) {
      STRATA_RETURN_IF_ERROR(mat(L.attn.qkv, g.n_attn * g.D));
      STRATA_RETURN_IF_ERROR(mat(L.attn.o, g.D * g.H * g.hd));
      STRATA_RETURN_IF_ERROR(f32(L.attn.q_norm, g.hd, 1.f, 1.f));
      STRATA_RETURN_IF_ERROR(f32(L.attn.k_norm, g.hd, 1.f, 1.f));
    } else {
      const GdnLayer& k = L.gdn;
      STRATA_RETURN_IF_ERROR(mat(k.in_proj, g.n_in * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.ba, 2 * g.Hv * g.D));
      STRATA_RETURN_IF_ERROR(mat(k.out, g.D * g.vw));
      STRATA_RETURN_IF_ERROR(f32(k.conv, g.C * g.K, -0.5f, 0.5f));
      STRATA_RETURN_IF_ERROR(f32(k.neg_exp_a, g.Hv, -16.f, -1.f));
      STRATA_RETURN_IF_ERROR(f32(k.dt_bias, g.Hv, -6.9f, -2.3f));
      STRATA_RETURN_IF_ERROR(f32(k.norm, g.dv, 1.f, 1.f));
    }
    const FfnLayer& f = L.ffn;
    if (!L.is_moe) {
      STRATA_RETURN_IF_ERROR(mat(f.gate_up.bf, 2 * g.I_dense * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.down.bf, g.D * g.I_dense));
    } else {
      STRATA_RETURN_IF_ERROR(mat(f.router.bf, g.E * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.w13.bf, g.E * 2 * g.I * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.w2.bf, g.E * g.D * g.I));
      STRATA_RETURN_IF_ERROR(mat(f.gate_up.bf, 2 * g.Is * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.down.bf, g.D * g.Is));
      STRATA_RETURN_IF_ERROR(mat(f.shared_gate, g.D));  // row 0; the padding stays zero
    }
  }
  return Sync("dummy weights");
}

}  // namespace qwen3next_cuda

StatusOr<std::unique_ptr<Model>> CreateQwen3NextCudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(config_path));
  STRATA_ASSIGN_OR_RETURN(Qwen3NextConfig config, ParseQwen3NextConfig(reader));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<qwen3next_cuda::Qwen3NextCudaModel> model,
                          qwen3next_cuda::Qwen3NextCudaModel::Create(std::move(weights), config, options));
  return std::unique_ptr<Model>(std::move(model));
}

StatusOr<Qwen3NextCudaStats> GetQwen3NextCudaStats(const Model& model) {
  const auto* m = dynamic_cast<const qwen3next_cuda::Qwen3NextCudaModel*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a qwen3_next CUDA model");
  return m->ExecutorStats();
}

}  // namespace strata
