// Rotary position embeddings on the GPU, applied in place to bf16 head
// vectors from a precomputed fp32 cos/sin table (one row per position, made
// on the host by cpu::RopeCosSin, YaRN's attention factor included), so the
// angles are the CPU's bit for bit. backend/cpu/rope_yarn.h is the reference
// for both pair layouts.
#ifndef STRATA_BACKEND_CUDA_ROPE_H_
#define STRATA_BACKEND_CUDA_ROPE_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

enum class RopePairs {
  kHalfSplit,    // (x_i, x_{i+half}): rotate_half (DeepSeek's indexer)
  kInterleaved,  // (x_{2i}, x_{2i+1}), written back [evens | odds] (DeepSeek MLA)
};

struct RopeArgs {
  RopePairs pairs = RopePairs::kHalfSplit;
  bf16* x = nullptr;         // head vector (t, h) at x + t·token_stride + h·head_stride
  int64_t num_tokens = 0;
  int64_t num_heads = 1;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
  int64_t offset = 0;        // first rotated element of a head vector
  int64_t half = 0;          // rotated pairs per vector (≤ 256)
  const float* cos = nullptr;  // device [max_positions, half]
  const float* sin = nullptr;
  int64_t max_positions = 0;   // rows of the tables
  // Token t's position: positions[t] (device) when set, else pos0 + t.
  const int32_t* positions = nullptr;
  int64_t pos0 = 0;
};

// No host synchronisation (graph-capturable). Positions outside the table
// (possible only through `positions`) leave the vector unchanged.
Status ApplyRope(const RopeArgs& args, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_ROPE_H_
