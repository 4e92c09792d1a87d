// One warp per head vector: each lane loads its pairs into registers, the
// warp synchronises, then the lanes write the rotated values. The interleaved
// layout writes element i from pair i, which other lanes read, so the loads
// must all be done before any store. Memory bound and tiny next to the GEMMs
// around it (a decode step rotates a few KB per layer).
#include "backend/cuda/rope.h"

#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/vec.cuh"

namespace strata::cuda {
namespace {

constexpr int kMaxHalf = 256;
constexpr int kPerLane = kMaxHalf / 32;
constexpr int kWarps = 8;

struct RopeParams {
  bf16* x;
  int64_t vectors;  // num_tokens · num_heads
  int64_t num_heads, token_stride, head_stride, offset;
  int half;
  int interleaved;
  const float* cos;
  const float* sin;
  int64_t max_positions;
  const int32_t* positions;
  int64_t pos0;
};

__global__ void __launch_bounds__(kWarps * 32) RopeKernel(RopeParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int lane = threadIdx.x & 31;
  const int64_t v = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (v >= p.vectors) return;  // warp-uniform
  const int64_t t = v / p.num_heads, h = v % p.num_heads;
  const int64_t pos = p.positions != nullptr ? static_cast<int64_t>(p.positions[t]) : p.pos0 + t;
  if (pos < 0 || pos >= p.max_positions) return;  // warp-uniform
  bf16* x = p.x + t * p.token_stride + h * p.head_stride + p.offset;
  const float* c = p.cos + pos * p.half;
  const float* s = p.sin + pos * p.half;
  float a[kPerLane], b[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < p.half) {
      a[j] = LoadF(x + (p.interleaved ? 2 * i : i));
      b[j] = LoadF(x + (p.interleaved ? 2 * i + 1 : i + p.half));
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < p.half) {
      // The CPU's a·c − b·s and b·c + a·s in fp32, without contraction.
      StoreF(x + i, __fsub_rn(__fmul_rn(a[j], c[i]), __fmul_rn(b[j], s[i])));
      StoreF(x + i + p.half, __fadd_rn(__fmul_rn(b[j], c[i]), __fmul_rn(a[j], s[i])));
    }
  }
}

}  // namespace

Status ApplyRope(const RopeArgs& a, cudaStream_t stream) {
  if (a.half < 1 || a.half > kMaxHalf) {
    return absl::InvalidArgumentError(absl::StrCat("ApplyRope: half must be in [1, ", kMaxHalf,
                                                   "], got ", a.half));
  }
  if (a.num_tokens < 0 || a.num_heads < 1) {
    return absl::InvalidArgumentError("ApplyRope: num_tokens must be >= 0 and num_heads >= 1");
  }
  if (a.num_tokens == 0) return OkStatus();
  if (a.x == nullptr || a.cos == nullptr || a.sin == nullptr) {
    return absl::InvalidArgumentError("ApplyRope: x, cos and sin must be set");
  }
  if (a.positions == nullptr && (a.pos0 < 0 || a.pos0 + a.num_tokens > a.max_positions)) {
    return absl::OutOfRangeError(absl::StrCat("ApplyRope: positions ", a.pos0, "..",
                                              a.pos0 + a.num_tokens - 1, " exceed the table's ",
                                              a.max_positions));
  }
  RopeParams p{};
  p.x = a.x;
  p.vectors = a.num_tokens * a.num_heads;
  p.num_heads = a.num_heads;
  p.token_stride = a.token_stride;
  p.head_stride = a.head_stride;
  p.offset = a.offset;
  p.half = static_cast<int>(a.half);
  p.interleaved = a.pairs == RopePairs::kInterleaved ? 1 : 0;
  p.cos = a.cos;
  p.sin = a.sin;
  p.max_positions = a.max_positions;
  p.positions = a.positions;
  p.pos0 = a.pos0;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.vectors, kWarps)));
  (void)LaunchPdl(RopeKernel, grid, dim3(kWarps * 32), 0, stream, p);
  return LaunchStatus("RopeKernel");
}

}  // namespace strata::cuda
