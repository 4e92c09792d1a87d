// SplitMix64's output step: a cheap, well-mixed 64-bit hash of a 64-bit
// word, so a counter or a chained value can stand for a random stream or a
// key (dummy weights, prefix-cache keys). In-process use only: not a
// cryptographic hash.
#ifndef STRATA_BASE_SPLITMIX64_H_
#define STRATA_BASE_SPLITMIX64_H_

#include <cstdint>

namespace strata {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace strata

#endif  // STRATA_BASE_SPLITMIX64_H_
