// Decode bytes and prefill FLOPs of a layer list.
#include "exec/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/cpu/cpu_executor.h"

namespace strata::exec {
namespace {

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

// Σ over the T queries of a causal prefill of how many keys each attends:
// all earlier ones and itself, or at most `top_k` (0: no limit).
double AttendedPairs(double T, int64_t top_k) {
  if (top_k <= 0 || static_cast<double>(top_k) >= T) return T * (T + 1.0) / 2.0;
  const double k = static_cast<double>(top_k);
  return k * (k + 1.0) / 2.0 + (T - k) * k;
}

// Multiply-adds of the chunked delta rule per 64-token chunk and value head:
// the decayed key-key and query-key matrices, the triangular inverse, the WY
// factors, and three chunk-by-state products.
double DeltaRuleChunkMacs(double dk, double dv) {
  constexpr double C = 64.0;
  return C * C * (3.0 * dk + 2.0 * dv) + C * C * C / 3.0 + 3.0 * C * dk * dv;
}

}  // namespace

StatusOr<ParameterCounts> CountParameters(const ArchSpec& spec) {
  STRATA_ASSIGN_OR_RETURN(const std::vector<BoundTensor> tensors, ListTensors(spec));
  ParameterCounts p;
  double all = 0;
  for (const BoundTensor& t : tensors) {
    const double n = static_cast<double>(t.NumElements());
    all += n;
    if (t.name == "model.embed_tokens.weight") p.embedding = n;
    if (t.name == "lm_head.weight") p.lm_head = n;
  }
  p.tied = p.lm_head == 0;
  if (p.tied) p.lm_head = p.embedding;
  const double D = static_cast<double>(spec.hidden_size);
  for (const LayerSpec& l : spec.layers) {
    if (const auto* moe = std::get_if<MoeSpec>(&l.ffn)) {
      const double expert = 3.0 * static_cast<double>(moe->intermediate) * D;
      p.routed += static_cast<double>(moe->experts) * expert;
      p.routed_active += static_cast<double>(moe->top_k) * expert;
    }
  }
  p.dense_path = all - p.embedding - (p.tied ? 0 : p.lm_head) - p.routed;
  return p;
}

double ExpectedDistinctExperts(int64_t experts, int64_t top_k, int64_t batch) {
  if (experts <= 0 || top_k <= 0 || batch <= 0) return 0;
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(batch)));
}

StatusOr<DecodeBytes> DecodeStepBytes(const ArchSpec& spec, int64_t batch, int64_t context) {
  STRATA_ASSIGN_OR_RETURN(const ParameterCounts p, CountParameters(spec));
  const double b = static_cast<double>(batch), D = static_cast<double>(spec.hidden_size);
  const double rows = static_cast<double>(context) + 1.0;  // attended, this token's included
  DecodeBytes out;
  out.weights = 2.0 * (p.dense_path + p.lm_head + b * D);
  double per_seq = 0;
  // Fixed state in fp32, read and written; cache rows in bf16, one written.
  auto fixed = [&](double floats) { per_seq += 2.0 * 4.0 * floats; };
  auto cache = [&](double width, double read) { per_seq += 2.0 * width * (read + 1.0); };
  for (const LayerSpec& l : spec.layers) {
    std::visit(Overloaded{
                   [&](const KdaSpec& s) {
                     const double C = static_cast<double>(s.heads * s.head_dim);
                     fixed(C * static_cast<double>(s.head_dim) +
                           3.0 * C * static_cast<double>(s.conv_kernel - 1));
                   },
                   [&](const GdnSpec& s) {
                     const double k = static_cast<double>(s.key_heads * s.key_dim);
                     const double v = static_cast<double>(s.value_heads * s.value_dim);
                     fixed(v * static_cast<double>(s.key_dim) +
                           (2.0 * k + v) * static_cast<double>(s.conv_kernel - 1));
                   },
                   [&](const MlaSpec& s) {
                     const double width = static_cast<double>(s.kv_lora_rank + s.rope_dim);
                     if (!s.indexer) return cache(width, rows);
                     cache(width, std::min(rows, static_cast<double>(s.indexer->top_k)));
                     cache(static_cast<double>(s.indexer->head_dim), rows);
                   },
                   [&](const GqaSpec& s) {
                     cache(2.0 * static_cast<double>(s.kv_heads * s.head_dim), rows);
                   },
               },
               l.mixer);
    if (const auto* moe = std::get_if<MoeSpec>(&l.ffn)) {
      out.experts += 2.0 * ExpectedDistinctExperts(moe->experts, moe->top_k, batch) * 3.0 *
                     static_cast<double>(moe->intermediate) * D;
    }
  }
  out.state = b * per_seq;
  return out;
}

StatusOr<double> PrefillFlops(const ArchSpec& spec, int64_t tokens) {
  STRATA_ASSIGN_OR_RETURN(const ParameterCounts p, CountParameters(spec));
  const double T = static_cast<double>(tokens);
  // Norm weights are in dense_path but cost no multiply-adds worth counting.
  double flops = 2.0 * T * (p.dense_path + p.routed_active) + 2.0 * p.lm_head;
  const double chunks = std::ceil(T / 64.0);
  for (const LayerSpec& l : spec.layers) {
    flops += std::visit(
        Overloaded{
            [&](const KdaSpec& s) {
              const double dk = static_cast<double>(s.head_dim);
              return 2.0 * DeltaRuleChunkMacs(dk, dk) * chunks * static_cast<double>(s.heads);
            },
            [&](const GdnSpec& s) {
              return 2.0 *
                     DeltaRuleChunkMacs(static_cast<double>(s.key_dim),
                                        static_cast<double>(s.value_dim)) *
                     chunks * static_cast<double>(s.value_heads);
            },
            [&](const MlaSpec& s) {
              // Scores over nope + rope, values of v_dim; the kv_b expansion
              // of the cached latents is already in dense_path.
              const int64_t top_k = s.indexer ? s.indexer->top_k : 0;
              double f = 2.0 * static_cast<double>(s.heads) * AttendedPairs(T, top_k) *
                         static_cast<double>(s.nope_dim + s.rope_dim + s.v_dim);
              if (s.indexer) {
                f += 2.0 * static_cast<double>(s.indexer->heads * s.indexer->head_dim) *
                     AttendedPairs(T, 0);
              }
              return f;
            },
            [&](const GqaSpec& s) {
              return 2.0 * static_cast<double>(s.heads) * AttendedPairs(T, 0) * 2.0 *
                     static_cast<double>(s.head_dim);
            },
        },
        l.mixer);
  }
  return flops;
}

}  // namespace strata::exec
