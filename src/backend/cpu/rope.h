// Rotary position embeddings, half-split ("rotate_half") form with a partial
// rotary width (model-spec §1.6): the first rotary_dim elements of each head
// are rotated, the rest pass through.
#ifndef STRATA_BACKEND_CPU_ROPE_H_
#define STRATA_BACKEND_CPU_ROPE_H_

#include <cstdint>
#include <vector>

namespace strata {
class ThreadPool;
namespace cpu {

// inv_freq[i] = 1 / theta^(2i / rotary_dim) for i < rotary_dim / 2, in fp32 as
// transformers computes it.
std::vector<float> RopeInverseFrequencies(int64_t rotary_dim, double theta);

// x: [num_tokens, num_heads, head_dim], rotated in place; token t sits at
// position first_position + t. Pairs are (x_i, x_{i + rotary_dim/2}).
void ApplyRopeHalfSplit(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                        int64_t rotary_dim, int64_t first_position, const float* inv_freq,
                        ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_ROPE_H_
