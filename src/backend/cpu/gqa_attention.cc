// GQA attention: each (token, head) pair walks its visible keys in blocks and
// folds them into a running max / sum / output (online softmax), so any
// context length runs without scratch; the pair's output row is the
// accumulator.
#include "backend/cpu/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

// Eight independent partial sums so the compiler vectorises the reduction.
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

Status GqaAttention(const GqaDims& d, const float* q, int64_t num_tokens, CacheRows k_cache,
                    CacheRows v_cache, int64_t past, float scale, float* out, ThreadPool* pool) {
  if (d.num_heads <= 0 || d.num_kv_heads <= 0 || d.head_dim <= 0 || num_tokens <= 0 || past < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GqaAttention: sizes must be positive (H=", d.num_heads, ", Hkv=", d.num_kv_heads,
        ", hd=", d.head_dim, ", T=", num_tokens, ", past=", past, ")"));
  }
  if (d.num_heads % d.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GqaAttention: ", d.num_kv_heads, " KV heads do not divide ", d.num_heads, " query heads"));
  }
  if (q == nullptr || k_cache.blocks == nullptr || v_cache.blocks == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("GqaAttention: null tensor");
  }
  const int64_t T = num_tokens, H = d.num_heads, hd = d.head_dim;
  const int64_t group = H / d.num_kv_heads;
  ParallelRange(pool, T * H, 4, [&](int64_t b, int64_t e) {
    float sc[kGqaKeyBlock];
    for (int64_t p = b; p < e; ++p) {
      const int64_t t = p / H, h = p % H;
      const float* qh = q + p * hd;
      const CacheRows kh = k_cache.At((h / group) * hd);
      const CacheRows vh = v_cache.At((h / group) * hd);
      float* acc = out + p * hd;
      std::fill(acc, acc + hd, 0.f);
      float mx = -std::numeric_limits<float>::infinity();
      float sum = 0.f;
      const int64_t visible = past + t + 1;  // causal
      for (int64_t s0 = 0; s0 < visible; s0 += kGqaKeyBlock) {
        const int64_t nb = std::min(kGqaKeyBlock, visible - s0);
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < nb; ++s) {
          sc[s] = Dot(qh, kh.row(s0 + s), hd) * scale;
          block_max = std::max(block_max, sc[s]);
        }
        if (block_max > mx) {
          // Rescale what was accumulated under the old maximum (0 on the first block).
          const float c = std::exp(mx - block_max);
          sum *= c;
          for (int64_t i = 0; i < hd; ++i) acc[i] *= c;
          mx = block_max;
        }
        for (int64_t s = 0; s < nb; ++s) {
          const float w = std::exp(sc[s] - mx);
          sum += w;
          const float* v = vh.row(s0 + s);
          for (int64_t i = 0; i < hd; ++i) acc[i] += w * v[i];
        }
      }
      const float inv = 1.f / sum;
      for (int64_t i = 0; i < hd; ++i) acc[i] *= inv;
    }
  });
  return OkStatus();
}

Status GqaAttention(const GqaDims& d, const float* q, int64_t num_tokens, const float* k_cache,
                    const float* v_cache, int64_t past, float scale, float* out, ThreadPool* pool) {
  const int64_t stride = d.num_kv_heads * d.head_dim;
  return GqaAttention(d, q, num_tokens, CacheRows::Contiguous(&k_cache, stride),
                      CacheRows::Contiguous(&v_cache, stride), past, scale, out, pool);
}

}  // namespace cpu
}  // namespace strata
