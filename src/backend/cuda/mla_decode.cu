// MLA decode on the GPU: the paged latent cache write/gather, the absorbed
// decode (flash-decoding over the shared 576-wide cache row, then the split
// merge), and the sparse prefill that runs the decode kernels over selected
// rows. Shared with the prefill: mla_common.cuh.
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
//  * MlaCacheWrite/Gather move 2·n·(r+dr)·2 B: pure copies.
#include "backend/cuda/mla_common.cuh"

namespace strata::cuda {
namespace {

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

}  // namespace strata::cuda
