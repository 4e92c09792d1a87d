// Region-by-region device copies of CUDA sequence states (cuda_paged_state.h).
#include <functional>

#include "backend/cuda/cuda_common.h"
#include "exec/cuda/cuda_paged_state.h"
#include "exec/cuda/layer_executor.h"

namespace strata {
namespace cuda_exec {

size_t StateLayout::SlotBytes() const {
  size_t n = 0;
  for (const StateRegion& r : slot_regions) n += r.empty() ? 0 : r.unit_bytes * r.layers;
  return n;
}

size_t StateLayout::BlockBytes() const {
  size_t n = 0;
  for (const StateRegion& r : block_regions) n += r.empty() ? 0 : r.unit_bytes * r.layers;
  return n;
}

bool StateLayout::has_blocks() const {
  for (const StateRegion& r : block_regions) {
    if (r.layers > 0) return true;
  }
  return false;
}

namespace {

// Calls f(first, run) for each run of blocks j ∈ [first, first + run) whose ids
// are consecutive in `a` and (when not empty) in `b`.
void ForRuns(std::span<const int32_t> a, std::span<const int32_t> b,
             const std::function<void(size_t, size_t)>& f) {
  const size_t n = a.size();
  for (size_t j = 0; j < n;) {
    size_t run = 1;
    while (j + run < n && a[j + run] == a[j] + static_cast<int32_t>(run) &&
           (b.empty() || b[j + run] == b[j] + static_cast<int32_t>(run))) {
      ++run;
    }
    f(j, run);
    j += run;
  }
}

}  // namespace

Status ZeroSlot(const StateLayout& layout, int32_t slot, cudaStream_t stream) {
  for (const StateRegion& r : layout.slot_regions) {
    if (r.empty()) continue;
    for (int64_t l = 0; l < r.layers; ++l) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(r.At(l, slot), 0, r.unit_bytes, stream));
    }
  }
  return OkStatus();
}

Status CopySlot(const StateLayout& layout, int32_t dst, int32_t src, cudaStream_t stream) {
  for (const StateRegion& r : layout.slot_regions) {
    if (r.empty()) continue;
    for (int64_t l = 0; l < r.layers; ++l) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(r.At(l, dst), r.At(l, src), r.unit_bytes,
                                                  cudaMemcpyDeviceToDevice, stream));
    }
  }
  return OkStatus();
}

Status CopyBlocks(const StateLayout& layout, std::span<const int32_t> dst,
                  std::span<const int32_t> src, cudaStream_t stream) {
  if (dst.size() != src.size()) return absl::InternalError("CopyBlocks: block counts differ");
  cudaError_t err = cudaSuccess;
  for (const StateRegion& r : layout.block_regions) {
    if (r.empty()) continue;
    for (int64_t l = 0; l < r.layers; ++l) {
      ForRuns(src, dst, [&](size_t j, size_t run) {
        if (err == cudaSuccess) {
          err = cudaMemcpyAsync(r.At(l, dst[j]), r.At(l, src[j]), run * r.unit_bytes,
                                cudaMemcpyDeviceToDevice, stream);
        }
      });
      STRATA_CUDA_RETURN_IF_ERROR(err);
    }
  }
  return OkStatus();
}

namespace {

// The host image: the slot regions layer by layer, then each block region
// layer by layer with the blocks in sequence order. `to_host` picks the
// direction.
Status HostImage(const StateLayout& layout, int32_t slot, std::span<const int32_t> blocks,
                 char* host, bool to_host, cudaStream_t stream) {
  const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  auto copy = [&](char* device, char* h, size_t bytes) {
    return to_host ? cudaMemcpyAsync(h, device, bytes, kind, stream)
                   : cudaMemcpyAsync(device, h, bytes, kind, stream);
  };
  size_t at = 0;
  for (const StateRegion& r : layout.slot_regions) {
    if (r.empty()) continue;
    for (int64_t l = 0; l < r.layers; ++l) {
      STRATA_CUDA_RETURN_IF_ERROR(copy(r.At(l, slot), host + at, r.unit_bytes));
      at += r.unit_bytes;
    }
  }
  cudaError_t err = cudaSuccess;
  for (const StateRegion& r : layout.block_regions) {
    if (r.empty()) continue;
    for (int64_t l = 0; l < r.layers; ++l) {
      ForRuns(blocks, {}, [&](size_t j, size_t run) {
        if (err == cudaSuccess) {
          err = copy(r.At(l, blocks[j]), host + at + j * r.unit_bytes, run * r.unit_bytes);
        }
      });
      STRATA_CUDA_RETURN_IF_ERROR(err);
      at += blocks.size() * r.unit_bytes;
    }
  }
  return OkStatus();
}

}  // namespace

Status SlotAndBlocksToHost(const StateLayout& layout, int32_t slot, std::span<const int32_t> blocks,
                           char* host, cudaStream_t stream) {
  return HostImage(layout, slot, blocks, host, true, stream);
}

Status SlotAndBlocksFromHost(const StateLayout& layout, int32_t slot,
                             std::span<const int32_t> blocks, const char* host,
                             cudaStream_t stream) {
  return HostImage(layout, slot, blocks, const_cast<char*>(host), false, stream);
}

StatusOr<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) {
    if (cudaError_t e = cudaMallocHost(&p, bytes); e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "allocating ", bytes, " bytes of pinned host memory failed: ", cudaGetErrorString(e)));
    }
  }
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(static_cast<char*>(p), bytes));
}

PinnedBuffer::~PinnedBuffer() {
  // Teardown cannot report; a failure here leaves nothing to do.
  if (data_ != nullptr) cudaFreeHost(data_);
}

// ----------------------------------------------------------------------------
// CudaSequenceState: the owner does the work (it holds the stream and pools).

CudaSequenceState::~CudaSequenceState() {
  book_->Release(blocks_);
  book_->GiveSlot(slot_);
}

std::unique_ptr<SequenceState> CudaSequenceState::Clone() const {
  return owner_->CloneState(*this);
}

void CudaSequenceState::Reset() { owner_->ResetState(*this); }

Status CudaSequenceState::MoveToHost() { return owner_->MoveStateToHost(*this); }

Status CudaSequenceState::MoveToDevice() { return owner_->MoveStateToDevice(*this); }

}  // namespace cuda_exec
}  // namespace strata
