// Dense products against stored weight matrices: y[n, m] = x[n, k] · Wᵀ, with W
// a row-major [m, k] matrix in F32/F16/BF16 read in place from the mapped
// checkpoint (never copied) and fp32 accumulation. One token (n == 1) takes a
// memory-bound GEMV path; more tokens take a blocked path that converts a tile
// of W rows to fp32 once and reuses it for every row of x.
#ifndef STRATA_BACKEND_CPU_MATMUL_H_
#define STRATA_BACKEND_CPU_MATMUL_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace strata {
class ThreadPool;
namespace cpu {

// A row-major [rows, cols] matrix of F32, F16 or BF16 elements (a PyTorch
// Linear weight is [out, in]). Borrowed: the data outlives the view.
struct WeightMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;  // m: output features
  int64_t cols = 0;  // k: input features

  // Rows [begin, begin + count) as a matrix of their own (e.g. one head's slice).
  WeightMatrix RowSlice(int64_t begin, int64_t count) const;
  const void* RowPtr(int64_t row) const;
};

// Floats of scratch that MatMul needs for n rows of x against a W of `k`
// columns on a pool of `num_threads` threads (0 when n == 1).
size_t MatMulScratchFloats(int64_t n, int64_t k, int num_threads);

// y[n, w.rows] = x[n, w.cols] · wᵀ. `scratch` must hold MatMulScratchFloats(...)
// floats for pool's thread count (or 1 without a pool). y must not alias x.
void MatMul(const float* x, int64_t n, const WeightMatrix& w, float* y, float* scratch,
            ThreadPool* pool);

// Single-threaded GEMV over rows [begin, end): y[j − begin] = w[j,:] · x. For
// callers that fuse several small products into one parallel loop.
void GemvRows(const WeightMatrix& w, const float* x, int64_t begin, int64_t end, float* y);

// Helpers for per-row work on a weight (attention heads, tests). Vectorised.
float DotRow(const WeightMatrix& w, int64_t row, const float* x);     // w[row,:]·x
void AxpyRow(const WeightMatrix& w, int64_t row, float a, float* y);  // y += a·w[row,:]
void RowToF32(const WeightMatrix& w, int64_t row, float* out);        // out = w[row,:]

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_MATMUL_H_
