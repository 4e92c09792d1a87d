// MoE routing (one warp per token, or the whole CTA for one token) and the
// plan (histogram, offsets, active experts, tile schedule, permutation).
#include "backend/cuda/moe_common.cuh"

namespace strata::cuda::moe_detail {

// ---------------------------------------------------------------------------
// Routing.

// sigmoid(logit) + bias, NaN as −inf.
__device__ __forceinline__ float BiasedScore(const float* logits, const float* bias, int e) {
  return BiasedFromSigmoid(SigmoidLikeCpu(logits[e]), bias, e);
}

// Group limit (cpu::RouteSigmoidGroupedTopK): lane g < num_groups scores its
// group (sum of its two largest biased scores, re-derived from the logits:
// the same rounded values), then topk_groups warp-wide picks (ties to the
// lower group) give the bit mask of eligible groups.
__device__ uint32_t EligibleGroups(const float* logits, int num_experts, const float* bias,
                                   int num_groups, int topk_groups) {
  const int lane = threadIdx.x & 31;
  const int per_group = num_experts / num_groups;
  float score = -INFINITY;
  if (lane < num_groups) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = lane * per_group; e < (lane + 1) * per_group; ++e) {
      const float v = BiasedScore(logits, bias, e);
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    score = __fadd_rn(first, second);
  }
  uint32_t mask = 0;
  for (int j = 0; j < topk_groups; ++j) {
    const bool taken = lane >= num_groups || ((mask >> lane) & 1u) != 0;
    float best_v = taken ? -INFINITY : score;
    int best_g = taken ? INT_MAX : lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int og = __shfl_xor_sync(0xffffffffu, best_g, o);
      if (RanksAbove(ov, og, best_v, best_g)) {
        best_v = ov;
        best_g = og;
      }
    }
    mask |= 1u << best_g;
  }
  return mask;
}

// Softmax routing's selection key: the logit itself (softmax is monotonic),
// NaN as −inf, as cpu::RouteSoftmaxTopK.
__device__ __forceinline__ float LogitKey(const float* logits, int e) {
  const float v = logits[e];
  return v != v ? -INFINITY : v;
}

// One warp routes one token. Pick j is the best eligible expert strictly
// below pick j−1 in the order (biased score desc, index asc), as the
// reference does. With `softmax` the order is on the logits and the weights
// are softmax probabilities over all experts (cpu::RouteSoftmaxTopK; the
// denominator is summed in warp order, not the CPU's, a few ulp apart).
template <int kPer>
__device__ void RouteToken(const float* logits, int num_experts, const float* bias, int top_k,
                           bool renormalize, float routed_scaling, int num_groups, int topk_groups,
                           bool softmax, int32_t* idx_out, float* w_out) {
  const int lane = threadIdx.x & 31;
  const uint32_t groups = num_groups > 1
                              ? EligibleGroups(logits, num_experts, bias, num_groups, topk_groups)
                              : 0xffffffffu;
  const int per_group = num_groups > 1 ? num_experts / num_groups : num_experts;
  float biased[kPer];
  bool eligible[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    biased[i] = e >= num_experts ? -INFINITY
                : softmax        ? LogitKey(logits, e)
                                 : BiasedScore(logits, bias, e);
    eligible[i] = e < num_experts && ((groups >> (e / per_group)) & 1u) != 0;
  }
  float prev_v = 0.f;
  int prev_e = -1;
  int my_pick = 0;
  float top_v = 0.f;  // the first pick's key: softmax's max
  for (int j = 0; j < top_k; ++j) {
    float best_v = -INFINITY;
    int best_e = INT_MAX;  // sentinel: loses to every real expert, -inf ones included
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      const float v = biased[i];
      const bool below_prev = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (eligible[i] && below_prev && RanksAbove(v, e, best_v, best_e)) {
        best_v = v;
        best_e = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (RanksAbove(ov, oe, best_v, best_e)) {
        best_v = ov;
        best_e = oe;
      }
    }
    if (lane == j) my_pick = best_e;
    if (j == 0) top_v = best_v;
    prev_v = best_v;
    prev_e = best_e;
  }
  if (softmax) {
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i < num_experts) part = __fadd_rn(part, expf(__fsub_rn(biased[i], top_v)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
    const float p =
        lane < top_k ? __fdiv_rn(expf(__fsub_rn(LogitKey(logits, my_pick), top_v)), part) : 0.f;
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) total = __fadd_rn(total, __shfl_sync(0xffffffffu, p, j));
    const float norm = renormalize ? __fdiv_rn(1.f, total) : 1.f;
    if (lane < top_k) {
      idx_out[lane] = my_pick;
      w_out[lane] = __fmul_rn(p, __fmul_rn(norm, routed_scaling));
    }
    return;
  }
  // Weights from the unbiased scores.
  const float s = lane < top_k ? SigmoidLikeCpu(logits[my_pick]) : 0.f;
  WriteSigmoidPicks(my_pick, s, top_k, renormalize, routed_scaling, idx_out, w_out);
}

template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) MoeRouteKernel(MoeParams p) {
  PdlWait();
  PdlLaunchDependents();
  if (p.cta_route) {  // host-checked: one token, sigmoid, no group limit
    __shared__ CtaRouteShared sm;
    RouteTokenCta(p.logits, p.num_experts, p.bias, p.top_k, p.renormalize != 0, p.routed_scaling,
                  p.idx, p.wt, sm);
    return;
  }
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
  if (t >= p.num_tokens) return;
  const size_t t64 = static_cast<size_t>(t);
  RouteToken<kPer>(p.logits + t64 * p.num_experts, p.num_experts, p.bias, p.top_k,
                   p.renormalize != 0, p.routed_scaling, p.num_groups, p.topk_groups,
                   p.softmax != 0, p.idx + t64 * p.top_k, p.wt + t64 * p.top_k);
}

__device__ __forceinline__ int WarpExclusiveScan(int v) {
  const int lane = threadIdx.x & 31;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  return incl - v;
}

// One CTA. Shared memory: count[E], cursor[E]. idx is read with plain loads
// (never the read-only path): when route_here is set this CTA wrote it, and
// __syncthreads makes a block's global writes visible to the block.
template <int kPer>
__global__ void __launch_bounds__(kPlanThreads) MoePlanKernel(MoeParams p, int route_here) {
  extern __shared__ int32_t plan_smem[];
  int32_t* count = plan_smem;
  int32_t* cursor = plan_smem + p.num_experts;
  PdlWait();
  PdlLaunchDependents();
  const int E = p.num_experts;
  const int k = p.top_k;
  const int pairs = p.num_tokens * k;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  if (route_here && p.cta_route) {
    __shared__ CtaRouteShared sm;
    RouteTokenCta(p.logits, E, p.bias, k, p.renormalize != 0, p.routed_scaling, p.idx, p.wt, sm);
  } else if (route_here) {
    const int num_warps = blockDim.x >> 5;
    for (int t = warp; t < p.num_tokens; t += num_warps) {
      const size_t t64 = static_cast<size_t>(t);
      RouteToken<kPer>(p.logits + t64 * E, E, p.bias, k, p.renormalize != 0, p.routed_scaling,
                       p.num_groups, p.topk_groups, p.softmax != 0, p.idx + t64 * k,
                       p.wt + t64 * k);
    }
  }
  __syncthreads();
  for (int q = threadIdx.x; q < pairs; q += blockDim.x) atomicAdd(&count[p.idx[q]], 1);
  __syncthreads();
  if (warp == 0) {
    // Lane l owns a contiguous run of experts; three exclusive scans give each
    // lane its first row, active slot and tile.
    const int per = (E + 31) / 32;
    const int e0 = min(E, lane * per);
    const int e1 = min(E, e0 + per);
    int rows = 0, act = 0, tiles = 0;
    for (int e = e0; e < e1; ++e) {
      const int c = count[e];
      rows += c;
      act += c > 0 ? 1 : 0;
      tiles += (c + kBm - 1) / kBm;
    }
    int row_at = WarpExclusiveScan(rows);
    int act_at = WarpExclusiveScan(act);
    int tile_at = WarpExclusiveScan(tiles);
    for (int e = e0; e < e1; ++e) {
      const int c = count[e];
      p.offsets[e] = row_at;
      cursor[e] = row_at;
      row_at += c;
      if (c > 0) {
        p.active[act_at++] = e;
        for (int m0 = 0; m0 < c; m0 += kBm) {
          p.tile_expert[tile_at] = e;
          p.tile_m0[tile_at] = m0;
          ++tile_at;
        }
      }
    }
    if (lane == 31) {
      p.offsets[E] = row_at;
      p.meta[0] = act_at;
      p.meta[1] = tile_at;
    }
  }
  __syncthreads();
  // Row order inside an expert follows the atomics and may vary between runs;
  // no value depends on it (each row is computed on its own, and the combine
  // reads rows through pair_row in k order).
  for (int q = threadIdx.x; q < pairs; q += blockDim.x) {
    const int pos = atomicAdd(&cursor[p.idx[q]], 1);
    p.row_token[pos] = q / k;
    p.pair_row[q] = pos;
  }
}

// ---------------------------------------------------------------------------
// Host side.

// Whether one token may be routed by the whole CTA (RouteTokenCta): sigmoid
// scores and no group limit (moe.cta_route=0 turns it off; the results are
// the same bits).
bool UseCtaRoute(int64_t num_tokens, const MoeShape& s) {
  return tuning::Current().On(tuning::Key::kMoeCtaRoute) && num_tokens == 1 && !s.softmax &&
         s.num_groups <= 1 && s.num_experts <= kMaxExperts && s.top_k <= kMaxTopK;
}

// Calls f(std::integral_constant<int, kPer>{}) with the biased scores per
// lane a routing warp holds for E experts (32·kPer ≥ E).
template <typename F>
Status WithScoresPerLane(int E, F f) {
  if (E <= 32) return f(std::integral_constant<int, 1>{});
  if (E <= 64) return f(std::integral_constant<int, 2>{});
  if (E <= 128) return f(std::integral_constant<int, 4>{});
  if (E <= 256) return f(std::integral_constant<int, 8>{});
  if (E <= 512) return f(std::integral_constant<int, 16>{});
  return f(std::integral_constant<int, 32>{});
}

template <int kPer>
Status LaunchRouteOnly(const MoeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.num_tokens, kRouteWarps)));
  return Launch("MoeRouteKernel", MoeRouteKernel<kPer>, grid, dim3(kRouteWarps * 32), 0, stream, p);
}

template <int kPer>
Status LaunchRouting(const MoeParams& p, bool in_plan, cudaStream_t stream) {
  if (!in_plan) STRATA_RETURN_IF_ERROR(LaunchRouteOnly<kPer>(p, stream));
  const cudaError_t err = LaunchPdl(MoePlanKernel<kPer>, dim3(1), dim3(kPlanThreads),
                                    2 * sizeof(int32_t) * static_cast<size_t>(p.num_experts),
                                    stream, p, in_plan ? 1 : 0);
  if (err != cudaSuccess) return CudaError(err, "MoePlanKernel");
  return OkStatus();
}

Status RouteAndPlan(const MoeParams& p, bool in_plan, cudaStream_t stream) {
  return WithScoresPerLane(p.num_experts, [&](auto per) {
    return LaunchRouting<decltype(per)::value>(p, in_plan, stream);
  });
}

Status RouteOnly(const MoeParams& p, cudaStream_t stream) {
  return WithScoresPerLane(
      p.num_experts, [&](auto per) { return LaunchRouteOnly<decltype(per)::value>(p, stream); });
}

}  // namespace strata::cuda::moe_detail
