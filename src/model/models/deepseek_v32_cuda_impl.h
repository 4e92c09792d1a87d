// Internals of the deepseek_v32 CUDA executor, shared by deepseek_v32_cuda.cc
// (states, forward passes, graphs) and deepseek_v32_load_cuda.cc (planning,
// allocation, weight upload). Not part of any interface.
//
// It is built like the kimi_linear executor: the host side (states, slot and
// block bookkeeping, decode driver, graphs) is CudaExecutorBase's
// (cuda_executor_base.h), the Carver (one allocation carved twice: sizing,
// then for real) cuda_load_helpers.h's.
// Layout:
//  * weights bf16, fused at upload where one input feeds several products:
//    per layer [q_a | kv_a | indexer wk] (segments padded to 8 rows so each
//    starts 16-byte aligned), dense MLP / shared expert [gate|up], experts
//    w13 [E, 2I, D] and w2 [E, D, I]; norms, the indexer LayerNorm's weight
//    and bias and the router bias fp32;
//  * FP8 block-scaled checkpoints: the matrices the plain GEMMs read (the
//    fused a, q_b, o, indexer wq_b / weights_proj, dense MLP and shared
//    experts, router) stay e4m3 on the device when stored so, with their
//    scales expanded to one row of the grid per 8 weight rows (Mat below) so
//    that a fused matrix's segments, which start at multiples of 8 rows, keep
//    their own scales. They run through cuda::Fp8Gemm (backend/cuda/
//    fp8_gemm.h). The routed experts stay e4m3 too (stacked w13 / w2 Mats
//    with the same 8-row scale groups, read by cuda::MoeForward's FP8 path)
//    when every expert matrix of the layer is FP8 and I and D are multiples
//    of 8. kv_b (read by the batched absorption GEMMs, transposed) is
//    dequantised on the host and uploaded bf16;
//  * residual stream fp32, activations bf16, router logits and the indexer's
//    head weights fp32;
//  * per sequence: 64-token blocks shared by two paged caches per layer, the
//    MLA latent rows [c (r) | rotated k_r (dr)] and the indexer's keys [dI]
//    (backend/cuda/indexer.h: one block table addresses both);
//  * rotary cos/sin tables [max_ctx, dr/2] fp32, made on the host exactly as
//    the CPU makes them (cpu::RopeCosSin), uploaded once;
//  * scratch carved once for (prefill slice, max batch, max context); decode
//    steps read their per-step inputs from fixed device buffers, so captured
//    graphs replay with new contents and the same pointers.
#ifndef STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_IMPL_H_
#define STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_IMPL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/mla.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/sampling.h"
#include "exec/cuda/cuda_executor_base.h"
#include "exec/cuda/cuda_load_helpers.h"
#include "model/model.h"
#include "model/models/deepseek_v32_config.h"
#include "model/models/deepseek_v32_cuda.h"

namespace strata {
class WeightStore;
namespace dsv32_cuda {

using cuda::bf16;
using cuda_exec::Carver;
using cuda_exec::CeilDiv;
using cuda_exec::kBlockTokens;
using cuda_exec::Pad8;

// Prefill slice. Sparse prefill runs in the absorbed form, whose per-token
// buffers (q̃ [H, r+dr] and the latent output [H, r], ~0.28 MB per token at
// the published shapes) are what the slice multiplies.
constexpr int64_t kPrefillSliceTokens = 2048;
using cuda_exec::kLogitsChunkRows;
constexpr int64_t kMinMlaBucket = 256;
// q_a_layernorm / kv_a_layernorm keep DeepseekV32RMSNorm's default epsilon;
// the indexer's k_norm is a LayerNorm with eps 1e-6 (as deepseek_v32.cc).
constexpr float kLatentNormEps = 1e-6f;
constexpr float kIndexerNormEps = 1e-6f;

struct Geometry {
  int64_t D = 0, V = 0, L = 0;
  float eps = 1e-6f;
  // MLA with a low-rank query.
  int64_t H = 0, dn = 0, dr = 0, dv = 0, r = 0, qr = 0, qd = 0, cd = 0, half = 0;
  float softmax_scale = 0.f;
  // Indexer.
  int64_t HI = 0, dI = 0, K = 0;
  // The fused [q_a | kv_a | wk] projection: n_a rows, segments at 0, off_kv, off_ik.
  int64_t n_a = 0, off_kv = 0, off_ik = 0;
  // FFN.
  int64_t I_dense = 0, I = 0, E = 0, top_k = 0, Is = 0, n_group = 1, topk_group = 1;
  bool renormalize = true;
  float routed_scaling = 1.f;
  bool has_moe = false, has_dense = false;
  int64_t gu_cols() const { return 2 * std::max(I_dense, Is); }
};
Geometry MakeGeometry(const DeepseekV32Config& c);

inline cuda::MlaShape MlaShapeOf(const Geometry& g) {
  cuda::MlaShape s;
  s.num_heads = g.H;
  s.nope_dim = g.dn;
  s.rope_dim = g.dr;
  s.v_dim = g.dv;
  s.kv_rank = g.r;
  s.scale = g.softmax_scale;
  return s;
}
inline cuda::IndexerShape IndexerShapeOf(const Geometry& g) {
  cuda::IndexerShape s;
  s.num_heads = g.HI;
  s.head_dim = g.dI;
  s.top_k = g.K;
  s.scale = 0.f;  // head_dim^-1/2, as the CPU
  return s;
}
inline cuda::MoeShape MoeShapeOf(const Geometry& g) {
  cuda::MoeShape s;
  s.num_experts = g.E;
  s.hidden = g.D;
  s.inter = g.I;
  s.top_k = g.top_k;
  s.renormalize = g.renormalize;
  s.routed_scaling = g.routed_scaling;
  s.num_groups = g.n_group;
  s.topk_groups = g.topk_group;
  return s;
}

struct Plan : cuda_exec::SequencePlan {
  int64_t dense_ctx = 0;   // min(max_ctx, K): longest context attended densely
  size_t mla_ws = 0, index_ws = 0, moe_ws = 0;
  int64_t fp8_tile = 0;    // bf16 elements of the prefill dequantisation tile
};

using cuda_exec::kFp8ScaleRows;
using cuda_exec::Mat;
// Cap on the prefill dequantisation tile (bf16 elements, 64 MiB).
constexpr int64_t kFp8TileMaxElems = int64_t{1} << 25;

struct AttnLayer {
  Mat a;                       // [n_a, D]: q_a, kv_a, wk
  float* q_a_norm = nullptr;   // [qr]
  float* kv_norm = nullptr;    // [r]
  float* ik_norm_w = nullptr;  // [dI]
  float* ik_norm_b = nullptr;  // [dI]
  Mat q_b;                     // [H·qd, qr]
  bf16* kv_b = nullptr;        // [H·(dn+dv), r]
  // Batch-invariant mode only: W_UK,h transposed per head, [H, r, dn], so the
  // absorption q̃_h = W_UK,hᵀ q_nope,h is a plain x·Wᵀ product, which the
  // invariant GEMM kernels take (they have no transposed-W variant).
  bf16* uk_t = nullptr;
  Mat o;                       // [D, H·dv]
  Mat iq;                      // indexer wq_b [HI·dI, qr]
  Mat iw;                      // indexer weights_proj [HI, D]
};

using FfnLayer = cuda_exec::FfnWeights;

struct Layer {
  bool is_moe = false;
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  AttnLayer attn;
  FfnLayer ffn;
};

struct Weights {
  bf16* embed = nullptr;
  bf16* lm_head = nullptr;
  float* final_norm = nullptr;
  std::vector<Layer> layers;
};
// Which checkpoint tensors are FP8 (given by name); empty: none (dummy
// weights, bf16 checkpoints).
using Fp8Query = std::function<bool(const std::string&)>;
// fp8_bytes: the device bytes of the matrices kept FP8 (codes and scales);
// max_fp8_elems: the largest of them (rows · cols), what the prefill tile
// must hold to dequantise one in a single chunk.
// The stacked routed experts count as two matrices per layer (w13, w2) and
// never go through the prefill tile (MoeForward has its own scratch).
struct Fp8Footprint {
  uint64_t bytes = 0;
  int64_t matrices = 0;
  int64_t max_elems = 0;
  int64_t expert_layers = 0;  // MoE layers whose routed experts stay FP8
};
// batch_invariant: also carve each layer's uk_t.
void CarveWeights(const Geometry& g, const DeepseekV32Config& cfg, bool separate_lm_head,
                  bool batch_invariant, const Fp8Query& is_fp8, Carver& c, Weights& w,
                  Fp8Footprint* fp8);

struct Scratch : cuda_exec::StepScratch {
  unsigned long long* selected_total = nullptr;  // Σ indexer selections, all layers and steps
  float* rope_cos = nullptr;       // [max_ctx, half]
  float* rope_sin = nullptr;
  bf16* a = nullptr;               // [rows, n_a]: c_q | kv row | index key
  bf16* q = nullptr;               // [rows, H·qd]
  bf16* iq = nullptr;              // [rows, HI·dI]
  float* iw = nullptr;             // [rows, HI]
  int32_t* sel_rows = nullptr;     // [rows, K]
  int32_t* sel_counts = nullptr;   // [rows]
  bf16* q_abs = nullptr;           // [rows, H, cd]
  bf16* lat_o = nullptr;           // [rows, H, r]
  bf16* attn = nullptr;            // [rows, H·dv]
  bf16* lat = nullptr;             // [dense_ctx, cd]
  bf16* kv_exp = nullptr;          // [dense_ctx, H·(dn+dv)]
  void* mla_ws = nullptr;
  void* index_ws = nullptr;
  bf16* fp8_tile = nullptr;        // [plan.fp8_tile]: FP8 weight rows for prefill GEMMs
};
void CarveScratch(const Geometry& g, const Plan& p, Carver& c, Scratch& s);

struct Pools {
  bf16* kv = nullptr;  // [L, blocks, 64, cd]
  bf16* ik = nullptr;  // [L, blocks, 64, dI]
  int64_t slots = 0, blocks = 0;
};

using DsaCudaState = cuda_exec::CudaSequenceState;

// Decode graphs are keyed by batch size, the length bound (next power of two
// ≥ the longest sequence, at least kMinMlaBucket), whether sampling is part
// of the step and whether the step is sparse (some sequence longer than
// index_topk: indexer + gathered attention for every row): DecodeVariant.
class DeepseekV32CudaModel final : public cuda_exec::CudaExecutorBase {
 public:
  DeepseekV32CudaModel() = default;
  // deepseek_v32_load_cuda.cc (through cuda_exec::CreateCudaExecutor).
  Status Setup(std::shared_ptr<const WeightStore> weights, const DeepseekV32Config& config,
               const LoadOptions& options);
  ~DeepseekV32CudaModel() override = default;

  // As the CPU adapter: min(context, index_topk) (DsaAttendedTokens).
  int64_t EffectiveAttendedTokens(const SequenceState& state, int64_t new_tokens) const override;

  DeepseekV32CudaStats Stats() const;

 private:
  // --- deepseek_v32_load_cuda.cc ---
  Status UploadWeights(const exec::ArchSpec& spec, const WeightStore& store,
                       const LoadOptions& options);
  Status MakeDummyWeights(const exec::ArchSpec& spec, uint64_t seed);
  // Batch-invariant mode: fills each layer's uk_t from kv_b.
  Status BuildTransposedUk();
  Status SelfCheck();

  // --- deepseek_v32_cuda.cc ---
  Status Rope(bool interleaved, bf16* x, int64_t n, int64_t heads, int64_t token_stride,
              int64_t head_stride, int64_t offset, int64_t pos0, bool decode) const;
  // Decode when v.bound > 0 (prefill passes StepVariant{}).
  Status EnqueueMixer(size_t layer, int64_t n, const DsaCudaState* prefill_state, int64_t past,
                      const StepVariant& v) const override;
  StepVariant DecodeVariant(int64_t max_len) const override;
  Status Attention(const Layer& L, int64_t l, int64_t n, int64_t past, int64_t bound,
                   bool sparse_decode) const;

  DeepseekV32Config cfg_;
  Geometry g_;
  // invariant_ (LoadOptions::batch_invariant) here: invariant GEMMs, MoE and MLA decode, and
  // every attention on the sparse path (indexer + absorbed attention), so a
  // query's path does not depend on how long the call or the batch is.
  Plan plan_;

  Fp8Footprint fp8_;
  Weights w_;
  Scratch s_;
  Pools pools_;

  mutable int64_t sparse_prefill_layers_ = 0, dense_prefill_layers_ = 0;
  mutable int64_t sparse_decode_steps_ = 0, dense_decode_steps_ = 0;
};

}  // namespace dsv32_cuda
}  // namespace strata

#endif  // STRATA_MODEL_MODELS_DEEPSEEK_V32_CUDA_IMPL_H_
