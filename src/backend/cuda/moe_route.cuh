// Sigmoid top-k routing of one token by a whole CTA, bit-compatible with
// cpu::RouteSigmoidTopK: the device code moe.cu's route kernels and the
// router GEMV with a routing epilogue (gemm.h, GemvRoute) share.
#ifndef STRATA_BACKEND_CUDA_MOE_ROUTE_CUH_
#define STRATA_BACKEND_CUDA_MOE_ROUTE_CUH_

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

namespace strata::cuda::route {

constexpr int kRouteMaxExperts = 1024;  // 32 biased scores per lane in a routing warp
constexpr int kRouteMaxTopK = 32;       // one pick per lane

// The CPU computes 1 / (1 + expf(-x)) in float. expf rounded from a double exp
// is the correctly rounded value, which glibc's expf returns (it is within
// 0.502 ulp), so the scores — and with them the top-k picks and their order —
// match the reference bit for bit. Explicit _rn ops keep the compiler from
// contracting or approximating anything.
__device__ __forceinline__ float SigmoidLikeCpu(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return __fdiv_rn(1.f, __fadd_rn(1.f, e));
}

// (v, e) ranks above (bv, be): larger value, ties to the lower index.
__device__ __forceinline__ bool RanksAbove(float v, int e, float bv, int be) {
  return v > bv || (v == bv && e < be);
}

// sig + bias (sig = SigmoidLikeCpu(logit of e)), NaN as −inf.
__device__ __forceinline__ float BiasedFromSigmoid(float sig, const float* bias, int e) {
  const float b = bias != nullptr ? bias[e] : 0.f;
  const float v = __fadd_rn(sig, b);
  return v != v ? -INFINITY : v;  // NaN ranks last, as in the reference
}

// Sigmoid routing's output, called by a whole warp whose lane j < top_k holds
// pick j and its unbiased score s: weights summed in pick order like the
// reference, renormalised and scaled.
__device__ __forceinline__ void WriteSigmoidPicks(int my_pick, float s, int top_k, bool renormalize,
                                                  float routed_scaling, int32_t* idx_out,
                                                  float* w_out) {
  const int lane = threadIdx.x & 31;
  float total = 0.f;
  for (int j = 0; j < top_k; ++j) total = __fadd_rn(total, __shfl_sync(0xffffffffu, s, j));
  const float norm = renormalize ? __fdiv_rn(1.f, __fadd_rn(total, 1e-20f)) : 1.f;
  if (lane < top_k) {
    idx_out[lane] = my_pick;
    w_out[lane] = __fmul_rn(s, __fmul_rn(norm, routed_scaling));
  }
}

// One token routed by the whole CTA: sigmoid scores without a group limit,
// the case of a batch-1 decode step. RouteToken's top_k rounds of warp-wide
// arg-max form one serial chain of ~2,000 dependent instructions (7 µs per
// route kernel on the H200, BM_CudaMoeRoute/1, 20k cycles for 2.3k
// instructions under Nsight Compute). Here warp w ranks its 32 experts among
// themselves (32 independent shuffles per lane), its best min(k, 32) become
// candidates, and one pass of each candidate over the candidate list in
// shared memory gives its rank, i.e. its pick slot. (score desc, index asc)
// is a total order and the global top k are all candidates (whatever ranks
// above a top-k expert in its warp is top-k too), so picks, their order and
// the weights (same SigmoidLikeCpu values, summed in pick order) are
// RouteToken's bit for bit. Every thread of the CTA must call it.
struct CtaRouteShared {
  float sig[kRouteMaxExperts];     // sigmoid of each logit (the weights reuse it)
  float cand_v[kRouteMaxExperts];  // candidates: ≤ 32 warps × ≤ 32 each
  int cand_e[kRouteMaxExperts];
  int pick[kRouteMaxTopK];
};

// The rank of each of `cands` candidates among them (its pick slot when it
// is below top_k), counted by kParts consecutive lanes each over every
// kParts-th candidate and summed with shuffles: a count, so the split does
// not change it. Four parts at E = 256, k = 8: 16 dependent steps of
// shared-memory reads instead of 64. Every thread of the CTA calls it.
template <int kParts>
__device__ __forceinline__ void RankCandidates(int cands, int top_k, CtaRouteShared& sm) {
  const int part = static_cast<int>(threadIdx.x) & (kParts - 1);
  const int per_round = static_cast<int>(blockDim.x) / kParts;
  for (int c0 = 0; c0 < cands; c0 += per_round) {  // CTA-uniform
    const int c = c0 + static_cast<int>(threadIdx.x) / kParts;
    const bool mine = c < cands;
    const float v = mine ? sm.cand_v[c] : 0.f;
    const int e = mine ? sm.cand_e[c] : INT_MAX;
    int r0 = 0, r1 = 0;
    if (mine) {
      int j = part;
      for (; j + kParts < cands; j += 2 * kParts) {
        r0 += RanksAbove(sm.cand_v[j], sm.cand_e[j], v, e) ? 1 : 0;
        r1 += RanksAbove(sm.cand_v[j + kParts], sm.cand_e[j + kParts], v, e) ? 1 : 0;
      }
      if (j < cands) r0 += RanksAbove(sm.cand_v[j], sm.cand_e[j], v, e) ? 1 : 0;
    }
    int r = r0 + r1;
#pragma unroll
    for (int o = 1; o < kParts; o <<= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    if (mine && part == 0 && r < top_k && e != INT_MAX) sm.pick[r] = e;
  }
}

__device__ inline void RouteTokenCta(const float* logits, int num_experts, const float* bias,
                                     int top_k, bool renormalize, float routed_scaling,
                                     int32_t* idx_out, float* w_out, CtaRouteShared& sm) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int block_warps = blockDim.x >> 5;
  const int expert_warps = (num_experts + 31) >> 5;
  const int kc = min(top_k, 32);
  for (int w = warp; w < expert_warps; w += block_warps) {
    const int e = w * 32 + lane;
    float v = -INFINITY;
    if (e < num_experts) {
      sm.sig[e] = SigmoidLikeCpu(logits[e]);
      v = BiasedFromSigmoid(sm.sig[e], bias, e);
    }
    // Lanes past num_experts hold -inf and the highest indices: they rank
    // last, so the warp's ranks are a permutation with real experts first.
    int r0 = 0, r1 = 0;
#pragma unroll
    for (int m = 0; m < 32; m += 2) {
      const float v0 = __shfl_sync(0xffffffffu, v, m);
      const float v1 = __shfl_sync(0xffffffffu, v, m + 1);
      r0 += RanksAbove(v0, w * 32 + m, v, e) ? 1 : 0;
      r1 += RanksAbove(v1, w * 32 + m + 1, v, e) ? 1 : 0;
    }
    const int r = r0 + r1;
    if (r < kc) {
      const bool real = e < num_experts;
      sm.cand_v[w * kc + r] = real ? v : -INFINITY;
      sm.cand_e[w * kc + r] = real ? e : INT_MAX;  // ranks below every real one
    }
  }
  __syncthreads();
  const int cands = expert_warps * kc;
  if (cands * 4 <= block_warps * 32) {
    RankCandidates<4>(cands, top_k, sm);
  } else {
    RankCandidates<1>(cands, top_k, sm);
  }
  __syncthreads();
  if (warp == 0) {  // weights exactly as RouteToken forms them
    const int my_pick = lane < top_k ? sm.pick[lane] : 0;
    WriteSigmoidPicks(my_pick, lane < top_k ? sm.sig[my_pick] : 0.f, top_k, renormalize,
                      routed_scaling, idx_out, w_out);
  }
}

}  // namespace strata::cuda::route

#endif  // STRATA_BACKEND_CUDA_MOE_ROUTE_CUH_
