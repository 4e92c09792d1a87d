// Element types of stored tensors and scalar conversions to fp32.
// bf16/fp16 are kept as raw uint16_t bit patterns; compute is always fp32 on the CPU.
#ifndef STRATA_BASE_DTYPE_H_
#define STRATA_BASE_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string_view>

namespace strata {

// kF8E4M3: OCP FP8 E4M3 ("e4m3fn": no infinities, ±448 max, one NaN code per
// sign), as DeepSeek-style block-scaled checkpoints store their matrices.
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5, kF8E4M3 = 6 };

// Size in bytes of one element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: case DType::kF8E4M3: return 1;
  }
  return 0;
}

// Safetensors spelling ("F32", "BF16", ...).
std::string_view DTypeName(DType t);
// Parses a safetensors dtype string; returns false for unknown or unsupported ones.
bool ParseDTypeName(std::string_view s, DType* out);

inline float Bf16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (quiet).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// FP8 E4M3 (e4m3fn) <-> fp32. Every E4M3 value is exact in fp32. The encoder
// rounds to nearest even and saturates to ±448 (what a quantiser wants after
// dividing by the block scale); NaN stays NaN.
float F8E4M3ToF32(uint8_t b);
uint8_t F32ToF8E4M3(float f);

// Converts `n` elements of type `t` at `src` to fp32.
void ConvertToF32(DType t, const void* src, float* dst, size_t n);

}  // namespace strata

#endif  // STRATA_BASE_DTYPE_H_
