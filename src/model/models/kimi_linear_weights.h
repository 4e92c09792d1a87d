// What a kimi_linear checkpoint holds, shared by the CPU and CUDA executors so
// that both bind the same original tensor names: the list of tensors with their
// shapes and roles, the name aliases some exports use, dummy (random) weights
// for --load-format dummy, and the cost model the benchmarks compare against
// (bytes a decode step must move, FLOPs a prefill must compute).
#ifndef STRATA_MODEL_MODELS_KIMI_LINEAR_WEIGHTS_H_
#define STRATA_MODEL_MODELS_KIMI_LINEAR_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/models/kimi_linear_config.h"

namespace strata {

class WeightStore;

// How a tensor is used (and how dummy weights initialise it).
enum class KimiTensorKind {
  kMatrix,     // a Linear weight [out, in]
  kEmbedding,  // [V, D], one row read per token
  kNorm,       // RMSNorm weight (dummy: 1.0)
  kConv,       // short-conv weight [C, 1, K]
  kALog,       // A_log (dummy: log of uniform [1, 16])
  kDtBias,     // dt_bias (dummy: softplus⁻¹ of uniform [0.001, 0.1])
  kScoreBias,  // MoE selection bias (dummy: small)
};

struct KimiTensorSpec {
  std::string name;            // original checkpoint name
  std::vector<int64_t> shape;  // canonical stored shape
  KimiTensorKind kind = KimiTensorKind::kMatrix;
  int64_t layer = -1;          // -1 for global tensors
  bool is_expert = false;      // a routed expert's w1/w2/w3
  int64_t NumElements() const;
};

// Every tensor the executors bind for `config`, global tensors first, then
// layer by layer (the dense MLP under its checkpoint name `mlp.`; lm_head
// omitted when the embeddings are tied).
std::vector<KimiTensorSpec> KimiLinearTensorSpecs(const KimiLinearConfig& config);

// "model.layers.<i>."
std::string KimiLayerPrefix(int64_t layer);

// The dense MLP's prefix in `store`: the published checkpoint names it `mlp.`,
// transformers' save_pretrained writes `block_sparse_moe.`. Errors name the
// checkpoint form.
std::string KimiDenseMlpPrefix(const WeightStore& store, int64_t layer);

// Dummy weights on the host (the CPU's --load-format dummy): writes
// `dir`/model.safetensors with random bf16 matrices (uniform ±0.02, as the
// CUDA dummy weights) and sensible small tensors, for configs whose weights
// fit in `max_bytes`. ResourceExhausted beyond that.
Status WriteKimiLinearDummyWeights(const KimiLinearConfig& config, const std::string& dir,
                                   uint64_t seed, uint64_t max_bytes);

// The config.json of Kimi-Linear-48B-A3B-Instruct (model-spec §2.1), for
// benchmarks of its exact shapes with dummy weights.
std::string KimiLinear48BConfigJson();

// ---------------------------------------------------------------------------
// Cost model (the physical limits the benchmarks report against).

// Parameters by role (elements).
struct KimiParamCounts {
  double embedding = 0;    // V·D
  double lm_head = 0;      // V·D (read at every step; the embedding when tied)
  double dense_path = 0;   // every matrix read for every token: mixers, dense
                           // MLPs, routers, shared experts, norms and gates
  double per_expert = 0;   // one routed expert (3·I·D)
  int64_t moe_layers = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
};
KimiParamCounts CountKimiParams(const KimiLinearConfig& config);

// Expected number of distinct experts B tokens touch in one MoE layer when
// each picks top_k of E uniformly: E·(1 − (1 − k/E)^B).
double ExpectedDistinctExperts(int64_t experts, int64_t top_k, int64_t batch);

struct KimiDecodeBytes {
  double weights = 0;  // non-expert weights + embedding rows + lm_head
  double experts = 0;  // expected distinct routed experts, all MoE layers
  double state = 0;    // KDA states and conv windows read and written, MLA
                       // latent caches read (context + 1 rows) and written
  double total() const { return weights + experts + state; }
};
// The bytes one decode step of `batch` sequences at `context` cached tokens
// must move at least, with bf16 weights, fp32 recurrent state and a bf16
// latent cache. Divided by the HBM bandwidth this is the step's lower bound.
KimiDecodeBytes KimiLinearDecodeBytes(const KimiLinearConfig& config, int64_t batch,
                                      int64_t context);

// FLOPs (2 per multiply-add) a prefill of `tokens` tokens into an empty state
// needs at least: every projection and the k active experts per token, one
// logits row, the MLA kv_b expansion and causal attention (T(T+1)/2 pairs), and
// the chunked KDA (chunk 64). Divided by the bf16 peak, its lower bound.
double KimiLinearPrefillFlops(const KimiLinearConfig& config, int64_t tokens);

}  // namespace strata

#endif  // STRATA_MODEL_MODELS_KIMI_LINEAR_WEIGHTS_H_
