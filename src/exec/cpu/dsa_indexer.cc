// The lightning indexer: scores in plain fp32 (no Walsh-Hadamard rotation or
// FP8 quantisation of q/k, as transformers' eager path; model-spec §3.3.3).
#include "exec/cpu/dsa_indexer.h"

#include <cmath>

#include "backend/cpu/indexer.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/rope_yarn.h"
#include "base/thread_pool.h"
#include "exec/cpu/weight_binder.h"

namespace strata::exec {

Status DsaIndexer::Bind(const std::string& x, int64_t D, int64_t q_rank, int64_t rope_half,
                        WeightBinder& wb) {
  half_ = rope_half;
  const int64_t HI = s_.heads, dI = s_.head_dim;
  STRATA_ASSIGN_OR_RETURN(q_, wb.Matrix(x + "wq_b.weight", HI * dI, q_rank));
  STRATA_ASSIGN_OR_RETURN(k_, wb.Matrix(x + "wk.weight", dI, D));
  STRATA_ASSIGN_OR_RETURN(k_norm_w_, wb.Vector(x + "k_norm.weight", {dI}));
  STRATA_ASSIGN_OR_RETURN(k_norm_b_, wb.Vector(x + "k_norm.bias", {dI}));
  STRATA_ASSIGN_OR_RETURN(weights_, wb.Matrix(x + "weights_proj.weight", HI, D));
  return OkStatus();
}

DsaIndexer::Buffers DsaIndexer::Carve(ScratchArena& a, int64_t T, int64_t past, int threads) const {
  Buffers b{};
  b.keys = a.Take<float>(static_cast<size_t>(T * s_.head_dim));
  if (!Sparse(past, T)) return b;
  b.q = a.Take<float>(static_cast<size_t>(T * s_.heads * s_.head_dim));
  b.weights = a.Take<float>(static_cast<size_t>(T * s_.heads));
  b.rows = a.Take<int32_t>(static_cast<size_t>(T * s_.top_k));
  b.counts = a.Take<int32_t>(static_cast<size_t>(T));
  b.scores_scratch = a.Take<float>(cpu::IndexerScratchFloats(T, past + T, threads));
  return b;
}

void DsaIndexer::AppendKeys(const LayerRun& run, const Buffers& b, const float* x, int64_t T,
                            const float* cos, const float* sin, const RegionView& keys) const {
  const int64_t dI = s_.head_dim;
  float* krows = b.keys;
  Linear(run, x, T, k_, krows);
  cpu::LayerNorm(krows, T, dI, k_norm_w_.data(), k_norm_b_.data(), s_.norm_eps, krows, run.pool);
  cpu::ApplyRope(cpu::RopeLayout::kHalfSplit, krows, T, 1, dI, 0, 0, half_, cos, sin, run.pool);
  keys.Write(run.past, T, krows);
}

cpu::MlaSelection DsaIndexer::Select(const LayerRun& run, const Buffers& b, const float* x,
                                     const float* cq, int64_t T, const float* cos, const float* sin,
                                     cpu::CacheRows keys) const {
  const int64_t HI = s_.heads, dI = s_.head_dim;
  Linear(run, cq, T, q_, b.q);
  cpu::ApplyRope(cpu::RopeLayout::kHalfSplit, b.q, T, HI, HI * dI, dI, 0, half_, cos, sin,
                 run.pool);
  Linear(run, x, T, weights_, b.weights);
  const float head_scale = 1.f / std::sqrt(static_cast<float>(HI));
  for (int64_t i = 0; i < T * HI; ++i) b.weights[i] *= head_scale;
  cpu::IndexerTopK({HI, dI, s_.top_k}, b.q, b.weights, T, keys, run.past,
                   1.f / std::sqrt(static_cast<float>(dI)), b.rows, b.counts, nullptr,
                   b.scores_scratch, run.pool);
  return {b.rows, b.counts, s_.top_k};
}

}  // namespace strata::exec
