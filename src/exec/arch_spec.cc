// Names derived from an architecture description.
#include "exec/arch_spec.h"

#include "absl/strings/str_cat.h"

namespace strata::exec {

std::string LayerKind(const LayerSpec& layer) {
  const char* mixer = "attention";
  if (std::holds_alternative<KdaSpec>(layer.mixer)) mixer = "kda";
  if (std::holds_alternative<GdnSpec>(layer.mixer)) mixer = "gdn";
  if (const auto* mla = std::get_if<MlaSpec>(&layer.mixer)) mixer = mla->indexer ? "dsa" : "mla";
  return absl::StrCat(mixer, std::holds_alternative<MoeSpec>(layer.ffn) ? "+moe" : "+dense");
}

MoeSpec RoutedMoeSpec(int64_t experts, int64_t top_k, int64_t intermediate,
                      int64_t shared_intermediate, bool renormalize) {
  return {.experts = experts,
          .top_k = top_k,
          .intermediate = intermediate,
          .shared_intermediate = shared_intermediate,
          .renormalize = renormalize};
}

MoeSpec SigmoidMoeSpec(int64_t experts, int64_t top_k, int64_t intermediate, int64_t num_shared,
                       bool renormalize, double routed_scaling) {
  MoeSpec moe = RoutedMoeSpec(experts, top_k, intermediate, intermediate * num_shared, renormalize);
  moe.score_bias = true;
  moe.routed_scaling = static_cast<float>(routed_scaling);
  return moe;
}

LayerSpec LayerAt(int64_t i, const std::string& mixer_dir, MixerSpec mixer,
                  const std::string& ffn_dir, FfnSpec ffn) {
  LayerSpec l;
  l.prefix = LayerPrefix(i);
  l.mixer_prefix = l.prefix + mixer_dir;
  l.mixer = std::move(mixer);
  l.ffn_prefix = l.prefix + ffn_dir;
  l.ffn = std::move(ffn);
  return l;
}

std::string LayerPrefix(int64_t layer) { return absl::StrCat("model.layers.", layer, "."); }

}  // namespace strata::exec
