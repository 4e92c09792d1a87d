// Kimi Delta Attention on the CPU: the delta rule with per-channel decay, in a
// chunked form for prefill and a recurrent form for one token (model-spec §2.3).
// Gated DeltaNet (§4.3) is the same rule with one decay per head (g_per_head).
// Both take fp32 inputs laid out [T, H, d] and update the fp32 state in place.
#ifndef STRATA_BACKEND_CPU_KDA_H_
#define STRATA_BACKEND_CPU_KDA_H_

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace strata {
class ThreadPool;
namespace cpu {

struct KdaArgs {
  int64_t num_tokens = 0;  // T
  int64_t num_heads = 0;   // H
  int64_t key_dim = 0;     // dk
  int64_t value_dim = 0;   // dv
  const float* q = nullptr;     // [T, H, dk] after conv+SiLU, NOT normalised
  const float* k = nullptr;     // [T, H, dk] after conv+SiLU, NOT normalised
  const float* v = nullptr;     // [T, H, dv]
  const float* g = nullptr;     // [T, H, dk] log-decay (<= 0); [T, H] with g_per_head
  const float* beta = nullptr;  // [T, H] write strength in (0, 1)
  float* state = nullptr;       // [H, dk, dv] in/out, fp32 (zeros for a new sequence)
  float* out = nullptr;         // [T, H, dv]
  float scale = 0.f;            // query scale; 0 means 1/sqrt(dk)
  // Gated DeltaNet (Qwen3-Next, model-spec §4.3) decays the whole state of a
  // head by one scalar per token: g is then [T, H] and acts as KDA's
  // per-channel g broadcast over dk. Same kernels, same numerics.
  bool g_per_head = false;
  // q and k are L2-normalised inside (eps 1e-6 added to the sum of squares),
  // as Kimi runs it (use_qk_l2norm_in_kernel).
};

constexpr int64_t kKdaChunkSize = 64;

// Scratch bytes KdaChunked needs for these sizes and `num_threads` workers.
size_t KdaChunkedWorkspaceBytes(int64_t num_tokens, int64_t num_heads, int64_t key_dim,
                                int64_t value_dim, int num_threads);

// Chunked (WY / UT-transform) form, chunk size 64, parallel over heads.
// `workspace` must hold KdaChunkedWorkspaceBytes(...) bytes, 64-byte aligned.
Status KdaChunked(const KdaArgs& args, void* workspace, size_t workspace_bytes, ThreadPool* pool);

// Token-by-token recurrence; T may be any length (used for decode with T = 1,
// and as the reference in tests). Parallel over heads.
Status KdaRecurrent(const KdaArgs& args, ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_KDA_H_
