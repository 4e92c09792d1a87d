// RMSNorm kernels. The sum of squares is accumulated in double so that long
// rows do not lose precision; the cost is negligible next to the matmuls.
#include "backend/cpu/norm.h"

#include <cmath>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

inline float InvRms(const float* x, int64_t dim, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
}

// Rows per parallel chunk: about 16K elements.
int64_t Grain(int64_t dim) { return dim >= (1 << 14) ? 1 : (1 << 14) / dim; }

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps, float* y,
             ThreadPool* pool) {
  ParallelRange(pool, rows, Grain(dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      const float s = InvRms(xr, dim, eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * s);
    }
  });
}

void GatedRmsNormSigmoid(const float* x, const float* gate, int64_t rows, int64_t dim,
                         const float* w, float eps, float* y, ThreadPool* pool) {
  ParallelRange(pool, rows, Grain(dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      const float* gr = gate + r * dim;
      float* yr = y + r * dim;
      const float s = InvRms(xr, dim, eps);
      for (int64_t i = 0; i < dim; ++i) {
        const float sig = 1.f / (1.f + std::exp(-gr[i]));
        yr[i] = w[i] * (xr[i] * s) * sig;
      }
    }
  });
}

void GatedRmsNormSilu(const float* x, const float* gate, int64_t rows, int64_t dim, const float* w,
                      float eps, float* y, ThreadPool* pool) {
  ParallelRange(pool, rows, Grain(dim), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * dim;
      const float* gr = gate + r * dim;
      float* yr = y + r * dim;
      const float s = InvRms(xr, dim, eps);
      for (int64_t i = 0; i < dim; ++i) {
        const float silu = gr[i] / (1.f + std::exp(-gr[i]));
        yr[i] = w[i] * (xr[i] * s) * silu;
      }
    }
  });
}

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b,
               float eps, float* y, ThreadPool* pool) {
  ParallelRange(pool, rows, Grain(dim), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double sum = 0.0, ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
      const float rstd = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - m) * rstd * w[i] + b[i];
    }
  });
}

}  // namespace cpu
}  // namespace strata
