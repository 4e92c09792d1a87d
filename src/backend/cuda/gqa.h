// Grouped-query softmax attention on the GPU (model-spec §4.4, Qwen3-Next's
// gated full attention) over a paged bf16 K/V cache. Two steps per layer:
//  1. GqaAppend: q and k rows are RMS-normalised (fp32 statistics, weights
//     with Qwen3-Next's 1 + w already folded in) and rotated over their first
//     rotary_dim elements (half-split pairs, angle = fp32(position ·
//     inv_freq[i]) as cpu::ApplyRopeHalfSplit), q in place; k and v are
//     written into the cache at their positions;
//  2. GqaAttention: causal softmax attention of each query over its cached
//     keys 0..position (online softmax, fp32 accumulation), then the output
//     gate o ⊙ sigmoid(gate) and a bf16 store.
// backend/cpu/gqa_attention.h with cpu::RmsNorm / ApplyRopeHalfSplit is the
// reference. The cache of a layer is [blocks, 64, Hkv, hd] bf16 for K and V;
// a sequence's token p lives in block table[p / 64], row p % 64.
//
// Token t of a call belongs to one sequence: with `per_token_rows` (decode,
// one token per sequence) its block-table row is t, else (prefill of one
// sequence) row 0. Its position is positions[t] (device) when given, else
// pos0 + t. No host synchronisation: both calls can be captured in a graph.
//
// Invariance (issue 6), in the unsplit form: a query's output depends only on
// its own q/gate, its position and the cached keys 0..position, bit for bit —
// not on the batch, the other tokens of the call, where a prompt was cut
// into calls, or whether it runs as decode or prefill (gqa.cu says why).
// Decode may instead take the split form (GqaAttentionArgs::max_seq_len with
// a workspace): each row's keys are cut into up to kGqaMaxSplits ranges that
// run as CTAs of their own, and a merge kernel combines their partial
// softmaxes. It rounds differently (the ranges' partial sums are added in
// another order), and how the keys are cut depends on the bound, so a
// batch-invariant caller keeps the unsplit form.
#ifndef STRATA_BACKEND_CUDA_GQA_H_
#define STRATA_BACKEND_CUDA_GQA_H_

#include "backend/cuda/cuda_common.h"

namespace strata::cuda {

struct GqaShape {
  int64_t num_heads = 0;     // H (query heads)
  int64_t num_kv_heads = 0;  // Hkv, divides H; H / Hkv ≤ 8 or a multiple of 8
  int64_t head_dim = 0;      // hd: even, at most 256
  int64_t rotary_dim = 0;    // even, ≤ hd (0: no rotary)
};

// Where a call's tokens sit in the cache.
struct GqaCacheArgs {
  bf16* k_cache = nullptr;  // [blocks, 64, Hkv, hd]
  bf16* v_cache = nullptr;
  const int32_t* block_table = nullptr;  // device [rows, table_stride]
  int64_t table_stride = 0;
  bool per_token_rows = false;
  const int32_t* positions = nullptr;  // device [n] or null
  int64_t pos0 = 0;
};

struct GqaAppendArgs {
  GqaShape shape;
  int64_t num_tokens = 0;
  bf16* q = nullptr;        // [n, H, hd], token stride ldq; normalised and rotated in place
  int64_t ldq = 0;          // 0: H·hd
  const bf16* k = nullptr;  // [n, Hkv, hd], token stride ldkv
  const bf16* v = nullptr;  // [n, Hkv, hd], token stride ldkv
  int64_t ldkv = 0;         // 0: Hkv·hd
  const float* q_norm = nullptr;  // [hd]
  const float* k_norm = nullptr;  // [hd]
  float eps = 1e-6f;
  const float* inv_freq = nullptr;  // device [rotary_dim / 2]; may be null when rotary_dim is 0
  GqaCacheArgs cache;
};
Status GqaAppend(const GqaAppendArgs& args, cudaStream_t stream);

struct GqaAttentionArgs {
  GqaShape shape;
  int64_t num_tokens = 0;
  const bf16* q = nullptr;     // [n, H, hd] after GqaAppend, token stride ldq
  int64_t ldq = 0;             // 0: H·hd
  const bf16* gate = nullptr;  // [n, H, hd] output-gate pre-activations; null: no gate
  int64_t ldg = 0;             // 0: H·hd
  float scale = 0.f;           // 0: 1/sqrt(hd)
  GqaCacheArgs cache;          // the keys 0..position of each token must be cached
  bf16* out = nullptr;         // [n, H, hd], token stride ldo
  int64_t ldo = 0;             // 0: H·hd
  // Decode (per-token rows) only, the split form: every row's position is
  // below max_seq_len (host-known; the same bound for a captured graph's
  // replays), and the partials go to `workspace` of at least
  // GqaDecodeWorkspaceBytes(shape, num_tokens, max_seq_len) bytes. 0 or no
  // workspace: the unsplit form.
  int64_t max_seq_len = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
Status GqaAttention(const GqaAttentionArgs& args, cudaStream_t stream);

// Key ranges of a split decode row at most.
constexpr int64_t kGqaMaxSplits = 128;
// The split form's workspace for `batch` rows under `max_seq_len`.
size_t GqaDecodeWorkspaceBytes(const GqaShape& shape, int64_t batch, int64_t max_seq_len);

}  // namespace strata::cuda

#endif  // STRATA_BACKEND_CUDA_GQA_H_
