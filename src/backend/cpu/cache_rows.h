// Where the rows of a per-token cache (attention keys, values, latents or
// indexer keys) live for the CPU kernels that read them. A sequence's cache
// is paged: 2^shift rows per block, each block its own allocation, so that
// sequences and prefix-cache checkpoints share the full blocks of a common
// prefix instead of copying them. A contiguous array is the one-block case.
#ifndef STRATA_BACKEND_CPU_CACHE_ROWS_H_
#define STRATA_BACKEND_CPU_CACHE_ROWS_H_

#include <cstdint>

namespace strata::cpu {

struct CacheRows {
  // Blocks of a contiguous array: every row index fits the first block.
  static constexpr int kContiguousShift = 62;

  const float* const* blocks = nullptr;
  int64_t offset = 0;  // floats from a block's start to its first row
  int64_t stride = 0;  // floats from one row to the next inside a block
  int shift = kContiguousShift;

  // The rows of `*base`, one every `stride` floats (`base` outlives the
  // view); blocks is null when `*base` is.
  static CacheRows Contiguous(const float* const* base, int64_t stride) {
    return {*base != nullptr ? base : nullptr, 0, stride, kContiguousShift};
  }
  const float* row(int64_t s) const {
    return blocks[s >> shift] + offset + (s & ((int64_t{1} << shift) - 1)) * stride;
  }
  // The same rows from float `floats` of each row on.
  CacheRows At(int64_t floats) const { return {blocks, offset + floats, stride, shift}; }
};

}  // namespace strata::cpu

#endif  // STRATA_BACKEND_CPU_CACHE_ROWS_H_
