// Internals of the qwen3_next CUDA executor, shared by qwen3_next_cuda.cc
// (states, forward passes, graphs) and qwen3_next_load_cuda.cc (planning,
// allocation, weight upload). Not part of any interface. States, slot/block
// bookkeeping, the decode driver and graphs are CudaExecutorBase's
// (cuda_executor_base.h); the Carver and Uploader are cuda_load_helpers.h's.
//
// Layout (qwen3_next.cc is the CPU reference for the math):
//  * weights bf16, regrouped at upload so that no kernel has to de-interleave:
//    GDN in_proj [q (Hk·dk) | k (Hk·dk) | v (Hv·dv) | z (Hv·dv)] with heads in
//    order (transformers' fix_query_key_value_ordering done once), ba
//    [b (Hv) | a (Hv)]; attention [q (H·hd) | gate (H·hd) | k | v] (q_proj's
//    per-head [query | gate] split); dense MLP and shared expert [gate|up];
//    experts w13 [E, 2I, D], w2 [E, D, I]; the shared-expert gate padded to 8
//    rows (row 0 real) so its product has an aligned row; all "1 + w" norms
//    folded to plain weights in fp32;
//  * residual stream fp32, activations bf16, GDN gates, router logits and the
//    shared-expert gate fp32;
//  * per sequence: one slot of GDN states [Hv, dk, dv] and conv windows
//    [K−1, C] (fp32) per GDN layer, and 64-token blocks of the paged bf16 K/V
//    cache, shared by all attention layers (block b of a sequence is block b
//    in every layer's pool).
#ifndef STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_IMPL_H_
#define STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_IMPL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gqa.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/sampling.h"
#include "model/model.h"
#include "model/models/cuda_executor_base.h"
#include "model/models/cuda_load_helpers.h"
#include "model/models/qwen3_next_config.h"
#include "model/models/qwen3_next_cuda.h"

namespace strata {
class WeightStore;
namespace qwen3next_cuda {

using cuda::bf16;
using cuda_exec::Carver;
using cuda_exec::CeilDiv;
using cuda_exec::kBlockTokens;
using cuda_exec::Pad8;

constexpr int64_t kPrefillSliceTokens = 4096;
using cuda_exec::kLogitsChunkRows;
constexpr int64_t kSharedGateRows = 8;

struct Geometry {
  int64_t D = 0, V = 0, L = 0;
  float eps = 1e-6f;
  // GDN: q/k heads Hk of dk, value heads Hv of dv; C conv channels.
  int64_t Hk = 0, Hv = 0, dk = 0, dv = 0, kw = 0, vw = 0, C = 0, K = 0;
  int64_t n_in = 0;    // in_proj rows: C + vw (z at +C)
  int64_t window = 0;  // (K−1)·C floats per sequence and layer
  int64_t state = 0;   // Hv·dk·dv floats per sequence and layer
  // Attention.
  int64_t H = 0, Hkv = 0, hd = 0, rot = 0, n_attn = 0;  // n_attn = 2·H·hd + 2·Hkv·hd
  // FFN.
  int64_t I_dense = 0, I = 0, E = 0, top_k = 0, Is = 0;
  bool renormalize = true;
  int64_t num_gdn = 0, num_attn = 0;
  bool has_moe = false, has_dense = false;
  int64_t gu_cols() const { return 2 * std::max(I_dense, Is); }
};
Geometry MakeGeometry(const Qwen3NextConfig& c);

inline cuda::KdaShape KdaShapeOf(const Geometry& g) {
  cuda::KdaShape s;
  s.num_heads = g.Hv;
  s.key_dim = g.dk;
  s.value_dim = g.dv;
  s.scale = 0.f;
  s.num_qk_heads = g.Hk;
  return s;
}
inline cuda::GqaShape GqaShapeOf(const Geometry& g) {
  cuda::GqaShape s;
  s.num_heads = g.H;
  s.num_kv_heads = g.Hkv;
  s.head_dim = g.hd;
  s.rotary_dim = g.rot;
  return s;
}
inline cuda::MoeShape MoeShapeOf(const Geometry& g) {
  cuda::MoeShape s;
  s.num_experts = g.E;
  s.hidden = g.D;
  s.inter = g.I;
  s.top_k = g.top_k;
  s.renormalize = g.renormalize;
  s.routed_scaling = 1.f;
  s.softmax = true;
  return s;
}

struct Plan : cuda_exec::SequencePlan {
  size_t kda_ws = 0, moe_ws = 0;
};

struct GdnLayer {
  bf16* in_proj = nullptr;  // [n_in, D]
  bf16* ba = nullptr;       // [2·Hv, D]
  bf16* out = nullptr;      // [D, vw]
  float* conv = nullptr;    // [C, K]
  float* neg_exp_a = nullptr;  // [Hv]
  float* dt_bias = nullptr;    // [Hv]
  float* norm = nullptr;       // [dv]
};

struct AttnLayer {
  bf16* qkv = nullptr;  // [n_attn, D]
  bf16* o = nullptr;    // [D, H·hd]
  float* q_norm = nullptr;  // [hd]
  float* k_norm = nullptr;  // [hd]
};

using FfnLayer = cuda_exec::FfnWeights;

struct Layer {
  bool is_attn = false, is_moe = false;
  int64_t index = 0;  // among the layers of its mixer kind (pool index)
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  GdnLayer gdn;
  AttnLayer attn;
  FfnLayer ffn;
};

struct Weights {
  bf16* embed = nullptr;
  bf16* lm_head = nullptr;
  float* final_norm = nullptr;
  float* inv_freq = nullptr;  // [rot / 2]
  std::vector<Layer> layers;
};
void CarveWeights(const Geometry& g, const Qwen3NextConfig& cfg, bool separate_lm_head, Carver& c,
                  Weights& w);

struct Scratch : cuda_exec::StepScratch {
  float* shared = nullptr;  // [rows, D] shared-expert output before its gate
  float* sgate = nullptr;   // [rows, 8] shared-expert gate logits
  bf16* proj = nullptr;     // [rows, C] GDN q|k|v before the conv
  bf16* z = nullptr;        // [rows, vw]
  float* gba = nullptr;     // [rows, 2·Hv] b | a
  bf16* qkv = nullptr;      // [rows, C] conv + SiLU output
  bf16* o = nullptr;        // [rows, vw] GDN output
  bf16* y = nullptr;        // [rows, max(vw, H·hd)] gated-norm / attention output
  bf16* aproj = nullptr;    // [rows, n_attn]
  void* kda_ws = nullptr;
};
void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s);

struct Pools {
  float* state = nullptr;   // [num_gdn, slots, state]
  float* window = nullptr;  // [num_gdn, slots, window]
  bf16* k = nullptr;        // [num_attn, blocks, 64, Hkv, hd]
  bf16* v = nullptr;
  int64_t slots = 0, blocks = 0;
  int64_t block_elems = 0;  // 64·Hkv·hd
};

using CudaState = cuda_exec::CudaSequenceState;

// Decode graphs are keyed by batch size and whether sampling is part of the
// step only (attention reads each row's length from the device): the
// StepVariant is always {}.
class Qwen3NextCudaModel final : public cuda_exec::CudaExecutorBase {
 public:
  Qwen3NextCudaModel() = default;
  // qwen3_next_load_cuda.cc (through cuda_exec::CreateCudaExecutor).
  Status Setup(std::shared_ptr<const WeightStore> weights, const Qwen3NextConfig& config,
               const LoadOptions& options);
  ~Qwen3NextCudaModel() override = default;

 private:
  // --- qwen3_next_load_cuda.cc ---
  Status UploadWeights(const exec::ArchSpec& spec, const WeightStore& store,
                       const LoadOptions& options);
  Status MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed);

  // --- qwen3_next_cuda.cc ---
  Status EnqueueMixer(size_t layer, int64_t n, const CudaState* prefill_state, int64_t past,
                      const StepVariant& v) const override;
  StepVariant DecodeVariant(int64_t max_len) const override { return StepVariant{}; }
  Status GdnMixer(const Layer& L, int64_t n, const CudaState* prefill_state) const;
  Status AttnMixer(const Layer& L, int64_t n, const CudaState* prefill_state, int64_t past) const;

  Qwen3NextConfig cfg_;
  Geometry g_;
  // invariant_ (LoadOptions::batch_invariant) here: invariant GEMMs and MoE, the token-recurrent
  // GDN prefill. GQA attention needs no variant (gqa.h: every query's result
  // is independent of the call's split and batch in every mode).
  Plan plan_;

  Weights w_;
  Scratch s_;
  Pools pools_;
  char* h_staging_ = nullptr;  // weight upload staging (pinned)
};

}  // namespace qwen3next_cuda
}  // namespace strata

#endif  // STRATA_MODEL_MODELS_QWEN3_NEXT_CUDA_IMPL_H_
