// y = x · Wᵀ against F32/F16/BF16 weights in place. The GEMV path streams each
// weight row once (memory bound: converts in registers, 8 rows per pass so x
// is loaded once per 8 rows). The blocked path converts a tile of W rows to
// fp32 in per-worker scratch, then runs a 4x3 register-blocked microkernel over
// blocks of x rows that stay in L2, so prefill reads and converts W once.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define STRATA_MATMUL_AVX2 1
#endif

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

// x rows per cache block of the blocked path (32 rows of k = 2304 is 288 KiB).
constexpr int64_t kXBlock = 32;
// Target bytes of one fp32 weight tile (per worker).
constexpr int64_t kTileBytes = 96 * 1024;
// Rows of x and of W per microkernel call.
constexpr int kMr = 4;
constexpr int kNr = 3;

int64_t TileRows(int64_t k) {
  int64_t rows = kTileBytes / (4 * std::max<int64_t>(k, 1));
  rows = std::clamp<int64_t>(rows, kNr, 16 * kNr);
  return rows / kNr * kNr;
}

inline float LoadScalar(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(base)[i]);
    default:
      return 0.f;
  }
}

#ifdef STRATA_MATMUL_AVX2

template <DType kT>
inline __m256 Load8(const void* base, int64_t i) {
  if constexpr (kT == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (kT == DType::kBF16) {
    // bf16 -> fp32 is the 16 bits moved to the top of the word.
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_cvtph_ps(h);
  }
}

inline float HSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// Rows per GEMV pass: x is loaded once per 8 rows, and the 8 independent FMA
// chains hide the FMA latency (measured ~12% faster than 4 rows x 2 chains).
constexpr int kGemvRows = 8;

// y[r] = w[row0 + r, :] · x for r < nrows <= kGemvRows.
template <DType kT>
void GemvPass(const WeightMatrix& w, int64_t row0, int nrows, const float* x, float* y) {
  const int64_t k = w.cols;
  const size_t esize = DTypeSize(kT);
  const char* base = static_cast<const char*>(w.data) + static_cast<size_t>(row0 * k) * esize;
  const void* r[kGemvRows];
  for (int i = 0; i < kGemvRows; ++i) {
    // Missing rows alias the last real one (read, never stored).
    r[i] = base + static_cast<size_t>(std::min(i, nrows - 1) * k) * esize;
  }
  __m256 acc[kGemvRows];
  for (int i = 0; i < kGemvRows; ++i) acc[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int i = 0; i < kGemvRows; ++i) acc[i] = _mm256_fmadd_ps(Load8<kT>(r[i], c), xv, acc[i]);
  }
  for (int i = 0; i < nrows; ++i) {
    float s = HSum(acc[i]);
    for (int64_t t = c; t < k; ++t) s += LoadScalar(kT, r[i], t) * x[t];
    y[i] = s;
  }
}

// y[j - begin] = w[j, :] · x for j in [begin, end).
template <DType kT>
void GemvRange(const WeightMatrix& w, const float* x, float* y, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; j += kGemvRows) {
    GemvPass<kT>(w, j, static_cast<int>(std::min<int64_t>(kGemvRows, end - j)), x, y + (j - begin));
  }
}

template <DType kT>
void ConvertRowsImpl(const WeightMatrix& w, int64_t row0, int64_t nrows, float* out) {
  const int64_t k = w.cols;
  const size_t esize = DTypeSize(kT);
  for (int64_t r = 0; r < nrows; ++r) {
    const void* src =
        static_cast<const char*>(w.data) + static_cast<size_t>((row0 + r) * k) * esize;
    float* dst = out + r * k;
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) _mm256_storeu_ps(dst + c, Load8<kT>(src, c));
    for (; c < k; ++c) dst[c] = LoadScalar(kT, src, c);
  }
}

// y[i, j] = x[i,:] · w[j,:] for i < RX, j < RW (fp32 both sides).
template <int RX, int RW>
void Micro(const float* x, int64_t ldx, const float* w, int64_t k, float* y, int64_t ldy) {
  __m256 acc[RX][RW];
  for (int i = 0; i < RX; ++i)
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 wv[RW];
    for (int j = 0; j < RW; ++j) wv[j] = _mm256_loadu_ps(w + j * k + c);
    for (int i = 0; i < RX; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RX; ++i) {
    for (int j = 0; j < RW; ++j) {
      float s = HSum(acc[i][j]);
      for (int64_t t = c; t < k; ++t) s += x[i * ldx + t] * w[j * k + t];
      y[i * ldy + j] = s;
    }
  }
}

#else  // portable fallback

template <DType kT>
void GemvRange(const WeightMatrix& w, const float* x, float* y, int64_t begin, int64_t end) {
  const size_t esize = DTypeSize(kT);
  for (int64_t j = begin; j < end; ++j) {
    const void* row = static_cast<const char*>(w.data) + static_cast<size_t>(j * w.cols) * esize;
    float s = 0.f;
    for (int64_t c = 0; c < w.cols; ++c) s += LoadScalar(kT, row, c) * x[c];
    y[j - begin] = s;
  }
}

template <DType kT>
void ConvertRowsImpl(const WeightMatrix& w, int64_t row0, int64_t nrows, float* out) {
  const size_t esize = DTypeSize(kT);
  for (int64_t r = 0; r < nrows; ++r) {
    const void* src =
        static_cast<const char*>(w.data) + static_cast<size_t>((row0 + r) * w.cols) * esize;
    for (int64_t c = 0; c < w.cols; ++c) out[r * w.cols + c] = LoadScalar(kT, src, c);
  }
}

template <int RX, int RW>
void Micro(const float* x, int64_t ldx, const float* w, int64_t k, float* y, int64_t ldy) {
  for (int i = 0; i < RX; ++i)
    for (int j = 0; j < RW; ++j) {
      float s = 0.f;
      for (int64_t t = 0; t < k; ++t) s += x[i * ldx + t] * w[j * k + t];
      y[i * ldy + j] = s;
    }
}

#endif  // STRATA_MATMUL_AVX2

void ConvertRows(const WeightMatrix& w, int64_t row0, int64_t nrows, float* out) {
  switch (w.dtype) {
    case DType::kBF16:
      ConvertRowsImpl<DType::kBF16>(w, row0, nrows, out);
      return;
    case DType::kF16:
      ConvertRowsImpl<DType::kF16>(w, row0, nrows, out);
      return;
    default:
      ConvertRowsImpl<DType::kF32>(w, row0, nrows, out);
      return;
  }
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);
constexpr MicroFn kMicro[kMr][kNr] = {
    {Micro<1, 1>, Micro<1, 2>, Micro<1, 3>},
    {Micro<2, 1>, Micro<2, 2>, Micro<2, 3>},
    {Micro<3, 1>, Micro<3, 2>, Micro<3, 3>},
    {Micro<4, 1>, Micro<4, 2>, Micro<4, 3>},
};

// Rows [x_begin, x_end) of x against W rows [w_begin, w_end), with `tile` as
// the fp32 staging area of TileRows(k) rows.
void BlockedPart(const float* x, int64_t x_begin, int64_t x_end, const WeightMatrix& w,
                 int64_t w_begin, int64_t w_end, float* y, float* tile) {
  const int64_t k = w.cols;
  const int64_t m = w.rows;
  const int64_t tile_rows = TileRows(k);
  for (int64_t t0 = w_begin; t0 < w_end; t0 += tile_rows) {
    const int64_t tn = std::min(tile_rows, w_end - t0);
    ConvertRows(w, t0, tn, tile);
    for (int64_t xb = x_begin; xb < x_end; xb += kXBlock) {
      const int64_t xe = std::min(x_end, xb + kXBlock);
      for (int64_t j = 0; j < tn; j += kNr) {
        const int rw = static_cast<int>(std::min<int64_t>(kNr, tn - j));
        for (int64_t i = xb; i < xe; i += kMr) {
          const int rx = static_cast<int>(std::min<int64_t>(kMr, xe - i));
          kMicro[rx - 1][rw - 1](x + i * k, k, tile + j * k, k, y + i * m + t0 + j, m);
        }
      }
    }
  }
}

}  // namespace

WeightMatrix WeightMatrix::RowSlice(int64_t begin, int64_t count) const {
  WeightMatrix s = *this;
  s.data = RowPtr(begin);
  s.rows = count;
  return s;
}

const void* WeightMatrix::RowPtr(int64_t row) const {
  return static_cast<const char*>(data) + static_cast<size_t>(row * cols) * DTypeSize(dtype);
}

size_t MatMulScratchFloats(int64_t n, int64_t k, int num_threads) {
  if (n <= 1) return 0;
  return static_cast<size_t>(std::max(num_threads, 1)) * static_cast<size_t>(TileRows(k) * k);
}

void MatMul(const float* x, int64_t n, const WeightMatrix& w, float* y, float* scratch,
            ThreadPool* pool) {
  const int64_t m = w.rows;
  if (n <= 0 || m <= 0) return;
  if (n == 1) {
    // Memory bound: rows in chunks big enough to amortise the dispatch.
    const int64_t grain = std::max<int64_t>(16, (1 << 16) / std::max<int64_t>(w.cols, 1)) / 8 * 8;
    auto body = [&](int64_t b, int64_t e) {
      switch (w.dtype) {
        case DType::kBF16:
          GemvRange<DType::kBF16>(w, x, y + b, b, e);
          break;
        case DType::kF16:
          GemvRange<DType::kF16>(w, x, y + b, b, e);
          break;
        default:
          GemvRange<DType::kF32>(w, x, y + b, b, e);
          break;
      }
    };
    // Chunks need not be multiples of kGemvRows: a partial pass is only slower.
    ParallelRange(pool, m, grain, body);
    return;
  }
  // Partition W tiles over workers; when there are fewer tiles than workers also
  // split the rows of x. Part p uses scratch slot p, so slots never collide.
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t k = w.cols;
  const int64_t tile_rows = TileRows(k);
  const int64_t num_tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t w_groups = std::min<int64_t>(num_tiles, threads);
  const int64_t x_groups = std::clamp<int64_t>(threads / w_groups, 1, (n + kMr - 1) / kMr);
  const int64_t parts = w_groups * x_groups;
  const size_t slot = static_cast<size_t>(tile_rows * k);
  ParallelRange(pool, parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t wg = p / x_groups;
      const int64_t xg = p % x_groups;
      const int64_t t_begin = num_tiles * wg / w_groups;
      const int64_t t_end = num_tiles * (wg + 1) / w_groups;
      const int64_t x_begin = n * xg / x_groups;
      const int64_t x_end = n * (xg + 1) / x_groups;
      BlockedPart(x, x_begin, x_end, w, t_begin * tile_rows, std::min(m, t_end * tile_rows), y,
                  scratch + static_cast<size_t>(p) * slot);
    }
  });
}

void GemvRows(const WeightMatrix& w, const float* x, int64_t begin, int64_t end, float* y) {
  switch (w.dtype) {
    case DType::kBF16:
      GemvRange<DType::kBF16>(w, x, y, begin, end);
      break;
    case DType::kF16:
      GemvRange<DType::kF16>(w, x, y, begin, end);
      break;
    default:
      GemvRange<DType::kF32>(w, x, y, begin, end);
      break;
  }
}

float DotRow(const WeightMatrix& w, int64_t row, const float* x) {
  float y = 0.f;
  switch (w.dtype) {
    case DType::kBF16:
      GemvRange<DType::kBF16>(w, x, &y, row, row + 1);
      break;
    case DType::kF16:
      GemvRange<DType::kF16>(w, x, &y, row, row + 1);
      break;
    default:
      GemvRange<DType::kF32>(w, x, &y, row, row + 1);
      break;
  }
  return y;
}

void AxpyRow(const WeightMatrix& w, int64_t row, float a, float* y) {
  const int64_t k = w.cols;
  const void* src = w.RowPtr(row);
  int64_t c = 0;
#ifdef STRATA_MATMUL_AVX2
  const __m256 av = _mm256_set1_ps(a);
  auto loop = [&](auto load) {
    for (; c + 8 <= k; c += 8) {
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(av, load(c), _mm256_loadu_ps(y + c)));
    }
  };
  switch (w.dtype) {
    case DType::kBF16:
      loop([&](int64_t i) { return Load8<DType::kBF16>(src, i); });
      break;
    case DType::kF16:
      loop([&](int64_t i) { return Load8<DType::kF16>(src, i); });
      break;
    default:
      loop([&](int64_t i) { return Load8<DType::kF32>(src, i); });
      break;
  }
#endif
  for (; c < k; ++c) y[c] += a * LoadScalar(w.dtype, src, c);
}

void RowToF32(const WeightMatrix& w, int64_t row, float* out) { ConvertRows(w, row, 1, out); }

}  // namespace cpu
}  // namespace strata
