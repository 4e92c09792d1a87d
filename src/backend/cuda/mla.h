// Kimi's NoPE MLA on the GPU (model-spec §2.4) over a paged cache of bf16
// latent rows [c (r) | k_r (dr)], kKvBlockTokens tokens per block. The
// executor writes the new rows (kv_a projection, then RMSNorm of the latent
// part) into the cache before calling attention. Softmax is fp32; the scale is
// (dn + dr)^-1/2 unless given. backend/cpu/attention.h is the reference.
#ifndef STRATA_BACKEND_CUDA_MLA_H_
#define STRATA_BACKEND_CUDA_MLA_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

constexpr int64_t kKvBlockTokens = 64;

struct MlaShape {
  int64_t num_heads = 0;  // H
  int64_t nope_dim = 0;   // dn
  int64_t rope_dim = 0;   // dr (unrotated in Kimi)
  int64_t v_dim = 0;      // dv
  int64_t kv_rank = 0;    // r
  float scale = 0.f;      // 0: 1/sqrt(dn + dr)
  int64_t cache_dim() const { return kv_rank + rope_dim; }
};

// Paged latent cache of one layer: pool [num_blocks, kKvBlockTokens, r + dr]
// bf16; token s of sequence b lives in block block_table[b·max_blocks + s/64]
// at row s % 64.
struct MlaCache {
  bf16* pool = nullptr;
  const int32_t* block_table = nullptr;  // device [batch, max_blocks]
  int64_t max_blocks = 0;                // per sequence (row stride of block_table)
};

// Copies `n` new rows (bf16 [n, r+dr], stride ld) of sequence b = 0 into the
// cache at positions start..start+n−1 (prefill), or row b of a decode batch
// to position positions[b] of sequence b (positions on the device; pass
// positions = nullptr for the prefill form).
Status MlaCacheWrite(const MlaShape& shape, const MlaCache& cache, const bf16* rows, int64_t ld,
                     int64_t n, int64_t start, const int32_t* positions, cudaStream_t stream);

// Decode in the absorbed form, B sequences with one query each:
//   q_abs [B, H, r + dr] bf16: per head (W_UK,hᵀ q_nope,h | q_rope,h), made by
//   the caller with StridedBatchedGemm;
//   seq_lens [B] on the device: tokens in the cache (the new one included).
//   out_latent [B, H, r] fp32 or bf16: Σ_s p(s) c_s; the caller applies W_UV.
// seq_lens above max_seq_len are read as max_seq_len; a sequence of length 0
// gets zeros. r = 512, dr = 64 with 16-byte aligned pointers take the
// tensor-core kernel (any H); other shapes a simple fp32 kernel.
// All heads of a sequence share each cache row, so one pass over the cache
// serves every head; long sequences are split over CTAs (split-K) and merged.
//
// Sparse attention (DeepSeek-V3.2 DSA, gather-based): with sparse.rows set,
// query row b reads only the cache positions sparse.rows[b·stride + j],
// j < sparse.counts[b] (the indexer's selection, backend/cuda/indexer.h),
// gathered row by row from the paged cache; seq_lens is then unused and
// max_seq_len bounds the counts (≤ stride; top_k for DSA). The kernels are the
// dense ones walking the gathered rows as if they were one sequence, so the
// cost is flat in the context length once it exceeds top_k. Positions must be
// valid cache positions of the row's sequence (negative or off-table ones
// read as zero rows). With one_sequence every row uses sequence 0's block
// table: the prefill form, where each of T query tokens (batch = T) has its
// own selected set — see MlaSparsePrefill.
struct MlaSparseRows {
  const int32_t* rows = nullptr;    // device [batch, stride]; null: dense attention
  const int32_t* counts = nullptr;  // device [batch]
  int64_t stride = 0;
  bool one_sequence = false;
};

struct MlaDecodeArgs {
  MlaShape shape;
  int64_t batch = 0;
  const bf16* q_abs = nullptr;
  MlaCache cache;
  const int32_t* seq_lens = nullptr;
  int64_t max_seq_len = 0;  // upper bound of seq_lens (host), sizes the split
  void* out_latent = nullptr;
  ActType out_type = ActType::kBf16;
  MlaSparseRows sparse;     // optional DSA selection
  // Optional: q_rope,h read from here instead of q_abs[b, h, r:], so a caller
  // whose projection already holds it skips a copy: row (b, h) at
  // q_rope + (b·H + h)·q_rope_stride, dr elements. q_abs[b, h, r:] is then
  // not read.
  const bf16* q_rope = nullptr;
  int64_t q_rope_stride = 0;
  // Batch-invariant mode (issue 6): a sequence's output is bit-identical
  // whatever the batch size, the other sequences, its slot in the batch and
  // max_seq_len. The tensor-core kernel then splits every sequence into
  // splits of a fixed 512 keys at absolute positions (keys [512·i,
  // 512·(i+1))), and one merge kernel sums the splits that hold keys in split
  // order (splits past the sequence's length are never read); the generic
  // kernel never splits. The workspace then holds
  // batch · ceil(max_seq_len / 512) · H · (r + 1) floats when that is more
  // than one split (MlaDecodeWorkspaceBytes with batch_invariant = true), e.g.
  // 269 MB at batch 64, 32K keys, H = 32, r = 512; max_seq_len ≤ 2^20.
  // Default off (the default plan picks the split from the batch and the
  // bound, which is faster at small batches).
  bool batch_invariant = false;
  // The caller's promise that the work this call follows on the stream
  // writes no cache row of a sequence b but its newest, position
  // seq_lens[b] − 1 (a decode step's MlaCacheWrite), and writes neither
  // seq_lens nor the block table: the tensor-core kernel then requests its
  // first cache block before its PDL wait when that block holds older rows
  // only, so the load overlaps the previous kernels' tail. Dense only
  // (ignored with `sparse`); the same bits either way.
  bool cache_before_wait = false;
};
size_t MlaDecodeWorkspaceBytes(const MlaShape& shape, int64_t batch, int64_t max_seq_len,
                               bool batch_invariant = false);
Status MlaDecode(const MlaDecodeArgs& args, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);

// Prefill of one sequence, flash-style on tensor cores with causal masking:
// T queries at positions past..past+T−1 attend to keys 0..past+T−1.
//   q [T, H, dn+dr] bf16 (stride ld_q);
//   k_nope [S, H, dn] and v [S, H, dv] bf16: the expanded keys/values
//   (kv_b_proj applied to the cached latents by the caller; S = past + T),
//   given as one [S, H·(dn+dv)] matrix kv with per-head blocks
//   [k_nope,h (dn) | v_h (dv)] — exactly kv_b_proj's output row layout;
//   k_rope [S, dr] bf16 shared by all heads (row stride ld_krope, so it can
//   point into the cache's gathered rows).
//   out [T, H, dv] bf16.
struct MlaPrefillArgs {
  MlaShape shape;
  int64_t num_tokens = 0;  // T
  int64_t past = 0;
  const bf16* q = nullptr;
  int64_t ld_q = 0;        // 0: H·(dn+dr)
  const bf16* kv = nullptr;
  const bf16* k_rope = nullptr;
  int64_t ld_krope = 0;    // 0: dr
  bf16* out = nullptr;
};
// dn = 128, dr = 64, dv = 128 with 16-byte aligned q/kv/k_rope/out and ld_q,
// ld_krope multiples of 8 take the tensor-core kernel; other shapes a simple
// fp32 kernel.
// Chunk invariance (issue 6), in every mode: the output of the query at
// absolute position i is bit-identical for any call [past, past + T) that
// contains it. The kernel choice depends on the shape, the alignment and the
// device only; key tiles start at absolute key 0; a query's own key tiles
// are processed in the same order with the same arithmetic in every call,
// and the key tiles past it that its query tile adds are fully masked, which
// is an exact no-op (max unchanged, rescale factor 2^0 = 1, P = 0 so the
// P·V products add zeros). Needs finite kv values.
Status MlaPrefill(const MlaPrefillArgs& args, cudaStream_t stream);

// Sparse prefill in the absorbed form (DeepSeek-V3.2): T query tokens of
// sequence 0, token t attending to its own selected cache positions
// rows[t·top_k + j], j < counts[t] (IndexerPrefill's output; the new tokens'
// rows already written to the cache).
//   q_abs [T, H, r + dr] bf16 (W_UK absorbed into q_nope, as for decode);
//   out_latent [T, H, r]: Σ_j p(j) c_rows[j]; the caller applies W_UV.
// This is MlaDecode with batch = T and sparse.one_sequence, in passes of at
// most 65535 tokens. Absorbed is the right form here: each query reads ≤ top_k
// rows, so expanding keys for the whole context would cost far more.
struct MlaSparsePrefillArgs {
  MlaShape shape;
  int64_t num_tokens = 0;
  const bf16* q_abs = nullptr;
  MlaCache cache;
  const int32_t* rows = nullptr;    // device [T, top_k]
  const int32_t* counts = nullptr;  // device [T]
  int64_t top_k = 0;
  void* out_latent = nullptr;
  ActType out_type = ActType::kBf16;
  // Batch-invariant mode (issue 6): MlaDecodeArgs::batch_invariant for the
  // passes, so a query's output is bit-identical whatever num_tokens and the
  // other queries of the call (its own selected rows in their order are all
  // it depends on). Size the workspace with batch_invariant = true.
  bool batch_invariant = false;
};
size_t MlaSparsePrefillWorkspaceBytes(const MlaShape& shape, int64_t num_tokens, int64_t top_k,
                                      bool batch_invariant = false);
Status MlaSparsePrefill(const MlaSparsePrefillArgs& args, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// Gathers sequence 0's first `n` cache rows into a contiguous [n, r+dr]
// buffer (prefill reads its latents back for the kv_b expansion).
Status MlaCacheGather(const MlaShape& shape, const MlaCache& cache, int64_t n, bf16* rows,
                      cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_MLA_H_
