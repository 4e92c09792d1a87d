// The deepseek_v32 architecture (DeepSeek-V3.2-Exp, model-spec §3) as a layer
// list: every layer is DeepSeek Sparse Attention (MLA with a low-rank query
// and YaRN rotary, restricted by the lightning indexer to the index_topk best
// past tokens); FFNs are dense SwiGLU for the first first_k_dense_replace
// layers, then sigmoid-routed MoE with group-limited selection and shared
// experts. FP8 block-scaled matrices are dequantised to fp32 at load on the
// CPU; the GPU keeps those of the plain GEMMs and the routed experts FP8
// (exec/cuda/weight_carver.h).
//
// What this matches is transformers 5.17's eager DeepseekV32 path, which
// differs from DeepSeek's published inference code in ways that change
// numbers (model-spec §3.3.3, §8):
//   * the indexer scores in plain fp32: no Walsh-Hadamard rotation of q/k
//     (orthogonal, so exact dot products are unchanged) and no FP8
//     quantisation of q/k or of the indexer key cache (DeepSeek quantises
//     both, ue8m0 scales); top-k sets can differ near ties on long contexts;
//   * no FP8 simulation of the MLA latent cache (DeepSeek's later code
//     quantises/dequantises it per 128 values);
//   * FP8 weights: DeepSeek multiplies FP8 activations by FP8 weights; the
//     reference (and we) use the dequantised weights with fp32 activations;
//   * the indexer mask applies in prefill and decode alike; with fewer causal
//     keys than index_topk a query keeps all of them (dense attention), as
//     DeepSeek's code does too.
#include "exec/arch_spec.h"
#include "model/models/builtin.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/deepseek_v32_layers.h"

namespace strata {

StatusOr<exec::ArchSpec> DescribeDeepseekV32(const ConfigReader& config, const WeightStore*) {
  STRATA_ASSIGN_OR_RETURN(const DeepseekV32Config c, ParseDeepseekV32Config(config));
  exec::ArchSpec a = exec::SpecOf("deepseek_v32", c);
  // Every FP8 tensor is dequantised, whether or not quantization_config says
  // so (the block defaults to 128×128).
  a.fp8_block = c.fp8_block;
  exec::MlaSpec dsa = DeepseekDsaSpec(c);
  dsa.softmax_scale = static_cast<float>(c.softmax_scale);
  dsa.rope = c.rope;
  const exec::MoeSpec moe = DeepseekMoeSpec(c);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const exec::FfnSpec ffn = c.is_moe[static_cast<size_t>(i)]
                                  ? exec::FfnSpec(moe)
                                  : exec::FfnSpec(exec::MlpSpec{c.intermediate_size});
    a.layers.push_back(exec::LayerAt(i, "self_attn.", dsa, "mlp.", ffn));
  }
  return a;
}

}  // namespace strata
