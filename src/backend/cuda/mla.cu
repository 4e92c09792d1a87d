// Kimi's NoPE MLA on the GPU: paged latent cache write/gather, absorbed decode
// (flash-decoding over the shared 576-wide cache row) and flash-style prefill.
//
// Cost model at the production shape (H=32, dn=128, dr=64, dv=128, r=512;
// H200: 4.27 TB/s copy bandwidth, ~686 TFLOP/s bf16 dense):
//  * MlaDecode reads every cached row once per head group of 32 heads: 1152 B
//    per token plus q (36 KB per sequence) and writes r floats per head. It does
//    2·H·(r+dr) + 2·H·r = 69.6 KFLOP per cached token, i.e. 60 FLOP/B, below the
//    ridge (686/4.27 = 160 FLOP/B), so it is bandwidth-bound if the mma.sync
//    pipe sustains ~38% of the bf16 peak.
//      batch 1,  4K context:  4.7 MB  -> 1.1 us at 4.27 TB/s (in practice the
//                             two launches, ~3-5 us, dominate);
//      batch 64, 32K context: 2.42 GB -> 566 us (146 GFLOP -> 213 us of math).
//    Expected: ~75-85% of the bandwidth limit at batch 64 x 32K (one CTA per
//    SM, a 72 KB cache block in flight per SM, the split partials stay in L2).
//  * MlaPrefill does 2·H·T·(past + (T+1)/2)·(dn+dr+dv) FLOP and reads q, kv,
//    k_rope once per query tile: at T = 32K, past = 0 that is 11 TFLOP
//    -> 16 ms at the bf16 peak. The mma.sync flash-attention-2 kernel
//    stays near a third of the peak (docs/dev/journal/performance.md); the
//    wgmma kernel (sm_90) issues 64x128x16 tensor ops from shared memory and
//    overlaps the softmax with the previous tile's P·V, and loads 128-row
//    query tiles (twice the old 64), which halves the L2->SM traffic per
//    FLOP: 80 KB of K/V per 10.5 MFLOP, 5.2 TB/s at the peak. Expected
//    ~55-65% of the peak (≈380-440 TFLOP/s) at long contexts.
//  * MlaCacheWrite/Gather move 2·n·(r+dr)·2 B: pure copies.
//
// Fast paths (tensor cores, cp.async double buffering, XOR-swizzled shared
// memory so ldmatrix is conflict-free) serve r = 512, dr = 64 (decode) and
// dn = 128, dr = 64, dv = 128 (prefill) with 16-byte aligned rows; every other
// shape takes a plain fp32 kernel that is slow but obviously correct (the test
// fixtures' odd sizes).
// Prefill at dn = 128, dr = 64, dv = 128 takes the wgmma kernel on sm_90
// devices (mla.prefill=mma: the mma.sync kernel, the reference).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/mla.h"
#include "backend/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxSplits = 256;  // flash-decoding splits per sequence (default plan)
// Batch-invariant decode (MlaDecodeArgs::batch_invariant): splits of a fixed
// kInvariantSplitBlocks cache blocks (512 keys) at absolute positions, so a
// sequence's partials and their merge depend on its own length only; up to
// kMaxMergeSplits of them (2^20 keys), the merge kernel's shared weights.
constexpr int kInvariantSplitBlocks = 8;
constexpr int kMaxMergeSplits = 2048;

// ---------------------------------------------------------------------------
// Device helpers: cp.async, ldmatrix, mma.sync (sm_80+ instructions that
// Hopper still runs at full rate for these tile sizes).

__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a (16x16, row) · b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16x2 register, `lo` in the low half (the lower column of
// an mma fragment pair).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are a
// multiple of 128 bytes: XOR-ing the chunk with row % 8 puts the 8 rows an
// ldmatrix phase reads in 8 different bank groups.
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide max/sum for blockDim.x a multiple of 32 (≤ 1024); every thread
// gets the result. `red` holds 32 floats; the trailing barrier lets the next
// call reuse it.
__device__ float BlockMax(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpMax(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : -INFINITY;
  v = WarpMax(v);
  __syncthreads();
  return v;
}

__device__ float BlockSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : 0.f;
  v = WarpSum(v);
  __syncthreads();
  return v;
}

// Tokens of sequence b the kernels may read: seq_lens clamped to the host's
// bound (which check-time guarantees fits the block table).
__device__ __forceinline__ int ClampedSeqLen(const int32_t* seq_lens, int b, int max_seq_len) {
  return min(max(seq_lens[b], 0), max_seq_len);
}

// Rows query b attends to: its selected count (sparse) or its sequence length.
__device__ __forceinline__ int DecodeLength(const int32_t* seq_lens, const int32_t* sel_counts,
                                            int b, int max_seq_len) {
  return ClampedSeqLen(sel_counts != nullptr ? sel_counts : seq_lens, b, max_seq_len);
}

// Cache row of position `pos` through one sequence's block table, or null
// when the position is outside it (sparse rows are data, so they are checked).
__device__ __forceinline__ const bf16* SparseCacheRow(const bf16* pool, const int32_t* table,
                                                      int64_t max_blocks, int pos, int cd) {
  if (pos < 0 || pos / kKvBlockTokens >= max_blocks) return nullptr;
  const int64_t blk = table[pos / kKvBlockTokens];
  if (blk < 0) return nullptr;
  return pool + (blk * kKvBlockTokens + pos % kKvBlockTokens) * cd;
}

// ---------------------------------------------------------------------------
// Cache write / gather: one CTA per row.

struct CacheCopyParams {
  bf16* pool;                  // [num_blocks, 64, cd]
  const int32_t* block_table;  // [batch, max_blocks]
  int64_t max_blocks;
  int64_t cd;       // r + dr
  const bf16* src;  // write: rows [n, ld]; gather: unused
  bf16* dst;        // gather: rows [n, cd]; write: unused
  int64_t ld;
  int64_t start;             // prefill form: first position
  const int32_t* positions;  // decode form: [n] positions (row i -> sequence i)
  bool vec16;                // cd, ld and both bases allow 16-byte copies
};

// Pointer to the cache row of (sequence b, position pos), or null when the
// position is negative (a padded decode slot) or outside the block table.
__device__ __forceinline__ bf16* CacheRow(const CacheCopyParams& p, int64_t b, int64_t pos) {
  if (pos < 0 || pos / kKvBlockTokens >= p.max_blocks) return nullptr;
  const int32_t blk = p.block_table[b * p.max_blocks + pos / kKvBlockTokens];
  if (blk < 0) return nullptr;
  return p.pool + (static_cast<int64_t>(blk) * kKvBlockTokens + pos % kKvBlockTokens) * p.cd;
}

__device__ __forceinline__ void CopyRow(bf16* dst, const bf16* src, int64_t cd, bool vec16) {
  if (vec16) {
    const int64_t n = cd / 8;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < cd; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void MlaCacheWriteKernel(const CacheCopyParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t i = blockIdx.x;
  const int64_t b = p.positions != nullptr ? i : 0;
  const int64_t pos = p.positions != nullptr ? p.positions[i] : p.start + i;
  bf16* row = CacheRow(p, b, pos);
  if (row == nullptr) return;
  CopyRow(row, p.src + i * p.ld, p.cd, p.vec16);
}

__global__ void MlaCacheGatherKernel(const CacheCopyParams p) {
  const int64_t i = blockIdx.x;
  const bf16* row = CacheRow(p, 0, i);
  if (row == nullptr) return;  // host checks make this unreachable
  CopyRow(p.dst + i * p.cd, row, p.cd, p.vec16);
}

// ---------------------------------------------------------------------------
// Absorbed decode, tensor-core path (r = 512, dr = 64).
//
// Grid (splits, head groups of 32, batch); 256 threads, one CTA per SM. Each
// CTA walks its range of 64-token cache blocks (one block = one contiguous
// 72 KB page), double-buffered with cp.async, and for all 32 heads computes
//   S = Q̃ Cᵀ  (M = 32 heads, N = 64 tokens, K = 576)
//   O = O·α + P C_latent  (M = 32, N = 512, K = 64)
// with m16n8k16 bf16 mma. S is split over warps as (m-tile = warp & 1,
// K-quarter = warp >> 1) so each warp keeps its slice of Q̃ in registers for
// the whole kernel and the cache block is read from shared memory only twice;
// the four K-quarter partials meet in shared memory, where 256 threads run the
// fp32 online softmax (8 threads per head). O is split over warps by latent
// columns (64 each), both m-tiles.

constexpr int kDecHeads = 32;     // heads per CTA (2 m-tiles)
constexpr int kDecThreads = 256;  // 8 warps
constexpr int kDecTok = static_cast<int>(kKvBlockTokens);
constexpr int kDecSRowFloats = kDecTok + 8;  // padded: conflict-free float2 stores
constexpr int kDecPRowElems = kDecTok + 8;   // padded: conflict-free ldmatrix

struct DecodeParams {
  const bf16* q;               // [B, H, cd]
  const bf16* q_rope;          // null, or row (b, h) at q_rope + (b·H + h)·q_rope_stride
  int64_t q_rope_stride;
  const bf16* pool;            // [num_blocks, 64, cd]
  const int32_t* block_table;  // [B, max_blocks]
  const int32_t* seq_lens;     // [B]
  int64_t max_blocks;
  int num_heads;
  int max_seq_len;
  int num_splits;
  int blocks_per_split;
  float scale_log2;  // softmax scale · log2(e): the kernels use exp2
  void* out;         // [B, H, r] fp32 or bf16 (single split)
  bool out_f32;
  float* part_o;    // [B, splits, H, r] normalised partial outputs
  float* part_lse;  // [B, splits, H] log2-sum-exp of each partial
  // Sparse (DSA): rows [B, sel_stride] of positions, counts [B]; null: dense.
  const int32_t* sel_rows;
  const int32_t* sel_counts;
  int64_t sel_stride;
  bool sel_one_seq;  // every row uses block-table row 0 (sparse prefill)
  bool cache_before_wait;  // MlaDecodeArgs::cache_before_wait
};

template <int kR, int kDr>
struct DecodeTile {
  static constexpr int kRank = kR;
  static constexpr int kCd = kR + kDr;
  static constexpr int kChunks = kCd / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = kCd * 2;
  static constexpr int kKSteps = kCd / 16;
  static constexpr int kKStepsPerWarp = kKSteps / 4;  // K-quarters
  static constexpr int kColsPerWarp = kR / 8;         // PV: latent columns per warp
  static constexpr int kNTilesPv = kColsPerWarp / 8;
  static constexpr int kStageBytes = kDecTok * kRowBytes;
  static constexpr int kQBytes = kDecHeads * kRowBytes;
  static constexpr int kSPartBytes = 4 * kDecHeads * kDecSRowFloats * 4;
  static constexpr int kPBytes = kDecHeads * kDecPRowElems * 2;
  static constexpr int kUnionBytes =
      kQBytes > kSPartBytes + kPBytes ? kQBytes : kSPartBytes + kPBytes;
  static constexpr int kStatsBytes = 3 * kDecHeads * 4;  // alpha, m, l
  static constexpr int kSmemBytes = 2 * kStageBytes + kUnionBytes + kStatsBytes;
  static_assert(kCd % 64 == 0, "cache rows must be whole 128-byte swizzle groups");
  static_assert(kKSteps % 4 == 0, "S is split in four K-quarters");
  static_assert(kR % 64 == 0 && kNTilesPv % 2 == 0, "PV columns come in ldmatrix.x4 pairs");
  static_assert((kDecTok * kChunks) % kDecThreads == 0, "whole cp.async rounds per block");
  static_assert((kDecHeads * kChunks) % kDecThreads == 0, "whole cp.async rounds for q");
};

template <int kR, int kDr>
__global__ void __launch_bounds__(kDecThreads, 1)
    MlaDecodeTcKernel(const __grid_constant__ DecodeParams p) {
  using Tile = DecodeTile<kR, kDr>;
  constexpr int kCd = Tile::kCd;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* stage_base = smem;                         // 2 x [64][kCd] swizzled
  uint8_t* q_stage = smem + 2 * Tile::kStageBytes;    // [32][kCd] swizzled (prologue)
  float* s_part = reinterpret_cast<float*>(q_stage);  // [4][32][72] (aliases q_stage)
  bf16* p_tile = reinterpret_cast<bf16*>(q_stage + Tile::kSPartBytes);  // [32][72]
  float* alpha_s = reinterpret_cast<float*>(q_stage + Tile::kUnionBytes);
  float* m_s = alpha_s + kDecHeads;
  float* l_s = m_s + kDecHeads;

  const int split = blockIdx.x, group = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c4 = lane & 3;  // mma fragment row / column pair
  const int head0 = group * kDecHeads;
  // cache_before_wait: the lengths, the block table and every cache row but
  // the newest are final before this kernel's predecessors end (see
  // MlaDecodeArgs), so the first block is requested before the wait when it
  // holds older rows only.
  if (!p.cache_before_wait) PdlWait();
  const int seq_len = DecodeLength(p.seq_lens, p.sel_counts, b, p.max_seq_len);
  const int num_blocks = (seq_len + kDecTok - 1) / kDecTok;
  const int blk_begin = split * p.blocks_per_split;
  const int blk_end = min(num_blocks, blk_begin + p.blocks_per_split);
  const int32_t* table =
      p.block_table + static_cast<int64_t>(p.sel_one_seq ? 0 : b) * p.max_blocks;
  auto load_block = [&](int blk, int st) {
    const int valid = min(kDecTok, seq_len - blk * kDecTok);
    const uint32_t dst = SmemAddr(stage_base + st * Tile::kStageBytes);
    if (p.sel_rows == nullptr) {
      const int64_t phys = table[blk];
      const bf16* src = p.pool + phys * kDecTok * kCd;
#pragma unroll 6
      for (int i = 0; i < kDecTok * Tile::kChunks / kDecThreads; ++i) {
        const int c = tid + i * kDecThreads;
        const int row = c / Tile::kChunks, ch = c % Tile::kChunks;
        const bool ok = row < valid;
        CpAsync16(dst + SwizzledOffset(row, ch, Tile::kRowBytes),
                  ok ? src + row * kCd + ch * 8 : src, ok);
      }
    } else {
      // Gather: row `row` of this virtual block is selected position
      // sel[blk·64 + row], wherever its page is.
      const int32_t* sel = p.sel_rows + static_cast<int64_t>(b) * p.sel_stride + blk * kDecTok;
#pragma unroll 6
      for (int i = 0; i < kDecTok * Tile::kChunks / kDecThreads; ++i) {
        const int c = tid + i * kDecThreads;
        const int row = c / Tile::kChunks, ch = c % Tile::kChunks;
        const bf16* src =
            row < valid ? SparseCacheRow(p.pool, table, p.max_blocks, sel[row], kCd) : nullptr;
        const bool ok = src != nullptr;
        CpAsync16(dst + SwizzledOffset(row, ch, Tile::kRowBytes), ok ? src + ch * 8 : p.pool, ok);
      }
    }
  };
  const bool block_early = p.cache_before_wait && p.sel_rows == nullptr && blk_begin < blk_end &&
                           (blk_begin + 1) * kDecTok <= seq_len - 1;
  if (block_early) {
    load_block(blk_begin, 0);
    CpAsyncCommit();
  }
  if (p.cache_before_wait) PdlWait();
  PdlLaunchDependents();

  if (blk_begin >= blk_end) {
    // Nothing cached in this range. The merge only reads the splits that
    // cover tokens, so only the single-split form has output to write.
    if (p.num_splits == 1) {
      for (int i = tid; i < kDecHeads * kR; i += kDecThreads) {
        const int head = head0 + i / kR;
        if (head >= p.num_heads) break;
        const int64_t o = (static_cast<int64_t>(b) * p.num_heads + head) * kR + i % kR;
        if (p.out_f32) {
          static_cast<float*>(p.out)[o] = 0.f;
        } else {
          static_cast<bf16*>(p.out)[o] = __float2bfloat16(0.f);
        }
      }
    }
    return;
  }

  // Prologue: this head group's q̃ rows (padding heads zero-filled) and the
  // first cache block.
  {
    const uint32_t dst = SmemAddr(q_stage);
#pragma unroll
    for (int i = 0; i < kDecHeads * Tile::kChunks / kDecThreads; ++i) {
      const int c = tid + i * kDecThreads;
      const int row = c / Tile::kChunks, ch = c % Tile::kChunks;
      const int head = head0 + row;
      const bool ok = head < p.num_heads;
      const int64_t bh = static_cast<int64_t>(b) * p.num_heads + (ok ? head : 0);
      // The rope chunks come from q_rope when the caller passes it.
      const bf16* src = p.q_rope != nullptr && ch >= Tile::kRank / 8
                            ? p.q_rope + bh * p.q_rope_stride + (ch - Tile::kRank / 8) * 8
                            : p.q + bh * kCd + ch * 8;
      CpAsync16(dst + SwizzledOffset(row, ch, Tile::kRowBytes), ok ? src : p.q, ok);
    }
  }
  if (!block_early) load_block(blk_begin, 0);
  CpAsyncCommit();

  // S-phase role: m-tile and K-quarter; PV role: latent columns.
  const int s_mt = warp & 1, s_kq = warp >> 1;
  const int pv_col0 = warp * Tile::kColsPerWarp;
  // Softmax role: head sh, tokens {4j..4j+3} ∪ {32+4j..32+4j+3}.
  const int sh = tid >> 3, sj = tid & 7;

  uint32_t q_frag[Tile::kKStepsPerWarp][4];
  float o_acc[2][Tile::kNTilesPv][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Tile::kNTilesPv; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[mt][nt][e] = 0.f;
    }
  }
  float row_m = -INFINITY, row_l = 0.f;  // softmax state of head sh (row_l: this thread's part)

  for (int blk = blk_begin, it = 0; blk < blk_end; ++blk, ++it) {
    const int st = it & 1;
    CpAsyncWaitAll();
    __syncthreads();  // block `blk` landed; every warp is done with the other stage
    if (it == 0) {
      const uint32_t qa = SmemAddr(q_stage);
#pragma unroll
      for (int ks = 0; ks < Tile::kKStepsPerWarp; ++ks) {
        const int kk = s_kq * Tile::kKStepsPerWarp + ks;
        const int row = s_mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = kk * 2 + (lane >> 4);
        Ldmatrix4(q_frag[ks], qa + SwizzledOffset(row, ch, Tile::kRowBytes));
      }
      __syncthreads();  // q_stage is reused as s_part below
    }
    if (blk + 1 < blk_end) load_block(blk + 1, st ^ 1);
    CpAsyncCommit();

    const uint32_t kv_addr = SmemAddr(stage_base + st * Tile::kStageBytes);

    // ---- S partial over this warp's K-quarter: 16 heads x 64 tokens.
    {
      float s_acc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[nt][e] = 0.f;
      }
#pragma unroll
      for (int ks = 0; ks < Tile::kKStepsPerWarp; ++ks) {
        const int kk = s_kq * Tile::kKStepsPerWarp + ks;
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bf[4];
          const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int ch = kk * 2 + ((lane >> 3) & 1);
          Ldmatrix4(bf, kv_addr + SwizzledOffset(row, ch, Tile::kRowBytes));
          Mma16816(s_acc[2 * np], q_frag[ks], bf[0], bf[1]);
          Mma16816(s_acc[2 * np + 1], q_frag[ks], bf[2], bf[3]);
        }
      }
      float* dst = s_part + (s_kq * kDecHeads + s_mt * 16) * kDecSRowFloats;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int col = nt * 8 + 2 * c4;
        *reinterpret_cast<float2*>(dst + g * kDecSRowFloats + col) =
            make_float2(s_acc[nt][0], s_acc[nt][1]);
        *reinterpret_cast<float2*>(dst + (g + 8) * kDecSRowFloats + col) =
            make_float2(s_acc[nt][2], s_acc[nt][3]);
      }
    }
    __syncthreads();  // all K-quarter partials are in s_part

    // ---- Online softmax, fp32: 8 threads per head.
    {
      const int valid = min(kDecTok, seq_len - blk * kDecTok);  // ≥ 1
      float x[8];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 v = *reinterpret_cast<const float4*>(
              s_part + (q * kDecHeads + sh) * kDecSRowFloats + half * 32 + 4 * sj);
          acc.x += v.x;
          acc.y += v.y;
          acc.z += v.z;
          acc.w += v.w;
        }
        x[half * 4 + 0] = acc.x;
        x[half * 4 + 1] = acc.y;
        x[half * 4 + 2] = acc.z;
        x[half * 4 + 3] = acc.w;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int tok = (e >> 2) * 32 + 4 * sj + (e & 3);
        x[e] = tok < valid ? x[e] * p.scale_log2 : -INFINITY;
        mx = fmaxf(mx, x[e]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float m_new = fmaxf(row_m, mx);      // finite: token 0 of the block is valid
      const float alpha = exp2f(row_m - m_new);  // 0 on the first block
      float sum = 0.f;
      float pw[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        pw[e] = exp2f(x[e] - m_new);
        sum += pw[e];
      }
      row_l = row_l * alpha + sum;
      row_m = m_new;
      bf16* prow = p_tile + sh * kDecPRowElems;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint2 packed;
        packed.x = PackBf16(pw[half * 4 + 0], pw[half * 4 + 1]);
        packed.y = PackBf16(pw[half * 4 + 2], pw[half * 4 + 3]);
        *reinterpret_cast<uint2*>(prow + half * 32 + 4 * sj) = packed;
      }
      if (sj == 0) alpha_s[sh] = alpha;
    }
    __syncthreads();  // P and α are ready

    // ---- O = O·α + P · C_latent over this warp's 64 latent columns.
    {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const float a0 = alpha_s[mt * 16 + g], a1 = alpha_s[mt * 16 + g + 8];
#pragma unroll
        for (int nt = 0; nt < Tile::kNTilesPv; ++nt) {
          o_acc[mt][nt][0] *= a0;
          o_acc[mt][nt][1] *= a0;
          o_acc[mt][nt][2] *= a1;
          o_acc[mt][nt][3] *= a1;
        }
      }
      const uint32_t p_addr = SmemAddr(p_tile);
#pragma unroll
      for (int kk = 0; kk < kDecTok / 16; ++kk) {
        uint32_t pa[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int row = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int col = kk * 16 + (lane >> 4) * 8;
          Ldmatrix4(pa[mt], p_addr + (row * kDecPRowElems + col) * 2);
        }
#pragma unroll
        for (int np = 0; np < Tile::kNTilesPv / 2; ++np) {
          uint32_t bf[4];
          const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int ch = (pv_col0 + np * 16) / 8 + (lane >> 4);
          Ldmatrix4Trans(bf, kv_addr + SwizzledOffset(row, ch, Tile::kRowBytes));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            Mma16816(o_acc[mt][2 * np], pa[mt], bf[0], bf[1]);
            Mma16816(o_acc[mt][2 * np + 1], pa[mt], bf[2], bf[3]);
          }
        }
      }
    }
  }

  // Finish: per-head max and sum to shared memory, then each warp writes its
  // latent columns (final output, or a normalised partial and its LSE).
  row_l += __shfl_xor_sync(0xffffffffu, row_l, 1);
  row_l += __shfl_xor_sync(0xffffffffu, row_l, 2);
  row_l += __shfl_xor_sync(0xffffffffu, row_l, 4);
  if (sj == 0) {
    m_s[sh] = row_m;
    l_s[sh] = row_l;
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int hq = mt * 16 + g + hi * 8;
      const int head = head0 + hq;
      if (head >= p.num_heads) continue;
      const float inv_l = 1.f / l_s[hq];  // ≥ 1: the running max contributed exp2(0)
      const int64_t bh = static_cast<int64_t>(b) * p.num_heads + head;
      if (p.num_splits == 1) {
#pragma unroll
        for (int nt = 0; nt < Tile::kNTilesPv; ++nt) {
          const int64_t o = bh * kR + pv_col0 + nt * 8 + 2 * c4;
          const float v0 = o_acc[mt][nt][2 * hi] * inv_l, v1 = o_acc[mt][nt][2 * hi + 1] * inv_l;
          if (p.out_f32) {
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + o) = make_float2(v0, v1);
          } else {
            *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + o) =
                __floats2bfloat162_rn(v0, v1);
          }
        }
      } else {
        const int64_t ps = (static_cast<int64_t>(b) * p.num_splits + split) * p.num_heads + head;
#pragma unroll
        for (int nt = 0; nt < Tile::kNTilesPv; ++nt) {
          const int64_t o = ps * kR + pv_col0 + nt * 8 + 2 * c4;
          *reinterpret_cast<float2*>(p.part_o + o) =
              make_float2(o_acc[mt][nt][2 * hi] * inv_l, o_acc[mt][nt][2 * hi + 1] * inv_l);
        }
        if (warp == 0 && c4 == 0) p.part_lse[ps] = m_s[hq] + log2f(l_s[hq]);
      }
    }
  }
}

// Merges the splits of one (sequence, head): out = Σ_i w_i o_i with
// w_i = 2^(lse_i − lse_max) / Σ_j 2^(lse_j − lse_max). Only the ns splits
// that hold tokens of the sequence are read (empty ones never reach the
// sums); with ns = 1 the weight is exactly 1 and out is the partial itself,
// the bits the single-split kernel writes directly. MlaDecodeMergeKernel sums
// splits 0, 1, ... in order for every batch size: the batch-invariant mode
// uses it alone.
// MlaDecodeMergeKernel: grid (H, B), 128 threads walking all splits of four
// columns each. MlaDecodeMergeWideKernel, used when H·B CTAs would leave SMs
// idle (batch 1): grid (H, B, ceil(r / 128)); each CTA merges 128 latent
// columns with four independent split streams per column (B = 1, H = 32: 128
// CTAs instead of 32, so the merge's latency chain is spread over 4× the SMs;
// timings in docs/dev/journal/performance.md).
constexpr int kMergeGroups = 4;  // split groups per CTA (128 threads / 32 columns)
constexpr int kMergeBatch = 17;  // partials per thread loaded at once (65 splits / 4 groups)
struct MergeParams {
  const float* part_o;  // [B, splits, H, r]
  const float* part_lse;
  const int32_t* seq_lens;
  const int32_t* sel_counts;  // sparse: selected rows per query (replaces seq_lens)
  int max_seq_len;
  int num_splits;
  int blocks_per_split;
  int num_heads;
  int r;
  void* out;
  bool out_f32;
  // Wide kernel: its first batch of partials is loaded before the weights
  // are formed (mla.merge_early=0: after; the same bits).
  bool early_partials;
};

__global__ void __launch_bounds__(128) MlaDecodeMergeKernel(const MergeParams p) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float w[kMaxMergeSplits];
  __shared__ float red[32];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int seq_len = DecodeLength(p.seq_lens, p.sel_counts, b, p.max_seq_len);
  const int num_blocks = (seq_len + kDecTok - 1) / kDecTok;
  const int ns = (num_blocks + p.blocks_per_split - 1) / p.blocks_per_split;  // ≤ num_splits
  const int64_t out_row = (static_cast<int64_t>(b) * p.num_heads + h) * p.r;
  const int64_t base = static_cast<int64_t>(b) * p.num_splits * p.num_heads + h;  // split 0
  const int64_t split_stride = p.num_heads;

  float mx = -INFINITY;
  for (int i = tid; i < ns; i += blockDim.x) {
    const float v = p.part_lse[base + i * split_stride];
    w[i] = v;
    mx = fmaxf(mx, v);
  }
  mx = BlockMax(mx, red);  // its barriers also publish w
  float sum = 0.f;
  for (int i = tid; i < ns; i += blockDim.x) {
    const float e = exp2f(w[i] - mx);
    w[i] = e;
    sum += e;
  }
  sum = BlockSum(sum, red);
  const float inv = ns > 0 ? 1.f / sum : 0.f;
  for (int d = tid * 4; d < p.r; d += blockDim.x * 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < ns; ++i) {
      const float4 v =
          *reinterpret_cast<const float4*>(p.part_o + (base + i * split_stride) * p.r + d);
      const float wi = w[i];
      acc.x += wi * v.x;
      acc.y += wi * v.y;
      acc.z += wi * v.z;
      acc.w += wi * v.w;
    }
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
    if (p.out_f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + out_row + d) = acc;
    } else {
      __nv_bfloat162* o =
          reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + out_row + d);
      o[0] = __floats2bfloat162_rn(acc.x, acc.y);
      o[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
}

__global__ void __launch_bounds__(128) MlaDecodeMergeWideKernel(const MergeParams p) {
  PdlWait();
  PdlLaunchDependents();
  __shared__ float w[kMaxSplits];
  __shared__ float red[32];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int seq_len = DecodeLength(p.seq_lens, p.sel_counts, b, p.max_seq_len);
  const int num_blocks = (seq_len + kDecTok - 1) / kDecTok;
  const int ns = (num_blocks + p.blocks_per_split - 1) / p.blocks_per_split;  // ≤ num_splits
  const int64_t out_row = (static_cast<int64_t>(b) * p.num_heads + h) * p.r;
  const int64_t base = static_cast<int64_t>(b) * p.num_splits * p.num_heads + h;  // split 0
  const int64_t split_stride = p.num_heads;
  // Thread (group sg = tid / 32, column c = tid % 32) sums splits sg, sg + 4,
  // ... of the four latent columns d = 128·blockIdx.z + 4c: four independent
  // load streams per column instead of one serial chain over all splits.
  // The partials do not depend on the weights, so the first kMergeBatch of
  // this thread's are loaded before the lse reduction, in the same round
  // trip as the lse values (at 4K context, 65 splits: all of them); later
  // batches, for longer contexts, one round trip each. The sums are formed
  // in the same order either way.
  const int sg = tid >> 5;
  const int d = blockIdx.z * 128 + (tid & 31) * 4;
  const bool has_d = d < p.r;
  auto load_batch = [&](int start, float4(&dst)[kMergeBatch]) {
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const int i = start + u * kMergeGroups;
      dst[u] =
          has_d && i < ns
              ? *reinterpret_cast<const float4*>(p.part_o + (base + i * split_stride) * p.r + d)
              : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  float4 v[kMergeBatch];
  if (p.early_partials) load_batch(sg, v);

  float mx = -INFINITY;
  for (int i = tid; i < ns; i += blockDim.x) {
    const float lse = p.part_lse[base + i * split_stride];
    w[i] = lse;
    mx = fmaxf(mx, lse);
  }
  mx = BlockMax(mx, red);  // its barriers also publish w
  float sum = 0.f;
  for (int i = tid; i < ns; i += blockDim.x) {
    const float e = exp2f(w[i] - mx);
    w[i] = e;
    sum += e;
  }
  sum = BlockSum(sum, red);
  const float inv = ns > 0 ? 1.f / sum : 0.f;
  __shared__ float4 part[kMergeGroups][32];
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (has_d) {
    for (int start = sg; start < ns; start += kMergeBatch * kMergeGroups) {
      if (start != sg || !p.early_partials) load_batch(start, v);
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        const int i = start + u * kMergeGroups;
        if (i < ns) {
          const float wi = w[i];
          acc.x += wi * v[u].x;
          acc.y += wi * v[u].y;
          acc.z += wi * v[u].z;
          acc.w += wi * v[u].w;
        }
      }
    }
  }
  part[sg][tid & 31] = acc;
  __syncthreads();
  if (sg == 0 && d < p.r) {
#pragma unroll
    for (int g = 1; g < kMergeGroups; ++g) {
      const float4 o = part[g][tid];
      acc.x += o.x;
      acc.y += o.y;
      acc.z += o.z;
      acc.w += o.w;
    }
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
    if (p.out_f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + out_row + d) = acc;
    } else {
      __nv_bfloat162* o =
          reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(p.out) + out_row + d);
      o[0] = __floats2bfloat162_rn(acc.x, acc.y);
      o[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
}

// ---------------------------------------------------------------------------
// Absorbed decode, generic path: one CTA per (head, sequence), fp32 dot
// products, online softmax over chunks of 128 tokens. Shared memory:
// q [cd] + acc... (acc lives in registers of the owning thread through smem).

struct SimpleDecodeParams {
  const bf16* q;
  const bf16* q_rope;  // as DecodeParams
  int64_t q_rope_stride;
  const bf16* pool;
  const int32_t* block_table;
  const int32_t* seq_lens;
  int64_t max_blocks;
  int num_heads;
  int r;
  int cd;
  int max_seq_len;
  float scale_log2;
  void* out;
  bool out_f32;
  const int32_t* sel_rows;  // sparse, as DecodeParams
  const int32_t* sel_counts;
  int64_t sel_stride;
  bool sel_one_seq;
};

constexpr int kSimpleThreads = 128;

__global__ void __launch_bounds__(kSimpleThreads)
    MlaDecodeSimpleKernel(const SimpleDecodeParams p) {
  extern __shared__ float dyn[];
  float* qs = dyn;         // [cd]
  float* acc = qs + p.cd;  // [r]: element i owned by thread i % 128
  float* pw = acc + p.r;   // [128]
  __shared__ float red[32];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int seq_len = DecodeLength(p.seq_lens, p.sel_counts, b, p.max_seq_len);
  const int64_t bh = static_cast<int64_t>(b) * p.num_heads + h;
  const bf16* q = p.q + bh * p.cd;
  const bf16* qr = p.q_rope != nullptr ? p.q_rope + bh * p.q_rope_stride : q + p.r;
  for (int i = tid; i < p.cd; i += kSimpleThreads) {
    qs[i] = __bfloat162float(i < p.r ? q[i] : qr[i - p.r]);
  }
  for (int i = tid; i < p.r; i += kSimpleThreads) acc[i] = 0.f;
  __syncthreads();
  const int32_t* table =
      p.block_table + static_cast<int64_t>(p.sel_one_seq ? 0 : b) * p.max_blocks;
  const int32_t* sel =
      p.sel_rows != nullptr ? p.sel_rows + static_cast<int64_t>(b) * p.sel_stride : nullptr;
  // Row s of the (possibly gathered) sequence; null for an invalid selected
  // position, which then reads as a zero row.
  auto row_of = [&](int s) -> const bf16* {
    if (sel != nullptr) return SparseCacheRow(p.pool, table, p.max_blocks, sel[s], p.cd);
    return p.pool +
           (static_cast<int64_t>(table[s / kKvBlockTokens]) * kKvBlockTokens + s % kKvBlockTokens) *
               p.cd;
  };
  float m = -INFINITY, l = 0.f;
  for (int s0 = 0; s0 < seq_len; s0 += kSimpleThreads) {
    const int s = s0 + tid;
    float x = -INFINITY;
    if (s < seq_len) {
      const bf16* row = row_of(s);
      float dot = 0.f;
      if (row != nullptr) {
        for (int i = 0; i < p.cd; ++i) dot += qs[i] * __bfloat162float(row[i]);
      }
      x = dot * p.scale_log2;
    }
    const float m_new = fmaxf(m, BlockMax(x, red));
    const float alpha = exp2f(m - m_new);
    const float e = s < seq_len ? exp2f(x - m_new) : 0.f;
    pw[tid] = e;
    l = l * alpha + BlockSum(e, red);  // its barriers also publish pw
    m = m_new;
    const int count = min(kSimpleThreads, seq_len - s0);
    for (int i = tid; i < p.r; i += kSimpleThreads) {
      float a = acc[i] * alpha;
      for (int k = 0; k < count; ++k) {
        const bf16* row = row_of(s0 + k);
        if (row != nullptr) a += pw[k] * __bfloat162float(row[i]);
      }
      acc[i] = a;
    }
    __syncthreads();  // pw is rewritten by the next chunk
  }
  const float inv = seq_len > 0 ? 1.f / l : 0.f;
  const int64_t o = (static_cast<int64_t>(b) * p.num_heads + h) * p.r;
  for (int i = tid; i < p.r; i += kSimpleThreads) {
    const float v = acc[i] * inv;
    if (p.out_f32) {
      static_cast<float*>(p.out)[o + i] = v;
    } else {
      static_cast<bf16*>(p.out)[o + i] = __float2bfloat16(v);
    }
  }
}

// ---------------------------------------------------------------------------
// Prefill, tensor-core path (dn = 128, dr = 64, dv = 128): flash-attention-2.
// Grid (query tiles of 64, heads), 128 threads (4 warps x 16 query rows).
// Per key tile of 64: S = Q Kᵀ with K = [k_nope,h | k_rope] assembled in
// shared memory from the two sources, online softmax in registers, the S
// accumulators reused as the A fragments of P·V. K/V tiles double-buffered
// with cp.async; the heaviest (last) query tiles are scheduled first.

constexpr int kPreRows = 64;  // queries per CTA
constexpr int kPreKeys = 64;  // keys per step
constexpr int kPreThreads = 128;

struct PrefillParams {
  const bf16* q;  // [T, ld_q], head h at h·(dn+dr)
  int64_t ld_q;
  const bf16* kv;  // [S, H·(dn+dv)]
  int64_t ld_kv;
  const bf16* k_rope;  // [S, ld_krope]
  int64_t ld_krope;
  bf16* out;  // [T, H·dv]
  int num_tokens;
  int past;
  int num_heads;
  int dn, dr, dv;  // used by the generic kernel
  float scale_log2;
};

template <int kDn, int kDr, int kDv>
struct PrefillTile {
  static constexpr int kDqk = kDn + kDr;
  static constexpr int kKChunks = kDqk / 8;
  static constexpr int kVChunks = kDv / 8;
  static constexpr int kKRowBytes = kDqk * 2;
  static constexpr int kVRowBytes = kDv * 2;
  static constexpr int kKSteps = kDqk / 16;
  static constexpr int kNTilesO = kDv / 8;
  static constexpr int kQBytes = kPreRows * kKRowBytes;
  static constexpr int kKBytes = kPreKeys * kKRowBytes;
  static constexpr int kVBytes = kPreKeys * kVRowBytes;
  static constexpr int kSmemBytes = kQBytes + 2 * (kKBytes + kVBytes);
  static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "rows must be whole 128-byte swizzle groups");
  static_assert(kDn % 8 == 0 && kDr % 8 == 0, "k_nope and k_rope come in 16-byte chunks");
  static_assert((kPreRows * kKChunks) % kPreThreads == 0, "whole cp.async rounds");
  static_assert((kPreKeys * kVChunks) % kPreThreads == 0, "whole cp.async rounds");
};

template <int kDn, int kDr, int kDv>
__global__ void __launch_bounds__(kPreThreads)
    MlaPrefillTcKernel(const __grid_constant__ PrefillParams p) {
  using Tile = PrefillTile<kDn, kDr, kDv>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* q_s = smem;
  uint8_t* k_s = smem + Tile::kQBytes;     // 2 stages
  uint8_t* v_s = k_s + 2 * Tile::kKBytes;  // 2 stages

  const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest tiles first
  const int h = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c4 = lane & 3;
  const int q0 = qt * kPreRows;
  const int T = p.num_tokens;
  // Keys seen by the tile's last real query (position past + min(q0+64, T) − 1).
  const int kv_len = p.past + min(q0 + kPreRows, T);
  const int num_kt = (kv_len + kPreKeys - 1) / kPreKeys;

  {
    const uint32_t dst = SmemAddr(q_s);
#pragma unroll
    for (int i = 0; i < kPreRows * Tile::kKChunks / kPreThreads; ++i) {
      const int c = tid + i * kPreThreads;
      const int row = c / Tile::kKChunks, ch = c % Tile::kKChunks;
      const int t = q0 + row;
      const bool ok = t < T;
      const bf16* src = p.q + static_cast<int64_t>(ok ? t : 0) * p.ld_q + h * Tile::kDqk;
      CpAsync16(dst + SwizzledOffset(row, ch, Tile::kKRowBytes), src + (ok ? ch * 8 : 0), ok);
    }
  }
  auto load_kv = [&](int kt, int st) {
    const int s0 = kt * kPreKeys;
    const uint32_t kdst = SmemAddr(k_s + st * Tile::kKBytes);
    const uint32_t vdst = SmemAddr(v_s + st * Tile::kVBytes);
#pragma unroll 2
    for (int i = 0; i < kPreKeys * Tile::kKChunks / kPreThreads; ++i) {
      const int c = tid + i * kPreThreads;
      const int row = c / Tile::kKChunks, ch = c % Tile::kKChunks;
      const int s = s0 + row;
      const bool ok = s < kv_len;
      const int64_t sr = ok ? s : 0;
      const bf16* src = ch < kDn / 8
                            ? p.kv + sr * p.ld_kv + static_cast<int64_t>(h) * (kDn + kDv) + ch * 8
                            : p.k_rope + sr * p.ld_krope + (ch - kDn / 8) * 8;
      CpAsync16(kdst + SwizzledOffset(row, ch, Tile::kKRowBytes), ok ? src : p.kv, ok);
    }
#pragma unroll 2
    for (int i = 0; i < kPreKeys * Tile::kVChunks / kPreThreads; ++i) {
      const int c = tid + i * kPreThreads;
      const int row = c / Tile::kVChunks, ch = c % Tile::kVChunks;
      const int s = s0 + row;
      const bool ok = s < kv_len;
      const bf16* src = p.kv + static_cast<int64_t>(ok ? s : 0) * p.ld_kv +
                        static_cast<int64_t>(h) * (kDn + kDv) + kDn + ch * 8;
      CpAsync16(vdst + SwizzledOffset(row, ch, Tile::kVRowBytes), ok ? src : p.kv, ok);
    }
  };
  load_kv(0, 0);
  CpAsyncCommit();

  uint32_t q_frag[Tile::kKSteps][4];
  float o_acc[Tile::kNTilesO][4];
#pragma unroll
  for (int nt = 0; nt < Tile::kNTilesO; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o_acc[nt][e] = 0.f;
  }
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f};  // rows g, g + 8
  const int pos0 = p.past + q0 + warp * 16 + g;                    // position of row g
  const int warp_min_pos = p.past + q0 + warp * 16;
  const uint32_t q_addr = SmemAddr(q_s);

  for (int kt = 0; kt < num_kt; ++kt) {
    const int st = kt & 1;
    CpAsyncWaitAll();
    __syncthreads();  // tile kt landed; every warp is done with the other stage
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < Tile::kKSteps; ++kk) {
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = kk * 2 + (lane >> 4);
        Ldmatrix4(q_frag[kk], q_addr + SwizzledOffset(row, ch, Tile::kKRowBytes));
      }
    }
    if (kt + 1 < num_kt) load_kv(kt + 1, st ^ 1);
    CpAsyncCommit();

    const uint32_t ka = SmemAddr(k_s + st * Tile::kKBytes);
    const uint32_t va = SmemAddr(v_s + st * Tile::kVBytes);
    float s_acc[kPreKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kPreKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s_acc[nt][e] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk) {
      const uint32_t(&qf)[4] = q_frag[kk];
#pragma unroll
      for (int np = 0; np < kPreKeys / 16; ++np) {
        uint32_t bf[4];
        const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int ch = kk * 2 + ((lane >> 3) & 1);
        Ldmatrix4(bf, ka + SwizzledOffset(row, ch, Tile::kKRowBytes));
        Mma16816(s_acc[2 * np], qf, bf[0], bf[1]);
        Mma16816(s_acc[2 * np + 1], qf, bf[2], bf[3]);
      }
    }

    // Causal mask (only where the tile reaches past this warp's first row)
    // and the scale, in log2 units.
    const int s0 = kt * kPreKeys;
    const bool need_mask = s0 + kPreKeys - 1 > warp_min_pos;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kPreKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = s0 + nt * 8 + 2 * c4 + (e & 1);
        const int pos = pos0 + (e >> 1) * 8;
        float v = s_acc[nt][e] * p.scale_log2;
        if (need_mask && key > pos) v = -INFINITY;
        s_acc[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float m_new = fmaxf(row_m[i], mx[i]);
      // Key 0 is visible to every row, so m_new is finite from the first
      // tile on; the guard keeps a fully masked row from making NaNs anyway.
      m_use[i] = m_new == -INFINITY ? 0.f : m_new;
      alpha[i] = exp2f(row_m[i] - m_use[i]);
      row_m[i] = m_new;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < kPreKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pv = exp2f(s_acc[nt][e] - m_use[e >> 1]);
        s_acc[nt][e] = pv;
        sum[e >> 1] += pv;
      }
    }
    row_l[0] = row_l[0] * alpha[0] + sum[0];
    row_l[1] = row_l[1] * alpha[1] + sum[1];
#pragma unroll
    for (int nt = 0; nt < Tile::kNTilesO; ++nt) {
      o_acc[nt][0] *= alpha[0];
      o_acc[nt][1] *= alpha[0];
      o_acc[nt][2] *= alpha[1];
      o_acc[nt][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kPreKeys / 16; ++kk) {
      // The S accumulators of key columns 16kk..16kk+15 are exactly the A
      // fragment of P for this k-step.
      uint32_t pa[4];
      pa[0] = PackBf16(s_acc[2 * kk][0], s_acc[2 * kk][1]);
      pa[1] = PackBf16(s_acc[2 * kk][2], s_acc[2 * kk][3]);
      pa[2] = PackBf16(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]);
      pa[3] = PackBf16(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < Tile::kNTilesO / 2; ++np) {
        uint32_t bf[4];
        const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = np * 2 + (lane >> 4);
        Ldmatrix4Trans(bf, va + SwizzledOffset(row, ch, Tile::kVRowBytes));
        Mma16816(o_acc[2 * np], pa, bf[0], bf[1]);
        Mma16816(o_acc[2 * np + 1], pa, bf[2], bf[3]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_l[i] += __shfl_xor_sync(0xffffffffu, row_l[i], 1);
    row_l[i] += __shfl_xor_sync(0xffffffffu, row_l[i], 2);
  }
  const int64_t ld_out = static_cast<int64_t>(p.num_heads) * kDv;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int t = q0 + warp * 16 + g + i * 8;
    if (t >= T) continue;
    const float inv = 1.f / row_l[i];
    bf16* o = p.out + t * ld_out + static_cast<int64_t>(h) * kDv;
#pragma unroll
    for (int nt = 0; nt < Tile::kNTilesO; ++nt) {
      *reinterpret_cast<__nv_bfloat162*>(o + nt * 8 + 2 * c4) =
          __floats2bfloat162_rn(o_acc[nt][2 * i] * inv, o_acc[nt][2 * i + 1] * inv);
    }
  }
}

// ---------------------------------------------------------------------------
// Prefill, Hopper path (sm_90a; dn = 128, dr = 64, dv = 128): flash-attention
// with wgmma. Grid (heads, query tiles of 128), heaviest (last) query tiles
// first over all heads; 256 threads = two warpgroups of 64 query rows.
//
// Per key tile of 128 (cp.async into a 2-stage ring, one tile ahead, issued
// while the step's tensor ops run):
//   S_j = Q K_jᵀ         wgmma m64n128k16 x12, Q and K from shared memory;
//   O  += P_{j-1} V_{j-1} wgmma m64n128k16 x8, P from registers (the S
//                         accumulators of the previous tile rounded to bf16);
// both groups are issued back to back, then the softmax of S_j (fp32, exp2,
// max/sum over the 4 lanes of a row) runs while P_{j-1} V_{j-1} is still on
// the tensor cores; O is rescaled once that group has retired. This keeps the
// tensor pipe busy across the exp2 work that stalled the mma.sync kernel.
//
// Shared memory (all tiles 1024-byte aligned, the 128-byte swizzle atom):
//   Q  [128 rows][192]  as 3 slabs of [128][64] (16 KB each)
//   K  2 stages x [128 keys][192] as 3 slabs of [128][64]
//   V  2 stages x [128 keys][128] as 2 slabs of [128][64]
// A slab row is 128 bytes; 16-byte chunk c of row r sits at chunk c ^ (r % 8)
// — the layout wgmma's 128B-swizzle descriptors describe (and the one the
// older kernels use for conflict-free ldmatrix). K slabs are K-major operands
// (SBO = 1024 B between 8-row groups, +32 B per 16-wide k step inside a slab);
// V slabs are N-major operands (LBO = slab stride between 64-wide dv halves,
// SBO = 1024 B between 8-key groups, +2048 B per 16-key k step).
//
// Budget at T = 8192 over 16K keys (one layer, H = 32): 64 tiles x 32 heads =
// 2048 CTAs, one per SM (210 KB of shared memory), 15.5 waves.

constexpr int kWgRows = 128;    // queries per CTA (2 warpgroups x 64)
constexpr int kWgKeys = 128;    // keys per step
constexpr int kWgThreads = 256;
constexpr int kWgSlabBytes = 128 * 128;          // [128 rows][64 bf16]
constexpr int kWgQBytes = 3 * kWgSlabBytes;      // dqk = 192
constexpr int kWgKBytes = 3 * kWgSlabBytes;
constexpr int kWgVBytes = 2 * kWgSlabBytes;      // dv = 128
constexpr int kWgSmemBytes = kWgQBytes + 2 * kWgKBytes + 2 * kWgVBytes + 1024;  // + alignment

// Byte offset of 16-byte chunk `chunk` (of the whole row) of row `row` in a
// tile stored as 64-column swizzled slabs.
__device__ __forceinline__ uint32_t SlabOffset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kWgSlabBytes + row * 128 +
                               (((chunk & 7) ^ (row & 7)) << 4));
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle (layout type 1),
// base offset 0 (every tile is 1024-byte aligned).
__device__ __forceinline__ uint64_t GmmaDesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins accumulator registers at this point so the compiler does not move
// their reads/writes across a wgmma wait.
__device__ __forceinline__ void FenceOperands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's completed cp.async writes to shared memory visible to
// the async proxy (wgmma operand reads); a barrier follows.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// d (64x128 fp32, wgmma accumulator layout) (+)= A · B, A and B both read
// from shared memory through descriptors (K-major, 128-byte swizzle).
// accumulate == 0 overwrites d.
__device__ __forceinline__ void WgmmaM64N128SS(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                               int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
      " %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d += A · B with A (64x16 bf16) in registers, in the mma.sync A-fragment
// layout per warp, and B from shared memory N-major (imm-trans-b = 1: V is
// stored [keys][dv]), 128-byte swizzle.
__device__ __forceinline__ void WgmmaM64N128RS(float (&d)[64], const uint32_t (&a)[4],
                                               uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
      " {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

__global__ void __launch_bounds__(kWgThreads, 1)
    MlaPrefillWgmmaKernel(const __grid_constant__ PrefillParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kDn = 128, kDr = 64, kDv = 128, kDqk = kDn + kDr;
  constexpr int kQkChunks = kDqk / 8, kVChunks = kDv / 8;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_s = base;
  const uint32_t k_s = q_s + kWgQBytes;      // 2 stages
  const uint32_t v_s = k_s + 2 * kWgKBytes;  // 2 stages

  const int h = blockIdx.x;
  const int qt = gridDim.y - 1 - blockIdx.y;  // heaviest tiles first, all heads
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2;  // warpgroup: query rows 64wg..64wg+63 of the tile
  const int g = lane >> 2, c4 = lane & 3;
  const int q0 = qt * kWgRows;
  const int T = p.num_tokens;
  // Keys seen by the tile's last real query (position past + min(q0+128, T) − 1).
  const int kv_len = p.past + min(q0 + kWgRows, T);
  const int num_kt = (kv_len + kWgKeys - 1) / kWgKeys;
  const int64_t head_kv = static_cast<int64_t>(h) * (kDn + kDv);

  // Zero-filled (src-size 0) chunks for rows past T / keys past kv_len: never
  // garbage in the tensor cores; masked keys get -inf anyway.
#pragma unroll
  for (int i = 0; i < kWgRows * kQkChunks / kWgThreads; ++i) {
    const int c = tid + i * kWgThreads;
    const int row = c / kQkChunks, ch = c % kQkChunks;
    const int t = q0 + row;
    const bool ok = t < T;
    const bf16* src = p.q + static_cast<int64_t>(ok ? t : 0) * p.ld_q + h * kDqk + ch * 8;
    CpAsync16(q_s + SlabOffset(row, ch), ok ? src : p.q, ok);
  }
  auto load_k = [&](int kt, int st) {
    const int s0 = kt * kWgKeys;
    const uint32_t dst = k_s + st * kWgKBytes;
#pragma unroll
    for (int i = 0; i < kWgKeys * kQkChunks / kWgThreads; ++i) {
      const int c = tid + i * kWgThreads;
      const int row = c / kQkChunks, ch = c % kQkChunks;
      const int s = s0 + row;
      const bool ok = s < kv_len;
      const int64_t sr = ok ? s : 0;
      const bf16* src = ch < kDn / 8 ? p.kv + sr * p.ld_kv + head_kv + ch * 8
                                     : p.k_rope + sr * p.ld_krope + (ch - kDn / 8) * 8;
      CpAsync16(dst + SlabOffset(row, ch), ok ? src : p.kv, ok);
    }
  };
  auto load_v = [&](int kt, int st) {
    const int s0 = kt * kWgKeys;
    const uint32_t dst = v_s + st * kWgVBytes;
#pragma unroll
    for (int i = 0; i < kWgKeys * kVChunks / kWgThreads; ++i) {
      const int c = tid + i * kWgThreads;
      const int row = c / kVChunks, ch = c % kVChunks;
      const int s = s0 + row;
      const bool ok = s < kv_len;
      const bf16* src = p.kv + static_cast<int64_t>(ok ? s : 0) * p.ld_kv + head_kv + kDn + ch * 8;
      CpAsync16(dst + SlabOffset(row, ch), ok ? src : p.kv, ok);
    }
  };
  load_k(0, 0);
  CpAsyncCommit();
  CpAsyncWaitAll();
  FenceProxyAsync();
  __syncthreads();

  float s_acc[64], o_acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    s_acc[i] = 0.f;
    o_acc[i] = 0.f;
  }
  uint32_t p_frag[kWgKeys / 16][4];  // P of the previous tile, A fragments per 16 keys
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f};  // rows g, g + 8
  const int pos0 = p.past + q0 + wg * 64 + (warp & 3) * 16 + g;     // position of row g
  const int warp_min_pos = p.past + q0 + wg * 64 + (warp & 3) * 16;
  const uint32_t q_wg = q_s + wg * 64 * 128;  // this warpgroup's 64 rows in each Q slab

  for (int kt = 0; kt < num_kt; ++kt) {
    const int st = kt & 1;
    WgmmaFence();  // p_frag / o_acc were written by ordinary instructions
    const uint32_t kb = k_s + st * kWgKBytes;
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      const uint32_t off = (kk >> 2) * kWgSlabBytes + (kk & 3) * 32;
      WgmmaM64N128SS(s_acc, GmmaDesc(q_wg + off, 16, 1024), GmmaDesc(kb + off, 16, 1024),
                     kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
    if (kt > 0) {
      const uint32_t vb = v_s + (st ^ 1) * kWgVBytes;
#pragma unroll
      for (int kk = 0; kk < kWgKeys / 16; ++kk) {
        WgmmaM64N128RS(o_acc, p_frag[kk], GmmaDesc(vb + kk * 16 * 128, kWgSlabBytes, 1024));
      }
      WgmmaCommit();
      WgmmaWait<1>();  // S_kt done; P_{kt-1} V_{kt-1} may still run
    } else {
      WgmmaWait<0>();
    }
    FenceOperands(s_acc);
    // Next loads, issued while P_{kt-1} V_{kt-1} runs: stage st^1 of K held
    // K_{kt-1} (S_kt, reading stage st, is done) and stage st of V held
    // V_{kt-2}, both retired before the barrier that ended the last step.
    // Unconditional (past the end it only zero-fills a free stage) so no
    // branch sits inside the wgmma pipeline stage.
    load_k(kt + 1, st ^ 1);
    load_v(kt, st);
    CpAsyncCommit();

    // Causal mask (only where the tile reaches past this warp's first row)
    // and the scale, in log2 units. Element i: key column 8(i/4) + 2c4 +
    // (i&1), row g + 8((i/2)&1).
    const int s0 = kt * kWgKeys;
    const bool need_mask = s0 + kWgKeys - 1 > warp_min_pos;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int key = s0 + (i >> 2) * 8 + 2 * c4 + (i & 1);
      const int r = (i >> 1) & 1;
      float v = s_acc[i] * p.scale_log2;
      if (need_mask && key > pos0 + 8 * r) v = -INFINITY;
      s_acc[i] = v;
      mx[r] = fmaxf(mx[r], v);
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(row_m[r], mx[r]);
      // Key 0 is in every row's first tile, so m_new is finite from the first
      // step on; the guard keeps a fully masked row from making NaNs anyway.
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = Exp2Approx(row_m[r] - m_use[r]);
      row_m[r] = m_new;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int r = (i >> 1) & 1;
      const float e = Exp2Approx(s_acc[i] - m_use[r]);
      s_acc[i] = e;
      sum[r] += e;
    }
    row_l[0] = row_l[0] * alpha[0] + sum[0];
    row_l[1] = row_l[1] * alpha[1] + sum[1];

    WgmmaWait<0>();  // P_{kt-1} V_{kt-1} retired: O is final for rescaling, p_frag free
    FenceOperands(o_acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) o_acc[i] *= alpha[(i >> 1) & 1];
    // The S accumulators of key columns 16kk..16kk+15 are exactly the A
    // fragment of P for that k step.
#pragma unroll
    for (int kk = 0; kk < kWgKeys / 16; ++kk) {
      p_frag[kk][0] = PackBf16(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
      p_frag[kk][1] = PackBf16(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
      p_frag[kk][2] = PackBf16(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
      p_frag[kk][3] = PackBf16(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
    }

    CpAsyncWaitAll();  // K_{kt+1}, V_kt landed (this thread's part)
    FenceProxyAsync();
    __syncthreads();   // ...everyone's; every warpgroup is done with K_kt, V_{kt-1}
  }

  // The last tile's P V.
  {
    WgmmaFence();
    const uint32_t vb = v_s + ((num_kt - 1) & 1) * kWgVBytes;
#pragma unroll
    for (int kk = 0; kk < kWgKeys / 16; ++kk) {
      WgmmaM64N128RS(o_acc, p_frag[kk], GmmaDesc(vb + kk * 16 * 128, kWgSlabBytes, 1024));
    }
    WgmmaCommit();
    WgmmaWait<0>();
    FenceOperands(o_acc);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_l[r] += __shfl_xor_sync(0xffffffffu, row_l[r], 1);
    row_l[r] += __shfl_xor_sync(0xffffffffu, row_l[r], 2);
  }
  const int64_t ld_out = static_cast<int64_t>(p.num_heads) * kDv;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = q0 + wg * 64 + (warp & 3) * 16 + g + r * 8;
    if (t >= T) continue;
    const float inv = 1.f / row_l[r];
    bf16* o = p.out + static_cast<int64_t>(t) * ld_out + static_cast<int64_t>(h) * kDv;
#pragma unroll
    for (int nt = 0; nt < kDv / 8; ++nt) {
      *reinterpret_cast<__nv_bfloat162*>(o + nt * 8 + 2 * c4) = __floats2bfloat162_rn(
          o_acc[4 * nt + 2 * r] * inv, o_acc[4 * nt + 2 * r + 1] * inv);
    }
  }
#else
  __trap();  // the host launches this only on sm_90 devices of an sm_90a build
#endif
}

// Prefill, generic path: one CTA per (query, head), fp32, chunks of 128 keys.
__global__ void __launch_bounds__(kSimpleThreads) MlaPrefillSimpleKernel(const PrefillParams p) {
  extern __shared__ float dyn[];
  const int dqk = p.dn + p.dr;
  float* qs = dyn;         // [dn + dr]
  float* acc = qs + dqk;   // [dv]: element i owned by thread i % 128
  float* pw = acc + p.dv;  // [128]
  __shared__ float red[32];
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const bf16* q = p.q + static_cast<int64_t>(t) * p.ld_q + static_cast<int64_t>(h) * dqk;
  for (int i = tid; i < dqk; i += kSimpleThreads) qs[i] = __bfloat162float(q[i]);
  for (int i = tid; i < p.dv; i += kSimpleThreads) acc[i] = 0.f;
  __syncthreads();
  const int64_t head_off = static_cast<int64_t>(h) * (p.dn + p.dv);
  const int num_keys = p.past + t + 1;  // causal
  float m = -INFINITY, l = 0.f;
  for (int s0 = 0; s0 < num_keys; s0 += kSimpleThreads) {
    const int s = s0 + tid;
    float x = -INFINITY;
    if (s < num_keys) {
      const bf16* kn = p.kv + s * p.ld_kv + head_off;
      const bf16* kr = p.k_rope + s * p.ld_krope;
      float dot = 0.f;
      for (int i = 0; i < p.dn; ++i) dot += qs[i] * __bfloat162float(kn[i]);
      for (int i = 0; i < p.dr; ++i) dot += qs[p.dn + i] * __bfloat162float(kr[i]);
      x = dot * p.scale_log2;
    }
    const float m_new = fmaxf(m, BlockMax(x, red));
    const float alpha = exp2f(m - m_new);
    const float e = s < num_keys ? exp2f(x - m_new) : 0.f;
    pw[tid] = e;
    l = l * alpha + BlockSum(e, red);  // its barriers also publish pw
    m = m_new;
    const int count = min(kSimpleThreads, num_keys - s0);
    for (int i = tid; i < p.dv; i += kSimpleThreads) {
      float a = acc[i] * alpha;
      for (int k = 0; k < count; ++k) {
        a += pw[k] * __bfloat162float(p.kv[(s0 + k) * p.ld_kv + head_off + p.dn + i]);
      }
      acc[i] = a;
    }
    __syncthreads();  // pw is rewritten by the next chunk
  }
  bf16* o = p.out + (static_cast<int64_t>(t) * p.num_heads + h) * p.dv;
  for (int i = tid; i < p.dv; i += kSimpleThreads) o[i] = __float2bfloat16(acc[i] / l);
}

// ---------------------------------------------------------------------------
// Host side.

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

Status Invalid(const char* field, const char* why) {
  return absl::InvalidArgumentError(absl::StrCat("MLA: ", field, " ", why));
}

Status CheckShape(const MlaShape& s, bool need_heads) {
  if (need_heads && s.num_heads < 1) return Invalid("shape.num_heads", "must be >= 1");
  if (s.kv_rank < 1) return Invalid("shape.kv_rank", "must be >= 1");
  if (s.rope_dim < 0) return Invalid("shape.rope_dim", "must be >= 0");
  if (s.nope_dim < 0) return Invalid("shape.nope_dim", "must be >= 0");
  if (!(s.scale >= 0.f) || !std::isfinite(s.scale)) {
    return Invalid("shape.scale", "must be finite and >= 0 (0: (dn + dr)^-1/2)");
  }
  if (s.scale == 0.f && s.nope_dim + s.rope_dim < 1) {
    return Invalid("shape.scale", "is 0 but nope_dim + rope_dim is 0");
  }
  if (s.num_heads > (1 << 16) || s.cache_dim() > (1 << 20) || s.nope_dim > (1 << 20)) {
    return Invalid("shape", "dimensions are implausibly large");
  }
  return OkStatus();
}

float ScaleLog2(const MlaShape& s) {
  const float scale =
      s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.nope_dim + s.rope_dim));
  return scale * kLog2e;
}

Status CheckCache(const MlaCache& c) {
  if (c.pool == nullptr) return Invalid("cache.pool", "is null");
  if (c.block_table == nullptr) return Invalid("cache.block_table", "is null");
  if (c.max_blocks < 1) return Invalid("cache.max_blocks", "must be >= 1");
  return OkStatus();
}

StatusOr<int> CurrentDeviceAttribute(cudaDeviceAttr attr, const char* what) {
  int dev = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  int value = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&value, attr, dev);
  if (err != cudaSuccess) return CudaError(err, what);
  return value;
}

int SmCount() {
  StatusOr<int> n = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, "sm count");
  return n.ok() && *n > 0 ? *n : 132;
}

// The tensor-core decode kernel's shape (any head count).
bool DecodeFastShape(const MlaShape& s) { return s.kv_rank == 512 && s.rope_dim == 64; }

struct DecodePlan {
  int num_splits = 1;
  int blocks_per_split = 1;
  size_t part_o_bytes = 0;
  size_t workspace_bytes = 0;
};

// Flash-decoding split: the CTA count is units·splits (units = batch · head
// groups, one CTA per SM), each CTA walks ceil(blocks / splits) blocks. Pick
// the split minimising waves × (blocks per CTA + 1): the +1 stands for the
// prologue and the partial's write, so tiny splits are not free.
// Batch-invariant (`invariant`): kInvariantSplitBlocks blocks per split
// whatever the batch or the bound, ceil(blocks / 8) splits.
DecodePlan PlanDecode(const MlaShape& s, int64_t batch, int64_t max_seq_len, int sm_count,
                      bool invariant) {
  DecodePlan plan;
  if (!DecodeFastShape(s) || batch < 1 || max_seq_len < 1 || s.num_heads < 1) return plan;
  const int64_t blocks = (max_seq_len + kKvBlockTokens - 1) / kKvBlockTokens;
  if (invariant) {
    plan.blocks_per_split = kInvariantSplitBlocks;
    plan.num_splits = static_cast<int>(
        std::min<int64_t>((blocks + kInvariantSplitBlocks - 1) / kInvariantSplitBlocks,
                          std::numeric_limits<int>::max()));
    if (plan.num_splits > 1) {
      const size_t parts = static_cast<size_t>(batch) * plan.num_splits * s.num_heads;
      plan.part_o_bytes = AlignUp(parts * s.kv_rank * sizeof(float));
      plan.workspace_bytes = plan.part_o_bytes + AlignUp(parts * sizeof(float));
    }
    return plan;
  }
  const int64_t units = batch * ((s.num_heads + kDecHeads - 1) / kDecHeads);
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  int64_t best_bps = blocks;
  for (int64_t splits = 1; splits <= std::min<int64_t>(blocks, kMaxSplits); ++splits) {
    const int64_t bps = (blocks + splits - 1) / splits;
    const int64_t used = (blocks + bps - 1) / bps;  // splits that actually get blocks
    const int64_t waves = (units * used + sm_count - 1) / sm_count;
    const int64_t cost = waves * (bps + 1);
    if (cost < best_cost) {
      best_cost = cost;
      best_bps = bps;
    }
  }
  plan.blocks_per_split = static_cast<int>(best_bps);
  plan.num_splits = static_cast<int>((blocks + best_bps - 1) / best_bps);
  if (plan.num_splits > 1) {
    const size_t parts = static_cast<size_t>(batch) * plan.num_splits * s.num_heads;
    plan.part_o_bytes = AlignUp(parts * s.kv_rank * sizeof(float));
    plan.workspace_bytes = plan.part_o_bytes + AlignUp(parts * sizeof(float));
  }
  return plan;
}

template <typename Kernel>
Status AllowDynamicSmem(Kernel kernel, int bytes, const char* name) {
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return CudaError(err, name);
  return OkStatus();
}

// Whether the device lets a block use `bytes` of dynamic shared memory.
bool SmemFits(int bytes) {
  StatusOr<int> optin = CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                               "max shared memory per block");
  return optin.ok() && *optin >= bytes;
}

// The wgmma prefill kernel is built for sm_90a only (its body traps
// elsewhere), so it runs on compute capability 9.0 devices only.
bool IsSm90Device() {
  StatusOr<int> major = CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, "cc major");
  StatusOr<int> minor = CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMinor, "cc minor");
  return major.ok() && minor.ok() && *major == 9 && *minor == 0;
}

// mla.prefill=mma keeps the mma.sync prefill kernel instead of the wgmma one.
bool OldPrefillSelected() {
  return tuning::Current().Choice<tuning::MlaPrefill>(tuning::Key::kMlaPrefill) ==
         tuning::MlaPrefill::kMma;
}

}  // namespace

// ---------------------------------------------------------------------------

Status MlaCacheWrite(const MlaShape& shape, const MlaCache& cache, const bf16* rows, int64_t ld,
                     int64_t n, int64_t start, const int32_t* positions, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(shape, /*need_heads=*/false));
  STRATA_RETURN_IF_ERROR(CheckCache(cache));
  if (n < 0) return Invalid("n", "must be >= 0");
  if (n == 0) return OkStatus();
  if (rows == nullptr) return Invalid("rows", "is null");
  const int64_t cd = shape.cache_dim();
  if (ld < cd) return Invalid("ld", "must be >= r + dr");
  if (n > std::numeric_limits<int32_t>::max()) return Invalid("n", "exceeds 2^31 - 1 rows");
  if (positions == nullptr) {
    if (start < 0) return Invalid("start", "must be >= 0");
    if ((start + n - 1) / kKvBlockTokens >= cache.max_blocks) {
      return Invalid("start", "+ n exceeds the block table (max_blocks · 64 tokens)");
    }
  }
  CacheCopyParams p{};
  p.pool = cache.pool;
  p.block_table = cache.block_table;
  p.max_blocks = cache.max_blocks;
  p.cd = cd;
  p.src = rows;
  p.ld = ld;
  p.start = start;
  p.positions = positions;
  p.vec16 = cd % 8 == 0 && ld % 8 == 0 && Aligned16(rows) && Aligned16(cache.pool);
  const cudaError_t err =
      LaunchPdl(MlaCacheWriteKernel, dim3(static_cast<unsigned>(n)), dim3(128), 0, stream, p);
  if (err != cudaSuccess) return CudaError(err, "MlaCacheWriteKernel");
  return OkStatus();
}

Status MlaCacheGather(const MlaShape& shape, const MlaCache& cache, int64_t n, bf16* rows,
                      cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(shape, /*need_heads=*/false));
  STRATA_RETURN_IF_ERROR(CheckCache(cache));
  if (n < 0) return Invalid("n", "must be >= 0");
  if (n == 0) return OkStatus();
  if (rows == nullptr) return Invalid("rows", "is null");
  if ((n - 1) / kKvBlockTokens >= cache.max_blocks) {
    return Invalid("n", "exceeds the block table (max_blocks · 64 tokens)");
  }
  const int64_t cd = shape.cache_dim();
  CacheCopyParams p{};
  p.pool = cache.pool;
  p.block_table = cache.block_table;
  p.max_blocks = cache.max_blocks;
  p.cd = cd;
  p.dst = rows;
  p.ld = cd;
  p.vec16 = cd % 8 == 0 && Aligned16(rows) && Aligned16(cache.pool);
  MlaCacheGatherKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(p);
  return LaunchStatus("MlaCacheGatherKernel");
}

size_t MlaDecodeWorkspaceBytes(const MlaShape& shape, int64_t batch, int64_t max_seq_len,
                               bool batch_invariant) {
  return PlanDecode(shape, batch, max_seq_len, SmCount(), batch_invariant).workspace_bytes;
}

namespace {
// mla.cache_early=0 ignores MlaDecodeArgs::cache_before_wait (the same bits).
bool MlaCacheEarlyEnabled() { return tuning::Current().On(tuning::Key::kMlaCacheEarly); }
}  // namespace

Status MlaDecode(const MlaDecodeArgs& args, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  const MlaShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(s, /*need_heads=*/true));
  STRATA_RETURN_IF_ERROR(CheckCache(args.cache));
  if (args.batch < 0) return Invalid("batch", "must be >= 0");
  if (args.batch == 0) return OkStatus();
  if (args.batch > 65535) return Invalid("batch", "exceeds 65535 sequences per call");
  if (args.q_abs == nullptr) return Invalid("q_abs", "is null");
  const MlaSparseRows& sp = args.sparse;
  const bool sparse = sp.rows != nullptr;
  if (sparse) {
    if (sp.counts == nullptr) return Invalid("sparse.counts", "is null (sparse.rows is set)");
    if (sp.stride < args.max_seq_len) return Invalid("sparse.stride", "must be >= max_seq_len");
  } else if (args.seq_lens == nullptr) {
    return Invalid("seq_lens", "is null");
  }
  if (args.out_latent == nullptr) return Invalid("out_latent", "is null");
  if (args.out_type != ActType::kBf16 && args.out_type != ActType::kF32) {
    return Invalid("out_type", "must be kBf16 or kF32");
  }
  if (args.max_seq_len < 1) return Invalid("max_seq_len", "must be >= 1");
  // Sparse positions are checked against the table row by row on the device.
  if (!sparse && args.max_seq_len > args.cache.max_blocks * kKvBlockTokens) {
    return Invalid("max_seq_len", "exceeds the block table (cache.max_blocks · 64 tokens)");
  }
  if (args.max_seq_len > std::numeric_limits<int32_t>::max() / 2) {
    return Invalid("max_seq_len", "exceeds 2^30 tokens");
  }
  const bool invariant = args.batch_invariant;
  if (invariant && args.max_seq_len > int64_t{kMaxMergeSplits} * kInvariantSplitBlocks *
                                          kKvBlockTokens) {
    return Invalid("max_seq_len", "exceeds 2^20 tokens (batch_invariant)");
  }
  const DecodePlan plan = PlanDecode(s, args.batch, args.max_seq_len, SmCount(), invariant);
  if (plan.workspace_bytes > 0 && workspace == nullptr) {
    return Invalid("workspace", "is null (MlaDecodeWorkspaceBytes > 0)");
  }
  if (workspace_bytes < plan.workspace_bytes) {
    return Invalid("workspace_bytes",
                   "is below MlaDecodeWorkspaceBytes(shape, batch, max_seq_len, batch_invariant)");
  }
  const bool out_f32 = args.out_type == ActType::kF32;
  const float scale_log2 = ScaleLog2(s);
  const int heads = static_cast<int>(s.num_heads);

  using FastTile = DecodeTile<512, 64>;
  const bool rope_ok =
      args.q_rope == nullptr || (Aligned16(args.q_rope) && args.q_rope_stride % 8 == 0);
  const bool fast = DecodeFastShape(s) && Aligned16(args.q_abs) && Aligned16(args.cache.pool) &&
                    Aligned16(args.out_latent) && Aligned16(workspace) && rope_ok &&
                    SmemFits(FastTile::kSmemBytes);
  if (fast) {
    DecodeParams p{};
    p.q = args.q_abs;
    p.q_rope = args.q_rope;
    p.q_rope_stride = args.q_rope_stride;
    p.pool = args.cache.pool;
    p.block_table = args.cache.block_table;
    p.seq_lens = args.seq_lens;
    p.max_blocks = args.cache.max_blocks;
    p.num_heads = heads;
    p.max_seq_len = static_cast<int>(args.max_seq_len);
    p.num_splits = plan.num_splits;
    p.blocks_per_split = plan.blocks_per_split;
    p.scale_log2 = scale_log2;
    p.out = args.out_latent;
    p.out_f32 = out_f32;
    p.sel_rows = sp.rows;
    p.sel_counts = sparse ? sp.counts : nullptr;
    p.sel_stride = sp.stride;
    p.sel_one_seq = sparse && sp.one_sequence;
    p.cache_before_wait = args.cache_before_wait && !sparse && MlaCacheEarlyEnabled();
    if (plan.num_splits > 1) {
      p.part_o = static_cast<float*>(workspace);
      p.part_lse = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + plan.part_o_bytes);
    }
    auto* kernel = &MlaDecodeTcKernel<512, 64>;
    STRATA_RETURN_IF_ERROR(
        AllowDynamicSmem(kernel, FastTile::kSmemBytes, "cudaFuncSetAttribute(MlaDecodeTcKernel)"));
    const dim3 grid(plan.num_splits, (heads + kDecHeads - 1) / kDecHeads,
                    static_cast<unsigned>(args.batch));
    const cudaError_t err =
        LaunchPdl(kernel, grid, dim3(kDecThreads), FastTile::kSmemBytes, stream, p);
    if (err != cudaSuccess) return CudaError(err, "MlaDecodeTcKernel");
    if (plan.num_splits > 1) {
      MergeParams m{};
      m.part_o = p.part_o;
      m.part_lse = p.part_lse;
      m.seq_lens = args.seq_lens;
      m.sel_counts = p.sel_counts;
      m.max_seq_len = p.max_seq_len;
      m.num_splits = plan.num_splits;
      m.blocks_per_split = plan.blocks_per_split;
      m.num_heads = heads;
      m.r = static_cast<int>(s.kv_rank);
      m.out = args.out_latent;
      m.out_f32 = out_f32;
      m.early_partials = tuning::Current().On(tuning::Key::kMlaMergeEarly);
      // The wide merge sums the splits in four interleaved streams and is
      // chosen by the batch size: never in batch-invariant mode.
      if (!invariant && static_cast<int64_t>(heads) * args.batch < SmCount()) {
        const cudaError_t merr = LaunchPdl(MlaDecodeMergeWideKernel,
                                           dim3(heads, static_cast<unsigned>(args.batch),
                                                static_cast<unsigned>((s.kv_rank + 127) / 128)),
                                           dim3(128), 0, stream, m);
        if (merr != cudaSuccess) return CudaError(merr, "MlaDecodeMergeWideKernel");
      } else {
        const cudaError_t merr =
            LaunchPdl(MlaDecodeMergeKernel, dim3(heads, static_cast<unsigned>(args.batch)),
                      dim3(128), 0, stream, m);
        if (merr != cudaSuccess) return CudaError(merr, "MlaDecodeMergeKernel");
      }
    }
    return OkStatus();
  }

  SimpleDecodeParams p{};
  p.q = args.q_abs;
  p.q_rope = args.q_rope;
  p.q_rope_stride = args.q_rope_stride;
  p.pool = args.cache.pool;
  p.block_table = args.cache.block_table;
  p.seq_lens = args.seq_lens;
  p.max_blocks = args.cache.max_blocks;
  p.num_heads = heads;
  p.r = static_cast<int>(s.kv_rank);
  p.cd = static_cast<int>(s.cache_dim());
  p.max_seq_len = static_cast<int>(args.max_seq_len);
  p.scale_log2 = scale_log2;
  p.out = args.out_latent;
  p.out_f32 = out_f32;
  p.sel_rows = sp.rows;
  p.sel_counts = sparse ? sp.counts : nullptr;
  p.sel_stride = sp.stride;
  p.sel_one_seq = sparse && sp.one_sequence;
  const int smem = static_cast<int>((s.cache_dim() + s.kv_rank + kSimpleThreads) * sizeof(float));
  if (smem > 48 * 1024) {
    if (!SmemFits(smem)) return Invalid("shape", "r + dr too large for the generic decode kernel");
    STRATA_RETURN_IF_ERROR(AllowDynamicSmem(&MlaDecodeSimpleKernel, smem,
                                            "cudaFuncSetAttribute(MlaDecodeSimpleKernel)"));
  }
  MlaDecodeSimpleKernel<<<dim3(heads, static_cast<unsigned>(args.batch)), kSimpleThreads, smem,
                          stream>>>(p);
  return LaunchStatus("MlaDecodeSimpleKernel");
}

namespace {
constexpr int64_t kSparsePrefillPass = 65535;  // grid.z limit of the decode kernels
}  // namespace

size_t MlaSparsePrefillWorkspaceBytes(const MlaShape& shape, int64_t num_tokens, int64_t top_k,
                                      bool batch_invariant) {
  if (num_tokens < 1 || top_k < 1) return 0;
  // Every pass is full-sized but the last; size for both.
  const int64_t first = std::min(num_tokens, kSparsePrefillPass);
  const int64_t last = num_tokens - (num_tokens - 1) / kSparsePrefillPass * kSparsePrefillPass;
  return std::max(MlaDecodeWorkspaceBytes(shape, first, top_k, batch_invariant),
                  MlaDecodeWorkspaceBytes(shape, last, top_k, batch_invariant));
}

Status MlaSparsePrefill(const MlaSparsePrefillArgs& args, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  if (args.num_tokens < 0) return Invalid("num_tokens", "must be >= 0");
  if (args.num_tokens == 0) return OkStatus();
  if (args.top_k < 1) return Invalid("top_k", "must be >= 1");
  if (args.rows == nullptr) return Invalid("rows", "is null");
  if (args.counts == nullptr) return Invalid("counts", "is null");
  if (args.q_abs == nullptr) return Invalid("q_abs", "is null");
  if (args.out_latent == nullptr) return Invalid("out_latent", "is null");
  if (args.out_type != ActType::kBf16 && args.out_type != ActType::kF32) {
    return Invalid("out_type", "must be kBf16 or kF32");
  }
  STRATA_RETURN_IF_ERROR(CheckShape(args.shape, /*need_heads=*/true));
  const int64_t cd = args.shape.cache_dim();
  const int64_t heads = args.shape.num_heads;
  const size_t out_elem = args.out_type == ActType::kF32 ? 4 : 2;
  for (int64_t t0 = 0; t0 < args.num_tokens; t0 += kSparsePrefillPass) {
    const int64_t n = std::min(kSparsePrefillPass, args.num_tokens - t0);
    MlaDecodeArgs d;
    d.shape = args.shape;
    d.batch = n;
    d.q_abs = args.q_abs + t0 * heads * cd;
    d.cache = args.cache;
    d.max_seq_len = args.top_k;
    d.out_latent = static_cast<uint8_t*>(args.out_latent) +
                   static_cast<size_t>(t0 * heads * args.shape.kv_rank) * out_elem;
    d.out_type = args.out_type;
    d.sparse.rows = args.rows + t0 * args.top_k;
    d.sparse.counts = args.counts + t0;
    d.sparse.stride = args.top_k;
    d.sparse.one_sequence = true;
    d.batch_invariant = args.batch_invariant;
    STRATA_RETURN_IF_ERROR(MlaDecode(d, workspace, workspace_bytes, stream));
  }
  return OkStatus();
}

Status MlaPrefill(const MlaPrefillArgs& args, cudaStream_t stream) {
  const MlaShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(s, /*need_heads=*/true));
  if (s.nope_dim + s.rope_dim < 1) return Invalid("shape.nope_dim", "+ rope_dim must be >= 1");
  if (s.v_dim < 1) return Invalid("shape.v_dim", "must be >= 1");
  if (s.num_heads > 65535) return Invalid("shape.num_heads", "exceeds 65535");
  if (args.num_tokens < 0) return Invalid("num_tokens", "must be >= 0");
  if (args.past < 0) return Invalid("past", "must be >= 0");
  if (args.num_tokens == 0) return OkStatus();
  if (args.past + args.num_tokens > std::numeric_limits<int32_t>::max() / 2) {
    return Invalid("past", "+ num_tokens exceeds 2^30 tokens");
  }
  if (args.q == nullptr) return Invalid("q", "is null");
  if (args.kv == nullptr) return Invalid("kv", "is null");
  if (s.rope_dim > 0 && args.k_rope == nullptr) return Invalid("k_rope", "is null");
  if (args.out == nullptr) return Invalid("out", "is null");
  const int64_t dqk = s.nope_dim + s.rope_dim;
  const int64_t ld_q = args.ld_q != 0 ? args.ld_q : s.num_heads * dqk;
  if (ld_q < s.num_heads * dqk) return Invalid("ld_q", "must be >= H·(dn + dr)");
  const int64_t ld_krope = args.ld_krope != 0 ? args.ld_krope : s.rope_dim;
  if (ld_krope < s.rope_dim) return Invalid("ld_krope", "must be >= dr");

  PrefillParams p{};
  p.q = args.q;
  p.ld_q = ld_q;
  p.kv = args.kv;
  p.ld_kv = s.num_heads * (s.nope_dim + s.v_dim);
  p.k_rope = args.k_rope != nullptr ? args.k_rope : args.kv;  // never read when dr == 0
  p.ld_krope = ld_krope;
  p.out = args.out;
  p.num_tokens = static_cast<int>(args.num_tokens);
  p.past = static_cast<int>(args.past);
  p.num_heads = static_cast<int>(s.num_heads);
  p.dn = static_cast<int>(s.nope_dim);
  p.dr = static_cast<int>(s.rope_dim);
  p.dv = static_cast<int>(s.v_dim);
  p.scale_log2 = ScaleLog2(s);

  using FastTile = PrefillTile<128, 64, 128>;
  const bool fast = s.nope_dim == 128 && s.rope_dim == 64 && s.v_dim == 128 && ld_q % 8 == 0 &&
                    ld_krope % 8 == 0 && Aligned16(args.q) && Aligned16(args.kv) &&
                    Aligned16(args.k_rope) && Aligned16(args.out) && SmemFits(FastTile::kSmemBytes);
  if (fast && !OldPrefillSelected() && IsSm90Device() && SmemFits(kWgSmemBytes)) {
    STRATA_RETURN_IF_ERROR(AllowDynamicSmem(&MlaPrefillWgmmaKernel, kWgSmemBytes,
                                            "cudaFuncSetAttribute(MlaPrefillWgmmaKernel)"));
    const int64_t tiles = (args.num_tokens + kWgRows - 1) / kWgRows;
    if (tiles > 65535) return Invalid("num_tokens", "exceeds 65535 query tiles of 128");
    MlaPrefillWgmmaKernel<<<dim3(p.num_heads, static_cast<unsigned>(tiles)), kWgThreads,
                            kWgSmemBytes, stream>>>(p);
    return LaunchStatus("MlaPrefillWgmmaKernel");
  }
  if (fast) {
    auto* kernel = &MlaPrefillTcKernel<128, 64, 128>;
    STRATA_RETURN_IF_ERROR(
        AllowDynamicSmem(kernel, FastTile::kSmemBytes, "cudaFuncSetAttribute(MlaPrefillTcKernel)"));
    const int64_t tiles = (args.num_tokens + kPreRows - 1) / kPreRows;
    kernel<<<dim3(static_cast<unsigned>(tiles), p.num_heads), kPreThreads, FastTile::kSmemBytes,
             stream>>>(p);
    return LaunchStatus("MlaPrefillTcKernel");
  }
  const int smem = static_cast<int>((dqk + s.v_dim + kSimpleThreads) * sizeof(float));
  if (smem > 48 * 1024) {
    if (!SmemFits(smem))
      return Invalid("shape", "dn + dr + dv too large for the generic prefill kernel");
    STRATA_RETURN_IF_ERROR(AllowDynamicSmem(&MlaPrefillSimpleKernel, smem,
                                            "cudaFuncSetAttribute(MlaPrefillSimpleKernel)"));
  }
  MlaPrefillSimpleKernel<<<dim3(static_cast<unsigned>(args.num_tokens), p.num_heads),
                           kSimpleThreads, smem, stream>>>(p);
  return LaunchStatus("MlaPrefillSimpleKernel");
}

}  // namespace strata::cuda
