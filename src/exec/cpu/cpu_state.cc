// Host-backed sequence state built from a region layout.
#include "exec/cpu/cpu_state.h"

#include <algorithm>

namespace strata::exec {

CpuSequenceState::CpuSequenceState(const Model* owner, const std::vector<StateRegion>* layout,
                                   int64_t max_tokens)
    : owner_(owner), layout_(layout), max_tokens_(max_tokens), regions_(layout->size()) {
  for (size_t i = 0; i < layout->size(); ++i) {
    if (!(*layout)[i].per_token) regions_[i].assign(static_cast<size_t>((*layout)[i].floats), 0.f);
  }
}

std::unique_ptr<SequenceState> CpuSequenceState::Clone() const {
  auto s = std::make_unique<CpuSequenceState>(owner_, layout_, max_tokens_);
  s->tokens_ = tokens_;
  s->regions_ = regions_;
  return s;
}

void CpuSequenceState::Reset() {
  tokens_ = 0;
  for (size_t i = 0; i < regions_.size(); ++i) {
    if ((*layout_)[i].per_token) {
      regions_[i].clear();
    } else {
      std::fill(regions_[i].begin(), regions_[i].end(), 0.f);
    }
  }
}

void CpuSequenceState::ReserveRows(int64_t tokens) {
  for (size_t i = 0; i < regions_.size(); ++i) {
    if ((*layout_)[i].per_token) {
      regions_[i].resize(static_cast<size_t>(tokens * (*layout_)[i].floats));
    }
  }
}

void* CpuSequenceState::Scratch(size_t bytes) {
  const size_t align = ScratchArena::kAlign;
  if (scratch_.size() < bytes + align) scratch_.resize(bytes + align);
  const uintptr_t p = reinterpret_cast<uintptr_t>(scratch_.data());
  return reinterpret_cast<void*>((p + align - 1) / align * align);
}

}  // namespace strata::exec
