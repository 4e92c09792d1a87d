// Kimi's MLA in NoPE form (model-spec §2.4) over a cache of compressed latents.
// Each cached token is one row [c (r) | k_r (dr)]: the normalised latent and the
// shared, unrotated key part. Prefill re-expands keys/values with kv_b_proj
// block by block (causal, online softmax); single-token decode (and short
// continuations) use the absorbed form that never expands the cache. Softmax is fp32; the scale is
// (dn + dr)^-1/2.
// DeepSeek-V3.2 uses the same kernels: its k_r rows are stored already rotated
// (q_r rotated by the caller), its scale carries YaRN's mscale², and its
// queries may be restricted to the indexer's selected rows (MlaSelection).
#ifndef STRATA_BACKEND_CPU_ATTENTION_H_
#define STRATA_BACKEND_CPU_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cache_rows.h"
#include "backend/cpu/matmul.h"

namespace strata {
class ThreadPool;
namespace cpu {

struct MlaDims {
  int64_t num_heads = 0;  // H
  int64_t nope_dim = 0;   // dn: qk_nope_head_dim
  int64_t rope_dim = 0;   // dr: qk_rope_head_dim (not rotated in Kimi)
  int64_t v_dim = 0;      // dv: v_head_dim
  int64_t kv_rank = 0;    // r:  kv_lora_rank
  // Softmax scale; 0 means (dn + dr)^-1/2 (Kimi). DeepSeek's YaRN checkpoints
  // multiply that by mscale² (model-spec §3.3.1).
  float softmax_scale = 0.f;
  int64_t q_dim() const { return nope_dim + rope_dim; }     // per head
  int64_t cache_dim() const { return kv_rank + rope_dim; }  // per token
  int64_t kv_b_rows_per_head() const { return nope_dim + v_dim; }
};

// Keys expanded per block in MlaPrefill.
constexpr int64_t kMlaKeyBlock = 128;

// Sparse attention (DeepSeek DSA): query t attends only to the cache rows
// rows[t·stride + j], j < counts[t], given in ascending order and all causal
// (the indexer's selection). Without a selection every causal row is read.
struct MlaSelection {
  const int32_t* rows = nullptr;
  const int32_t* counts = nullptr;
  int64_t stride = 0;
};

size_t MlaPrefillScratchFloats(const MlaDims& d, int64_t num_tokens, int num_threads);

// Causal attention of `num_tokens` new queries at positions past..past+T−1.
// q: [T, H, dn+dr]. cache: past + T rows of [r + dr] (the new tokens already
// appended; the pointer overloads read a contiguous [past + T, r + dr] array).
// kv_b: kv_b_proj [H·(dn+dv), r]; per head h rows h·(dn+dv) .. +dn−1 are W_UK and
// the next dv rows W_UV. out: [T, H, dv]. `scratch`: MlaPrefillScratchFloats.
// `selection` (optional): restricts each query to its selected rows.
void MlaPrefill(const MlaDims& d, const float* q, int64_t num_tokens, CacheRows cache,
                int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                ThreadPool* pool, const MlaSelection* selection = nullptr);
inline void MlaPrefill(const MlaDims& d, const float* q, int64_t num_tokens, const float* cache,
                       int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                       ThreadPool* pool, const MlaSelection* selection = nullptr) {
  MlaPrefill(d, q, num_tokens, CacheRows::Contiguous(&cache, d.cache_dim()), past, kv_b, out,
             scratch, pool, selection);
}

size_t MlaAbsorbedScratchFloats(const MlaDims& d, int64_t num_tokens);

// The absorbed form (never expands the cache), for single-token decode and
// short continuations over a long cache; same inputs and output as MlaPrefill:
//   q̃_h = W_UK,hᵀ q_nope,h;  score(s) = (q̃_h·c_s + q_r,h·k_r,s)·scale;
//   õ_h = Σ_s p(s) c_s;       o_h = W_UV,h õ_h.
// `scratch`: MlaAbsorbedScratchFloats floats. `selection` as in MlaPrefill.
void MlaAbsorbed(const MlaDims& d, const float* q, int64_t num_tokens, CacheRows cache,
                 int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                 ThreadPool* pool, const MlaSelection* selection = nullptr);
inline void MlaAbsorbed(const MlaDims& d, const float* q, int64_t num_tokens, const float* cache,
                        int64_t past, const WeightMatrix& kv_b, float* out, float* scratch,
                        ThreadPool* pool, const MlaSelection* selection = nullptr) {
  MlaAbsorbed(d, q, num_tokens, CacheRows::Contiguous(&cache, d.cache_dim()), past, kv_b, out,
              scratch, pool, selection);
}

// Multiply-adds of each form for T new tokens after `past` cached ones, to pick
// the cheaper one (expansion dominates for fresh prefill, the absorbed form for
// decode and short continuations). `top_k` > 0: each query reads at most that
// many rows (a sparse selection).
double MlaPrefillCost(const MlaDims& d, int64_t num_tokens, int64_t past, int64_t top_k = 0);
double MlaAbsorbedCost(const MlaDims& d, int64_t num_tokens, int64_t past, int64_t top_k = 0);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_ATTENTION_H_
