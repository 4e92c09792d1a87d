// Overflow-free totals of config fields (see config_sizes.h).
#include "model/config_sizes.h"

#include <cstdio>
#include <limits>

namespace strata {
namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

std::string Approx(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2g", static_cast<double>(v));
  return buf;
}

}  // namespace

void ConfigSizeTotal::Add(std::initializer_list<SizeFactor> factors) {
  uint64_t product = 1;
  for (const SizeFactor& f : factors) {
    const uint64_t v = f.value < 0 ? 0 : static_cast<uint64_t>(f.value);
    if (product != kSaturated && __builtin_mul_overflow(product, v, &product)) product = kSaturated;
    if (v == 0) product = 0;
  }
  if (__builtin_add_overflow(total_, product, &total_)) total_ = kSaturated;
  if (product > largest_ || largest_factors_.empty()) {
    largest_ = product;
    largest_factors_.assign(factors.begin(), factors.end());
  }
}

Status ConfigSizeTotal::Check() const {
  if (total_ <= limit_) return OkStatus();
  std::string fields, values;
  for (const SizeFactor& f : largest_factors_) {
    if (!f.field.empty()) absl::StrAppend(&fields, fields.empty() ? "" : " x ", "'", f.field, "'");
    absl::StrAppend(&values, values.empty() ? "" : " x ", f.value);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_.file_label(), ": fields ", fields, " (", values, ") make the ", what_,
                   " total at least ", total_ == kSaturated ? std::string("2^64") : Approx(total_),
                   ", more than the supported ", Approx(limit_)));
}

}  // namespace strata
