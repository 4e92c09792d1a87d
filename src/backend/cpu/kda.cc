// Kimi Delta Attention CPU kernels (model-spec §2.3, §2.3.1).
//
// Chunked form, per head and per 64-token chunk:
//   * q and k are L2-normalised into scratch; the cumulative log-decay Γ is kept
//     as an unevaluated float pair (hi + lo, Knuth two-sum) so that Γ_i − Γ_j
//     stays accurate even when both are large (a strongly decayed channel
//     followed by weakly decayed tokens would otherwise lose ~1e-5 relative).
//   * The key–key (A) and query–key (B) matrices are built from 16-token
//     sub-chunks (see IntraChunk): no exp(−Γ) alone is ever formed, every
//     decay factor is <= 1, and almost all of them come from products of
//     exp(g) instead of a pairwise [C, C, dk] exp.
//   * T = (I + A)^-1 by forward substitution, with β folded into its columns so
//     U = T'·V and W = T'·(K̂ ⊙ exp Γ) read V straight from the input.
//   * Everything that touches the state is a small row-major GEMM with an
//     AVX2/FMA register-blocked micro-kernel.
// Recurrent form: two passes over each head's state per token (decay + read,
// then the rank-1 write), with fixed-size stack tiles so that nothing is
// allocated for any head size.
#include "backend/cpu/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define STRATA_KDA_SIMD 1
#endif

#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

constexpr int64_t kChunk = kKdaChunkSize;
constexpr int64_t kSubChunk = 16;
constexpr float kNormEps = 1e-6f;
// Head sizes above this are rejected: keeps every size computation far from
// overflow and is orders of magnitude above any published model.
constexpr int64_t kMaxHeadDim = 1 << 16;

static_assert(kChunk % kSubChunk == 0, "sub-chunks must tile the chunk");
static_assert(kSubChunk % 8 == 0, "key-panel columns are transposed 8 at a time");
static_assert(kChunk >= 3 * kSubChunk + 3, "W scratch holds the intra-chunk panels");

// ---------------------------------------------------------------------------
// Vector helpers.

#ifdef STRATA_KDA_SIMD
// exp for 8 floats: Cephes-style range reduction and degree-6 polynomial
// (about 1 ulp). Inputs are clamped so that 2^n stays a normal float; below
// -87.3 the true value is < 1.2e-38 and the clamp's error is irrelevant.
inline __m256 Exp8(__m256 x) {
  // Operand order makes a NaN input come out as NaN rather than clamped.
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline float HSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// (hi_a − hi_b) + (lo_a − lo_b) for 8 channels; b may be null (meaning Γ = 0).
inline __m256 GammaDiff8(const float* hi_a, const float* lo_a, const float* hi_b,
                         const float* lo_b) {
  const __m256 ha = _mm256_loadu_ps(hi_a), la = _mm256_loadu_ps(lo_a);
  if (hi_b == nullptr) return _mm256_add_ps(ha, la);
  return _mm256_add_ps(_mm256_sub_ps(ha, _mm256_loadu_ps(hi_b)),
                       _mm256_sub_ps(la, _mm256_loadu_ps(lo_b)));
}
#endif  // STRATA_KDA_SIMD

inline float GammaDiff1(const float* hi_a, const float* lo_a, const float* hi_b, const float* lo_b,
                        int64_t d) {
  if (hi_b == nullptr) return hi_a[d] + lo_a[d];
  return (hi_a[d] - hi_b[d]) + (lo_a[d] - lo_b[d]);
}

float SumSquares(const float* __restrict x, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef STRATA_KDA_SIMD
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
    a1 = _mm256_fmadd_ps(x1, x1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
  }
  total = HSum8(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) total += x[i] * x[i];
  return total;
}

float Dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  int64_t i = 0;
  float total = 0.f;
#ifdef STRATA_KDA_SIMD
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
  }
  total = HSum8(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) total += x[i] * y[i];
  return total;
}

// out[d] = exp(Γ_a[d] − Γ_b[d]) for d < n (b null: exp(Γ_a)).
void ExpGammaDiff(const float* hi_a, const float* lo_a, const float* hi_b, const float* lo_b,
                  float* __restrict out, int64_t n) {
  int64_t d = 0;
#ifdef STRATA_KDA_SIMD
  for (; d + 8 <= n; d += 8) {
    const __m256 diff = hi_b ? GammaDiff8(hi_a + d, lo_a + d, hi_b + d, lo_b + d)
                             : GammaDiff8(hi_a + d, lo_a + d, nullptr, nullptr);
    _mm256_storeu_ps(out + d, Exp8(diff));
  }
#endif
  for (; d < n; ++d) out[d] = std::exp(GammaDiff1(hi_a, lo_a, hi_b, lo_b, d));
}

// ---------------------------------------------------------------------------
// Small row-major GEMM: C[m×n] (op)= A[m×k]·B[k×n]. With `a_lower`, A is lower
// triangular (zeros stored above the diagonal), so a row block stops reading
// at its last row's diagonal. With `a_trans`, A is stored transposed ([k×m],
// leading dimension lda), which saves materialising a transpose.

enum class Accumulate { kOverwrite, kAdd, kSubtract };

#ifdef STRATA_KDA_SIMD
constexpr int64_t kGemmRows = 6;  // 6×16 tile: 12 accumulators + 3 live registers

// The accumulate mode is a template parameter: with a runtime switch after the
// loop GCC keeps the accumulator array in memory and spills it every step.
template <int MR, int NV, Accumulate kMode, bool kTransA>
inline void GemmTile(int64_t k_len, const float* __restrict a, int64_t lda,
                     const float* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k_len; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + p * ldb + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(kTransA ? a + p * lda + r : a + r * lda + p);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* dst = c + r * ldc + 8 * v;
      if constexpr (kMode == Accumulate::kOverwrite) {
        _mm256_storeu_ps(dst, acc[r][v]);
      } else if constexpr (kMode == Accumulate::kAdd) {
        _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), acc[r][v]));
      } else {
        _mm256_storeu_ps(dst, _mm256_sub_ps(_mm256_loadu_ps(dst), acc[r][v]));
      }
    }
  }
}

template <int NV, Accumulate kMode, bool kTransA>
void GemmPanel(int64_t m, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
               float* c, int64_t ldc, bool a_lower) {
  for (int64_t i0 = 0; i0 < m; i0 += kGemmRows) {
    const int64_t mr = std::min(kGemmRows, m - i0);
    const int64_t k_len = a_lower ? std::min(k, i0 + mr) : k;
    const float* ap = kTransA ? a + i0 : a + i0 * lda;
    float* cp = c + i0 * ldc;
    switch (mr) {
      case 6:
        GemmTile<6, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
      case 5:
        GemmTile<5, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
      case 4:
        GemmTile<4, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
      case 3:
        GemmTile<3, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
      case 2:
        GemmTile<2, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
      default:
        GemmTile<1, NV, kMode, kTransA>(k_len, ap, lda, b, ldb, cp, ldc);
        break;
    }
  }
}

template <Accumulate kMode, bool kTransA>
int64_t GemmVector(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float* c, int64_t ldc, bool a_lower) {
  int64_t j0 = 0;
  for (; j0 + 16 <= n; j0 += 16) {
    GemmPanel<2, kMode, kTransA>(m, k, a, lda, b + j0, ldb, c + j0, ldc, a_lower);
  }
  for (; j0 + 8 <= n; j0 += 8) {
    GemmPanel<1, kMode, kTransA>(m, k, a, lda, b + j0, ldb, c + j0, ldc, a_lower);
  }
  return j0;
}
#endif  // STRATA_KDA_SIMD

void Gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, Accumulate mode, bool a_lower, bool a_trans = false) {
  int64_t j0 = 0;
#ifdef STRATA_KDA_SIMD
  using A = Accumulate;
  if (a_trans) {
    // Only the state update reads a transposed A, and it accumulates.
    if (mode == A::kAdd) j0 = GemmVector<A::kAdd, true>(m, n, k, a, lda, b, ldb, c, ldc, a_lower);
  } else if (mode == A::kOverwrite) {
    j0 = GemmVector<A::kOverwrite, false>(m, n, k, a, lda, b, ldb, c, ldc, a_lower);
  } else if (mode == A::kAdd) {
    j0 = GemmVector<A::kAdd, false>(m, n, k, a, lda, b, ldb, c, ldc, a_lower);
  } else {
    j0 = GemmVector<A::kSubtract, false>(m, n, k, a, lda, b, ldb, c, ldc, a_lower);
  }
#endif
  if (j0 == n) return;
  const int64_t a_row = a_trans ? 1 : lda, a_col = a_trans ? lda : 1;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t k_len = a_lower ? std::min(k, i + 1) : k;
    const float* ai = a + i * a_row;
    float* ci = c + i * ldc;
    for (int64_t j = j0; j < n; ++j) {
      float s = 0.f;
      for (int64_t p = 0; p < k_len; ++p) s += ai[p * a_col] * b[p * ldb + j];
      switch (mode) {
        case Accumulate::kOverwrite:
          ci[j] = s;
          break;
        case Accumulate::kAdd:
          ci[j] += s;
          break;
        case Accumulate::kSubtract:
          ci[j] -= s;
          break;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Argument checks shared by both entry points.

Status ValidateArgs(const KdaArgs& a) {
  if (a.num_tokens <= 0 || a.num_heads <= 0 || a.key_dim <= 0 || a.value_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("KDA: sizes must be positive (T=", a.num_tokens,
                                                   ", H=", a.num_heads, ", dk=", a.key_dim,
                                                   ", dv=", a.value_dim, ")"));
  }
  if (a.key_dim > kMaxHeadDim || a.value_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("KDA: head dims above ", kMaxHeadDim, " are not supported"));
  }
  int64_t rows = 0, elems = 0;
  const int64_t width = std::max(a.key_dim, a.value_dim);
  if (__builtin_mul_overflow(a.num_tokens, a.num_heads, &rows) ||
      __builtin_mul_overflow(rows, width, &elems) ||
      __builtin_mul_overflow(a.num_heads, a.key_dim * a.value_dim, &elems)) {
    return absl::InvalidArgumentError("KDA: tensor sizes overflow int64");
  }
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.g == nullptr || a.beta == nullptr ||
      a.state == nullptr || a.out == nullptr) {
    return absl::InvalidArgumentError("KDA: q, k, v, g, beta, state and out must be non-null");
  }
  if (!std::isfinite(a.scale)) return absl::InvalidArgumentError("KDA: scale must be finite");
  return OkStatus();
}

// Flushes denormals on this thread while alive. Strong decays drive state and
// intra-chunk factors through the denormal range, where x86 arithmetic is many
// times slower; values that small (< 1.2e-38) carry no information here.
class ScopedFlushDenormals {
 public:
#ifdef STRATA_KDA_SIMD
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR flush-to-zero | denormals-are-zero
  unsigned saved_;
#endif
};

float EffectiveScale(const KdaArgs& a) {
  return a.scale != 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(a.key_dim));
}

// ---------------------------------------------------------------------------
// Chunked form.

// Per-worker scratch, carved from the caller's workspace. Every buffer starts
// on a 64-byte boundary.
struct ChunkScratch {
  float* qn;    // [C, dk] q̂, later q̂ ⊙ exp(Γ)
  float* kn;    // [C, dk] k̂, later k̂ ⊙ exp(Γ)
  float* ghi;   // [C, dk] Γ, high part
  float* glo;   // [C, dk] Γ, low part
  float* beta;  // [C]
  float* am;    // [C, C] A (strictly lower)
  float* bm;    // [C, C] B (lower with diagonal)
  float* tm;    // [C, C] (I + A)^-1 · diag(β)
  float* kt;    // [dk, C] intra-chunk key panel
  float* kd;    // [C, dk] K̂ ⊙ exp(Γ_C − Γ)
  float* u;     // [C, dv] U, then V_new
  float* w;     // [C, dk] sub-chunk panels and diagonal-block rows, then W
  float* gx;    // [C, dk] per-head decays broadcast over dk (g_per_head only)
};

constexpr size_t kFloatsPerLine = 16;

size_t Pad(size_t floats) {
  return (floats + kFloatsPerLine - 1) / kFloatsPerLine * kFloatsPerLine;
}

// Returns the slot size in floats; fills `s` when `base` is non-null.
size_t LayoutScratch(int64_t dk, int64_t dv, float* base, ChunkScratch* s) {
  const size_t c = kChunk;
  const size_t cdk = Pad(c * dk), cdv = Pad(c * dv), cc = Pad(c * c);
  float** const slots[] = {&s->qn, &s->kn, &s->ghi, &s->glo, &s->beta, &s->am, &s->bm,
                           &s->tm, &s->kt, &s->kd,  &s->u,   &s->w,    &s->gx};
  const size_t sizes[] = {cdk, cdk, cdk, cdk, Pad(c), cc, cc, cc, Pad(dk * c), cdk, cdv, cdk, cdk};
  size_t offset = 0;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    if (base != nullptr) *slots[i] = base + offset;
    offset += sizes[i];
  }
  return offset;
}

size_t SlotBytes(int64_t dk, int64_t dv) {
  ChunkScratch unused{};
  return LayoutScratch(dk, dv, nullptr, &unused) * sizeof(float);
}

// Normalises q/k of one chunk and accumulates Γ as a two-sum pair. Row i of
// the chunk's log-decays is g_rows + i·g_stride.
void PrepareChunk(const KdaArgs& a, int64_t h, int64_t t0, int64_t len, float scale,
                  const float* g_rows, int64_t g_stride, const ChunkScratch& s) {
  const int64_t nh = a.num_heads, dk = a.key_dim;
  for (int64_t i = 0; i < len; ++i) {
    const int64_t row = (t0 + i) * nh + h;
    const float* __restrict q = a.q + row * dk;
    const float* __restrict k = a.k + row * dk;
    const float* __restrict g = g_rows + i * g_stride;
    const float inv_q = scale / std::sqrt(SumSquares(q, dk) + kNormEps);
    const float inv_k = 1.f / std::sqrt(SumSquares(k, dk) + kNormEps);
    float* __restrict qn = s.qn + i * dk;
    float* __restrict kn = s.kn + i * dk;
    for (int64_t d = 0; d < dk; ++d) qn[d] = q[d] * inv_q;
    for (int64_t d = 0; d < dk; ++d) kn[d] = k[d] * inv_k;
    float* __restrict hi = s.ghi + i * dk;
    float* __restrict lo = s.glo + i * dk;
    if (i == 0) {
      for (int64_t d = 0; d < dk; ++d) hi[d] = g[d];
      for (int64_t d = 0; d < dk; ++d) lo[d] = 0.f;
    } else {
      const float* __restrict hp = hi - dk;
      const float* __restrict lp = lo - dk;
      for (int64_t d = 0; d < dk; ++d) {
        const float x = hp[d], y = g[d];
        const float sum = x + y;
        const float yv = sum - x;
        const float err = (x - (sum - yv)) + (y - yv);
        hi[d] = sum;
        lo[d] = lp[d] + err;
      }
    }
    s.beta[i] = a.beta[row];
  }
}

#ifdef STRATA_KDA_SIMD
inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

// exp of 8 gates at a time (scalar tail).
void ExpRow(const float* __restrict x, float* __restrict out, int64_t n) {
  int64_t d = 0;
#ifdef STRATA_KDA_SIMD
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(out + d, Exp8(_mm256_loadu_ps(x + d)));
#endif
  for (; d < n; ++d) out[d] = std::exp(x[d]);
}

// Builds A (strictly lower, rows scaled by β) and B (lower with diagonal) of
// one chunk from 16-token sub-chunks.
//
// Diagonal blocks: a reference point inside a block would need a factor > 1,
// so the decay is carried forward instead. F_j = k̂_j ⊙ exp(Γ_i − Γ_j) picks up
// α_i = exp(g_i) at each new row i; the products only shrink.
//
// Off-diagonal blocks (rows of sub-chunk I against all earlier columns) are
// GEMMs around the reference row r = first row of I: [k̂_i; q̂_i] ⊙ exp(Γ_i − Γ_r)
// times the key panel kt[d, j] = k̂_j[d]·exp(Γ_r − Γ_j). Every factor is <= 1.
// The panel is carried from one reference to the next: older columns are
// rescaled by exp(Γ_r − Γ_{r−16}), and the columns of the block just finished
// are its final F rows times α_r. So besides one exp(g) per row the chunk needs
// only one exp row per sub-chunk, and the products stay short (<= ~18 factors).
void IntraChunk(int64_t len, int64_t dk, const float* g, int64_t g_stride, const ChunkScratch& s) {
  float* kq = s.w;                          // [16, dk] k̂_i ⊙ exp(Γ_i − Γ_r)
  float* qq = s.w + kSubChunk * dk;         // [16, dk] q̂_i ⊙ exp(Γ_i − Γ_r)
  float* f = s.w + 2 * kSubChunk * dk;      // [16, dk] F_j
  float* alpha = s.w + 3 * kSubChunk * dk;  // [dk] exp(g_i)
  float* run = alpha + dk;                  // [dk] exp(Γ_i − Γ_r)
  float* rescale = run + dk;                // [dk] exp(Γ_r − Γ_{r−16})
  for (int64_t s0 = 0; s0 < len; s0 += kSubChunk) {
    const int64_t s1 = std::min(len, s0 + kSubChunk);
    for (int64_t i = s0; i < s1; ++i) {
      const float* qi = s.qn + i * dk;
      const float* ki = s.kn + i * dk;
      if (i > 0) ExpRow(g + i * g_stride, alpha, dk);
      if (i == s0 && s0 > 0) {
        // Move the key panel to reference row s0.
        const int64_t prev = s0 - kSubChunk;
        ExpGammaDiff(s.ghi + s0 * dk, s.glo + s0 * dk, s.ghi + prev * dk, s.glo + prev * dk,
                     rescale, dk);
        for (int64_t d = 0; d < dk; ++d) {
          float* __restrict row = s.kt + d * kChunk;
          const float c = rescale[d];
          for (int64_t j = 0; j < prev; ++j) row[j] *= c;
        }
        int64_t d0 = 0;
#ifdef STRATA_KDA_SIMD
        for (; d0 + 8 <= dk; d0 += 8) {
          const __m256 a8 = _mm256_loadu_ps(alpha + d0);
          for (int64_t j0 = 0; j0 < kSubChunk; j0 += 8) {
            __m256 tile[8];
            for (int l = 0; l < 8; ++l) {
              tile[l] = _mm256_mul_ps(_mm256_loadu_ps(f + (j0 + l) * dk + d0), a8);
            }
            Transpose8x8(tile);
            for (int l = 0; l < 8; ++l) {
              _mm256_storeu_ps(s.kt + (d0 + l) * kChunk + prev + j0, tile[l]);
            }
          }
        }
#endif
        for (int64_t d = d0; d < dk; ++d) {
          for (int64_t j = 0; j < kSubChunk; ++j) {
            s.kt[d * kChunk + prev + j] = f[j * dk + d] * alpha[d];
          }
        }
      }
      if (i == s0) {
        std::fill(run, run + dk, 1.f);
      } else {
        for (int64_t d = 0; d < dk; ++d) run[d] *= alpha[d];
        for (int64_t j = s0; j < i; ++j) {
          float* __restrict fj = f + (j - s0) * dk;
          float a_sum = 0.f, b_sum = 0.f;
          int64_t d = 0;
#ifdef STRATA_KDA_SIMD
          __m256 av = _mm256_setzero_ps(), bv = _mm256_setzero_ps();
          for (; d + 8 <= dk; d += 8) {
            const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(fj + d), _mm256_loadu_ps(alpha + d));
            _mm256_storeu_ps(fj + d, x);
            av = _mm256_fmadd_ps(_mm256_loadu_ps(ki + d), x, av);
            bv = _mm256_fmadd_ps(_mm256_loadu_ps(qi + d), x, bv);
          }
          a_sum = HSum8(av);
          b_sum = HSum8(bv);
#endif
          for (; d < dk; ++d) {
            const float x = fj[d] * alpha[d];
            fj[d] = x;
            a_sum += ki[d] * x;
            b_sum += qi[d] * x;
          }
          s.am[i * kChunk + j] = s.beta[i] * a_sum;
          s.bm[i * kChunk + j] = b_sum;
        }
      }
      {
        float* __restrict kq_i = kq + (i - s0) * dk;
        float* __restrict qq_i = qq + (i - s0) * dk;
        for (int64_t d = 0; d < dk; ++d) {
          kq_i[d] = ki[d] * run[d];
          qq_i[d] = qi[d] * run[d];
        }
      }
      s.bm[i * kChunk + i] = Dot(qi, ki, dk);
      std::memcpy(f + (i - s0) * dk, ki, sizeof(float) * dk);
    }
    if (s0 > 0) {
      const int64_t rows = s1 - s0;
      Gemm(rows, s0, dk, kq, dk, s.kt, kChunk, s.am + s0 * kChunk, kChunk, Accumulate::kOverwrite,
           false);
      Gemm(rows, s0, dk, qq, dk, s.kt, kChunk, s.bm + s0 * kChunk, kChunk, Accumulate::kOverwrite,
           false);
      for (int64_t i = s0; i < s1; ++i) {
        float* row = s.am + i * kChunk;
        const float b = s.beta[i];
        for (int64_t j = 0; j < s0; ++j) row[j] *= b;
      }
    }
    // The inter-chunk factors of this block's rows come from the same short
    // products: exp(Γ_i) = exp(Γ_s0)·exp(Γ_i − Γ_s0), and, F_j being final now,
    // exp(Γ_last − Γ_j) = exp(Γ_last − Γ_{s1−1})·exp(Γ_{s1−1} − Γ_j). Raw q̂, k̂
    // of these rows are not needed again.
    float* e = rescale;  // free until the next block starts
    ExpGammaDiff(s.ghi + s0 * dk, s.glo + s0 * dk, nullptr, nullptr, e, dk);
    for (int64_t i = s0; i < s1; ++i) {
      float* __restrict qi = s.qn + i * dk;
      float* __restrict ki = s.kn + i * dk;
      const float* __restrict qq_i = qq + (i - s0) * dk;
      const float* __restrict kq_i = kq + (i - s0) * dk;
      for (int64_t d = 0; d < dk; ++d) {
        qi[d] = qq_i[d] * e[d];
        ki[d] = kq_i[d] * e[d];
      }
    }
    ExpGammaDiff(s.ghi + (len - 1) * dk, s.glo + (len - 1) * dk, s.ghi + (s1 - 1) * dk,
                 s.glo + (s1 - 1) * dk, e, dk);
    for (int64_t j = s0; j < s1; ++j) {
      float* __restrict kd = s.kd + j * dk;
      const float* __restrict fj = f + (j - s0) * dk;
      for (int64_t d = 0; d < dk; ++d) kd[d] = fj[d] * e[d];
    }
  }
}

// tm = (I + A)^-1 · diag(β). Scaling on the right commutes with the row
// recurrence, so row i is β_i e_i − Σ_{j<i} A[i,j]·(row j, already scaled).
// Rows are kChunk wide with zeros right of the diagonal.
void InvertUnitLower(int64_t len, const ChunkScratch& s) {
#ifdef STRATA_KDA_SIMD
  static_assert(kChunk == 64, "a row of the inverse is held in 8 registers");
  for (int64_t i = 0; i < len; ++i) {
    float* ti = s.tm + i * kChunk;
    std::memset(ti, 0, sizeof(float) * kChunk);
    ti[i] = s.beta[i];
    __m256 acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_loadu_ps(ti + 8 * v);
    const float* ai = s.am + i * kChunk;
    for (int64_t j = 0; j < i; ++j) {
      const __m256 a = _mm256_set1_ps(-ai[j]);
      const float* tj = s.tm + j * kChunk;
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(tj + 8 * v), acc[v]);
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(ti + 8 * v, acc[v]);
  }
#else
  for (int64_t i = 0; i < len; ++i) {
    float* __restrict ti = s.tm + i * kChunk;
    std::memset(ti, 0, sizeof(float) * len);
    ti[i] = s.beta[i];
    const float* ai = s.am + i * kChunk;
    for (int64_t j = 0; j < i; ++j) {
      const float a = ai[j];
      const float* __restrict tj = s.tm + j * kChunk;
      for (int64_t c = 0; c <= j; ++c) ti[c] -= a * tj[c];
    }
  }
#endif
}

// One chunk [t0, t0 + len) of head h: updates the head's state and writes
// its outputs.
void ChunkStep(const KdaArgs& a, int64_t h, int64_t t0, float scale, const ChunkScratch& s) {
  const int64_t nh = a.num_heads, dk = a.key_dim, dv = a.value_dim;
  float* state = a.state + h * dk * dv;
  const int64_t len = std::min(kChunk, a.num_tokens - t0);
  // The chunk's log-decay rows. A per-head decay (GDN) is broadcast over dk
  // into scratch first, so that everything below is KDA's per-channel code.
  const float* g_rows = a.g + (t0 * nh + h) * dk;
  int64_t g_stride = nh * dk;
  if (a.g_per_head) {
    for (int64_t i = 0; i < len; ++i) {
      std::fill(s.gx + i * dk, s.gx + (i + 1) * dk, a.g[(t0 + i) * nh + h]);
    }
    g_rows = s.gx;
    g_stride = dk;
  }
  PrepareChunk(a, h, t0, len, scale, g_rows, g_stride, s);

  std::memset(s.am, 0, sizeof(float) * len * kChunk);
  std::memset(s.bm, 0, sizeof(float) * len * kChunk);
  IntraChunk(len, dk, g_rows, g_stride, s);
  InvertUnitLower(len, s);

  const float* hi_last = s.ghi + (len - 1) * dk;
  const float* lo_last = s.glo + (len - 1) * dk;

  const float* v = a.v + (t0 * nh + h) * dv;
  float* out = a.out + (t0 * nh + h) * dv;
  const int64_t ld_io = nh * dv;
  // W = T'·(K̂ ⊙ exp Γ); U = T'·V; V_new = U − W·S.
  Gemm(len, dk, len, s.tm, kChunk, s.kn, dk, s.w, dk, Accumulate::kOverwrite, true);
  Gemm(len, dv, len, s.tm, kChunk, v, ld_io, s.u, dv, Accumulate::kOverwrite, true);
  Gemm(len, dv, dk, s.w, dk, state, dv, s.u, dv, Accumulate::kSubtract, false);
  // O = (Q̂ ⊙ exp Γ)·S + B·V_new.
  Gemm(len, dv, dk, s.qn, dk, state, dv, out, ld_io, Accumulate::kOverwrite, false);
  Gemm(len, dv, len, s.bm, kChunk, s.u, dv, out, ld_io, Accumulate::kAdd, true);
  // S = diag(exp Γ_last)·S + (K̂ ⊙ exp(Γ_last − Γ))^T · V_new.
  int64_t d = 0;
#ifdef STRATA_KDA_SIMD
  alignas(32) float decay[8];
  for (; d + 8 <= dk; d += 8) {
    _mm256_store_ps(decay, Exp8(GammaDiff8(hi_last + d, lo_last + d, nullptr, nullptr)));
    for (int l = 0; l < 8; ++l) {
      float* __restrict row = state + (d + l) * dv;
      const float f = decay[l];
      for (int64_t n = 0; n < dv; ++n) row[n] *= f;
    }
  }
#endif
  for (; d < dk; ++d) {
    float* __restrict row = state + d * dv;
    const float f = std::exp(GammaDiff1(hi_last, lo_last, nullptr, nullptr, d));
    for (int64_t n = 0; n < dv; ++n) row[n] *= f;
  }
  Gemm(dk, dv, len, s.kd, dk, s.u, dv, state, dv, Accumulate::kAdd, false, true);
}

// ---------------------------------------------------------------------------
// Recurrent form.

constexpr int64_t kRecKeyTile = 128;
constexpr int64_t kRecValueTile = 256;

// For rows d < rows of a value-column block: S[d] *= alpha[d], then
// e += k̂[d]·S[d] and o += q̂[d]·S[d] (both read the decayed state).
void DecayAndRead(float* __restrict st, int64_t ld, int64_t rows, int64_t cols,
                  const float* __restrict alpha, const float* __restrict kh,
                  const float* __restrict qh, float* __restrict e_acc, float* __restrict o_acc) {
  int64_t n0 = 0;
#ifdef STRATA_KDA_SIMD
  for (; n0 + 32 <= cols; n0 += 32) {
    __m256 e[4], o[4];
    for (int v = 0; v < 4; ++v) {
      e[v] = _mm256_loadu_ps(e_acc + n0 + 8 * v);
      o[v] = _mm256_loadu_ps(o_acc + n0 + 8 * v);
    }
    for (int64_t d = 0; d < rows; ++d) {
      const __m256 al = _mm256_broadcast_ss(alpha + d);
      const __m256 kd = _mm256_broadcast_ss(kh + d);
      const __m256 qd = _mm256_broadcast_ss(qh + d);
      float* row = st + d * ld + n0;
      for (int v = 0; v < 4; ++v) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * v), al);
        _mm256_storeu_ps(row + 8 * v, x);
        e[v] = _mm256_fmadd_ps(kd, x, e[v]);
        o[v] = _mm256_fmadd_ps(qd, x, o[v]);
      }
    }
    for (int v = 0; v < 4; ++v) {
      _mm256_storeu_ps(e_acc + n0 + 8 * v, e[v]);
      _mm256_storeu_ps(o_acc + n0 + 8 * v, o[v]);
    }
  }
  for (; n0 + 8 <= cols; n0 += 8) {
    __m256 e = _mm256_loadu_ps(e_acc + n0), o = _mm256_loadu_ps(o_acc + n0);
    for (int64_t d = 0; d < rows; ++d) {
      float* row = st + d * ld + n0;
      const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row), _mm256_broadcast_ss(alpha + d));
      _mm256_storeu_ps(row, x);
      e = _mm256_fmadd_ps(_mm256_broadcast_ss(kh + d), x, e);
      o = _mm256_fmadd_ps(_mm256_broadcast_ss(qh + d), x, o);
    }
    _mm256_storeu_ps(e_acc + n0, e);
    _mm256_storeu_ps(o_acc + n0, o);
  }
#endif
  for (int64_t d = 0; d < rows; ++d) {
    float* row = st + d * ld;
    for (int64_t n = n0; n < cols; ++n) {
      const float x = row[n] * alpha[d];
      row[n] = x;
      e_acc[n] += kh[d] * x;
      o_acc[n] += qh[d] * x;
    }
  }
}

void RecurrentHead(const KdaArgs& a, int64_t h, float scale) {
  const int64_t nh = a.num_heads, dk = a.key_dim, dv = a.value_dim;
  float* state = a.state + h * dk * dv;
  alignas(64) float alpha[kRecKeyTile], kh[kRecKeyTile], qh[kRecKeyTile];
  alignas(64) float e_acc[kRecValueTile], o_acc[kRecValueTile];
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t row = t * nh + h;
    const float* q = a.q + row * dk;
    const float* k = a.k + row * dk;
    // GDN (g_per_head): one decay for the whole head, exp taken once per token.
    const float* g = a.g_per_head ? nullptr : a.g + row * dk;
    const float head_alpha = a.g_per_head ? std::exp(a.g[row]) : 0.f;
    const float* v = a.v + row * dv;
    float* out = a.out + row * dv;
    const float beta = a.beta[row];
    const float inv_q = scale / std::sqrt(SumSquares(q, dk) + kNormEps);
    const float inv_k = 1.f / std::sqrt(SumSquares(k, dk) + kNormEps);
    const float qk = Dot(q, k, dk) * inv_q * inv_k;  // q̂·k̂ (scale included)
    for (int64_t n0 = 0; n0 < dv; n0 += kRecValueTile) {
      const int64_t cols = std::min(kRecValueTile, dv - n0);
      std::fill(e_acc, e_acc + cols, 0.f);
      std::fill(o_acc, o_acc + cols, 0.f);
      for (int64_t d0 = 0; d0 < dk; d0 += kRecKeyTile) {
        const int64_t rows = std::min(kRecKeyTile, dk - d0);
        int64_t d = 0;
        if (g == nullptr) {
          std::fill(alpha, alpha + rows, head_alpha);
          d = rows;
        }
#ifdef STRATA_KDA_SIMD
        for (; d + 8 <= rows; d += 8) _mm256_store_ps(alpha + d, Exp8(_mm256_loadu_ps(g + d0 + d)));
#endif
        for (; d < rows; ++d) alpha[d] = std::exp(g[d0 + d]);
        for (d = 0; d < rows; ++d) kh[d] = k[d0 + d] * inv_k;
        for (d = 0; d < rows; ++d) qh[d] = q[d0 + d] * inv_q;
        DecayAndRead(state + d0 * dv + n0, dv, rows, cols, alpha, kh, qh, e_acc, o_acc);
      }
      // u = β (v − Sᵀk̂); o = S_newᵀ q̂ = S_decayedᵀ q̂ + (q̂·k̂) u.
      float* u = e_acc;  // e is dead once u is formed
      for (int64_t n = 0; n < cols; ++n) {
        u[n] = beta * (v[n0 + n] - e_acc[n]);
        out[n0 + n] = o_acc[n] + qk * u[n];
      }
      for (int64_t d0 = 0; d0 < dk; d0 += kRecKeyTile) {
        const int64_t rows = std::min(kRecKeyTile, dk - d0);
        for (int64_t d = 0; d < rows; ++d) {
          float* __restrict srow = state + (d0 + d) * dv + n0;
          const float kd = k[d0 + d] * inv_k;
          for (int64_t n = 0; n < cols; ++n) srow[n] += kd * u[n];
        }
      }
    }
  }
}

}  // namespace

size_t KdaChunkedWorkspaceBytes(int64_t num_tokens, int64_t num_heads, int64_t key_dim,
                                int64_t value_dim, int num_threads) {
  if (num_tokens <= 0 || num_heads <= 0 || key_dim <= 0 || value_dim <= 0 ||
      key_dim > kMaxHeadDim || value_dim > kMaxHeadDim) {
    return 0;
  }
  // More workers than heads would sit idle, so their scratch is not counted.
  const int64_t workers = std::min<int64_t>(std::max(1, num_threads), num_heads);
  // The extra line lets a caller hand in an unaligned buffer of this size.
  return static_cast<size_t>(workers) * SlotBytes(key_dim, value_dim) + 64;
}

Status KdaChunked(const KdaArgs& args, void* workspace, size_t workspace_bytes, ThreadPool* pool) {
  STRATA_RETURN_IF_ERROR(ValidateArgs(args));
  if (workspace == nullptr) return absl::InvalidArgumentError("KdaChunked: null workspace");
  const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace);
  const uintptr_t aligned = (raw + 63) & ~uintptr_t{63};
  const size_t skipped = aligned - raw;
  const size_t slot = SlotBytes(args.key_dim, args.value_dim);
  if (workspace_bytes < skipped + slot) {
    return absl::InvalidArgumentError(
        absl::StrCat("KdaChunked: workspace of ", workspace_bytes, " bytes is below the ",
                     skipped + slot, " one worker needs (see KdaChunkedWorkspaceBytes)"));
  }
  // A workspace sized for fewer threads than the pool has just runs fewer
  // workers. Each worker owns one slot and a contiguous range of heads, and
  // walks chunk by chunk across its heads: the rows it reads for one chunk
  // are then adjacent in memory ([T, H, d] layout), which the hardware
  // prefetchers follow, where one head at a time jumps H·d floats per token.
  const int64_t slots = static_cast<int64_t>((workspace_bytes - skipped) / slot);
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t workers = std::min({slots, threads, args.num_heads});
  const float scale = EffectiveScale(args);
  char* base = reinterpret_cast<char*>(aligned);
  ParallelFor(pool, workers, 1, [&](int64_t begin, int64_t end) {
    [[maybe_unused]] ScopedFlushDenormals flush;
    for (int64_t w = begin; w < end; ++w) {
      ChunkScratch s{};
      LayoutScratch(args.key_dim, args.value_dim, reinterpret_cast<float*>(base + w * slot), &s);
      const int64_t h_begin = args.num_heads * w / workers;
      const int64_t h_end = args.num_heads * (w + 1) / workers;
      for (int64_t t0 = 0; t0 < args.num_tokens; t0 += kChunk) {
        for (int64_t h = h_begin; h < h_end; ++h) ChunkStep(args, h, t0, scale, s);
      }
    }
  });
  return OkStatus();
}

Status KdaRecurrent(const KdaArgs& args, ThreadPool* pool) {
  STRATA_RETURN_IF_ERROR(ValidateArgs(args));
  const float scale = EffectiveScale(args);
  ParallelFor(pool, args.num_heads, 1, [&](int64_t begin, int64_t end) {
    [[maybe_unused]] ScopedFlushDenormals flush;
    for (int64_t h = begin; h < end; ++h) RecurrentHead(args, h, scale);
  });
  return OkStatus();
}

}  // namespace cpu
}  // namespace strata
