// Host-backed sequence state built from a region layout.
#include "exec/cpu/cpu_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata::exec {

CpuStateLayout::CpuStateLayout(std::vector<StateRegion> r)
    : regions(std::move(r)), block_offset(regions.size(), 0) {
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].per_token) {
      block_offset[i] = block_floats;
      block_floats += kStateBlockRows * regions[i].floats;
    } else {
      fixed_bytes += static_cast<uint64_t>(regions[i].floats) * sizeof(float);
    }
  }
}

std::string CpuStateLayout::Describe() const {
  std::string d = absl::StrCat("cpu.v1;block=", kStateBlockRows);
  for (const StateRegion& r : regions) {
    absl::StrAppend(&d, ";", r.per_token ? "rows" : "fixed", ":f32x", r.floats);
  }
  return d;
}

CpuSequenceState::CpuSequenceState(const Model* owner, const CpuStateLayout* layout,
                                   std::shared_ptr<HostBlockPool> blocks, int64_t max_tokens)
    : owner_(owner),
      layout_(layout),
      pool_(std::move(blocks)),
      max_tokens_(max_tokens),
      fixed_(layout->regions.size()) {
  for (size_t i = 0; i < fixed_.size(); ++i) {
    const StateRegion& r = layout->regions[i];
    if (!r.per_token) fixed_[i].assign(static_cast<size_t>(r.floats), 0.f);
  }
}

CpuSequenceState::~CpuSequenceState() {
  if (pool_ != nullptr) pool_->Release(block_ids_);
}

std::unique_ptr<SequenceState> CpuSequenceState::Clone() const {
  auto s = std::make_unique<CpuSequenceState>(owner_, layout_, pool_, max_tokens_);
  s->tokens_ = tokens_;
  s->fixed_ = fixed_;
  if (pool_ == nullptr) return s;
  const size_t full = static_cast<size_t>(tokens_ / kStateBlockRows);
  const std::span<const int32_t> shared(block_ids_.data(), full);
  pool_->Share(shared);
  s->block_ids_.assign(shared.begin(), shared.end());
  s->block_data_.assign(block_data_.begin(), block_data_.begin() + static_cast<ptrdiff_t>(full));
  if (tokens_ % kStateBlockRows != 0) {
    pool_->Take(1, s->block_ids_, s->block_data_);
    std::memcpy(s->block_data_.back(), block_data_[full],
                sizeof(float) * static_cast<size_t>(pool_->block_floats()));
  }
  return s;
}

void CpuSequenceState::Reset() {
  tokens_ = 0;
  for (std::vector<float>& f : fixed_) std::fill(f.begin(), f.end(), 0.f);
  if (pool_ != nullptr) pool_->Release(block_ids_);
  block_ids_.clear();
  block_data_.clear();
}

StateFootprint CpuSequenceState::footprint() const {
  StateFootprint f;
  f.own_bytes = layout_->fixed_bytes;
  if (pool_ == nullptr) return f;
  const size_t full = static_cast<size_t>(tokens_ / kStateBlockRows);
  f.shared_blocks = std::span<const int32_t>(block_ids_.data(), full);
  f.block_bytes = pool_->block_bytes();
  f.own_bytes += (block_ids_.size() - full) * f.block_bytes;
  return f;
}

Status CpuSequenceState::SaveContents(std::vector<uint8_t>* out) const {
  const auto put = [out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
  };
  const uint64_t tokens = static_cast<uint64_t>(tokens_);
  out->reserve(out->size() + sizeof(tokens) + layout_->fixed_bytes +
               static_cast<size_t>(tokens_ * layout_->block_floats / kStateBlockRows) * sizeof(float));
  put(&tokens, sizeof(tokens));
  for (size_t i = 0; i < fixed_.size(); ++i) {
    const StateRegion& r = layout_->regions[i];
    if (!r.per_token) {
      put(fixed_[i].data(), fixed_[i].size() * sizeof(float));
      continue;
    }
    for (int64_t t = 0; t < tokens_; ++t) put(RowOf(i, t), static_cast<size_t>(r.floats) * sizeof(float));
  }
  return OkStatus();
}

Status CpuSequenceState::LoadContents(std::span<const uint8_t> bytes) {
  if (tokens_ != 0) return absl::FailedPreconditionError("LoadContents: the state is not empty");
  uint64_t tokens = 0;
  if (bytes.size() < sizeof(tokens)) {
    return absl::DataLossError(
        absl::StrCat("state contents: ", bytes.size(), " bytes, too short for the token count"));
  }
  std::memcpy(&tokens, bytes.data(), sizeof(tokens));
  if (tokens > static_cast<uint64_t>(max_tokens_)) {
    return absl::OutOfRangeError(absl::StrCat("state contents hold ", tokens,
                                              " tokens; the state holds at most ", max_tokens_));
  }
  uint64_t want = sizeof(tokens);
  for (const StateRegion& r : layout_->regions) {
    want += static_cast<uint64_t>(r.floats) * sizeof(float) * (r.per_token ? tokens : 1);
  }
  if (bytes.size() != want) {
    return absl::DataLossError(absl::StrCat("state contents: ", bytes.size(), " bytes, but ", tokens,
                                            " tokens of this layout take ", want));
  }
  const int64_t T = static_cast<int64_t>(tokens);
  ReserveRows(T);
  size_t at = sizeof(tokens);
  for (size_t i = 0; i < fixed_.size(); ++i) {
    const StateRegion& r = layout_->regions[i];
    const size_t row_bytes = static_cast<size_t>(r.floats) * sizeof(float);
    if (!r.per_token) {
      std::memcpy(fixed_[i].data(), bytes.data() + at, row_bytes);
      at += row_bytes;
      continue;
    }
    for (int64_t t = 0; t < T; ++t, at += row_bytes) std::memcpy(RowOf(i, t), bytes.data() + at, row_bytes);
  }
  tokens_ = T;
  return OkStatus();
}

void CpuSequenceState::ReserveRows(int64_t tokens) {
  if (pool_ == nullptr) return;
  const int64_t need = (tokens + kStateBlockRows - 1) / kStateBlockRows;
  const int64_t have = static_cast<int64_t>(block_ids_.size());
  if (need > have) pool_->Take(need - have, block_ids_, block_data_);
}

std::vector<RegionView> CpuSequenceState::Views() {
  std::vector<RegionView> views(fixed_.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const StateRegion& r = layout_->regions[i];
    if (r.per_token) {
      views[i].rows = {block_data_.data(), layout_->block_offset[i], r.floats, kStateBlockShift};
    } else {
      views[i].fixed = fixed_[i].data();
    }
  }
  return views;
}

void* CpuSequenceState::Scratch(size_t bytes) {
  const size_t align = ScratchArena::kAlign;
  if (scratch_.size() < bytes + align) scratch_.resize(bytes + align);
  const uintptr_t p = reinterpret_cast<uintptr_t>(scratch_.data());
  return reinterpret_cast<void*>((p + align - 1) / align * align);
}

}  // namespace strata::exec
