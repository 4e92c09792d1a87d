// Dense products y = alpha · x · Wᵀ (+ beta · y) on FP8 block-scaled weights
// (DeepSeek-V3 style: e4m3 codes plus one fp32 multiplier per block of the
// [n, k] weight, model-spec §3.2), kept FP8 on the device so that decode
// streams half the bytes of bf16.
//
//  * m ≤ kFp8GemvMaxRows (decode, small batches): a streaming kernel reads
//    the e4m3 codes once, converts them in registers (cvt e4m3x2 → f16x2),
//    multiplies by the block scale in fp32, rounds to bf16 and feeds the bf16
//    tensor cores with fp32 accumulation. The rounded value is exactly what
//    dequantising to fp32 and then to bf16 on the host gives, so the result
//    matches the bf16 path on host-dequantised weights.
//  * larger m (prefill): row chunks of W are dequantised into a bf16 tile
//    buffer the caller planned at load, each chunk followed by the bf16 Gemm
//    (cuBLASLt). Why not an FP8 × FP8 GEMM: cuBLASLt's FP8 path wants the
//    activations quantised to e4m3 too (with per-128 scales of their own),
//    which changes the numerics against the CPU reference and needs a
//    quantisation kernel per product; the dequantisation costs ~3 bytes per
//    weight element, which at a 2048-token slice is a few percent of the
//    GEMM's time (2·m flops per element at ~686 TFLOP/s vs 3 bytes at
//    ~4 TB/s).
#ifndef STRATA_BACKEND_CUDA_FP8_GEMM_H_
#define STRATA_BACKEND_CUDA_FP8_GEMM_H_

#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"

namespace strata::cuda {

// One FP8 weight as it lives on the device. Element (i, j) is
// code[i, j] · scale[i / block_rows, j / block_cols]; partial blocks at the
// right and bottom edges have scales of their own.
struct Fp8Matrix {
  const uint8_t* w = nullptr;    // [n, k] e4m3 codes, row stride ldw bytes
  int64_t ldw = 0;               // 0: k
  const float* scale = nullptr;  // [ceil(n / block_rows), ceil(k / block_cols)]
  int64_t ld_scale = 0;          // 0: ceil(k / block_cols)
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

struct Fp8GemmArgs {
  int64_t m = 0;                    // rows of x and y
  int64_t n = 0;                    // rows of W = columns of y
  int64_t k = 0;                    // columns of x and W
  const bf16* x = nullptr;          // [m, k], row stride ldx elements
  int64_t ldx = 0;                  // 0: k
  Fp8Matrix w;
  void* y = nullptr;                // [m, n], row stride ldy elements
  ActType y_type = ActType::kBf16;
  int64_t ldy = 0;                  // 0: n
  float alpha = 1.f;
  float beta = 0.f;                 // beta != 0 accumulates into y (fp32 y only)
  // bf16 scratch for m > kFp8GemvMaxRows: W is dequantised in chunks of
  // floor(tile_elems / k) rows. Unused (may be null) for smaller m.
  bf16* tile = nullptr;
  int64_t tile_elems = 0;
};

// Rows at or below which Fp8Gemm takes the streaming kernel.
constexpr int64_t kFp8GemvMaxRows = 64;

Status Fp8Gemm(BlasContext& ctx, const Fp8GemmArgs& args, cudaStream_t stream);

// out[i - row0, j] = bf16(W[i, j]) for rows [row0, row0 + rows) of a
// [*, k] FP8 matrix; out has row stride k.
Status DequantizeFp8ToBf16(const Fp8Matrix& w, int64_t row0, int64_t rows, int64_t k, bf16* out,
                           cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_FP8_GEMM_H_
