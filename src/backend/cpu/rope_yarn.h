// Rotary position embeddings with a configurable schedule (model-spec §1.6,
// §3.3.1): inverse frequencies for the plain and YaRN schedules, cos/sin
// tables (with YaRN's attention factor), and both pair layouts (half-split
// "rotate_half" and interleaved GPT-J pairs). rope.h holds the plain
// half-split form Qwen3-Next uses; this file adds what DeepSeek needs.
//
// The tables are computed in fp32 with the same operation order as
// transformers' rope initialisers (modeling_rope_utils.py), so that positions
// in the hundreds or thousands rotate by the same fp32 angles as the
// reference; a double-precision table would differ from it by an ulp of the
// angle, which at position 10^4 is already ~1e-3 rad.
#ifndef STRATA_BACKEND_CPU_ROPE_YARN_H_
#define STRATA_BACKEND_CPU_ROPE_YARN_H_

#include <cstdint>
#include <vector>

namespace strata {
class ThreadPool;
namespace cpu {

enum class RopeType { kDefault, kYarn };

// What a checkpoint's rope_parameters (or legacy rope_scaling) configure.
struct RopeParams {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;  // rope_theta
  int64_t dim = 0;         // rotary width (even); dim/2 frequencies
  // YaRN only.
  double factor = 1.0;                      // context extension s
  double original_max_position = 4096;      // original_max_position_embeddings
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;                      // 0: absent
  double mscale_all_dim = 0.0;              // 0: absent
  double attention_factor = 0.0;            // 0: absent (derived, see below)
  bool truncate = true;                     // floor/ceil the correction range

  bool operator==(const RopeParams&) const = default;
};

// YaRN's magnitude correction 0.1·m·ln(s) + 1 (1 for s <= 1).
double YarnGetMscale(double scale, double m);

// The factor transformers multiplies cos and sin by ("attention_scaling"):
// 1 for the default type; for YaRN the configured attention_factor, else
// mscale(s, mscale)/mscale(s, mscale_all_dim) when both are given, else
// mscale(s, 1).
double RopeAttentionFactor(const RopeParams& p);

// inv_freq[i] for i < dim/2, in fp32 as transformers computes it. Default:
// 1/θ^(2i/dim). YaRN: the extrapolated (original) frequency below the
// correction range [low, high] found from beta_fast / beta_slow, the
// interpolated one (divided by s) above it, and a linear ramp between.
std::vector<float> RopeInvFreq(const RopeParams& p);

// cos/sin [num_tokens, half] for positions pos0 .. pos0+num_tokens−1:
// angle = float(pos) · inv_freq[i] (one fp32 product), times attention_factor.
void RopeCosSin(const float* inv_freq, int64_t half, int64_t pos0, int64_t num_tokens,
                float attention_factor, float* cos, float* sin);

// Which elements of the rotary slice form a rotated pair.
enum class RopeLayout {
  // (x_i, x_{i+half}): transformers' rotate_half (Llama, Qwen, DeepSeek indexer).
  kHalfSplit,
  // (x_{2i}, x_{2i+1}): DeepSeek MLA. Written back de-interleaved,
  // [rotated evens | rotated odds], as transformers'
  // apply_rotary_pos_emb_interleave does; q and k get the same permutation,
  // so their dot products are those of the interleaved form.
  kInterleaved,
};

// Rotates, in place, the slice [offset, offset + 2·half) of every head vector
// x[t, h, :] (at x + t·token_stride + h·head_stride) by token t's cos/sin row.
// half <= 256.
void ApplyRope(RopeLayout layout, float* x, int64_t num_tokens, int64_t num_heads,
               int64_t token_stride, int64_t head_stride, int64_t offset, int64_t half,
               const float* cos, const float* sin, ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_ROPE_YARN_H_
