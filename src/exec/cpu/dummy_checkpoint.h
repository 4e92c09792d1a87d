// Random host weights for a layer list, the CPU's --load-format dummy.
#ifndef STRATA_EXEC_CPU_DUMMY_CHECKPOINT_H_
#define STRATA_EXEC_CPU_DUMMY_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "exec/arch_spec.h"

namespace strata::exec {

// Writes `dir`/model.safetensors with every tensor ListTensors(spec) names:
// bf16 matrices uniform in ±0.02 (as the GPU's dummy weights), norms that
// scale by one, other vectors (conv taps, decay parameters, biases) uniform
// in [0.5, 1.5]. Each value depends only on the seed, the tensor's position
// in the list and its index. ResourceExhausted, before anything is written,
// when the tensors would take more than `max_bytes`.
Status WriteDummyCheckpoint(const ArchSpec& spec, const std::string& dir, uint64_t seed,
                            uint64_t max_bytes);

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_DUMMY_CHECKPOINT_H_
