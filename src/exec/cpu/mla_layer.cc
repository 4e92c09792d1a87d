// Multi-head latent attention on the CPU (model-spec §2.4, §3.3): the query
// straight from the hidden state (Kimi) or through a low-rank latent (DeepSeek),
// one cached row per token [RMSNorm(c) (r) | k_r (dr)], its rope part rotated
// (interleaved pairs) unless NoPE. With an indexer this is DeepSeek Sparse
// Attention: each query attends to the indexer's top-k rows only. Decode runs
// the absorbed form; a continuation takes whichever form costs less (a fresh
// prefill: the expansion of the latents through kv_b).
#include <algorithm>
#include <cmath>
#include <optional>

#include "backend/cpu/attention.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/rope_yarn.h"
#include "base/thread_pool.h"
#include "exec/cpu/cpu_layer.h"
#include "exec/cpu/dsa_indexer.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {
namespace {

class MlaLayer final : public CpuLayerOf<MlaLayer, MlaSpec> {
 public:
  MlaLayer(const MlaSpec& spec, int64_t hidden) : CpuLayerOf(spec, hidden) {
    dims_ = {spec.heads, spec.nope_dim, spec.rope_dim, spec.v_dim, spec.kv_lora_rank};
    dims_.softmax_scale = spec.softmax_scale;
    if (spec.indexer) indexer_.emplace(*spec.indexer);
  }
  Status Bind(const std::string& a, WeightBinder& wb);

  std::vector<StateRegion> StateRegions() const override {
    std::vector<StateRegion> r = {{dims_.cache_dim(), true}};
    if (indexer_) r.push_back({indexer_->KeyFloats(), true});
    return r;
  }
  int64_t AttendedTokens(int64_t context) const override {
    return indexer_ ? std::min(context, indexer_->top_k()) : context;
  }
  Status Run(const LayerRun& run, const float* x, int64_t T, float* out) const override;

  struct Buffers {
    float *cos, *sin, *cq, *q, *o, *attn, *rows;
    DsaIndexer::Buffers index;
  };
  Buffers Carve(ScratchArena& a, int64_t T, int64_t past, int threads) const {
    const int64_t half = s_.rotary ? s_.rope_dim / 2 : 0;
    Buffers b{};
    b.cos = a.Take<float>(static_cast<size_t>(T * half));
    b.sin = a.Take<float>(static_cast<size_t>(T * half));
    b.cq = a.Take<float>(static_cast<size_t>(T * s_.q_lora_rank));
    b.q = a.Take<float>(static_cast<size_t>(T * s_.heads * dims_.q_dim()));
    b.o = a.Take<float>(static_cast<size_t>(T * s_.heads * s_.v_dim));
    b.attn = a.Take<float>(std::max(cpu::MlaAbsorbedScratchFloats(dims_, T),
                                    cpu::MlaPrefillScratchFloats(dims_, T, threads)));
    b.rows = a.Take<float>(static_cast<size_t>(T * dims_.cache_dim()));
    if (indexer_) b.index = indexer_->Carve(a, T, past, threads);
    return b;
  }

 private:
  cpu::MlaDims dims_;
  std::optional<DsaIndexer> indexer_;
  std::vector<float> inv_freq_;  // [dr/2] with `rotary`
  float rope_attention_factor_ = 1.f;
  cpu::WeightMatrix q_;          // without q_lora_rank: [H·(dn+dr), D]
  cpu::WeightMatrix q_a_;        // [qr, D]
  std::vector<float> q_a_norm_;  // [qr]
  cpu::WeightMatrix q_b_;        // [H·(dn+dr), qr]
  cpu::WeightMatrix kv_a_;       // [r+dr, D]
  std::vector<float> kv_norm_;   // [r]
  cpu::WeightMatrix kv_b_;       // [H·(dn+dv), r]
  cpu::WeightMatrix o_;          // [D, H·dv]
};

}  // namespace

LayerOrError MakeCpuLayer(const MlaSpec& spec, const LayerBind& bind) {
  return BindLayer<MlaLayer>(spec, bind);
}

Status MlaLayer::Bind(const std::string& a, WeightBinder& wb) {
  const int64_t H = s_.heads, qr = s_.q_lora_rank, qrows = H * dims_.q_dim();
  if (qr == 0) {
    STRATA_ASSIGN_OR_RETURN(q_, wb.Matrix(a + "q_proj.weight", qrows, hidden_));
  } else {
    STRATA_ASSIGN_OR_RETURN(q_a_, wb.Matrix(a + "q_a_proj.weight", qr, hidden_));
    STRATA_ASSIGN_OR_RETURN(q_a_norm_, wb.Vector(a + "q_a_layernorm.weight", {qr}));
    STRATA_ASSIGN_OR_RETURN(q_b_, wb.Matrix(a + "q_b_proj.weight", qrows, qr));
  }
  STRATA_ASSIGN_OR_RETURN(kv_a_,
                          wb.Matrix(a + "kv_a_proj_with_mqa.weight", dims_.cache_dim(), hidden_));
  STRATA_ASSIGN_OR_RETURN(kv_norm_, wb.Vector(a + "kv_a_layernorm.weight", {dims_.kv_rank}));
  STRATA_ASSIGN_OR_RETURN(
      kv_b_, wb.Matrix(a + "kv_b_proj.weight", H * dims_.kv_b_rows_per_head(), dims_.kv_rank));
  STRATA_ASSIGN_OR_RETURN(o_, wb.Matrix(a + "o_proj.weight", hidden_, H * dims_.v_dim));
  if (s_.rotary) {
    inv_freq_ = cpu::RopeInvFreq(s_.rope);
    rope_attention_factor_ = static_cast<float>(cpu::RopeAttentionFactor(s_.rope));
  }
  if (indexer_) {
    STRATA_RETURN_IF_ERROR(indexer_->Bind(a + "indexer.", hidden_, qr, s_.rope_dim / 2, wb));
  }
  return OkStatus();
}

Status MlaLayer::Run(const LayerRun& run, const float* x, int64_t T, float* out) const {
  ThreadPool* pool = run.pool;
  const cpu::MlaDims& md = dims_;
  const int64_t H = md.num_heads, qd = md.q_dim(), cd = md.cache_dim();
  const int64_t half = md.rope_dim / 2, past = run.past;
  const Buffers b = Carve(*run.scratch, T, past, pool->num_threads());
  if (s_.rotary) {
    cpu::RopeCosSin(inv_freq_.data(), half, past, T, rope_attention_factor_, b.cos, b.sin);
  }

  // Query: q_proj x, or q_b(RMSNorm(q_a x)).
  if (s_.q_lora_rank == 0) {
    Linear(run, x, T, q_, b.q);
  } else {
    Linear(run, x, T, q_a_, b.cq);
    cpu::RmsNorm(b.cq, T, s_.q_lora_rank, q_a_norm_.data(), s_.latent_norm_eps, b.cq, pool);
    Linear(run, b.cq, T, q_b_, b.q);
  }
  if (s_.rotary) {
    cpu::ApplyRope(cpu::RopeLayout::kInterleaved, b.q, T, H, H * qd, qd, md.nope_dim, half, b.cos,
                   b.sin, pool);
  }

  // Append [RMSNorm(c_raw) | k_r] for the new tokens straight into the cache.
  const RegionView& cache = run.state[0];
  float* rows = b.rows;
  Linear(run, x, T, kv_a_, rows);
  cpu::ParallelRange(pool, T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      cpu::RmsNorm(rows + t * cd, 1, md.kv_rank, kv_norm_.data(), s_.latent_norm_eps, rows + t * cd,
                   nullptr);
    }
  });
  if (s_.rotary) {
    cpu::ApplyRope(cpu::RopeLayout::kInterleaved, rows, T, 1, cd, 0, md.kv_rank, half, b.cos, b.sin,
                   pool);
  }
  cache.Write(past, T, rows);

  cpu::MlaSelection selection;
  const cpu::MlaSelection* sel = nullptr;
  if (indexer_) {
    indexer_->AppendKeys(run, b.index, x, T, b.cos, b.sin, run.state[1]);
    if (indexer_->Sparse(past, T)) {
      selection = indexer_->Select(run, b.index, x, b.cq, T, b.cos, b.sin, run.state[1].rows);
      sel = &selection;
    }
  }
  const int64_t top_k = sel ? indexer_->top_k() : 0;

  const bool absorbed = past > 0 && (T == 1 || cpu::MlaAbsorbedCost(md, T, past, top_k) <
                                                   cpu::MlaPrefillCost(md, T, past, top_k));
  if (absorbed) {
    cpu::MlaAbsorbed(md, b.q, T, cache.rows, past, kv_b_, b.o, b.attn, pool, sel);
  } else {
    cpu::MlaPrefill(md, b.q, T, cache.rows, past, kv_b_, b.o, b.attn, pool, sel);
  }
  Linear(run, b.o, T, o_, out);
  return OkStatus();
}

}  // namespace strata::exec
