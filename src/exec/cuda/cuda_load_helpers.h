// Load-time helpers of the GPU executor (layer_executor_cuda.cc, _load_cuda.cc): the
// device check, device allocation with a readable error, and the weight
// Uploader (pinned double buffering).
#ifndef STRATA_EXEC_CUDA_CUDA_LOAD_HELPERS_H_
#define STRATA_EXEC_CUDA_CUDA_LOAD_HELPERS_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/sampling.h"
#include "base/dtype.h"
#include "base/status.h"
#include "exec/cuda/carver.h"
#include "exec/cuda/tensor_sink.h"
#include "model/fp8_weights.h"
#include "model/model.h"
#include "model/weight_store.h"

namespace strata {
namespace cuda_exec {

using cuda::bf16;

// "12.3 GiB".
std::string GiB(double bytes);

constexpr int64_t kDefaultMaxBatch = 64;
constexpr int64_t kDefaultMaxContext = 131072;

// Rows of the device logits buffer: an all-logits prefill goes through it
// in chunks of this many rows.
constexpr int64_t kLogitsChunkRows = 64;

// The scratch of every step: the per-step inputs, the residual stream, the
// logits and sampling, and the feed-forward blocks' buffers. The executor's
// Scratch derives from it.
struct StepScratch {
  int32_t* tokens = nullptr;       // [rows] prefill token ids
  int32_t* step = nullptr;         // [4, max_batch]: tokens | slots | positions | seq_lens
  int32_t* block_table = nullptr;  // [max_batch + 1, max_blocks]; the last row is prefill's
  cuda::GpuSamplingRow* sampling = nullptr;  // [max_batch]
  int32_t* sampled = nullptr;                // [max_batch]
  float* h = nullptr;                        // [rows, D] residual stream
  bf16* xn = nullptr;                        // [rows, D] normed input of a block
  float* delta = nullptr;          // [rows, D] routed-expert output, added by the next norm
  float* logits = nullptr;         // [max(max_batch, kLogitsChunkRows), V]
  void* sample_ws = nullptr;       // [plan.sample_ws bytes]
  bf16* gu = nullptr;              // [rows, gu_cols] gate | up
  bf16* act = nullptr;             // [rows, gu_cols / 2]
  float* router_logits = nullptr;  // [rows, experts]
  void* moe_ws = nullptr;          // [moe_ws bytes]
};
// Carves `s` for plan `p`: hidden size D, vocabulary V, gu_cols the widest
// gate|up of the feed-forward blocks (0: none), `experts` of the MoE layers
// (0: no MoE layer) and their workspace of `moe_ws` bytes.
void CarveStepScratch(const SequencePlan& p, int64_t D, int64_t V, int64_t gu_cols, int64_t experts,
                      size_t moe_ws, Carver& c, StepScratch& s);

// From LoadOptions (0: the defaults above, `default_slice`) and the
// checkpoint's context (`config_max_context`, 0: unknown); InvalidArgument for
// a context under 3 tokens or a memory fraction outside (0, 1].
Status PlanSequences(const LoadOptions& options, int64_t config_max_context, int64_t default_slice,
                     SequencePlan& p);

// Visible device `index`, if it is an sm_90 (Hopper) part, made current.
struct DeviceChoice {
  int index = 0;
  std::string name;  // "cuda:<index> <device name>"
};
StatusOr<DeviceChoice> SelectHopperDevice(int32_t index);

// cudaMalloc of `bytes` (nothing for 0), ResourceExhausted naming `what`.
Status DeviceAlloc(const std::string& device_name, void** ptr, size_t bytes, const char* what);

// Bytes of pinned staging the Uploader works through.
constexpr size_t kStagingBytes = size_t{128} << 20;

// An FP8 checkpoint matrix `name` [rows, cols] into rows [row0, row0 + rows)
// of `dst` (an FP8 Mat cols wide, row0 a multiple of kFp8ScaleRows): the
// codes as stored, the scale grid with each row repeated for the 8-row
// groups of its block. Synchronous. Errors name the tensor (dtype, shape, a
// missing scale tensor).
Status UploadFp8(const WeightStore& ws, const std::string& name, int64_t rows, int64_t cols,
                 Fp8BlockSize block, const Mat& dst, int64_t row0);

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
  // Waits for the copies still in flight (an upload that stopped early
  // included): none may read the staging after this.
  ~Uploader() {
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
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
  // Elements [first, first + count) of it (count < 0: to the end), for
  // uploads that regroup rows.
  Status Matrix(const WeightStore& ws, const std::string& name, const std::vector<int64_t>& shape,
                bf16* dst, int64_t first = 0, int64_t count = -1) {
    STRATA_ASSIGN_OR_RETURN(TensorView v, ws.GetFloat(name, shape));
    const int64_t n = count < 0 ? v.NumElements() - first : count;
    const int64_t per = static_cast<int64_t>(half_ / 2);
    const auto* src =
        static_cast<const uint8_t*>(v.data) + first * (v.dtype == DType::kF32 ? 4 : 2);
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

  // fp32 values into `dst` as they are (float) or rounded (bf16).
  template <typename T>
  Status Values(const std::vector<float>& v, T* dst) {
    const int64_t n = static_cast<int64_t>(v.size());
    const int64_t per = static_cast<int64_t>(half_ / sizeof(T));
    for (int64_t i = 0; i < n; i += per) {
      const int64_t m = std::min(per, n - i);
      STRATA_ASSIGN_OR_RETURN(char* buf, NextBuffer());
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(buf, v.data() + i, static_cast<size_t>(4 * m));
      } else {
        auto* out = reinterpret_cast<uint16_t*>(buf);
        for (int64_t j = 0; j < m; ++j) out[j] = F32ToBf16(v[static_cast<size_t>(i + j)]);
      }
      STRATA_RETURN_IF_ERROR(Send(dst + i, buf, sizeof(T) * static_cast<size_t>(m)));
    }
    return OkStatus();
  }
  Status Floats(const std::vector<float>& v, float* dst) { return Values(v, dst); }

  // This uploader as the sink of `ws`'s tensors, with norms zero-centred or
  // not as `zero_centred_norms` says. With `fp8_block`, FP8 e4m3 matrices go
  // to FP8 destinations as stored (UploadFp8) and are dequantised on the host
  // for bf16 ones; without it they are refused like any unsupported dtype.
  TensorSink Sink(const WeightStore& ws, bool zero_centred_norms = false,
                  std::optional<Fp8BlockSize> fp8_block = std::nullopt) {
    TensorSink sink;
    sink.matrix = [this, &ws, fp8_block](const std::string& name, int64_t rows, int64_t cols,
                                         const Mat& dst, int64_t row0) -> Status {
      if (fp8_block.has_value()) {
        if (dst.is_fp8()) return UploadFp8(ws, name, rows, cols, *fp8_block, dst, row0);
        STRATA_ASSIGN_OR_RETURN(TensorView raw, ws.Get(name));
        if (raw.dtype == DType::kF8E4M3) {
          STRATA_ASSIGN_OR_RETURN(std::vector<float> f,
                                  LoadFp8BlockScaled(ws, name, rows, cols, *fp8_block));
          return Values(f, dst.bf + row0 * cols);
        }
      }
      if (dst.bf == nullptr) return absl::InternalError(name + ": no bf16 destination at upload");
      return Matrix(ws, name, {rows, cols}, dst.bf + row0 * cols);
    };
    sink.vector = [this, &ws](const std::string& name, int64_t n, float* dst) -> Status {
      STRATA_ASSIGN_OR_RETURN(std::vector<float> v, ws.GetF32Copy(name, {n}));
      return Floats(v, dst);
    };
    sink.part = [this, &ws](const std::string& name, int64_t rows, int64_t cols, int64_t src_row,
                            int64_t count, bf16* dst, int64_t row0) -> Status {
      return Matrix(ws, name, {rows, cols}, dst + row0 * cols, src_row * cols, count * cols);
    };
    sink.floats = [this, &ws](
                      const std::string& name, const std::vector<std::vector<int64_t>>& shapes,
                      const std::function<void(std::vector<float>&)>& map, float* dst) -> Status {
      STRATA_ASSIGN_OR_RETURN(std::vector<float> v, ws.GetF32CopyOfShapes(name, shapes));
      if (map) map(v);
      return Floats(v, dst);
    };
    sink.values = [this](const std::vector<float>& v, float* dst) { return Floats(v, dst); };
    sink.zero_centred_norms = zero_centred_norms;
    return sink;
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

// Layer i of n is on the device: LoadOptions::progress moves from 0.05 to
// 0.95 over the layers; Cancelled naming ws.dir() when the callback says stop.
Status LayerLoaded(const LoadOptions& options, const WeightStore& ws, int64_t i, int64_t n);

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CUDA_LOAD_HELPERS_H_
