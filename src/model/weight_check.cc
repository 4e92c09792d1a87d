// Non-finite weight scan (see weight_check.h). A value is non-finite exactly
// when its exponent bits are all ones, so each dtype is one mask compare per
// element; blocks are reduced without branches (the compiler vectorises the
// loop) and only a block that has a hit is searched again for its index.
#include "model/weight_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "model/weight_store.h"

namespace strata {
namespace {

// Elements per branch-free block, and per unit of parallel work.
constexpr int64_t kBlock = 4096;
constexpr int64_t kChunk = int64_t{1} << 20;

template <class Bits, Bits kMask>
struct ExponentAllOnes {
  static bool At(const unsigned char* p, int64_t i) {
    Bits b;
    std::memcpy(&b, p + static_cast<size_t>(i) * sizeof(Bits), sizeof(Bits));
    return (b & kMask) == kMask;
  }
};

using F32Bad = ExponentAllOnes<uint32_t, 0x7f800000u>;
using F16Bad = ExponentAllOnes<uint16_t, 0x7c00u>;
using Bf16Bad = ExponentAllOnes<uint16_t, 0x7f80u>;
using E4m3Bad = ExponentAllOnes<uint8_t, 0x7fu>;  // e4m3fn: S.1111.111 is NaN, no infinity

// The first hit in [begin, end), or -1.
template <class Bad>
int64_t FirstIn(const unsigned char* p, int64_t begin, int64_t end) {
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    int hits = 0;
    for (int64_t i = b; i < e; ++i) hits |= Bad::At(p, i);
    if (hits == 0) continue;
    for (int64_t i = b; i < e; ++i) {
      if (Bad::At(p, i)) return i;
    }
  }
  return -1;
}

template <class Bad>
int64_t FirstInTensor(const unsigned char* p, int64_t n, ThreadPool* pool) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(static_cast<size_t>(chunks), -1);
  ParallelFor(pool, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      first[static_cast<size_t>(c)] = FirstIn<Bad>(p, c * kChunk, std::min(n, (c + 1) * kChunk));
    }
  });
  for (int64_t f : first) {
    if (f >= 0) return f;
  }
  return -1;
}

std::string Describe(const TensorView& t, int64_t i) {
  float v = 0.f;
  const auto* p =
      static_cast<const unsigned char*>(t.data) + static_cast<size_t>(i) * DTypeSize(t.dtype);
  ConvertToF32(t.dtype, p, &v, 1);
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "+inf" : "-inf";
}

}  // namespace

int64_t FirstNonFiniteElement(const TensorView& t, ThreadPool* pool) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  // The store checked at open that the data holds this many elements.
  const int64_t n = t.NumElements();
  switch (t.dtype) {
    case DType::kF32:
      return FirstInTensor<F32Bad>(p, n, pool);
    case DType::kF16:
      return FirstInTensor<F16Bad>(p, n, pool);
    case DType::kBF16:
      return FirstInTensor<Bf16Bad>(p, n, pool);
    case DType::kF8E4M3:
      return FirstInTensor<E4m3Bad>(p, n, pool);
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
      return -1;
  }
  return -1;
}

Status CheckWeightsFinite(const WeightStore& store, ThreadPool* pool) {
  for (const std::string& name : store.Names()) {
    STRATA_ASSIGN_OR_RETURN(TensorView t, store.Get(name));
    const int64_t i = FirstNonFiniteElement(t, pool);
    if (i < 0) continue;
    return absl::DataLossError(absl::StrCat(std::string(t.file), ": tensor '", name, "' (",
                                            std::string(DTypeName(t.dtype)), "): element ", i,
                                            " is ", Describe(t, i), " (found by check_weights)"));
  }
  return OkStatus();
}

}  // namespace strata
