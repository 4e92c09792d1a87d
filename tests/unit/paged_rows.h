// A contiguous [rows, stride] array copied into blocks of 2^shift rows, each
// its own allocation, at an offset inside its block and with NaN around the
// rows, as a paged CPU sequence state holds its attention rows: a kernel
// reading through the view must see exactly the array (a misread row shows
// as NaN or a different result).
#ifndef STRATA_TESTS_UNIT_PAGED_ROWS_H_
#define STRATA_TESTS_UNIT_PAGED_ROWS_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/cache_rows.h"

namespace strata::testing_util {

class PagedRows {
 public:
  PagedRows(const std::vector<float>& rows, int64_t stride, int shift = 4, int64_t offset = 3)
      : stride_(stride), shift_(shift), offset_(offset) {
    const int64_t per_block = int64_t{1} << shift;
    const int64_t n = static_cast<int64_t>(rows.size()) / stride;
    for (int64_t b = 0; b * per_block < n; ++b) {
      storage_.emplace_back(static_cast<size_t>(offset + per_block * stride + offset),
                            std::numeric_limits<float>::quiet_NaN());
      for (int64_t r = b * per_block; r < n && r < (b + 1) * per_block; ++r) {
        for (int64_t i = 0; i < stride; ++i) {
          storage_.back()[static_cast<size_t>(offset + (r - b * per_block) * stride + i)] =
              rows[static_cast<size_t>(r * stride + i)];
        }
      }
    }
    for (const std::vector<float>& s : storage_) blocks_.push_back(s.data());
  }
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;

  cpu::CacheRows view() const { return {blocks_.data(), offset_, stride_, shift_}; }

 private:
  int64_t stride_;
  int shift_;
  int64_t offset_;
  std::vector<std::vector<float>> storage_;
  std::vector<const float*> blocks_;
};

}  // namespace strata::testing_util

#endif  // STRATA_TESTS_UNIT_PAGED_ROWS_H_
