// The MoE prefill's expert products on Hopper through CUTLASS 3.x's
// ptr-array grouped GEMM (TMA + wgmma, warp-specialised cooperative kernel,
// persistent over the tiles of all experts). moe_route.cu plans the rows
// (expert offsets, the row → token permutation) and moe_decode.cu's combine
// sums them; this file owns
// everything between: x gathered into expert-sorted rows, gate|up, SwiGLU,
// down. Every group's shape and pointers are written on the device from the
// plan's offsets, so there is no host loop over experts and no host sync.
//
// Built only when CMake found the CUTLASS headers (STRATA_HAVE_CUTLASS);
// otherwise MoeSm90GemmAvailable() is false and moe.cu keeps its mma.sync
// kernels. All CUTLASS instantiations live in moe_grouped_gemm_sm90.cu alone
// (they take minutes to compile).
#ifndef STRATA_BACKEND_CUDA_MOE_GROUPED_GEMM_SM90_H_
#define STRATA_BACKEND_CUDA_MOE_GROUPED_GEMM_SM90_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// Whether this build carries the CUTLASS kernels.
bool MoeSm90GemmAvailable();

// Whether a layer of this shape can take the path (bf16 experts; D and I
// multiples of 8 so every row start is 16-byte aligned for TMA).
bool MoeSm90GemmShapeOk(int64_t hidden, int64_t inter);

// Device bytes for the per-expert argument arrays of both GEMMs and CUTLASS's
// own workspace (tensor maps per SM) with num_experts groups on the current
// device. Depends on E and the SM count only, never on the token count.
// 0 when unavailable.
size_t MoeSm90WorkspaceBytes(int64_t num_experts);

// Activation bytes the path needs for `rows` (= n·k) expert-sorted rows:
// xs [rows, D] bf16 (gathered x) and h13 [rows, 2I] bf16 (gate|up), both
// dead before the down GEMM writes yrows, so moe.cu overlays them on yrows.
size_t MoeSm90ActivationBytes(int64_t rows, int64_t hidden, int64_t inter);

struct MoeSm90Args {
  int num_experts = 0;
  int hidden = 0;  // D
  int inter = 0;   // I
  int rows = 0;    // n·k, every row belongs to one expert
  const int32_t* offsets = nullptr;    // [E + 1] device, first row of each expert
  const int32_t* row_token = nullptr;  // [rows] device, token of each row
  const bf16* x = nullptr;             // [n, D]
  const bf16* w13 = nullptr;           // [E, 2I, D] (gate rows, then up rows)
  const bf16* w2 = nullptr;            // [E, D, I]
  void* act = nullptr;                 // MoeSm90ActivationBytes, 256-byte aligned
  bf16* h = nullptr;                   // [rows, I] out: silu(gate) ⊙ up
  float* yrows = nullptr;              // [rows, D] out: h · w2ᵀ
  void* workspace = nullptr;           // MoeSm90WorkspaceBytes(E), 256-byte aligned
  size_t workspace_bytes = 0;
};

// Enqueues gather, gate|up, SwiGLU and down on `stream`. `act` may alias
// `yrows` (it is consumed before the down GEMM writes).
Status MoeSm90GroupedGemms(const MoeSm90Args& args, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_MOE_GROUPED_GEMM_SM90_H_
