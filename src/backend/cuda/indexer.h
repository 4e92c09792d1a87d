// DeepSeek-V3.2's lightning indexer on the GPU (model-spec §3.3.3): score
// every causal cached key for each query,
//   I(t, s) = Σ_h w[t, h] · ReLU(scale · q[t, h, :] · key[s, :]),
// and select the top `top_k` keys, fused, so that the decode path never writes
// a full score row to global memory. backend/cpu/indexer.h is the reference.
//
// Selection rule (the CPU's, exactly): the min(top_k, #causal keys) keys with
// the largest I, ties to the lower position; NaN scores rank as −inf. Output
// rows are positions in ascending order, −1 past counts[t]. Scores are fp32
// from bf16 q and keys (fp32 accumulation), so they can differ from the CPU's
// fp32 scores in the last bits; keys whose scores sit within that rounding of
// the k-th score may be swapped — exact ties (e.g. the zeros ReLU makes) are
// resolved exactly as on the CPU.
//
// Index key cache: kept BESIDE the MLA latent cache with the SAME paging —
// pool [num_blocks, kKvBlockTokens, head_dim] bf16 addressed through the same
// block table as the sequence's MlaCache. One block allocation then serves
// both caches, and a selected position maps to its MLA row and its index-key
// row by the same table lookup (no second allocator, no translation table).
#ifndef STRATA_BACKEND_CUDA_INDEXER_H_
#define STRATA_BACKEND_CUDA_INDEXER_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

// Keys per CTA of the fused score + partial top-k. A row of at most this many
// keys is scored and selected inside one CTA (nothing but the selection
// leaves the chip). A longer row is split; each split writes only its own
// top-k candidates (score, position) to the workspace — at most top_k per
// 4096 keys, half a row's worth at top_k = 2048 — and a merge kernel selects
// the final top-k from them.
constexpr int64_t kIndexerSplitKeys = 4096;

struct IndexKeyCache {
  bf16* pool = nullptr;                  // [num_blocks, 64, head_dim]
  const int32_t* block_table = nullptr;  // device [batch, max_blocks] (the MLA cache's)
  int64_t max_blocks = 0;
};

struct IndexerShape {
  int64_t num_heads = 0;  // index_n_heads (64 in DeepSeek-V3.2)
  int64_t head_dim = 0;   // index_head_dim (128)
  int64_t top_k = 0;      // index_topk (2048)
  float scale = 0.f;      // inside the ReLU; 0 means head_dim^-1/2
};

// Writes `n` key rows (bf16 [n, head_dim], row stride ld) as MlaCacheWrite
// does: sequence 0 at positions start.. (positions == nullptr), or row b of a
// decode batch to position positions[b] of sequence b.
Status IndexKeyCacheWrite(int64_t head_dim, const IndexKeyCache& cache, const bf16* rows,
                          int64_t ld, int64_t n, int64_t start, const int32_t* positions,
                          cudaStream_t stream);

// Decode: B queries, query b against positions 0..seq_lens[b]−1 of sequence b
// (its new key already written).
//   q [B, H, d] bf16, row stride ld_q (0: H·d);
//   weights [B, H] fp32 (weights_proj output times H^-1/2), row stride ld_w;
//   rows [B, top_k] int32 out; counts [B] int32 out.
// seq_lens above max_seq_len are read as max_seq_len. H a multiple of 8 up to
// 64 and d a multiple of 32 up to 256 with 16-byte aligned q and pool score on
// tensor cores; other shapes on a plain fp32 path.
struct IndexerDecodeArgs {
  IndexerShape shape;
  int64_t batch = 0;
  const bf16* q = nullptr;
  int64_t ld_q = 0;
  const float* weights = nullptr;
  int64_t ld_w = 0;
  IndexKeyCache cache;
  const int32_t* seq_lens = nullptr;
  int64_t max_seq_len = 0;
  int32_t* rows = nullptr;
  int32_t* counts = nullptr;
  // Optional (device): Σ counts is added to it, the selected-row total the
  // executor can hand the scheduler as this layer's effective attention cost.
  unsigned long long* selected_total = nullptr;
  // Splits shorter than kIndexerSplitKeys when batch · ceil(max_seq_len /
  // kIndexerSplitKeys) CTAs would leave most of the GPU idle (a batch-1 row
  // of 4K keys is one CTA): about kIndexerWaveCtas CTAs in all, each of at
  // least kIndexerMinSplitKeys keys, every key of a split passed to the merge
  // when the split is no longer than top_k. The selection is exact either
  // way, so the output is the same bits (indexer.split_decode).
  bool small_splits = false;
};
constexpr int64_t kIndexerWaveCtas = 128;
constexpr int64_t kIndexerMinSplitKeys = 256;
// small_splits as the call will pass it.
size_t IndexerDecodeWorkspaceBytes(const IndexerShape& shape, int64_t batch, int64_t max_seq_len,
                                   bool small_splits = false);
Status IndexerDecode(const IndexerDecodeArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

// Prefill of one sequence (block-table row 0): T queries at positions
// past..past+T−1, query t over keys 0..past+t. Same layouts with T rows.
// Queries go in passes of kIndexerPrefillRowsPerPass, which bounds the
// candidate workspace.
constexpr int64_t kIndexerPrefillRowsPerPass = 128;
struct IndexerPrefillArgs {
  IndexerShape shape;
  int64_t num_tokens = 0;
  int64_t past = 0;
  const bf16* q = nullptr;
  int64_t ld_q = 0;
  const float* weights = nullptr;
  int64_t ld_w = 0;
  IndexKeyCache cache;
  int32_t* rows = nullptr;
  int32_t* counts = nullptr;
  unsigned long long* selected_total = nullptr;  // optional, as for decode
};
size_t IndexerPrefillWorkspaceBytes(const IndexerShape& shape, int64_t num_tokens, int64_t past);
Status IndexerPrefill(const IndexerPrefillArgs& args, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_INDEXER_H_
