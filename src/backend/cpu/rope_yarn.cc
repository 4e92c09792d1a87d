// RoPE schedules and application. Every table entry is produced by the same
// sequence of fp32 operations as transformers' initialisers; see rope_yarn.h.
#include "backend/cpu/rope_yarn.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The rotary dimension index whose wavelength completes `rotations` turns over
// the original context (YaRN's find_correction_dim), in double as Python does.
double CorrectionDim(double rotations, int64_t dim, double base, double max_position) {
  return (static_cast<double>(dim) * std::log(max_position / (rotations * 2.0 * kPi))) /
         (2.0 * std::log(base));
}

}  // namespace

double YarnGetMscale(double scale, double m) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * m * std::log(scale) + 1.0;
}

double RopeAttentionFactor(const RopeParams& p) {
  if (p.type != RopeType::kYarn) return 1.0;
  if (p.attention_factor != 0.0) return p.attention_factor;
  if (p.mscale != 0.0 && p.mscale_all_dim != 0.0) {
    return YarnGetMscale(p.factor, p.mscale) / YarnGetMscale(p.factor, p.mscale_all_dim);
  }
  return YarnGetMscale(p.factor, 1.0);
}

std::vector<float> RopeInvFreq(const RopeParams& p) {
  const int64_t half = p.dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = static_cast<float>(p.theta);
  // pos_freqs = base ** (arange(0, dim, 2).float() / dim)
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(p.dim);
    pos_freqs[static_cast<size_t>(i)] = std::pow(base, exponent);
  }
  if (p.type == RopeType::kDefault) {
    for (int64_t i = 0; i < half; ++i) inv[static_cast<size_t>(i)] = 1.f / pos_freqs[static_cast<size_t>(i)];
    return inv;
  }
  // YaRN: frequencies below `low` keep their original value (extrapolation),
  // above `high` are divided by the factor (interpolation), linear in between.
  double low = CorrectionDim(p.beta_fast, p.dim, p.theta, p.original_max_position);
  double high = CorrectionDim(p.beta_slow, p.dim, p.theta, p.original_max_position);
  if (p.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(p.dim - 1));
  if (low == high) high += 0.001;  // transformers: "prevent singularity"
  const float factor = static_cast<float>(p.factor);
  const float low_f = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  for (int64_t i = 0; i < half; ++i) {
    const float pf = pos_freqs[static_cast<size_t>(i)];
    const float extrapolation = 1.f / pf;
    const float interpolation = 1.f / (factor * pf);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.f, 1.f);
    const float extrapolation_factor = 1.f - ramp;
    inv[static_cast<size_t>(i)] =
        interpolation * (1.f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

void RopeCosSin(const float* inv_freq, int64_t half, int64_t pos0, int64_t num_tokens,
                float attention_factor, float* cos, float* sin) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float pos = static_cast<float>(pos0 + t);
    for (int64_t i = 0; i < half; ++i) {
      // The angle is rounded to fp32 (the reference's fp32 outer product);
      // cos/sin of that angle are then taken accurately.
      const double angle = static_cast<double>(pos * inv_freq[i]);
      cos[t * half + i] = static_cast<float>(std::cos(angle)) * attention_factor;
      sin[t * half + i] = static_cast<float>(std::sin(angle)) * attention_factor;
    }
  }
}

void ApplyRope(RopeLayout layout, float* x, int64_t num_tokens, int64_t num_heads,
               int64_t token_stride, int64_t head_stride, int64_t offset, int64_t half,
               const float* cos, const float* sin, ThreadPool* pool) {
  constexpr int64_t kMaxHalf = 256;
  ParallelRange(pool, num_tokens * num_heads, 16, [&](int64_t b, int64_t e) {
    float tmp[2 * kMaxHalf];
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / num_heads, h = th % num_heads;
      float* v = x + t * token_stride + h * head_stride + offset;
      const float* c = cos + t * half;
      const float* s = sin + t * half;
      if (layout == RopeLayout::kHalfSplit) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], bb = v[i + half];
          v[i] = a * c[i] - bb * s[i];
          v[i + half] = bb * c[i] + a * s[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], bb = v[2 * i + 1];
          tmp[i] = a * c[i] - bb * s[i];
          tmp[i + half] = bb * c[i] + a * s[i];
        }
        std::copy(tmp, tmp + 2 * half, v);
      }
    }
  });
}

}  // namespace cpu
}  // namespace strata
