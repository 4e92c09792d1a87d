// Internals of the kimi_linear CUDA executor, shared by kimi_linear_cuda.cc
// (states, forward passes, graphs) and kimi_linear_load_cuda.cc (planning,
// allocation, weight upload). Not part of any interface.
//
// Layout summary (docs/cuda-backend.md has the why):
//  * weights bf16, fused at upload: KDA [q|k|v|f_a|g_a|b] (segments after v
//    padded to 8 rows so every segment starts 16-byte aligned), dense MLP and
//    shared expert [gate|up], experts w13 [E, 2I, D] and w2 [E, D, I]; norms,
//    conv taps, −exp(A_log), dt_bias and the router bias fp32;
//  * residual stream fp32, activations bf16, gates and router logits fp32;
//  * per sequence: one slot of the KDA state / conv window pools (fp32) and
//    64-token blocks of the paged MLA latent cache (bf16), shared by all MLA
//    layers (block b of a sequence is block b in every layer's pool);
//  * scratch carved once from one allocation for (prefill slice, max batch,
//    max context); decode steps read their per-step inputs (tokens, slots,
//    positions, lengths, block tables) from fixed device buffers, so a
//    captured graph replays with new contents and the same pointers.
#ifndef STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_IMPL_H_
#define STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_IMPL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/sampling.h"
#include "model/model.h"
#include "model/models/cuda_executor_base.h"
#include "model/models/cuda_load_helpers.h"
#include "model/models/kimi_linear_config.h"
#include "model/models/kimi_linear_cuda.h"

namespace strata {
class WeightStore;
namespace kimi_cuda {

using cuda::bf16;

// Prefill slice: long enough that re-reading the expert weights per slice
// (~96 GB at the 48B shapes, ~23 ms) stays well below the slice's compute.
constexpr int64_t kPrefillSliceTokens = 8192;
using cuda_exec::kLogitsChunkRows;
// Smallest MlaDecode length bound a graph is captured for (see DecodeVariant).
constexpr int64_t kMinMlaBucket = 256;
// Largest decode batch whose KDA mixer takes KdaDecodeFused (kimi_linear_cuda.cc).
constexpr int64_t kFusedKdaMaxBatch = 2;
using cuda_exec::kBlockTokens;
// MLA kv_a_layernorm epsilon: fixed in the reference, not rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

using cuda_exec::Carver;
using cuda_exec::CeilDiv;
using cuda_exec::GiB;
using cuda_exec::Pad8;

// Every dimension the executor uses, from the config.
struct Geometry {
  int64_t D = 0, V = 0, L = 0;
  float eps = 1e-5f;
  // KDA: C = H·dk channels per q/k/v; the fused input projection has n_in
  // rows: [q | k | v] (3C), then f_a, g_a (dk each) and b (H) at the offsets.
  int64_t H = 0, dk = 0, C = 0, K = 0, n_in = 0, off_fa = 0, off_ga = 0, off_b = 0;
  int64_t window = 0;  // (K−1)·3C floats of conv window per sequence and layer
  int64_t kda_state = 0;  // H·dk·dk floats per sequence and layer
  // MLA.
  int64_t Hm = 0, dn = 0, dr = 0, dv = 0, r = 0, qd = 0, cd = 0;
  // FFN.
  int64_t I_dense = 0, I = 0, E = 0, top_k = 0, Is = 0;
  bool moe_renormalize = true;
  float routed_scaling = 1.f;
  int64_t num_kda = 0, num_mla = 0;
  bool has_moe = false, has_dense = false;
  int64_t gu_cols() const { return 2 * std::max(I_dense, Is); }
};
Geometry MakeGeometry(const KimiLinearConfig& c);

inline cuda::KdaShape KdaShapeOf(const Geometry& g) {
  cuda::KdaShape s;
  s.num_heads = g.H;
  s.key_dim = g.dk;
  s.value_dim = g.dk;
  s.scale = 0.f;
  return s;
}
inline cuda::MlaShape MlaShapeOf(const Geometry& g) {
  cuda::MlaShape s;
  s.num_heads = g.Hm;
  s.nope_dim = g.dn;
  s.rope_dim = g.dr;
  s.v_dim = g.dv;
  s.kv_rank = g.r;
  s.scale = 0.f;
  return s;
}
inline cuda::MoeShape MoeShapeOf(const Geometry& g) {
  cuda::MoeShape s;
  s.num_experts = g.E;
  s.hidden = g.D;
  s.inter = g.I;
  s.top_k = g.top_k;
  s.renormalize = g.moe_renormalize;
  s.routed_scaling = g.routed_scaling;
  return s;
}

// Sizes fixed at load.
struct Plan : cuda_exec::SequencePlan {
  size_t kda_ws = 0, mla_ws = 0, moe_ws = 0;
};

struct KdaLayer {
  bf16* in_proj = nullptr;  // [n_in, D]
  bf16* f_b = nullptr;      // [C, dk]
  bf16* g_b = nullptr;      // [C, dk]
  bf16* o = nullptr;        // [D, C]
  float* conv = nullptr;    // [3C, K]
  float* neg_exp_a = nullptr;  // [H]
  float* dt_bias = nullptr;    // [C]
  float* o_norm = nullptr;     // [dk]
};

struct MlaLayer {
  bf16* q = nullptr;      // [Hm·qd, D]
  bf16* kv_a = nullptr;   // [cd, D]
  float* kv_norm = nullptr;  // [r]
  bf16* kv_b = nullptr;   // [Hm·(dn+dv), r]
  bf16* o = nullptr;      // [D, Hm·dv]
  // W_UK,h transposed per head, [Hm, r, dn] (made at load from kv_b), so the
  // decode absorption q̃_h = W_UK,hᵀ q_nope,h is a plain x·Wᵀ product: the
  // streaming GEMV takes it (cuBLASLt's transposed product at m = 1 ran at
  // 0.8 TB/s), and so do the invariant kernels (no transposed-W variant).
  bf16* uk_t = nullptr;
};

using FfnLayer = cuda_exec::FfnWeights;

struct Layer {
  bool is_mla = false, is_moe = false;
  int64_t index = 0;  // among the layers of its mixer kind (pool index)
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  KdaLayer kda;
  MlaLayer mla;
  FfnLayer ffn;
};

struct Weights {
  bf16* embed = nullptr;    // [V, D]
  bf16* lm_head = nullptr;  // [V, D] (the embedding when tied)
  float* final_norm = nullptr;
  std::vector<Layer> layers;
};
// Carves the fused weight layout (see the file comment) out of `c`.
// `separate_lm_head`: false when the embeddings are tied and no lm_head is stored.
void CarveWeights(const Geometry& g, const KimiLinearConfig& cfg, bool separate_lm_head, Carver& c,
                  Weights& w);

// Activation buffers and op workspaces.
struct Scratch : cuda_exec::StepScratch {
  bf16* proj = nullptr;            // [rows, n_in]
  bf16* qkv = nullptr;             // [rows, 3C] conv + SiLU output
  float* graw = nullptr;           // [rows, C] f_b output (gate pre-activation)
  bf16* gate = nullptr;            // [rows, C] g_b output
  bf16* o = nullptr;               // [rows, C] KDA output
  bf16* y = nullptr;               // [rows, C] gated-norm output
  bf16* q = nullptr;               // [rows, Hm·qd]
  bf16* kva = nullptr;             // [rows, cd]
  bf16* q_abs = nullptr;           // [max_batch, Hm, cd]
  bf16* lat_o = nullptr;           // [max_batch, Hm, r]
  bf16* attn = nullptr;            // [rows, Hm·dv]
  bf16* lat = nullptr;             // [max_ctx, cd] gathered latents (prefill)
  bf16* kv_exp = nullptr;          // [max_ctx, Hm·(dn+dv)] expanded keys/values
  void* kda_ws = nullptr;
  void* mla_ws = nullptr;
};
void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s);

// Per-sequence pools.
struct Pools {
  float* kda_state = nullptr;    // [num_kda, slots, H·dk·dk]
  float* conv_window = nullptr;  // [num_kda, slots, (K−1)·3C]
  bf16* kv = nullptr;            // [num_mla, blocks, 64, cd]
  int64_t slots = 0, blocks = 0;
};

using CudaState = cuda_exec::CudaSequenceState;

class KimiLinearCudaModel final : public cuda_exec::CudaExecutorBase {
 public:
  KimiLinearCudaModel() = default;
  // kimi_linear_load_cuda.cc (through cuda_exec::CreateCudaExecutor).
  Status Setup(std::shared_ptr<const WeightStore> weights, const KimiLinearConfig& config,
               const LoadOptions& options);
  ~KimiLinearCudaModel() override = default;

 private:
  // --- kimi_linear_load_cuda.cc ---
  Status UploadWeights(const exec::ArchSpec& spec, const WeightStore& store,
                       const LoadOptions& options);
  Status MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed);
  // Batch-invariant mode: fills each MLA layer's uk_t from kv_b.
  Status BuildTransposedUk();

  // --- kimi_linear_cuda.cc ---
  // Enqueue-only building blocks (no host synchronisation; graph-safe).
  Status EnqueueMixer(size_t layer, int64_t n, const CudaState* prefill_state, int64_t past,
                      const StepVariant& v) const override;
  // Decode graphs are keyed by the MlaDecode length bound: the next power of
  // two ≥ the longest sequence, at least kMinMlaBucket (0 without MLA layers).
  StepVariant DecodeVariant(int64_t max_len) const override;
  // Random KDA states and conv windows.
  Status FillSlotForBenchmark(const CudaState& st,
                              const std::function<uint64_t()>& next) const override;
  Status KdaMixer(const Layer& L, int64_t n, const CudaState* prefill_state) const;
  Status TryFusedKdaDecode(const Layer& L, int64_t n, float* windows, float* states,
                           const int32_t* slots, bool* done) const;
  Status KdaChain(const Layer& L, int64_t n, const CudaState* prefill_state, float* windows,
                  float* states, const int32_t* slots) const;
  Status MlaMixer(const Layer& L, int64_t n, const CudaState* prefill_state, int64_t past,
                  int64_t mla_bound) const;
  KimiLinearConfig cfg_;
  Geometry g_;
  Plan plan_;

  Weights w_;
  Scratch s_;
  Pools pools_;
  char* h_staging_ = nullptr;  // weight upload staging (pinned)
};

}  // namespace kimi_cuda
}  // namespace strata

#endif  // STRATA_MODEL_MODELS_KIMI_LINEAR_CUDA_IMPL_H_
