// A sequence's state on the CPU, laid out from the layers' state regions: one
// fp32 buffer per region (fixed ones zero-initialised, per-token ones growing
// with the sequence, so unused capacity costs nothing), plus the scratch the
// executor carves per slice (never cloned). Owned by a session; not
// thread-safe.
#ifndef STRATA_EXEC_CPU_CPU_STATE_H_
#define STRATA_EXEC_CPU_CPU_STATE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/cpu/cpu_layer.h"
#include "model/model.h"

namespace strata::exec {

class CpuSequenceState final : public SequenceState {
 public:
  // `layout` (the executor's, outliving the state) lists every region.
  CpuSequenceState(const Model* owner, const std::vector<StateRegion>* layout, int64_t max_tokens);

  int64_t num_tokens() const override { return tokens_; }
  std::unique_ptr<SequenceState> Clone() const override;
  void Reset() override;

  const Model* owner() const { return owner_; }
  int64_t max_tokens() const { return max_tokens_; }
  // Per-token regions made to hold `tokens` rows (their rows so far kept).
  void ReserveRows(int64_t tokens);
  void Advance(int64_t tokens) { tokens_ += tokens; }
  std::vector<std::vector<float>>& regions() { return regions_; }
  // `bytes` of 64-byte aligned scratch; grows the buffer only when needed.
  void* Scratch(size_t bytes);

 private:
  const Model* owner_;
  const std::vector<StateRegion>* layout_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<std::vector<float>> regions_;  // one per layout entry
  std::vector<uint8_t> scratch_;
};

}  // namespace strata::exec

#endif  // STRATA_EXEC_CPU_CPU_STATE_H_
