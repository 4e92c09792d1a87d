// Loading of the deepseek_v32 CUDA executor: the device check, the memory
// plan (weights, scratch, the two paged caches), the weight upload (or dummy
// weights made on the device), the rotary tables, and a load-time self-check
// that runs one prefill and one decode step so that shapes the kernels reject
// fall back to the CPU at load rather than fail in the middle of a request.
//
// FP8 block-scaled checkpoints keep the matrices of the plain GEMMs in FP8 on
// the device (codes copied as stored, scales expanded to 8-row groups; see
// deepseek_v32_cuda_impl.h), the routed experts included (cuda::MoeForward
// reads them FP8); kv_b is dequantised on the host (the CPU adapter's
// LoadFp8BlockScaled) and uploaded as bf16.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/rope_yarn.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/elementwise.h"
#include "base/dtype.h"
#include "model/config_reader.h"
#include "model/fp8_weights.h"
#include "model/models/arch_descriptions.h"
#include "model/models/builtin.h"
#include "model/models/deepseek_v32_cuda_impl.h"
#include "model/weight_store.h"

namespace strata {
namespace dsv32_cuda {

using cuda_exec::GiB;

Geometry MakeGeometry(const DeepseekV32Config& c) {
  Geometry g;
  g.D = c.hidden_size;
  g.V = c.vocab_size;
  g.L = c.num_layers;
  g.eps = static_cast<float>(c.rms_norm_eps);
  g.H = c.num_heads;
  g.dn = c.qk_nope_dim;
  g.dr = c.qk_rope_dim;
  g.dv = c.v_head_dim;
  g.r = c.kv_lora_rank;
  g.qr = c.q_lora_rank;
  g.qd = g.dn + g.dr;
  g.cd = g.r + g.dr;
  g.half = g.dr / 2;
  g.softmax_scale = static_cast<float>(c.softmax_scale);
  g.HI = c.index_heads;
  g.dI = c.index_head_dim;
  g.K = c.index_topk;
  g.off_kv = Pad8(g.qr);
  g.off_ik = g.off_kv + Pad8(g.cd);
  g.n_a = g.off_ik + Pad8(g.dI);
  g.I_dense = c.intermediate_size;
  g.I = c.moe_intermediate_size;
  g.E = c.num_experts;
  g.top_k = c.experts_per_token;
  g.Is = c.moe_intermediate_size * c.num_shared_experts;
  g.n_group = c.n_group;
  g.topk_group = c.topk_group;
  g.renormalize = c.norm_topk_prob;
  g.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  for (bool m : c.is_moe) (m ? g.has_moe : g.has_dense) = true;
  if (!g.has_moe) g.Is = 0;
  if (!g.has_dense) g.I_dense = 0;
  return g;
}

void CarveWeights(const Geometry& g, const DeepseekV32Config& cfg, bool separate_lm_head,
                  bool batch_invariant, const Fp8Query& is_fp8, Carver& c, Weights& w,
                  Fp8Footprint* fp8) {
  const int64_t bc = cfg.fp8_block.cols;
  // A matrix stays FP8 when every tensor fused into it is FP8 and the
  // checkpoint's scale blocks map onto whole 8-row groups; `rows_ok` is
  // false when a fused segment would start inside a group.
  const bool fp8_ok = static_cast<bool>(is_fp8) && bc > 0 && cfg.fp8_block.rows > 0 &&
                      cfg.fp8_block.rows % kFp8ScaleRows == 0;
  auto want = [&](std::initializer_list<std::string> names, bool rows_ok = true) {
    if (!fp8_ok || !rows_ok) return false;
    for (const std::string& n : names) {
      if (!is_fp8(n)) return false;
    }
    return true;
  };
  Fp8Footprint foot;
  // in_tile: the prefill GEMM dequantises this matrix through the shared
  // tile (not the routed experts, which MoeForward dequantises itself).
  auto mat = [&](int64_t rows, int64_t cols, bool f8, bool in_tile = true) {
    Mat m;
    if (!f8) {
      m.bf = c.Take<bf16>(rows * cols);
      return m;
    }
    const int64_t scales = CeilDiv(rows, kFp8ScaleRows) * CeilDiv(cols, bc);
    m.fp8 = c.Take<uint8_t>(rows * cols);
    m.scale = c.Take<float>(scales);
    m.block_cols = bc;
    foot.bytes += static_cast<uint64_t>(rows * cols + 4 * scales);
    ++foot.matrices;
    if (in_tile) foot.max_elems = std::max(foot.max_elems, rows * cols);
    return m;
  };
  // Routed experts stay FP8 when all 3·E of the layer's matrices are and each
  // expert's gate, up and down rows start on an 8-row scale group.
  auto experts_fp8 = [&](const std::string& m) {
    if (!fp8_ok || g.I % kFp8ScaleRows != 0 || g.D % kFp8ScaleRows != 0) return false;
    for (int64_t e = 0; e < g.E; ++e) {
      const std::string xe = absl::StrCat(m, "experts.", e, ".");
      if (!is_fp8(xe + "gate_proj.weight") || !is_fp8(xe + "up_proj.weight") ||
          !is_fp8(xe + "down_proj.weight")) {
        return false;
      }
    }
    return true;
  };
  w.embed = c.Take<bf16>(g.V * g.D);
  w.lm_head = separate_lm_head ? c.Take<bf16>(g.V * g.D) : w.embed;
  w.final_norm = c.Take<float>(g.D);
  w.layers.assign(static_cast<size_t>(g.L), Layer{});
  for (int64_t i = 0; i < g.L; ++i) {
    Layer& L = w.layers[static_cast<size_t>(i)];
    L.is_moe = cfg.is_moe[static_cast<size_t>(i)];
    L.input_norm = c.Take<float>(g.D);
    L.post_norm = c.Take<float>(g.D);
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string sa = p + "self_attn.";
    const std::string sx = sa + "indexer.";
    const std::string m = p + "mlp.";
    AttnLayer& a = L.attn;
    a.a = mat(g.n_a, g.D,
              want({sa + "q_a_proj.weight", sa + "kv_a_proj_with_mqa.weight", sx + "wk.weight"}));
    a.q_a_norm = c.Take<float>(g.qr);
    a.kv_norm = c.Take<float>(g.r);
    a.ik_norm_w = c.Take<float>(g.dI);
    a.ik_norm_b = c.Take<float>(g.dI);
    a.q_b = mat(g.H * g.qd, g.qr, want({sa + "q_b_proj.weight"}));
    a.kv_b = c.Take<bf16>(g.H * (g.dn + g.dv) * g.r);
    if (batch_invariant) a.uk_t = c.Take<bf16>(g.H * g.r * g.dn);
    a.o = mat(g.D, g.H * g.dv, want({sa + "o_proj.weight"}));
    a.iq = mat(g.HI * g.dI, g.qr, want({sx + "wq_b.weight"}));
    a.iw = mat(g.HI, g.D, want({sx + "weights_proj.weight"}));
    FfnLayer& f = L.ffn;
    if (!L.is_moe) {
      f.gate_up = mat(2 * g.I_dense, g.D, want({m + "gate_proj.weight", m + "up_proj.weight"},
                                               g.I_dense % kFp8ScaleRows == 0));
      f.down = mat(g.D, g.I_dense, want({m + "down_proj.weight"}));
    } else {
      f.router = mat(g.E, g.D, want({m + "gate.weight"}));
      f.score_bias = c.Take<float>(g.E);
      const bool xf8 = experts_fp8(m);
      f.w13 = mat(g.E * 2 * g.I, g.D, xf8, /*in_tile=*/false);
      f.w2 = mat(g.E * g.D, g.I, xf8, /*in_tile=*/false);
      if (xf8) ++foot.expert_layers;
      if (g.Is > 0) {
        const std::string se = m + "shared_experts.";
        f.gate_up = mat(2 * g.Is, g.D, want({se + "gate_proj.weight", se + "up_proj.weight"},
                                            g.Is % kFp8ScaleRows == 0));
        f.down = mat(g.D, g.Is, want({se + "down_proj.weight"}));
      }
    }
  }
  if (fp8 != nullptr) *fp8 = foot;
}

void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s) {
  const int64_t R = p.rows;
  cuda_exec::CarveStepScratch(p, g.D, g.V, g.gu_cols(), g.has_moe ? g.E : 0, p.moe_ws, c, s);
  s.selected_total = c.Take<unsigned long long>(1);
  s.rope_cos = c.Take<float>(p.max_ctx * g.half);
  s.rope_sin = c.Take<float>(p.max_ctx * g.half);
  s.a = c.Take<bf16>(R * g.n_a);
  s.q = c.Take<bf16>(R * g.H * g.qd);
  s.iq = c.Take<bf16>(R * g.HI * g.dI);
  s.iw = c.Take<float>(R * g.HI);
  s.sel_rows = c.Take<int32_t>(R * g.K);
  s.sel_counts = c.Take<int32_t>(R);
  s.q_abs = c.Take<bf16>(R * g.H * g.cd);
  s.lat_o = c.Take<bf16>(R * g.H * g.r);
  s.attn = c.Take<bf16>(R * g.H * g.dv);
  s.lat = c.Take<bf16>(p.dense_ctx * g.cd);
  s.kv_exp = c.Take<bf16>(p.dense_ctx * g.H * (g.dn + g.dv));
  if (p.fp8_tile > 0) s.fp8_tile = c.Take<bf16>(p.fp8_tile);
  s.mla_ws = c.Take<char>(static_cast<int64_t>(p.mla_ws));
  s.index_ws = c.Take<char>(static_cast<int64_t>(p.index_ws));
}

namespace {

// A checkpoint matrix [rows, cols] as bf16 bits on the host: bf16 as stored,
// fp32/fp16 rounded, FP8 block-scaled dequantised (fp32) then rounded.
StatusOr<std::vector<uint16_t>> HostBf16(const WeightStore& ws, const std::string& name,
                                         int64_t rows, int64_t cols, Fp8BlockSize block) {
  STRATA_ASSIGN_OR_RETURN(TensorView raw, ws.Get(name));
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  if (raw.dtype == DType::kF8E4M3) {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> f, LoadFp8BlockScaled(ws, name, rows, cols, block));
    for (size_t i = 0; i < out.size(); ++i) out[i] = F32ToBf16(f[i]);
    return out;
  }
  STRATA_ASSIGN_OR_RETURN(TensorView v, ws.GetFloat(name, {rows, cols}));
  const auto* src = static_cast<const uint8_t*>(v.data);
  // The format does not promise alignment: read elements through memcpy.
  if (v.dtype == DType::kBF16) {
    std::memcpy(out.data(), src, 2 * out.size());
  } else if (v.dtype == DType::kF32) {
    for (size_t i = 0; i < out.size(); ++i) {
      float f;
      std::memcpy(&f, src + 4 * i, 4);
      out[i] = F32ToBf16(f);
    }
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = F32ToBf16(F16ToF32(h));
    }
  }
  return out;
}

// An FP8 checkpoint matrix [rows, cols] into rows [row0, row0 + rows) of
// `dst` (an FP8 Mat cols wide, row0 a multiple of kFp8ScaleRows): the codes
// as stored, the scale grid with each row repeated for the 8-row groups of
// its block.
Status UploadFp8(const WeightStore& ws, const std::string& name, int64_t rows, int64_t cols,
                 Fp8BlockSize block, const Mat& dst, int64_t row0) {
  STRATA_ASSIGN_OR_RETURN(TensorView w, ws.Get(name));
  const std::string where =
      absl::StrCat("tensor '", name, "' in ", std::string(w.file));
  if (w.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": dtype ", std::string(DTypeName(w.dtype)), ", expected F8_E4M3"));
  }
  if (w.shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected shape [", rows, ", ", cols, "]"));
  }
  if (row0 % kFp8ScaleRows != 0 || dst.block_cols != block.cols ||
      block.rows % kFp8ScaleRows != 0) {
    return absl::InternalError(absl::StrCat(where, ": FP8 layout mismatch at upload"));
  }
  const std::string scale_name = Fp8ScaleName(name);
  if (!ws.Has(scale_name)) {
    return absl::NotFoundError(absl::StrCat(where, " is FP8 but its scale tensor '", scale_name,
                                            "' is not in ", ws.dir()));
  }
  const int64_t grid_cols = CeilDiv(cols, block.cols);
  STRATA_ASSIGN_OR_RETURN(std::vector<float> grid,
                          ws.GetF32Copy(scale_name, {CeilDiv(rows, block.rows), grid_cols}));
  const int64_t groups = CeilDiv(rows, kFp8ScaleRows);
  std::vector<float> expanded(static_cast<size_t>(groups * grid_cols));
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t src = gi * kFp8ScaleRows / block.rows;
    std::memcpy(expanded.data() + gi * grid_cols, grid.data() + src * grid_cols,
                sizeof(float) * static_cast<size_t>(grid_cols));
  }
  // cudaMemcpy takes the mapped file's bytes at any alignment.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.fp8 + row0 * cols, w.data,
                                         static_cast<size_t>(rows * cols),
                                         cudaMemcpyHostToDevice));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.scale + row0 / kFp8ScaleRows * grid_cols,
                                         expanded.data(), sizeof(float) * expanded.size(),
                                         cudaMemcpyHostToDevice));
  return OkStatus();
}

}  // namespace

Status DeepseekV32CudaModel::Setup(std::shared_ptr<const WeightStore> weights,
                                   const DeepseekV32Config& config, const LoadOptions& options) {
  cfg_ = config;
  g_ = MakeGeometry(config);
  STRATA_RETURN_IF_ERROR(ReadOptions(options));
  const tuning::Scope tuned(tuning_);
  const Geometry& g = g_;
  if (g.dr < 2 || g.dr % 2 != 0 || g.half > 256) {
    return absl::UnimplementedError(absl::StrCat(
        "qk_rope_head_dim ", g.dr, " is not supported by the CUDA rotary kernel (even, 2..512)"));
  }
  if (g.n_group > 32) {
    return absl::UnimplementedError(
        absl::StrCat("n_group ", g.n_group, " exceeds the CUDA router's 32 groups"));
  }

  Plan& p = plan_;
  STRATA_ASSIGN_OR_RETURN(const std::string dev_name,
                          BeginLoad(options, g.V, config.max_context, kPrefillSliceTokens, p));
  p.dense_ctx = std::min(p.max_ctx, g.K);
  const cuda::MlaShape mshape = MlaShapeOf(g);
  const cuda::IndexerShape ishape = IndexerShapeOf(g);
  // Sized for every (batch, length bound) a decode graph may use, dense or
  // sparse, and for a sparse prefill slice.
  // Invariant mode decodes on the sparse path only (bound index_topk).
  for (int64_t b = 1; b <= p.max_batch; ++b) {
    for (int64_t len = kMinMlaBucket;; len *= 2) {
      const int64_t bound = std::min(len, p.max_ctx);
      if (!invariant_) {
        p.mla_ws = std::max(p.mla_ws, cuda::MlaDecodeWorkspaceBytes(mshape, b, bound));
      }
      p.index_ws = std::max(p.index_ws, cuda::IndexerDecodeWorkspaceBytes(ishape, b, bound));
      if (bound == p.max_ctx) break;
    }
    p.mla_ws = std::max(p.mla_ws, cuda::MlaDecodeWorkspaceBytes(mshape, b, g.K, invariant_));
  }
  p.mla_ws = std::max(p.mla_ws,
                      cuda::MlaSparsePrefillWorkspaceBytes(mshape, p.slice, g.K, invariant_));
  p.index_ws = std::max(p.index_ws, cuda::IndexerPrefillWorkspaceBytes(
                                        ishape, p.slice, std::max<int64_t>(0, p.max_ctx - p.slice)));

  const bool separate_lm_head =
      !config.tie_word_embeddings || (weights != nullptr && weights->Has("lm_head.weight"));
  Fp8Query is_fp8;
  if (weights != nullptr) {
    is_fp8 = [store = weights.get()](const std::string& name) {
      StatusOr<TensorView> t = store->Get(name);
      return t.ok() && t->dtype == DType::kF8E4M3;
    };
  }
  Carver weight_size(nullptr);  // for the FP8 footprint
  CarveWeights(g, config, separate_lm_head, invariant_, is_fp8, weight_size, w_, &fp8_);
  if (invariant_ && fp8_.max_elems > 0) {
    // cuda::Fp8Gemm streams small row counts through its own FP8 GEMV and
    // dequantises for the bf16 GEMM above them: a row's bits depend on the
    // batch. (FP8 routed experts are fine: MoeForward has an invariant mode.)
    return absl::UnimplementedError(
        "deepseek_v32: batch-invariant mode on the GPU needs bf16 dense weights; this "
        "checkpoint keeps FP8 dense matrices (cuda::Fp8Gemm has no invariant variant). Run "
        "without batch_invariant, or on the CPU (always invariant)");
  }
  if (g.has_moe) {
    // FP8 experts add MoeForward's prefill dequantisation scratch; bf16
    // layers need a prefix of the same workspace.
    cuda::MoeShape ms = MoeShapeOf(g);
    ms.fp8_experts = fp8_.expert_layers > 0;
    p.moe_ws = cuda::MoeWorkspaceBytes(ms, p.rows, invariant_);
  }
  // Prefill GEMMs on FP8 weights dequantise row chunks into this tile; a cap
  // keeps it small next to the weights (the largest published FP8 matrix,
  // o_proj [7168, 16384], then takes 4 chunks).
  p.fp8_tile = std::min(fp8_.max_elems, kFp8TileMaxElems);
  MemoryPlan memory;
  memory.carve_weights = [&](Carver& c) {
    CarveWeights(g, config, separate_lm_head, invariant_, is_fp8, c, w_, nullptr);
  };
  memory.carve_scratch = [&](Carver& c) { CarveScratch(g, p, c, s_); };
  // No per-slot state (slots only count live sequences); two caches per
  // layer addressed by one block table: the MLA latent rows and the indexer keys.
  memory.block_arrays = {{g.L, sizeof(bf16) * static_cast<size_t>(kBlockTokens * g.cd)},
                         {g.L, sizeof(bf16) * static_cast<size_t>(kBlockTokens * g.dI)}};
  STRATA_ASSIGN_OR_RETURN(const int64_t blocks,
                          AllocateMemory(dev_name, p, options.gpu_memory_fraction, memory));
  pools_.slots = p.max_sequences;
  pools_.blocks = blocks;
  pools_.kv = reinterpret_cast<bf16*>(layout_.block_regions[0].base);
  pools_.ik = reinterpret_cast<bf16*>(layout_.block_regions[1].base);

  // Rotary tables: the CPU's, for every position of the plan.
  {
    const std::vector<float> inv_freq = cpu::RopeInvFreq(config.rope);
    const float factor = static_cast<float>(cpu::RopeAttentionFactor(config.rope));
    std::vector<float> cos(static_cast<size_t>(p.max_ctx * g.half));
    std::vector<float> sin(cos.size());
    cpu::RopeCosSin(inv_freq.data(), g.half, 0, p.max_ctx, factor, cos.data(), sin.data());
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.rope_cos, cos.data(), sizeof(float) * cos.size(),
                                                cudaMemcpyHostToDevice, stream_));
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.rope_sin, sin.data(), sizeof(float) * sin.size(),
                                                cudaMemcpyHostToDevice, stream_));
    STRATA_RETURN_IF_ERROR(Sync("rotary tables"));  // the host vectors go out of scope
  }

  // What the shared host side (cuda_executor_base.h) works with.
  BindFrame(g, p, w_, s_, kLogitsChunkRows);
  fp8_tile_ = s_.fp8_tile;
  fp8_tile_elems_ = p.fp8_tile;
  BindStack(w_, s_, cuda_exec::FfnDims{g.D, g.I_dense, g.Is, 0, MoeShapeOf(g)}, p.moe_ws,
            invariant_);
  benchmark_fill_ = true;
  // Pinned host memory: step inputs, block-table mirror, results.
  STRATA_RETURN_IF_ERROR(InitRuntime(pools_.slots, pools_.blocks, options.cuda_graphs,
                                     0, nullptr));

  // --- weights ---------------------------------------------------------------
  const exec::ArchSpec spec = DescribeDeepseekV32(config, weights.get());
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(spec, options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(spec, *weights, options));
  }
  if (invariant_) {
    STRATA_RETURN_IF_ERROR(BuildTransposedUk());
    // From here on (the load-time check included) every GEMM is invariant.
    blas_->set_batch_invariant(true);
  }
  DescribeModel(spec, dev_name, weights.get(), p);
  return SelfCheck();
}

Status DeepseekV32CudaModel::UploadWeights(const exec::ArchSpec& spec, const WeightStore& ws,
                                           const LoadOptions& options) {
  const Geometry& g = g_;
  const Fp8BlockSize block = cfg_.fp8_block;
  const int64_t D = g.D, V = g.V;
  // Synchronous copies from pageable host vectors: simple, and the host-side
  // conversion (FP8 dequantisation in particular) dominates anyway.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, bf16* dst) -> Status {
    STRATA_ASSIGN_OR_RETURN(std::vector<uint16_t> h, HostBf16(ws, name, rows, cols, block));
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst, h.data(), 2 * h.size(), cudaMemcpyHostToDevice));
    return OkStatus();
  };
  auto vec = [&](const std::string& name, int64_t n, float* dst) -> Status {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> v, ws.GetF32Copy(name, {n}));
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst, v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice));
    return OkStatus();
  };
  // A checkpoint matrix into rows [row0, row0 + rows) of `dst` (cols wide).
  auto put = [&](const std::string& name, int64_t rows, int64_t cols, const Mat& dst,
                 int64_t row0) -> Status {
    if (dst.is_fp8()) return UploadFp8(ws, name, rows, cols, block, dst, row0);
    return matrix(name, rows, cols, dst.bf + row0 * cols);
  };
  STRATA_RETURN_IF_ERROR(matrix("model.embed_tokens.weight", V, D, w_.embed));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(matrix("lm_head.weight", V, D, w_.lm_head));
  STRATA_RETURN_IF_ERROR(vec("model.norm.weight", D, w_.final_norm));
  for (int64_t i = 0; i < g.L; ++i) {
    const Layer& L = w_.layers[static_cast<size_t>(i)];
    const exec::LayerSpec& layer = spec.layers[static_cast<size_t>(i)];
    const std::string& p = layer.prefix;
    const std::string& a = layer.mixer_prefix;
    const std::string x = a + "indexer.";
    STRATA_RETURN_IF_ERROR(vec(p + "input_layernorm.weight", D, L.input_norm));
    STRATA_RETURN_IF_ERROR(vec(p + "post_attention_layernorm.weight", D, L.post_norm));
    const AttnLayer& w = L.attn;
    STRATA_RETURN_IF_ERROR(put(a + "q_a_proj.weight", g.qr, D, w.a, 0));
    STRATA_RETURN_IF_ERROR(put(a + "kv_a_proj_with_mqa.weight", g.cd, D, w.a, g.off_kv));
    STRATA_RETURN_IF_ERROR(put(x + "wk.weight", g.dI, D, w.a, g.off_ik));
    STRATA_RETURN_IF_ERROR(vec(a + "q_a_layernorm.weight", g.qr, w.q_a_norm));
    STRATA_RETURN_IF_ERROR(vec(a + "kv_a_layernorm.weight", g.r, w.kv_norm));
    STRATA_RETURN_IF_ERROR(vec(x + "k_norm.weight", g.dI, w.ik_norm_w));
    STRATA_RETURN_IF_ERROR(vec(x + "k_norm.bias", g.dI, w.ik_norm_b));
    STRATA_RETURN_IF_ERROR(put(a + "q_b_proj.weight", g.H * g.qd, g.qr, w.q_b, 0));
    STRATA_RETURN_IF_ERROR(matrix(a + "kv_b_proj.weight", g.H * (g.dn + g.dv), g.r, w.kv_b));
    STRATA_RETURN_IF_ERROR(put(a + "o_proj.weight", D, g.H * g.dv, w.o, 0));
    STRATA_RETURN_IF_ERROR(put(x + "wq_b.weight", g.HI * g.dI, g.qr, w.iq, 0));
    STRATA_RETURN_IF_ERROR(put(x + "weights_proj.weight", g.HI, D, w.iw, 0));

    cuda_exec::TensorSink sink;
    sink.matrix = put;
    sink.vector = vec;
    STRATA_RETURN_IF_ERROR(UploadFfnWeights(layer, D, L.ffn, sink));
    STRATA_RETURN_IF_ERROR(cuda_exec::LayerLoaded(options, ws, i, g.L));
  }
  return OkStatus();
}

Status DeepseekV32CudaModel::MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed) {
  const Geometry& g = g_;
  cuda_exec::DummyFill fill(seed, stream_);
  auto mat = [&](bf16* p, int64_t n) { return fill.Matrix(p, n); };
  STRATA_RETURN_IF_ERROR(mat(w_.embed, g.V * g.D));
  if (w_.lm_head != w_.embed) STRATA_RETURN_IF_ERROR(mat(w_.lm_head, g.V * g.D));
  STRATA_RETURN_IF_ERROR(fill.Ones(w_.final_norm, g.D));
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    const Layer& L = w_.layers[i];
    STRATA_RETURN_IF_ERROR(fill.Ones(L.input_norm, g.D));
    STRATA_RETURN_IF_ERROR(fill.Ones(L.post_norm, g.D));
    const AttnLayer& a = L.attn;
    STRATA_RETURN_IF_ERROR(mat(a.a.bf, g.qr * g.D));
    STRATA_RETURN_IF_ERROR(mat(a.a.bf + g.off_kv * g.D, g.cd * g.D));
    STRATA_RETURN_IF_ERROR(mat(a.a.bf + g.off_ik * g.D, g.dI * g.D));
    STRATA_RETURN_IF_ERROR(fill.Ones(a.q_a_norm, g.qr));
    STRATA_RETURN_IF_ERROR(fill.Ones(a.kv_norm, g.r));
    STRATA_RETURN_IF_ERROR(fill.Ones(a.ik_norm_w, g.dI));
    STRATA_RETURN_IF_ERROR(fill.Uniform(a.ik_norm_b, g.dI, 0.f, 0.f));
    STRATA_RETURN_IF_ERROR(mat(a.q_b.bf, g.H * g.qd * g.qr));
    STRATA_RETURN_IF_ERROR(mat(a.kv_b, g.H * (g.dn + g.dv) * g.r));
    STRATA_RETURN_IF_ERROR(mat(a.o.bf, g.D * g.H * g.dv));
    STRATA_RETURN_IF_ERROR(mat(a.iq.bf, g.HI * g.dI * g.qr));
    STRATA_RETURN_IF_ERROR(mat(a.iw.bf, g.HI * g.D));
    STRATA_RETURN_IF_ERROR(FillDummyFfnWeights(spec.layers[i], g.D, L.ffn, fill));
  }
  return Sync("dummy weights");
}

Status DeepseekV32CudaModel::BuildTransposedUk() {
  const Geometry& g = g_;
  std::vector<std::pair<const bf16*, bf16*>> layers;
  for (const Layer& L : w_.layers) layers.emplace_back(L.attn.kv_b, L.attn.uk_t);
  return cuda_exec::TransposeUkPerHead(*blas_, layers, g.H, g.dn, g.dv, g.r, stream_);
}

Status DeepseekV32CudaModel::SelfCheck() {
  STRATA_RETURN_IF_ERROR(LoadTimeCheck(g_.V));
  // The check's passes do not count in the statistics.
  sparse_prefill_layers_ = dense_prefill_layers_ = 0;
  sparse_decode_steps_ = dense_decode_steps_ = 0;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(s_.selected_total, 0, sizeof(unsigned long long), stream_));
  return Sync("self-check");
}

}  // namespace dsv32_cuda

StatusOr<std::unique_ptr<Model>> CreateDeepseekV32CudaModel(
    std::shared_ptr<const WeightStore> weights, const std::string& config_path,
    const LoadOptions& options) {
  return cuda_exec::CreateCudaExecutor<dsv32_cuda::DeepseekV32CudaModel, DeepseekV32Config>(
      std::move(weights), config_path, options, ParseDeepseekV32Config);
}

StatusOr<DeepseekV32CudaStats> GetDeepseekV32CudaStats(const Model& model) {
  const auto* m = dynamic_cast<const dsv32_cuda::DeepseekV32CudaModel*>(&model);
  if (m == nullptr) return absl::NotFoundError("not a deepseek_v32 CUDA model");
  return m->Stats();
}

}  // namespace strata
