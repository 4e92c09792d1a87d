// Causal depthwise conv + SiLU. Parallel over channel blocks: every channel's
// window update depends only on that channel, so blocks are independent.
#include "backend/cpu/conv.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {

void CausalConv1dSilu(const float* x, int64_t num_tokens, int64_t channels, const float* weight,
                      int64_t kernel_size, float* window, float* y, ThreadPool* pool) {
  const int64_t T = num_tokens;
  const int64_t C = channels;
  const int64_t K = kernel_size;
  const int64_t W = K - 1;  // rows in the carried window
  ParallelRange(pool, C, 64, [&](int64_t cb, int64_t ce) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = cb; c < ce; ++c) {
        const float* wc = weight + c * K;
        float acc = 0.f;
        // Tap j reads time t − (K−1) + j: from the window when negative.
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - W + j;
          const float v = src >= 0 ? x[src * C + c] : window[(W + src) * C + c];
          acc += wc[j] * v;
        }
        y[t * C + c] = acc / (1.f + std::exp(-acc));
      }
    }
    // New window = last W rows of (window ++ x).
    for (int64_t r = 0; r < W; ++r) {
      const int64_t src = T - W + r;  // index into x; negative reaches the old window
      if (src >= 0) {
        std::copy(x + src * C + cb, x + src * C + ce, window + r * C + cb);
      } else {
        // Old row W + src = T + r > r: rows move towards the front, so writing
        // row r (ascending) never clobbers a row still to be read.
        std::copy(window + (W + src) * C + cb, window + (W + src) * C + ce, window + r * C + cb);
      }
    }
  });
}

}  // namespace cpu
}  // namespace strata
