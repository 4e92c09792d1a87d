#include "exec/cuda/cuda_load_helpers.h"

#include <cstring>

#include "absl/strings/str_cat.h"
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
  p.checkpoint_slots = options.max_checkpoints > 0    ? options.max_checkpoints
                       : options.max_checkpoints == 0 ? p.max_sequences
                                                      : 0;
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
  // A pass may carry a decode batch and a prefill slice (DecodeAndPrefill).
  p.rows = p.slice + p.max_batch;
  p.max_blocks = CeilDiv(p.max_ctx, kBlockTokens);
  return OkStatus();
}

void CarveStepScratch(const SequencePlan& p, int64_t D, int64_t V, int64_t gu_cols, int64_t experts,
                      size_t moe_ws, Carver& c, StepScratch& s) {
  const int64_t R = p.rows, B = p.max_batch;
  s.tokens = c.Take<int32_t>(R);
  s.step = c.Take<int32_t>(4 * B);
  s.block_table = c.Take<int32_t>((B + 1) * p.max_blocks);
  // A decode batch and a prefill's last position.
  s.sampling = c.Take<cuda::GpuSamplingRow>(B + 1);
  s.sampled = c.Take<int32_t>(B + 1);
  s.h = c.Take<float>(R * D);
  s.xn = c.Take<bf16>(R * D);
  s.delta = c.Take<float>(R * D);
  s.logits = c.Take<float>(std::max(B + 1, kLogitsChunkRows) * V);
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

Status UploadFp8(const WeightStore& ws, const std::string& name, int64_t rows, int64_t cols,
                 Fp8BlockSize block, const Mat& dst, int64_t row0) {
  STRATA_ASSIGN_OR_RETURN(TensorView w, ws.Get(name));
  const std::string where = absl::StrCat("tensor '", name, "' in ", std::string(w.file));
  if (w.dtype != DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype ", std::string(DTypeName(w.dtype)), ", expected F8_E4M3"));
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
                                         static_cast<size_t>(rows * cols), cudaMemcpyHostToDevice));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.scale + row0 / kFp8ScaleRows * grid_cols,
                                         expanded.data(), sizeof(float) * expanded.size(),
                                         cudaMemcpyHostToDevice));
  return OkStatus();
}

Status LayerLoaded(const LoadOptions& options, const WeightStore& ws, int64_t i, int64_t n) {
  if (!options.progress) return OkStatus();
  const float frac = 0.05f + 0.9f * static_cast<float>(i + 1) / static_cast<float>(n);
  if (options.progress(frac)) return OkStatus();
  return absl::CancelledError(absl::StrCat(ws.dir(), ": load cancelled by the progress callback"));
}

}  // namespace cuda_exec
}  // namespace strata
