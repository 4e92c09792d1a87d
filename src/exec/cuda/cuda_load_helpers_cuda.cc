#include "exec/cuda/cuda_load_helpers.h"

#include "absl/strings/str_format.h"
#include "backend/cuda/device_info.h"
#include "exec/cuda/cuda_paged_state.h"

namespace strata {
namespace cuda_exec {

std::string GiB(double bytes) { return absl::StrFormat("%.1f GiB", bytes / 1073741824.0); }

StatusOr<DeviceChoice> SelectHopperDevice(int32_t index) {
  StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::ListDevices();
  if (!devices.ok()) {
    return absl::UnavailableError(
        absl::StrCat("no device is visible (", devices.status().message(), ")"));
  }
  if (devices->empty()) return absl::UnavailableError("no device is visible (0 CUDA devices)");
  if (index < 0 || static_cast<size_t>(index) >= devices->size()) {
    return absl::UnavailableError(absl::StrCat("device index ", index, " is not visible (",
                                               devices->size(), " CUDA device(s))"));
  }
  const cuda::DeviceInfo& dev = (*devices)[index];
  DeviceChoice c;
  c.index = dev.index;
  c.name = absl::StrCat("cuda:", dev.index, " ", dev.name);
  if (dev.compute_major != 9 || dev.compute_minor != 0) {
    return absl::UnavailableError(absl::StrCat(c.name, " is sm_", dev.compute_major,
                                               dev.compute_minor,
                                               "; this build's kernels are for sm_90a (Hopper)"));
  }
  if (cudaError_t e = cudaSetDevice(c.index); e != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("cudaSetDevice(", c.index, ") failed: ", cudaGetErrorString(e)));
  }
  return c;
}

Status PlanSequences(const LoadOptions& options, int64_t config_max_context, int64_t default_slice,
                     SequencePlan& p) {
  p.max_batch = options.max_batch > 0 ? options.max_batch : kDefaultMaxBatch;
  p.max_sequences = options.max_sequences > 0 ? options.max_sequences : p.max_batch;
  const int64_t model_ctx = config_max_context > 0 ? config_max_context : kDefaultMaxContext;
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
      options.prefill_slice_tokens > 0 ? options.prefill_slice_tokens : default_slice, p.max_ctx);
  p.rows = std::max(p.slice, p.max_batch);
  p.max_blocks = CeilDiv(p.max_ctx, kBlockTokens);
  return OkStatus();
}

void CarveStepScratch(const SequencePlan& p, int64_t D, int64_t V, int64_t gu_cols, int64_t experts,
                      size_t moe_ws, Carver& c, StepScratch& s) {
  const int64_t R = p.rows, B = p.max_batch;
  s.tokens = c.Take<int32_t>(R);
  s.step = c.Take<int32_t>(4 * B);
  s.block_table = c.Take<int32_t>((B + 1) * p.max_blocks);
  s.sampling = c.Take<cuda::GpuSamplingRow>(B);
  s.sampled = c.Take<int32_t>(B);
  s.h = c.Take<float>(R * D);
  s.xn = c.Take<bf16>(R * D);
  s.delta = c.Take<float>(R * D);
  s.logits = c.Take<float>(std::max(B, kLogitsChunkRows) * V);
  s.sample_ws = c.Take<char>(static_cast<int64_t>(p.sample_ws));
  if (gu_cols > 0) {
    s.gu = c.Take<bf16>(R * gu_cols);
    s.act = c.Take<bf16>(R * gu_cols / 2);
  }
  if (experts > 0) {
    s.router_logits = c.Take<float>(R * experts);
    s.moe_ws = c.Take<char>(static_cast<int64_t>(moe_ws));
  }
}

Status DeviceAlloc(const std::string& device_name, void** ptr, size_t bytes, const char* what) {
  if (bytes == 0) return OkStatus();
  if (cudaError_t e = cudaMalloc(ptr, bytes); e != cudaSuccess) {
    cudaGetLastError();
    *ptr = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(device_name, ": allocating ", GiB(bytes),
                                                     " for the ", what,
                                                     " failed: ", cudaGetErrorString(e)));
  }
  return OkStatus();
}

Status LayerLoaded(const LoadOptions& options, const WeightStore& ws, int64_t i, int64_t n) {
  if (!options.progress) return OkStatus();
  const float frac = 0.05f + 0.9f * static_cast<float>(i + 1) / static_cast<float>(n);
  if (options.progress(frac)) return OkStatus();
  return absl::CancelledError(absl::StrCat(ws.dir(), ": load cancelled by the progress callback"));
}

Status TransposeUkPerHead(cuda::BlasContext& blas,
                          const std::vector<std::pair<const bf16*, bf16*>>& layers, int64_t heads,
                          int64_t dn, int64_t dv, int64_t r, cudaStream_t stream) {
  if (layers.empty()) return OkStatus();
  std::vector<uint16_t> eye(static_cast<size_t>(r * r), 0);
  for (int64_t i = 0; i < r; ++i) eye[static_cast<size_t>(i * r + i)] = 0x3F80;  // bf16 1.0
  void* d_eye = nullptr;
  const size_t bytes = eye.size() * sizeof(uint16_t);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_eye, bytes));
  Status st = [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_eye, eye.data(), bytes, cudaMemcpyHostToDevice, stream));
    for (const auto& [kv_b, uk_t] : layers) {
      cuda::StridedBatchedGemmArgs a;
      a.g.m = r;
      a.g.n = dn;
      a.g.k = r;
      a.g.x = d_eye;
      a.g.x_type = cuda::ActType::kBf16;
      a.g.ldx = r;
      a.g.w = kv_b;
      a.g.ldw = r;
      a.g.y = uk_t;
      a.g.y_type = cuda::ActType::kBf16;
      a.g.ldy = dn;
      a.count = heads;
      a.stride_x = 0;
      a.stride_w = (dn + dv) * r;
      a.stride_y = r * dn;
      a.transpose_w = false;
      STRATA_RETURN_IF_ERROR(cuda::StridedBatchedGemm(blas, a, stream));
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return OkStatus();
  }();
  cudaFree(d_eye);
  return st;
}

}  // namespace cuda_exec
}  // namespace strata
