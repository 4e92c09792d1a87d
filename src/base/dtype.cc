// Scalar dtype helpers.
#include "base/dtype.h"

#include <algorithm>
#include <cmath>

namespace strata {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

bool ParseDTypeName(std::string_view s, DType* out) {
  static constexpr struct { std::string_view name; DType t; } kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I32", DType::kI32}, {"I64", DType::kI64}, {"U8", DType::kU8},
      {"F8_E4M3", DType::kF8E4M3}};
  for (const auto& e : kTable) {
    if (e.name == s) {
      *out = e.t;
      return true;
    }
  }
  return false;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);  // subnormal (or zero)
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                              // subnormal half
    // Scale so that the half subnormal unit is 1.0 and round to nearest even.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float F8E4M3ToF32(uint8_t b) {
  const bool neg = (b & 0x80u) != 0;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  float v;
  if (exp == 0xfu && man == 0x7u) {
    v = NAN;  // e4m3fn has no infinities; S.1111.111 is NaN
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);  // subnormal: man · 2^-6 / 8
  } else {
    v = std::ldexp(static_cast<float>(man | 0x8u), static_cast<int>(exp) - 10);
  }
  return neg ? -v : v;
}

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::min(std::fabs(f), 448.f);
  // Nearest representable magnitude: walk the 127 finite codes' grid. The
  // spacing at exponent e (>= 1) is 2^(e-10); subnormals are spaced 2^-9.
  int e;
  std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1)
  const int unbiased = e - 1;                     // a in [2^unbiased, 2^(unbiased+1))
  const int step_exp = std::max(unbiased, -6) - 3;  // mantissa has 3 bits
  const float q = std::nearbyint(std::ldexp(a, -step_exp));  // ties to even (default mode)
  const float r = std::ldexp(q, step_exp);
  // Encode r (exactly representable by construction; may have carried into
  // the next binade, which the decomposition below handles).
  if (r == 0.f) return sign;
  int re;
  const float rm = std::frexp(r, &re);
  const int rexp = re - 1 + 7;  // biased
  if (rexp <= 0) {
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::lrint(std::ldexp(r, 9))));
  }
  const uint32_t man = static_cast<uint32_t>(std::lrint(std::ldexp(rm, 4))) & 0x7u;
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(rexp) << 3) | man);
}

void ConvertToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kI64: {
      const auto* s = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kU8: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
    }
  }
}

}  // namespace strata
