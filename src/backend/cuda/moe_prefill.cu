// The MoE prefill regime: the mma.sync grouped GEMM, the FP8 expert
// dequantisation into scratch, and the CUTLASS (sm_90) path's launch.
#include "backend/cuda/moe_common.cuh"

namespace strata::cuda::moe_detail {

// ---------------------------------------------------------------------------
// Grouped GEMM (prefill): mma.sync m16n8k16, bf16 in, fp32 accumulate.

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Batch invariance (MoeArgs::batch_invariant): an output element of a row is
// the fp32 sum over k tiles 0, 1, ... of mma.sync m16n8k16 steps, each of
// which reads only that row's A fragment and the B tile; the tile config is
// fixed and the k loop never splits, so the value depends neither on how
// many rows the tile or the call hold nor on the row's slot in the tile
// (rows are placed by atomics, in any order). Masked rows are zero-filled and
// feed only their own accumulators. The combine sums the k picks in k order
// with one fmaf chain (vector and scalar forms alike).
//
// kGateUp: A = x rows gathered through row_token (K = D), B = 64 gate rows and
// the matching 64 up rows of w13[e] interleaved in groups of 16 (smem row r is
// gate row j0 + 16·(r/32) + r%16 when (r/16) is even, else the up row of the
// same j), epilogue h = silu(g)·u as bf16. Otherwise A = h rows (K = I), B =
// 128 rows of w2[e], epilogue yrows fp32.
// Grid (tile bound, I/64 or D/128). Requires D % 128 == 0, I % 64 == 0 and
// 16-byte aligned x, w13, w2 (checked on the host).
template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) MoeGroupedGemmKernel(MoeParams p) {
  extern __shared__ __align__(16) unsigned char gemm_smem[];
  bf16* const a_smem = reinterpret_cast<bf16*>(gemm_smem);  // [kStages][kBm][kLds]
  bf16* const b_smem = a_smem + kStages * kBm * kLds;       // [kStages][kBn][kLds]
  PdlWait();
  PdlLaunchDependents();
  const int tile = blockIdx.x;
  if (tile >= p.meta[1]) return;
  const int e = p.tile_expert[tile];
  if (e < p.expert_lo || e >= p.expert_hi) return;
  const size_t el = static_cast<size_t>(e - p.expert_lo);  // weight slot
  const int first = p.offsets[e] + p.tile_m0[tile];
  const int rows = min(kBm, p.offsets[e + 1] - first);
  const int D = p.hidden;
  const int I = p.inter;
  const int K = kGateUp ? D : I;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int wm = warp >> 2;  // 2 warps along M (32 rows each)
  const int wn = warp & 3;   // 4 warps along N (32 columns each)

  // Loaders: one 16-byte chunk of A and two of B per thread and stage.
  const int ld_row = tid >> 2;       // 0..63
  const int ld_col = (tid & 3) * 8;  // element offset of the chunk
  const bool a_valid = ld_row < rows;
  const bf16* a_src;
  if (kGateUp) {
    const int tok = a_valid ? p.row_token[first + ld_row] : 0;
    a_src = p.x + static_cast<size_t>(tok) * D + ld_col;
  } else {
    a_src = p.h + static_cast<size_t>(first + (a_valid ? ld_row : 0)) * I + ld_col;
  }
  const bf16* b_src[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = ld_row + 64 * i;
    size_t wrow;
    if (kGateUp) {
      const int group = r >> 4;
      const int j = blockIdx.y * 64 + (group >> 1) * 16 + (r & 15);
      wrow = el * 2 * I + ((group & 1) ? I + j : j);
    } else {
      wrow = el * D + blockIdx.y * kBn + r;
    }
    b_src[i] = (kGateUp ? p.w13 : p.w2) + wrow * K + ld_col;
  }
  auto load_stage = [&](int stage, int kt) {
    const int koff = kt * kBk;
    CpAsync16(a_smem + (stage * kBm + ld_row) * kLds + ld_col, a_src + koff, a_valid);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      CpAsync16(b_smem + (stage * kBn + ld_row + 64 * i) * kLds + ld_col, b_src[i] + koff, true);
    }
  };

  const int k_tiles = K / kBk;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    CpAsyncCommit();  // empty groups keep the wait count uniform
  }
  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.f;
    }
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile kt landed
    __syncthreads();             // everyone's did, and tile kt−1 is no longer read
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    CpAsyncCommit();
    const bf16* a_tile = a_smem + (kt % kStages) * kBm * kLds;
    const bf16* b_tile = b_smem + (kt % kStages) * kBn * kLds;
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        LdMatrixX4(a[mi], a_tile + (wm * 32 + mi * 16 + (lane & 15)) * kLds + kk + (lane >> 4) * 8);
      }
      uint32_t b[4][2];
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t r[4];
        LdMatrixX4(r, b_tile + (wn * 32 + nj * 16 + (lane >> 4) * 8 + (lane & 7)) * kLds + kk +
                          ((lane >> 3) & 1) * 8);
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Mma16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      }
    }
  }
  CpAsyncWait<0>();

  // Accumulator c of fragment (mi, ni): row wm·32 + mi·16 + lane/4 (+8 for
  // c = 2, 3), column wn·32 + ni·8 + 2·(lane%4) (+1 for odd c).
  const int g = lane >> 2;
  const int c2 = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = wm * 32 + mi * 16 + g + half * 8;
      if (row >= rows) continue;
      const size_t out_row = static_cast<size_t>(first + row);
      if (kGateUp) {
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const int j = blockIdx.y * 64 + wn * 16 + ni * 8 + c2;
          const float h0 = Silu(acc[mi][ni][2 * half]) * acc[mi][ni + 2][2 * half];
          const float h1 = Silu(acc[mi][ni][2 * half + 1]) * acc[mi][ni + 2][2 * half + 1];
          *reinterpret_cast<uint32_t*>(p.h + out_row * I + j) = F32x2ToBf16x2(h0, h1);
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int col = blockIdx.y * kBn + wn * 32 + ni * 8 + c2;
          *reinterpret_cast<float2*>(p.yrows + out_row * D + col) =
              make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
        }
      }
    }
  }
}

// FP8 prefill: experts [expert_lo, expert_hi) that have rows, dequantised
// into deq13 / deq2 (slot e − expert_lo) in the bf16 layout, 8 elements per
// thread (D and I are multiples of 64 on this path). Grid (x, chunk size).
constexpr int kDequantThreads = 256;
__global__ void __launch_bounds__(kDequantThreads) MoeDequantExpertsKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  const int e = p.expert_lo + static_cast<int>(blockIdx.y);
  if (e >= p.expert_hi || p.offsets[e + 1] == p.offsets[e]) return;
  const size_t D = static_cast<size_t>(p.hidden);
  const size_t I = static_cast<size_t>(p.inter);
  const size_t slot = blockIdx.y;
  const size_t n13 = 2 * I * D / 8;
  const size_t total = n13 + D * I / 8;
  for (size_t v = static_cast<size_t>(blockIdx.x) * kDequantThreads + threadIdx.x; v < total;
       v += static_cast<size_t>(gridDim.x) * kDequantThreads) {
    const bool is13 = v < n13;
    const size_t q = (is13 ? v : v - n13) * 8;
    const size_t cols = is13 ? D : I;
    const int r = static_cast<int>(q / cols);
    const int c = static_cast<int>(q % cols);
    const Fp8Row row = is13 ? W13Row<uint8_t>(p, e, r) : W2Row<uint8_t>(p, e, r);
    float f[8];
    Unpack(LoadRow<8>(row, c), f);
    bf16* dst = (is13 ? p.deq13 + slot * 2 * I * D : p.deq2 + slot * D * I) + q;
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(F32x2ToBf16x2(f[0], f[1]), F32x2ToBf16x2(f[2], f[3]), F32x2ToBf16x2(f[4], f[5]),
                   F32x2ToBf16x2(f[6], f[7]));
  }
}

// fp8_chunk: experts per dequantisation chunk when p.w13_fp8 is set.
Status LaunchGemmPath(const MoeParams& p, bool vec4_y, int fp8_chunk, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const unsigned tiles = static_cast<unsigned>(TileBound(rows, p.num_experts));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(MoeGroupedGemmKernel<true>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kGemmSmemBytes)));
  STRATA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(MoeGroupedGemmKernel<false>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kGemmSmemBytes)));
  auto gemms = [&](const MoeParams& q) -> Status {
    STRATA_RETURN_IF_ERROR(Launch("MoeGroupedGemmKernel<gate_up>", MoeGroupedGemmKernel<true>,
                                  dim3(tiles, static_cast<unsigned>(q.inter / 64)),
                                  dim3(kGemmThreads), kGemmSmemBytes, stream, q));
    return Launch("MoeGroupedGemmKernel<down>", MoeGroupedGemmKernel<false>,
                  dim3(tiles, static_cast<unsigned>(q.hidden / kBn)), dim3(kGemmThreads),
                  kGemmSmemBytes, stream, q);
  };
  if (p.w13_fp8 == nullptr) {
    STRATA_RETURN_IF_ERROR(gemms(p));
  } else {
    // Chunks of `chunk` experts: dequantise the chunk's active experts, then
    // the GEMMs on the tiles of those experts (the others exit at once). The
    // scratch is reused; stream order (and each kernel's PdlWait) keeps the
    // next chunk's dequantisation behind the previous chunk's GEMMs.
    const int64_t per = 3 * static_cast<int64_t>(p.inter) * p.hidden / 8;
    const unsigned dq_x =
        static_cast<unsigned>(std::min<int64_t>(CeilDiv(per, kDequantThreads), 1024));
    for (int lo = 0; lo < p.num_experts; lo += fp8_chunk) {
      MoeParams q = p;
      q.expert_lo = lo;
      q.expert_hi = std::min(p.num_experts, lo + fp8_chunk);
      q.w13 = p.deq13;
      q.w2 = p.deq2;
      STRATA_RETURN_IF_ERROR(Launch("MoeDequantExpertsKernel", MoeDequantExpertsKernel,
                                    dim3(dq_x, static_cast<unsigned>(q.expert_hi - lo)),
                                    dim3(kDequantThreads), 0, stream, q));
      STRATA_RETURN_IF_ERROR(gemms(q));
    }
  }
  return LaunchCombine(p, vec4_y, stream);
}

// The CUTLASS grouped GEMM for this call? MoeArgs::gemm_impl, else
// moe.gemm=cutlass|mma|auto, and auto from moe.cutlass_min_rows rows (n·k)
// on, default 4096. CUTLASS's TMA + wgmma GEMM wins by about 2× from n =
// 2048 tokens (16384 rows) up, as the compute-bound regime predicts (Session
// 5 in docs/dev/journal/performance.md); between 4096 and 16384 rows the
// crossover has not been measured, so 4096 stays the threshold there.
bool UseSm90(MoeGemmImpl impl, int64_t rows) {
  if (impl == MoeGemmImpl::kCutlass) return true;
  if (impl == MoeGemmImpl::kMma) return false;
  const tuning::Config& t = tuning::Current();
  switch (t.Choice<tuning::MoeGemm>(tuning::Key::kMoeGemm)) {
    case tuning::MoeGemm::kCutlass:
      return true;
    case tuning::MoeGemm::kMma:
      return false;
    case tuning::MoeGemm::kAuto:
      break;
  }
  return rows >= t.Int(tuning::Key::kMoeCutlassMinRows);
}

Status LaunchSm90Path(const MoeParams& p, char* ws, const Layout& l, bool vec4_y,
                      cudaStream_t stream) {
  MoeSm90Args a;
  a.num_experts = p.num_experts;
  a.hidden = p.hidden;
  a.inter = p.inter;
  a.rows = p.num_tokens * p.top_k;
  a.offsets = p.offsets;
  a.row_token = p.row_token;
  a.x = p.x;
  a.w13 = p.w13;
  a.w2 = p.w2;
  a.act = p.yrows;
  a.h = p.h;
  a.yrows = p.yrows;
  a.workspace = ws + l.sm90;
  a.workspace_bytes = l.sm90_bytes;
  STRATA_RETURN_IF_ERROR(MoeSm90GroupedGemms(a, stream));
  return LaunchCombine(p, vec4_y, stream);
}

}  // namespace strata::cuda::moe_detail
