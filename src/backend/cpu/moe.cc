// SwiGLU and MoE. Tokens are bucketed by expert (counting sort) so each expert
// runs one batched matmul over its tokens instead of one GEMV per token.
#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/parallel.h"
#include "base/thread_pool.h"

namespace strata {
namespace cpu {
namespace {

size_t AlignUp(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Carves typed arrays out of the caller's scratch, 64-byte aligned each.
class Carver {
 public:
  explicit Carver(void* base) : p_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(size_t count) {
    T* out = reinterpret_cast<T*>(p_);
    p_ += AlignUp(count * sizeof(T));
    return out;
  }

 private:
  char* p_;
};

}  // namespace

size_t SwiGluScratchFloats(int64_t num_tokens, int64_t hidden, int64_t intermediate,
                           int num_threads) {
  return static_cast<size_t>(2 * num_tokens * intermediate) +
         std::max(MatMulScratchFloats(num_tokens, hidden, num_threads),
                  MatMulScratchFloats(num_tokens, intermediate, num_threads));
}

void SwiGlu(const float* x, int64_t num_tokens, const SwiGluWeights& w, float* y, float* scratch,
            ThreadPool* pool) {
  const int64_t n = num_tokens;
  const int64_t inter = w.intermediate();
  float* g = scratch;
  float* u = g + n * inter;
  float* mm = u + n * inter;
  MatMul(x, n, w.gate, g, mm, pool);
  MatMul(x, n, w.up, u, mm, pool);
  ParallelRange(pool, n * inter, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  });
  MatMul(g, n, w.down, y, mm, pool);
}

void RouteSigmoidTopK(const float* logits, int64_t num_experts, const float* bias, int64_t top_k,
                      bool renormalize, float routed_scaling, int32_t* idx, float* weight) {
  auto score = [&](int64_t e) { return 1.f / (1.f + std::exp(-logits[e])); };
  // NaN (from broken weights) ranks last, so a full set of experts is always chosen.
  auto biased = [&](int64_t e) {
    const float v = score(e) + (bias ? bias[e] : 0.f);
    return std::isnan(v) ? -INFINITY : v;
  };
  // Pass j picks the best expert strictly below pick j−1 in the order
  // (biased score desc, index asc), so no "taken" mask is needed.
  float prev_v = 0.f;
  int64_t prev_e = -1;
  for (int64_t j = 0; j < top_k; ++j) {
    int64_t best = -1;
    float best_v = 0.f;
    for (int64_t e = 0; e < num_experts; ++e) {
      const float v = biased(e);
      if (prev_e >= 0 && !(v < prev_v || (v == prev_v && e > prev_e))) continue;
      if (best < 0 || v > best_v) {
        best = e;
        best_v = v;
      }
    }
    idx[j] = static_cast<int32_t>(best);
    prev_v = best_v;
    prev_e = best;
  }
  float total = 0.f;
  for (int64_t j = 0; j < top_k; ++j) {
    weight[j] = score(idx[j]);
    total += weight[j];
  }
  const float norm = renormalize ? 1.f / (total + 1e-20f) : 1.f;
  for (int64_t j = 0; j < top_k; ++j) weight[j] *= norm * routed_scaling;
}

void RouteSigmoidGroupedTopK(const float* logits, int64_t num_experts, const float* bias,
                             int64_t num_groups, int64_t topk_groups, int64_t top_k,
                             bool renormalize, float routed_scaling, int32_t* idx,
                             float* weight) {
  auto score = [&](int64_t e) { return 1.f / (1.f + std::exp(-logits[e])); };
  auto biased = [&](int64_t e) {
    const float v = score(e) + (bias ? bias[e] : 0.f);
    return std::isnan(v) ? -INFINITY : v;
  };
  const int64_t per_group = num_experts / num_groups;
  // Group score: the sum of the group's two largest biased scores.
  constexpr int64_t kMaxGroups = 64;
  float group_score[kMaxGroups];
  bool eligible[kMaxGroups];
  for (int64_t g = 0; g < num_groups; ++g) {
    float first = -INFINITY, second = -INFINITY;
    for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      const float v = biased(e);
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[g] = first + second;
    eligible[g] = false;
  }
  for (int64_t j = 0; j < topk_groups; ++j) {
    int64_t best = -1;
    for (int64_t g = 0; g < num_groups; ++g) {
      if (!eligible[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
    }
    eligible[best] = true;
  }
  // Top-k among eligible experts, in the order (biased score desc, index asc).
  float prev_v = 0.f;
  int64_t prev_e = -1;
  for (int64_t j = 0; j < top_k; ++j) {
    int64_t best = -1;
    float best_v = 0.f;
    for (int64_t e = 0; e < num_experts; ++e) {
      if (!eligible[e / per_group]) continue;
      const float v = biased(e);
      if (prev_e >= 0 && !(v < prev_v || (v == prev_v && e > prev_e))) continue;
      if (best < 0 || v > best_v) {
        best = e;
        best_v = v;
      }
    }
    idx[j] = static_cast<int32_t>(best);
    prev_v = best_v;
    prev_e = best;
  }
  float total = 0.f;
  for (int64_t j = 0; j < top_k; ++j) {
    weight[j] = score(idx[j]);
    total += weight[j];
  }
  const float norm = renormalize ? 1.f / (total + 1e-20f) : 1.f;
  for (int64_t j = 0; j < top_k; ++j) weight[j] *= norm * routed_scaling;
}

void RouteSoftmaxTopK(const float* logits, int64_t num_experts, int64_t top_k, bool renormalize,
                      float routed_scaling, int32_t* idx, float* weight) {
  // Selection on the logits (softmax is monotonic); NaN ranks last as in
  // RouteSigmoidTopK, so a full set of distinct experts is always chosen.
  auto key = [&](int64_t e) { return std::isnan(logits[e]) ? -INFINITY : logits[e]; };
  float prev_v = 0.f;
  int64_t prev_e = -1;
  for (int64_t j = 0; j < top_k; ++j) {
    int64_t best = -1;
    float best_v = 0.f;
    for (int64_t e = 0; e < num_experts; ++e) {
      const float v = key(e);
      if (prev_e >= 0 && !(v < prev_v || (v == prev_v && e > prev_e))) continue;
      if (best < 0 || v > best_v) {
        best = e;
        best_v = v;
      }
    }
    idx[j] = static_cast<int32_t>(best);
    prev_v = best_v;
    prev_e = best;
  }
  // p[e] = exp(l_e − max) / Σ_all exp(l − max), as the reference's fp32 softmax.
  const float mx = key(idx[0]);
  float denom = 0.f;
  for (int64_t e = 0; e < num_experts; ++e) denom += std::exp(key(e) - mx);
  float total = 0.f;
  for (int64_t j = 0; j < top_k; ++j) {
    weight[j] = std::exp(key(idx[j]) - mx) / denom;
    total += weight[j];
  }
  const float norm = renormalize ? 1.f / total : 1.f;
  for (int64_t j = 0; j < top_k; ++j) weight[j] *= norm * routed_scaling;
}

size_t MoeScratchBytes(int64_t num_tokens, int64_t hidden, const MoeWeights& w, int num_threads) {
  const int64_t n = num_tokens;
  const int64_t E = w.num_experts();
  const int64_t slots = n * w.top_k;
  int64_t inter = w.has_shared ? w.shared.intermediate() : 0;
  for (const auto& e : w.experts) inter = std::max(inter, e.intermediate());
  size_t bytes = 0;
  bytes += AlignUp(sizeof(float) * n * E);                                 // router logits
  bytes += AlignUp(sizeof(int32_t) * slots);                               // idx
  bytes += AlignUp(sizeof(float) * slots);                                 // weights
  bytes += AlignUp(sizeof(int32_t) * (E + 1));                             // bucket offsets
  bytes += AlignUp(sizeof(int32_t) * slots);                               // bucket tokens
  bytes += AlignUp(sizeof(float) * slots);                                 // bucket weights
  bytes += 2 * AlignUp(sizeof(float) * n * hidden);                        // gathered x, expert out
  bytes += AlignUp(sizeof(float) * (w.top_k + 1) * (2 * inter + hidden));  // single-token path
  bytes += AlignUp(sizeof(float) * n);                                     // shared-expert gates
  bytes += AlignUp(sizeof(float) * std::max(MatMulScratchFloats(n, hidden, num_threads),
                                            SwiGluScratchFloats(n, hidden, inter, num_threads)));
  return bytes;
}

namespace {

// One token (decode): every active expert's gate/up rows go through one
// parallel loop and every down row through a second, instead of three
// dispatches per expert. `act_*` list the active experts, shared one last.
void MoeSingleToken(const float* x, const MoeWeights& w, const int32_t* idx, const float* wt,
                    float shared_scale, float* work, float* y, ThreadPool* pool) {
  const int64_t D = w.router.cols;
  const int64_t K = w.top_k;
  const int64_t A = K + (w.has_shared ? 1 : 0);
  auto expert = [&](int64_t a) -> const SwiGluWeights& {
    return a < K ? w.experts[static_cast<size_t>(idx[a])] : w.shared;
  };
  int64_t total_rows = 0;
  for (int64_t a = 0; a < A; ++a) total_rows += expert(a).intermediate();
  float* g = work;              // [total_rows] gate, then the SwiGLU product
  float* u = g + total_rows;    // [total_rows] up
  float* out = u + total_rows;  // [A, D] per-expert outputs
  // Calls fn(a, row_begin, row_end, offset) for the parts of [b, e) that fall
  // in expert a's segment of `rows_of(a)` rows laid end to end.
  auto segments = [&](int64_t b, int64_t e, auto rows_of, auto fn) {
    int64_t off = 0;
    for (int64_t a = 0; a < A && off < e; ++a) {
      const int64_t n = rows_of(a);
      const int64_t lo = std::max(b, off), hi = std::min(e, off + n);
      if (lo < hi) fn(a, lo - off, hi - off, off);
      off += n;
    }
  };
  auto inter_of = [&](int64_t a) { return expert(a).intermediate(); };
  ParallelRange(pool, total_rows, 32, [&](int64_t b, int64_t e) {
    segments(b, e, inter_of, [&](int64_t a, int64_t lo, int64_t hi, int64_t off) {
      GemvRows(expert(a).gate, x, lo, hi, g + off + lo);
      GemvRows(expert(a).up, x, lo, hi, u + off + lo);
      for (int64_t i = off + lo; i < off + hi; ++i) g[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    });
  });
  auto d_of = [&](int64_t) { return D; };
  ParallelRange(pool, A * D, 32, [&](int64_t b, int64_t e) {
    segments(b, e, d_of, [&](int64_t a, int64_t lo, int64_t hi, int64_t off) {
      int64_t h_off = 0;
      for (int64_t p = 0; p < a; ++p) h_off += inter_of(p);
      GemvRows(expert(a).down, g + h_off, lo, hi, out + off + lo);
    });
  });
  // Routed experts summed in ascending index (as the batched path does), then shared.
  std::fill(y, y + D, 0.f);
  for (int64_t e = 0; e < w.num_experts(); ++e) {
    for (int64_t a = 0; a < K; ++a) {
      if (idx[a] != e) continue;
      for (int64_t j = 0; j < D; ++j) y[j] += wt[a] * out[a * D + j];
    }
  }
  if (w.has_shared) {
    for (int64_t j = 0; j < D; ++j) y[j] += shared_scale * out[K * D + j];
  }
}

}  // namespace

void Moe(const float* x, int64_t num_tokens, const MoeWeights& w, float* y, void* scratch,
         ThreadPool* pool) {
  const int64_t n = num_tokens;
  const int64_t D = w.router.cols;
  const int64_t E = w.num_experts();
  const int64_t K = w.top_k;
  Carver c(scratch);
  float* logits = c.Take<float>(n * E);
  int32_t* idx = c.Take<int32_t>(n * K);
  float* wt = c.Take<float>(n * K);
  int32_t* offsets = c.Take<int32_t>(E + 1);
  int32_t* bucket_tok = c.Take<int32_t>(n * K);
  float* bucket_w = c.Take<float>(n * K);
  float* xg = c.Take<float>(n * D);
  float* yg = c.Take<float>(n * D);
  int64_t inter = w.has_shared ? w.shared.intermediate() : 0;
  for (const auto& e : w.experts) inter = std::max(inter, e.intermediate());
  float* single = c.Take<float>((K + 1) * (2 * inter + D));
  float* shared_scale = c.Take<float>(n);  // sigmoid(shared_gate·x), or 1
  float* mm = c.Take<float>(1);            // the rest

  // The router runs in fp32 on fp32-converted weights (as the reference does).
  MatMul(x, n, w.router, logits, mm, pool);
  ParallelRange(pool, n, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (w.routing == MoeRouting::kSoftmax) {
        RouteSoftmaxTopK(logits + t * E, E, K, w.renormalize, w.routed_scaling, idx + t * K,
                         wt + t * K);
      } else {
        RouteSigmoidTopK(logits + t * E, E, w.score_bias, K, w.renormalize, w.routed_scaling,
                         idx + t * K, wt + t * K);
      }
    }
  });
  if (w.has_shared && w.shared_gate.rows > 0) {
    MatMul(x, n, w.shared_gate, shared_scale, mm, pool);  // [n, 1]
    for (int64_t t = 0; t < n; ++t) shared_scale[t] = 1.f / (1.f + std::exp(-shared_scale[t]));
  } else {
    std::fill(shared_scale, shared_scale + n, 1.f);
  }
  if (w.num_groups > 1) {
    // Group-limited routing (DeepSeek): re-select from the same logits with
    // only the best groups eligible.
    ParallelRange(pool, n, 8, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        RouteSigmoidGroupedTopK(logits + t * E, E, w.score_bias, w.num_groups, w.topk_groups, K,
                                w.renormalize, w.routed_scaling, idx + t * K, wt + t * K);
      }
    });
  }
  if (n == 1) {
    MoeSingleToken(x, w, idx, wt, shared_scale[0], single, y, pool);
    return;
  }
  // Counting sort of (token, weight) pairs by expert; tokens stay ascending.
  std::fill(offsets, offsets + E + 1, 0);
  for (int64_t i = 0; i < n * K; ++i) ++offsets[idx[i] + 1];
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  {
    // Reuse logits as the fill cursor (n·E ≥ E floats; int-sized).
    int32_t* cursor = reinterpret_cast<int32_t*>(logits);
    std::copy(offsets, offsets + E, cursor);
    for (int64_t i = 0; i < n * K; ++i) {
      const int32_t pos = cursor[idx[i]]++;
      bucket_tok[pos] = static_cast<int32_t>(i / K);
      bucket_w[pos] = wt[i];
    }
  }
  std::fill(y, y + n * D, 0.f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = offsets[e];
    const int64_t cnt = offsets[e + 1] - begin;
    if (cnt == 0) continue;
    for (int64_t i = 0; i < cnt; ++i) {
      std::memcpy(xg + i * D, x + bucket_tok[begin + i] * D, sizeof(float) * D);
    }
    SwiGlu(xg, cnt, w.experts[static_cast<size_t>(e)], yg, mm, pool);
    for (int64_t i = 0; i < cnt; ++i) {
      float* yt = y + bucket_tok[begin + i] * D;
      const float a = bucket_w[begin + i];
      const float* src = yg + i * D;
      for (int64_t j = 0; j < D; ++j) yt[j] += a * src[j];
    }
  }
  if (w.has_shared) {
    SwiGlu(x, n, w.shared, yg, mm, pool);
    for (int64_t t = 0; t < n; ++t) {
      const float a = shared_scale[t];
      for (int64_t j = 0; j < D; ++j) y[t * D + j] += a * yg[t * D + j];
    }
  }
}

}  // namespace cpu
}  // namespace strata
