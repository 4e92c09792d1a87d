// Half-split partial RoPE. cos/sin are formed per (token, frequency) once and
// applied to every head of the token.
#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {

std::vector<float> RopeInverseFrequencies(int64_t rotary_dim, double theta) {
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  // transformers: 1.0 / (base ** (arange(0, dim, 2, dtype=float32) / dim)), all fp32.
  const float base = static_cast<float>(theta);
  for (size_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.f / std::pow(base, exponent);
  }
  return inv;
}

void ApplyRopeHalfSplit(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                        int64_t rotary_dim, int64_t first_position, const float* inv_freq,
                        ThreadPool* pool) {
  const int64_t half = rotary_dim / 2;
  ParallelRange(pool, num_tokens, 8, [&](int64_t b, int64_t e) {
    constexpr int64_t kMaxHalf = 512;
    float cs[kMaxHalf], sn[kMaxHalf];
    for (int64_t t = b; t < e; ++t) {
      const float pos = static_cast<float>(first_position + t);
      for (int64_t i0 = 0; i0 < half; i0 += kMaxHalf) {
        const int64_t n = std::min(kMaxHalf, half - i0);
        for (int64_t i = 0; i < n; ++i) {
          // The angle is rounded to fp32 (the reference's fp32 outer product),
          // then cos/sin are taken accurately.
          const float angle = pos * inv_freq[i0 + i];
          cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
          sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
        }
        for (int64_t h = 0; h < num_heads; ++h) {
          float* row = x + (t * num_heads + h) * head_dim;
          for (int64_t i = 0; i < n; ++i) {
            const float a = row[i0 + i], c = row[i0 + i + half];
            row[i0 + i] = a * cs[i] - c * sn[i];
            row[i0 + i + half] = c * cs[i] + a * sn[i];
          }
        }
      }
    }
  });
}

}  // namespace cpu
}  // namespace strata
