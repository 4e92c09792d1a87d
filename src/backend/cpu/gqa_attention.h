// Causal grouped-query softmax attention over a K/V cache (model-spec §1.5,
// §4.4): query head h reads KV head h / (H / Hkv), as transformers' repeat_kv
// expands them. Scores and softmax are fp32; the caller applies RoPE, norms
// and any output gate.
#ifndef STRATA_BACKEND_CPU_GQA_ATTENTION_H_
#define STRATA_BACKEND_CPU_GQA_ATTENTION_H_

#include <cstdint>

#include "backend/cpu/cache_rows.h"
#include "base/status.h"

namespace strata {
class ThreadPool;
namespace cpu {

struct GqaDims {
  int64_t num_heads = 0;     // H (query heads)
  int64_t num_kv_heads = 0;  // Hkv, divides H
  int64_t head_dim = 0;      // hd, shared by q, k and v
};

// Keys per block of the online softmax (scores of one block live on the stack).
constexpr int64_t kGqaKeyBlock = 128;

// out[t, h, :] = Σ_{s ≤ past + t} softmax_s(scale · q[t, h]·k[s, h/G]) v[s, h/G]
// for the T new queries at positions past .. past + T − 1 (G = H / Hkv).
// q: [T, H, hd]. k_cache, v_cache: past + T rows of [Hkv, hd], the new
// tokens' rows already appended. out: [T, H, hd], must not alias the inputs.
// Parallel over (token, head) pairs; no scratch. InvalidArgument on bad sizes.
Status GqaAttention(const GqaDims& dims, const float* q, int64_t num_tokens, CacheRows k_cache,
                    CacheRows v_cache, int64_t past, float scale, float* out, ThreadPool* pool);
// The same over contiguous [past + T, Hkv, hd] arrays.
Status GqaAttention(const GqaDims& dims, const float* q, int64_t num_tokens, const float* k_cache,
                    const float* v_cache, int64_t past, float scale, float* out, ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_GQA_ATTENTION_H_
