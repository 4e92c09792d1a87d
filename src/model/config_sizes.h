// Totals sized from config.json (parameters, tensors, per-sequence and
// per-token state), computed without overflow before anything is allocated
// from them. Each field is within its own bound (model/config_bounds.h), but
// products of bounded fields can still exceed any machine or wrap around
// 64 bits; a total past its limit is refused as InvalidArgument naming the
// fields whose product is the largest term, so the user sees which values
// to fix rather than a bad_alloc.
#ifndef STRATA_MODEL_CONFIG_SIZES_H_
#define STRATA_MODEL_CONFIG_SIZES_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config_reader.h"

namespace strata {

// Limits on totals. Each is orders of magnitude above the published models
// and below what would overflow the byte counts derived from it.
// Parameters: DeepSeek-V3.2 has 6.7e11, the largest published models about 2e12.
inline constexpr uint64_t kMaxConfigParameters = uint64_t{1} << 43;
// Tensors: DeepSeek-V3.2 has about 1.5e5 (with its FP8 scales).
inline constexpr uint64_t kMaxConfigTensors = uint64_t{1} << 22;
// Fixed state of one sequence: Kimi-Linear 48B and Qwen3-Next 80B need tens of MiB.
inline constexpr uint64_t kMaxConfigSequenceStateBytes = uint64_t{1} << 40;
// Growing state per token: DeepSeek-V3.2 needs about 150 KB.
inline constexpr uint64_t kMaxConfigTokenStateBytes = uint64_t{1} << 30;

// One factor of a term: the field it came from ("" for a constant such as
// the three matrices of a SwiGLU expert) and its value (>= 0).
struct SizeFactor {
  std::string field;
  int64_t value;
};

// A sum of products of config fields, saturating instead of wrapping.
// Usage:
//   ConfigSizeTotal params(config, "parameters", kMaxConfigParameters);
//   params.Add({{"vocab_size", V}, {"hidden_size", D}});
//   params.Add({{"num_hidden_layers", L}, {"n_routed_experts", E}, {"", 3},
//               {"moe_intermediate_size", I}, {"hidden_size", D}});
//   STRATA_RETURN_IF_ERROR(params.Check());
class ConfigSizeTotal {
 public:
  ConfigSizeTotal(const ConfigReader& config, std::string what, uint64_t limit)
      : config_(config), what_(std::move(what)), limit_(limit) {}

  void Add(std::initializer_list<SizeFactor> factors);

  // The sum (saturated at UINT64_MAX).
  uint64_t total() const { return total_; }

  // InvalidArgument naming the fields of the largest term when the sum
  // exceeds the limit, e.g.
  //   "<dir>/config.json: fields 'num_hidden_layers' x 'num_experts' x
  //    'moe_intermediate_size' x 'hidden_size' (4096 x 60000 x 65536 x 65536 x 3)
  //    make the parameters total at least 3.2e+18, more than the supported 8.8e+12".
  Status Check() const;

 private:
  const ConfigReader& config_;
  std::string what_;
  uint64_t limit_;
  uint64_t total_ = 0;
  uint64_t largest_ = 0;
  std::vector<SizeFactor> largest_factors_;
};

// The four totals of a decoder-only config (parameters, tensors, the fixed
// state of one sequence, the state per token), built layer kind by layer
// kind. Each adder takes the config's own spellings of its fields, so that
// an error names what to fix; `n` is how many layers are of that kind.
// Usage:
//   DecoderSizes sizes(config, V, D, tied, per_layer_tensors);
//   sizes.Kda(kda_layers, {"linear_num_heads", H}, {"linear_head_dim", dk}, {"...", K});
//   sizes.Moe(moe_layers, {"num_experts", E}, {"moe_intermediate_size", I}, ...);
//   STRATA_RETURN_IF_ERROR(sizes.Check());
class DecoderSizes {
 public:
  // The embedding (and lm_head unless tied) of `vocab` × `hidden`, and
  // `tensors_per_layer` tensors in each of `layers` layers.
  DecoderSizes(const ConfigReader& config, int64_t vocab, int64_t hidden, bool tied, int64_t layers,
               int64_t tensors_per_layer);
  // Kimi Delta Attention: q/k/v/o and the low-rank gates, short convs over
  // q, k and v; a [heads, dim, dim] state and conv tails.
  void Kda(int64_t n, const SizeFactor& heads, const SizeFactor& dim, const SizeFactor& kernel);
  // Gated DeltaNet: the fused q/k/v/z and b/a projections, out_proj, one
  // conv over `conv_channels`; a [value_heads, key_dim, value_dim] state.
  void Gdn(int64_t n, const SizeFactor& key_heads, const SizeFactor& value_heads,
           const SizeFactor& key_dim, const SizeFactor& value_dim, const SizeFactor& kernel,
           int64_t conv_channels);
  // Multi-head latent attention: q_proj, or q_a/q_b through `q_rank` (value
  // > 0); kv_a, kv_b, o_proj; a latent row per token. With `index_heads`
  // (value > 0), the indexer's projections and its key per token.
  struct MlaFields {
    SizeFactor heads, q_rank, kv_rank, nope_dim, rope_dim, v_dim;
    SizeFactor index_heads = {"", 0}, index_dim = {"", 0};
  };
  void Mla(int64_t n, const MlaFields& f);
  // Gated grouped-query attention: q (with its gate) and o, k and v; K and V
  // rows per token.
  void Gqa(int64_t n, const SizeFactor& heads, const SizeFactor& kv_heads,
           const SizeFactor& head_dim);
  void DenseMlp(int64_t n, const SizeFactor& intermediate);
  // Routed experts of `intermediate`, `tensors_per_expert` tensors each, and
  // shared experts: `shared` of the routed width, or of width `shared` when
  // `shared_is_width`.
  void Moe(int64_t n, const SizeFactor& experts, const SizeFactor& intermediate,
           const SizeFactor& shared, bool shared_is_width, int64_t tensors_per_expert);
  // The first total past its limit, in the order above.
  Status Check() const;

 private:
  const std::string layers_ = "num_hidden_layers";
  int64_t hidden_;
  ConfigSizeTotal params_, tensors_, state_, per_token_;
};

}  // namespace strata

#endif  // STRATA_MODEL_CONFIG_SIZES_H_
