// How a GPU executor lays out its weight arena, its scratch and its state
// pools: each piece is carved from one allocation by the same calls run twice,
// once to size it and once on the memory.
#ifndef STRATA_EXEC_CUDA_CARVER_H_
#define STRATA_EXEC_CUDA_CARVER_H_

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_common.h"

namespace strata {
namespace cuda_exec {

inline int64_t Pad8(int64_t n) { return (n + 7) / 8 * 8; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Carves 256-byte aligned pieces out of one allocation. Run once with a null
// base to size it, then again on the real allocation with the same calls.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(int64_t count) {
    const size_t off = offset_;
    offset_ += cuda::AlignUp(sizeof(T) * static_cast<size_t>(count > 0 ? count : 0));
    return base_ ? reinterpret_cast<T*>(base_ + off) : nullptr;
  }
  size_t size() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// The sizes every executor's plan starts from.
struct SequencePlan {
  int64_t max_batch = 0;
  int64_t max_sequences = 0;
  int64_t checkpoint_slots = 0;  // after the sequence slots in every slot array
  int64_t max_ctx = 0;     // longest sequence (tokens)
  int64_t slice = 0;       // prefill slice (tokens)
  int64_t rows = 0;  // slice + max_batch: rows of the activation buffers (a pass may mix both)
  int64_t max_blocks = 0;  // blocks per sequence = ceil(max_ctx / 64)
  size_t sample_ws = 0;    // the sampling workspace of the largest batch
};

// One array of a state pool before allocation: `layers` sub-arrays of one
// unit of `unit_bytes` per slot (or per block).
struct PoolArray {
  int64_t layers = 0;
  size_t unit_bytes = 0;
};

}  // namespace cuda_exec
}  // namespace strata

#endif  // STRATA_EXEC_CUDA_CARVER_H_
