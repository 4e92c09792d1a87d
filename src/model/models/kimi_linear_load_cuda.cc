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

std::string GiB(double bytes) { return absl::StrFormat("%.1f GiB", bytes / 1073741824.0); }

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
      L.ffn.gate_up = c.Take<bf16>(2 * g.I_dense * g.D);
      L.ffn.down = c.Take<bf16>(g.D * g.I_dense);
    } else {
      L.ffn.router = c.Take<bf16>(g.E * g.D);
      L.ffn.score_bias = c.Take<float>(g.E);
      L.ffn.w13 = c.Take<bf16>(g.E * 2 * g.I * g.D);
      L.ffn.w2 = c.Take<bf16>(g.E * g.D * g.I);
      if (g.Is > 0) {
        L.ffn.gate_up = c.Take<bf16>(2 * g.Is * g.D);
        L.ffn.down = c.Take<bf16>(g.D * g.Is);
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

namespace {

// Host → device copies through two pinned staging halves, converting
// F32/F16 checkpoints to bf16 (matrices) or reading anything as fp32 (small
// tensors) on the way. One half fills while the other is in flight.
class Uploader {
 public:
  Uploader(cudaStream_t stream, char* staging, size_t bytes) : stream_(stream) {
    half_ = bytes / 2 / 16 * 16;
    buf_[0] = staging;
    buf_[1] = staging + half_;
  }
  ~Uploader() {
    for (cudaEvent_t& e : done_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  Status Init() {
    for (cudaEvent_t& e : done_) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    return OkStatus();
  }

  // A matrix tensor of `shape` into `dst` as bf16.
  Status Matrix(const WeightStore& ws, const std::string& name, const std::vector<int64_t>& shape,
                bf16* dst) {
    STRATA_ASSIGN_OR_RETURN(TensorView v, ws.GetFloat(name, shape));
    const int64_t n = v.NumElements();
    const int64_t per = static_cast<int64_t>(half_ / 2);
    const auto* src = static_cast<const uint8_t*>(v.data);
    for (int64_t i = 0; i < n; i += per) {
      const int64_t m = std::min(per, n - i);
      STRATA_ASSIGN_OR_RETURN(char* buf, NextBuffer());
      auto* out = reinterpret_cast<uint16_t*>(buf);
      // The format does not promise alignment: read elements through memcpy.
      if (v.dtype == DType::kBF16) {
        std::memcpy(out, src + 2 * i, static_cast<size_t>(2 * m));
      } else if (v.dtype == DType::kF32) {
        for (int64_t j = 0; j < m; ++j) {
          float f;
          std::memcpy(&f, src + 4 * (i + j), 4);
          out[j] = F32ToBf16(f);
        }
      } else {
        for (int64_t j = 0; j < m; ++j) {
          uint16_t h;
          std::memcpy(&h, src + 2 * (i + j), 2);
          out[j] = F32ToBf16(F16ToF32(h));
        }
      }
      STRATA_RETURN_IF_ERROR(Send(dst + i, buf, static_cast<size_t>(2 * m)));
    }
    return OkStatus();
  }

  Status Floats(const std::vector<float>& v, float* dst) {
    const int64_t n = static_cast<int64_t>(v.size());
    const int64_t per = static_cast<int64_t>(half_ / 4);
    for (int64_t i = 0; i < n; i += per) {
      const int64_t m = std::min(per, n - i);
      STRATA_ASSIGN_OR_RETURN(char* buf, NextBuffer());
      std::memcpy(buf, v.data() + i, static_cast<size_t>(4 * m));
      STRATA_RETURN_IF_ERROR(Send(dst + i, buf, static_cast<size_t>(4 * m)));
    }
    return OkStatus();
  }

  Status Finish() {
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return OkStatus();
  }

 private:
  StatusOr<char*> NextBuffer() {
    cur_ ^= 1;
    // The copy that last read this half must be done before we overwrite it.
    if (used_[cur_]) STRATA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done_[cur_]));
    return buf_[cur_];
  }
  Status Send(void* dst, const char* buf, size_t bytes) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, buf, bytes, cudaMemcpyHostToDevice, stream_));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_[cur_], stream_));
    used_[cur_] = true;
    return OkStatus();
  }

  cudaStream_t stream_;
  size_t half_ = 0;
  char* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  bool used_[2] = {false, false};
  int cur_ = 1;
};

constexpr size_t kStagingBytes = size_t{128} << 20;

}  // namespace

KimiLinearCudaModel::~KimiLinearCudaModel() {
  // Teardown cannot report errors; a failing call here leaves nothing to do.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& [key, entry] : graphs_) {
    if (entry.exec != nullptr) cudaGraphExecDestroy(entry.exec);
  }
  blas_.reset();
  if (weight_mem_ != nullptr) cudaFree(weight_mem_);
  if (runtime_mem_ != nullptr) cudaFree(runtime_mem_);
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

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
  const Geometry& g = g_;

  // --- the device -----------------------------------------------------------
  StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::ListDevices();
  if (!devices.ok()) {
    return absl::UnavailableError(
        absl::StrCat("no device is visible (", devices.status().message(), ")"));
  }
  if (devices->empty()) return absl::UnavailableError("no device is visible (0 CUDA devices)");
  const cuda::DeviceInfo& dev = devices->front();
  device_ = dev.index;
  const std::string dev_name = absl::StrCat("cuda:", dev.index, " ", dev.name);
  if (dev.compute_major != 9 || dev.compute_minor != 0) {
    return absl::UnavailableError(absl::StrCat(dev_name, " is sm_", dev.compute_major,
                                               dev.compute_minor,
                                               "; this build's kernels are for sm_90a (Hopper)"));
  }
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("cudaSetDevice(", device_, ") failed: ", cudaGetErrorString(e)));
  }

  // --- the plan -------------------------------------------------------------
  Plan& p = plan_;
  p.max_batch = options.max_batch > 0 ? options.max_batch : kDefaultMaxBatch;
  p.max_sequences = options.max_sequences > 0 ? options.max_sequences : p.max_batch;
  const int64_t model_ctx = config.max_context > 0 ? config.max_context : kDefaultMaxContext;
  p.max_ctx = options.max_context_tokens > 0 ? std::min(options.max_context_tokens, model_ctx)
                                             : std::min(model_ctx, kDefaultMaxContext);
  if (p.max_ctx < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadOptions.max_context_tokens: the CUDA plan needs at least 3 tokens, got ", p.max_ctx));
  }
  if (!(options.gpu_memory_fraction > 0.0 && options.gpu_memory_fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadOptions.gpu_memory_fraction must be in (0, 1], got ", options.gpu_memory_fraction));
  }
  p.slice = std::min(
      options.prefill_slice_tokens > 0 ? options.prefill_slice_tokens : kPrefillSliceTokens,
      p.max_ctx);
  p.rows = std::max(p.slice, p.max_batch);
  p.max_blocks = CeilDiv(p.max_ctx, kBlockTokens);
  if (g.num_kda > 0) p.kda_ws = cuda::KdaPrefillWorkspaceBytes(KdaShapeOf(g), p.slice);
  if (g.num_mla > 0) {
    // Sized for every (batch, length bound) a decode graph may use.
    for (int64_t b = 1; b <= p.max_batch; ++b) {
      for (int64_t len = kMinMlaBucket;; len *= 2) {
        const int64_t bound = std::min(len, p.max_ctx);
        p.mla_ws = std::max(p.mla_ws, cuda::MlaDecodeWorkspaceBytes(MlaShapeOf(g), b, bound));
        if (bound == p.max_ctx) break;
      }
    }
  }
  if (g.has_moe) p.moe_ws = cuda::MoeWorkspaceBytes(MoeShapeOf(g), p.rows);
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
  auto alloc = [&](void** ptr, size_t bytes, const char* what) -> Status {
    if (bytes == 0) return OkStatus();
    if (cudaError_t e = cudaMalloc(ptr, bytes); e != cudaSuccess) {
      cudaGetLastError();
      *ptr = nullptr;
      return absl::ResourceExhaustedError(absl::StrCat(dev_name, ": allocating ", GiB(bytes),
                                                       " for the ", what,
                                                       " failed: ", cudaGetErrorString(e)));
    }
    return OkStatus();
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

  // Pinned host memory: step inputs, block-table mirror, results, staging.
  {
    Carver c(nullptr);
    c.Take<int32_t>(4 * p.max_batch);
    c.Take<int32_t>((p.max_batch + 1) * p.max_blocks);
    c.Take<cuda::GpuSamplingRow>(p.max_batch);
    c.Take<int32_t>(p.max_batch);
    c.Take<float>(p.max_batch * g.V);
    c.Take<char>(static_cast<int64_t>(kStagingBytes));
    STRATA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, c.size()));
    Carver h(static_cast<char*>(pinned_));
    h_step_ = h.Take<int32_t>(4 * p.max_batch);
    h_block_table_ = h.Take<int32_t>((p.max_batch + 1) * p.max_blocks);
    h_sampling_ = h.Take<cuda::GpuSamplingRow>(p.max_batch);
    h_sampled_ = h.Take<int32_t>(p.max_batch);
    h_logits_ = h.Take<float>(p.max_batch * g.V);
    h_staging_ = h.Take<char>(static_cast<int64_t>(kStagingBytes));
    std::memset(h_block_table_, 0,
                sizeof(int32_t) * static_cast<size_t>((p.max_batch + 1) * p.max_blocks));
  }
  row_owner_.assign(static_cast<size_t>(p.max_batch), RowOwner{});

  book_ = std::make_shared<PoolBook>();
  book_->total_slots = pools_.slots;
  book_->total_blocks = pools_.blocks;
  for (int64_t i = pools_.slots - 1; i >= 0; --i) book_->free_slots.push_back(static_cast<int32_t>(i));
  for (int64_t i = pools_.blocks - 1; i >= 0; --i) {
    book_->free_blocks.push_back(static_cast<int32_t>(i));
  }
  graphs_enabled_ = options.cuda_graphs;

  // --- weights ---------------------------------------------------------------
  if (weights == nullptr) {
    STRATA_RETURN_IF_ERROR(MakeDummyWeights(options.dummy_seed));
  } else {
    STRATA_RETURN_IF_ERROR(UploadWeights(*weights, options));
  }

  // --- info --------------------------------------------------------------------
  ModelInfo& info = info_;
  info.architecture = "kimi_linear";
  info.device = dev_name;
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
  info.bos_token_id = config.bos_token_id;
  info.eos_token_id = config.eos_token_id;

  return SelfCheck();
}

Status KimiLinearCudaModel::UploadWeights(const WeightStore& ws, const LoadOptions& options) {
  const Geometry& g = g_;
  Uploader up(stream_, h_staging_, kStagingBytes);
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
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "gate_proj.weight", {I, D}, f.gate_up));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "up_proj.weight", {I, D}, f.gate_up + I * D));
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, d + "down_proj.weight", {D, I}, f.down));
    } else {
      const std::string m = p + "block_sparse_moe.";
      const int64_t E = g.E, I = g.I;
      STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "gate.weight", {E, D}, f.router));
      STRATA_ASSIGN_OR_RETURN(std::vector<float> bias,
                              ws.GetF32Copy(m + "gate.e_score_correction_bias", {E}));
      STRATA_RETURN_IF_ERROR(up.Floats(bias, f.score_bias));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = absl::StrCat(m, "experts.", e, ".");
        bf16* w13 = f.w13 + e * 2 * I * D;
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w1.weight", {I, D}, w13));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w3.weight", {I, D}, w13 + I * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, x + "w2.weight", {D, I}, f.w2 + e * D * I));
      }
      if (g.Is > 0) {
        const int64_t Is = g.Is;
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, m + "shared_experts.gate_proj.weight", {Is, D}, f.gate_up));
        STRATA_RETURN_IF_ERROR(
            up.Matrix(ws, m + "shared_experts.up_proj.weight", {Is, D}, f.gate_up + Is * D));
        STRATA_RETURN_IF_ERROR(up.Matrix(ws, m + "shared_experts.down_proj.weight", {D, Is}, f.down));
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
      STRATA_RETURN_IF_ERROR(mat(f.gate_up, 2 * g.I_dense * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.down, g.D * g.I_dense));
    } else {
      STRATA_RETURN_IF_ERROR(mat(f.router, g.E * g.D));
      STRATA_RETURN_IF_ERROR(f32(f.score_bias, g.E, -0.01f, 0.01f));
      STRATA_RETURN_IF_ERROR(mat(f.w13, g.E * 2 * g.I * g.D));
      STRATA_RETURN_IF_ERROR(mat(f.w2, g.E * g.D * g.I));
      if (g.Is > 0) {
        STRATA_RETURN_IF_ERROR(mat(f.gate_up, 2 * g.Is * g.D));
        STRATA_RETURN_IF_ERROR(mat(f.down, g.D * g.Is));
      }
    }
  }
  return Sync("dummy weights");
}

Status KimiLinearCudaModel::SelfCheck() {
  // One 2-token prefill and one decode step on a scratch sequence: every op
  // sees the model's shapes once (kernels that reject them say so now, and
  // lazily loaded kernels are loaded before any graph capture).
  auto fail = [](const Status& s) {
    if (absl::IsResourceExhausted(s) || absl::IsUnavailable(s)) return s;
    return absl::UnimplementedError(
        absl::StrCat("the CUDA executor failed its load-time check (", s.message(), ")"));
  };
  StatusOr<std::unique_ptr<SequenceState>> st = NewState(3);
  if (!st.ok()) return fail(st.status());
  std::vector<float> logits(static_cast<size_t>(g_.V));
  const int32_t prompt[2] = {0, static_cast<int32_t>(g_.V - 1)};
  if (Status s = Forward(std::span(prompt, 2), **st, logits.data(), false); !s.ok()) return fail(s);
  const int32_t next = 1 % static_cast<int32_t>(g_.V);
  if (Status s = Forward(std::span(&next, 1), **st, logits.data(), false); !s.ok()) return fail(s);
  for (float v : logits) {
    if (!std::isfinite(v)) {
      return absl::InternalError("the CUDA executor's load-time check produced non-finite logits");
    }
  }
  return OkStatus();
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
  return m->Stats();
}

}  // namespace strata
