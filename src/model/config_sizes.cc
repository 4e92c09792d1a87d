// Overflow-free totals of config fields (see config_sizes.h).
#include "model/config_sizes.h"

#include <cstdio>
#include <limits>

namespace strata {
namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

std::string Approx(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2g", static_cast<double>(v));
  return buf;
}

}  // namespace

void ConfigSizeTotal::Add(std::initializer_list<SizeFactor> factors) {
  uint64_t product = 1;
  for (const SizeFactor& f : factors) {
    const uint64_t v = f.value < 0 ? 0 : static_cast<uint64_t>(f.value);
    if (product != kSaturated && __builtin_mul_overflow(product, v, &product)) product = kSaturated;
    if (v == 0) product = 0;
  }
  if (__builtin_add_overflow(total_, product, &total_)) total_ = kSaturated;
  if (product > largest_ || largest_factors_.empty()) {
    largest_ = product;
    largest_factors_.assign(factors.begin(), factors.end());
  }
}

Status ConfigSizeTotal::Check() const {
  if (total_ <= limit_) return OkStatus();
  std::string fields, values;
  for (const SizeFactor& f : largest_factors_) {
    if (!f.field.empty()) absl::StrAppend(&fields, fields.empty() ? "" : " x ", "'", f.field, "'");
    absl::StrAppend(&values, values.empty() ? "" : " x ", f.value);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_.file_label(), ": fields ", fields, " (", values, ") make the ", what_,
                   " total at least ", total_ == kSaturated ? std::string("2^64") : Approx(total_),
                   ", more than the supported ", Approx(limit_)));
}

DecoderSizes::DecoderSizes(const ConfigReader& config, int64_t vocab, int64_t hidden, bool tied,
                           int64_t layers, int64_t tensors_per_layer)
    : hidden_(hidden),
      params_(config, "parameters", kMaxConfigParameters),
      tensors_(config, "tensors", kMaxConfigTensors),
      state_(config, "bytes of one sequence's recurrent state", kMaxConfigSequenceStateBytes),
      per_token_(config, "bytes of state per token", kMaxConfigTokenStateBytes) {
  params_.Add({{"vocab_size", vocab}, {"hidden_size", hidden}, {"", tied ? 1 : 2}});
  tensors_.Add({{layers_, layers}, {"", tensors_per_layer}});
}

void DecoderSizes::Kda(int64_t n, const SizeFactor& heads, const SizeFactor& dim,
                       const SizeFactor& kernel) {
  const SizeFactor layers{layers_, n}, D{"hidden_size", hidden_};
  params_.Add({layers, heads, dim, D, {"", 4}});
  params_.Add({layers, heads, dim, dim, {"", 2}});
  params_.Add({layers, heads, dim, kernel, {"", 3}});
  state_.Add({layers, heads, dim, dim, {"", 4}});
  state_.Add({layers, heads, dim, kernel, {"", 12}});
}

void DecoderSizes::Gdn(int64_t n, const SizeFactor& key_heads, const SizeFactor& value_heads,
                       const SizeFactor& key_dim, const SizeFactor& value_dim,
                       const SizeFactor& kernel, int64_t conv_channels) {
  const SizeFactor layers{layers_, n}, D{"hidden_size", hidden_};
  params_.Add({layers, key_heads, key_dim, D, {"", 2}});
  params_.Add({layers, value_heads, value_dim, D, {"", 3}});
  params_.Add({layers, value_heads, D, {"", 2}});
  params_.Add({layers, value_heads, value_dim, kernel, {"", 3}});
  state_.Add({layers, value_heads, key_dim, value_dim, {"", 4}});
  state_.Add({layers, {"conv channels", conv_channels}, kernel, {"", 4}});
}

void DecoderSizes::Mla(int64_t n, const MlaFields& f) {
  const SizeFactor layers{layers_, n}, D{"hidden_size", hidden_};
  const SizeFactor q_dim{absl::StrCat(f.nope_dim.field, " + ", f.rope_dim.field),
                         f.nope_dim.value + f.rope_dim.value};
  const SizeFactor latent{absl::StrCat(f.kv_rank.field, " + ", f.rope_dim.field),
                          f.kv_rank.value + f.rope_dim.value};
  if (f.q_rank.value > 0) {
    params_.Add({layers, f.q_rank, D});
    params_.Add({layers, f.heads, q_dim, f.q_rank});
  } else {
    params_.Add({layers, f.heads, q_dim, D});
  }
  params_.Add({layers, latent, D});
  params_.Add(
      {layers,
       f.heads,
       {absl::StrCat(f.nope_dim.field, " + ", f.v_dim.field), f.nope_dim.value + f.v_dim.value},
       f.kv_rank});
  params_.Add({layers, f.heads, f.v_dim, D});
  SizeFactor per_token = latent;
  if (f.index_heads.value > 0) {
    params_.Add({layers, f.index_heads, f.index_dim, f.q_rank.value > 0 ? f.q_rank : D});
    params_.Add({layers, f.index_dim, D});
    per_token = {absl::StrCat(latent.field, " + ", f.index_dim.field),
                 latent.value + f.index_dim.value};
  }
  per_token_.Add({layers, per_token, {"", 4}});
}

void DecoderSizes::Gqa(int64_t n, const SizeFactor& heads, const SizeFactor& kv_heads,
                       const SizeFactor& head_dim) {
  const SizeFactor layers{layers_, n}, D{"hidden_size", hidden_};
  params_.Add({layers, heads, head_dim, D, {"", 3}});
  params_.Add({layers, kv_heads, head_dim, D, {"", 2}});
  per_token_.Add({layers, kv_heads, head_dim, {"", 8}});
}

void DecoderSizes::DenseMlp(int64_t n, const SizeFactor& intermediate) {
  params_.Add({{layers_, n}, intermediate, {"hidden_size", hidden_}, {"", 3}});
}

void DecoderSizes::Moe(int64_t n, const SizeFactor& experts, const SizeFactor& intermediate,
                       const SizeFactor& shared, bool shared_is_width, int64_t tensors_per_expert) {
  const SizeFactor layers{layers_, n}, D{"hidden_size", hidden_};
  params_.Add({layers, experts, intermediate, D, {"", 3}});
  if (shared_is_width) {
    params_.Add({layers, shared, D, {"", 3}});
  } else {
    params_.Add({layers, shared, intermediate, D, {"", 3}});
  }
  tensors_.Add({layers, experts, {"", tensors_per_expert}});
}

Status DecoderSizes::Check() const {
  STRATA_RETURN_IF_ERROR(params_.Check());
  STRATA_RETURN_IF_ERROR(tensors_.Check());
  STRATA_RETURN_IF_ERROR(state_.Check());
  return per_token_.Check();
}

}  // namespace strata
