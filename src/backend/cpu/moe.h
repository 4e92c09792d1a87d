// Feed-forward blocks of Kimi Linear: the SwiGLU MLP (dense layers, experts,
// shared experts; model-spec §1.3) and the sigmoid-routed mixture of experts
// with DeepSeek-style selection bias (§2.5).
#ifndef STRATA_BACKEND_CPU_MOE_H_
#define STRATA_BACKEND_CPU_MOE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/matmul.h"

namespace strata {
class ThreadPool;
namespace cpu {

// y = down( silu(gate·x) ⊙ (up·x) ); gate/up: [I, D], down: [D, I].
struct SwiGluWeights {
  WeightMatrix gate;
  WeightMatrix up;
  WeightMatrix down;
  int64_t intermediate() const { return gate.rows; }
};

size_t SwiGluScratchFloats(int64_t num_tokens, int64_t hidden, int64_t intermediate,
                           int num_threads);

// x: [n, D] -> y: [n, D] (overwritten; must not alias x).
void SwiGlu(const float* x, int64_t num_tokens, const SwiGluWeights& w, float* y, float* scratch,
            ThreadPool* pool);

// How the router turns its logits into the chosen experts and their weights.
enum class MoeRouting {
  kSigmoid,  // Kimi / DeepSeek: RouteSigmoidTopK (selection bias, routed scaling)
  kSoftmax,  // Qwen3-Next (model-spec §4.5): RouteSoftmaxTopK
};

struct MoeWeights {
  MoeRouting routing = MoeRouting::kSigmoid;
  WeightMatrix router;                 // [E, D] (gate.weight)
  const float* score_bias = nullptr;   // [E] e_score_correction_bias; selection only; may be null
  std::vector<SwiGluWeights> experts;  // E routed experts
  bool has_shared = false;
  SwiGluWeights shared;  // shared experts fused: intermediate I·n_shared
  // Qwen3-Next's shared_expert_gate [1, D]: the shared expert's output is
  // scaled per token by sigmoid(shared_gate · x). rows == 0: no gate (Kimi).
  WeightMatrix shared_gate;
  int64_t top_k = 1;
  bool renormalize = true;
  float routed_scaling = 1.f;
  // DeepSeek's group-limited routing (n_group, topk_group): experts form
  // num_groups equal groups and only the topk_groups best groups may be
  // chosen (RouteSigmoidGroupedTopK). num_groups <= 1: no limit (Kimi).
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  int64_t num_experts() const { return static_cast<int64_t>(experts.size()); }
};

// Routing of one token: s = sigmoid(logits); the top_k experts by s + bias (ties
// go to the lower index) in descending order; weights s[idx] (divided by
// Σ s[idx] + 1e-20 when renormalising) times routed_scaling.
void RouteSigmoidTopK(const float* logits, int64_t num_experts, const float* bias, int64_t top_k,
                      bool renormalize, float routed_scaling, int32_t* idx, float* weight);

// RouteSigmoidTopK limited to the best groups (DeepSeek-V3 "noaux_tc",
// model-spec §3.3.4): b = s + bias; a group's score is the sum of its two
// largest b; the topk_groups groups with the largest scores (ties to the lower
// group) stay eligible and top_k experts are chosen among them as above.
// Requires num_experts % num_groups == 0, at least two experts per group and
// top_k <= topk_groups · (experts per group).
void RouteSigmoidGroupedTopK(const float* logits, int64_t num_experts, const float* bias,
                             int64_t num_groups, int64_t topk_groups, int64_t top_k,
                             bool renormalize, float routed_scaling, int32_t* idx,
                             float* weight);

// Routing of one token, softmax flavour: p = softmax(logits) over all experts
// (fp32); the top_k experts by p (ties go to the lower index) in descending
// order; weights p[idx] (divided by Σ p[idx] when renormalising, i.e.
// norm_topk_prob) times routed_scaling. No selection bias.
void RouteSoftmaxTopK(const float* logits, int64_t num_experts, int64_t top_k, bool renormalize,
                      float routed_scaling, int32_t* idx, float* weight);

size_t MoeScratchBytes(int64_t num_tokens, int64_t hidden, const MoeWeights& w, int num_threads);

// y[n, D] = Σ_k w_k Expert_{idx_k}(x) + Shared(x) (times sigmoid(shared_gate·x)
// when there is a shared gate). Experts run in ascending
// index over the tokens routed to them (batched). y must not alias x.
// `scratch`: MoeScratchBytes bytes, 64-byte aligned.
void Moe(const float* x, int64_t num_tokens, const MoeWeights& w, float* y, void* scratch,
         ThreadPool* pool);

}  // namespace cpu
}  // namespace strata

#endif  // STRATA_BACKEND_CPU_MOE_H_
