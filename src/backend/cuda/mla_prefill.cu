// MLA prefill on the GPU: causal flash attention over the prompt's own keys
// and the cached ones (wgmma on sm_90, mma.sync as the reference, a plain fp32
// kernel for other shapes). Shared with decode: mla_common.cuh.
//
// Cost model at the production shape (H=32, dn=128, dr=64, dv=128, r=512;
// H200: 4.27 TB/s copy bandwidth, ~686 TFLOP/s bf16 dense):
//  * MlaPrefill does 2·H·T·(past + (T+1)/2)·(dn+dr+dv) FLOP and reads q, kv,
//    k_rope once per query tile: at T = 32K, past = 0 that is 11 TFLOP
//    -> 16 ms at the bf16 peak. The mma.sync flash-attention-2 kernel
//    stays near a third of the peak (docs/dev/journal/performance.md); the
//    wgmma kernel (sm_90) issues 64x128x16 tensor ops from shared memory and
//    overlaps the softmax with the previous tile's P·V, and loads 128-row
//    query tiles (twice the old 64), which halves the L2->SM traffic per
//    FLOP: 80 KB of K/V per 10.5 MFLOP, 5.2 TB/s at the peak. Expected
//    ~55-65% of the peak (≈380-440 TFLOP/s) at long contexts.
// Prefill at dn = 128, dr = 64, dv = 128 takes the wgmma kernel on sm_90
// devices (mla.prefill=mma: the mma.sync kernel, the reference).
#include "backend/cuda/mla_common.cuh"

namespace strata::cuda {
namespace {

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
