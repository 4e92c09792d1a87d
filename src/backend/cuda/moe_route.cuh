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

// Pick j's weight from its unbiased score s and the sum of the picks' scores
// (formed in pick order): renormalised and scaled like the reference.
__device__ __forceinline__ float SigmoidPickWeight(float s, float total, bool renormalize,
                                                   float routed_scaling) {
  const float norm = renormalize ? __fdiv_rn(1.f, __fadd_rn(total, 1e-20f)) : 1.f;
  return __fmul_rn(s, __fmul_rn(norm, routed_scaling));
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
  if (lane < top_k) {
    idx_out[lane] = my_pick;
    w_out[lane] = SigmoidPickWeight(s, total, renormalize, routed_scaling);
  }
}

// One token routed by the whole CTA: sigmoid scores without a group limit,
// the case of a batch-1 decode step. RouteToken's top_k rounds of warp-wide
// arg-max form one serial chain of ~2,000 dependent instructions, so one
// warp's latency sets the kernel's time (profile in
// docs/dev/journal/performance.md). Here warp w ranks its 32 experts among
// themselves, its best min(k, 32) become candidates, and one pass of each
// candidate over the candidate list gives its rank, i.e. its pick slot.
// (score desc, index asc) is a total order and the global top k are all
// candidates (whatever ranks above a top-k expert in its warp is top-k too),
// so picks, their order and the weights (same SigmoidLikeCpu values, summed
// in pick order) are RouteToken's bit for bit.
//
// Every comparison reads its operands from shared memory with 16-byte
// broadcast loads (4 scores, or 2 candidates, per load): in GemvRoute the
// CTA shares its SM with the MoE gate|up kernel's CTAs, whose weight loads
// fill the SM's memory-instruction queue, and each shuffle or shared-memory
// access waits its turn there, so the fewer the better (32 shuffles per lane
// became 8 loads, 32 candidate loads 8, and the weights' 8-shuffle chain two
// dependent loads).
struct alignas(16) CtaRouteShared {
  float sig[kRouteMaxExperts];    // sigmoid of each logit (the weights reuse it)
  float score[kRouteMaxExperts];  // biased scores, warp w's 32 at [32w, 32w + 32)
  // Candidates (biased score, expert index as bits): ≤ 32 warps × ≤ 32 each,
  // plus one never-ranking pad to make the count even.
  float2 cand[kRouteMaxExperts + 2];
  int pick[kRouteMaxTopK];
};

// Candidate c's rank among the `cands` candidates (its pick slot when it is
// below top_k), counted by kParts consecutive lanes each over every
// kParts-th pair of candidates and summed with shuffles: a count, so the
// split does not change it. Every thread of the CTA calls it.
template <int kParts>
__device__ __forceinline__ void RankCandidates(int cands, int top_k, CtaRouteShared& sm) {
  const int part = static_cast<int>(threadIdx.x) & (kParts - 1);
  const int per_round = static_cast<int>(blockDim.x) / kParts;
  const int pairs = (cands + 1) / 2;
  const float4* cand2 = reinterpret_cast<const float4*>(sm.cand);
  for (int c0 = 0; c0 < cands; c0 += per_round) {  // CTA-uniform
    const int c = c0 + static_cast<int>(threadIdx.x) / kParts;
    const bool mine = c < cands;
    const float2 me = mine ? sm.cand[c] : make_float2(0.f, __int_as_float(INT_MAX));
    const float v = me.x;
    const int e = __float_as_int(me.y);
    int r0 = 0, r1 = 0;
    if (mine) {
      for (int j = part; j < pairs; j += kParts) {
        const float4 two = cand2[j];
        r0 += RanksAbove(two.x, __float_as_int(two.y), v, e) ? 1 : 0;
        r1 += RanksAbove(two.z, __float_as_int(two.w), v, e) ? 1 : 0;
      }
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
      const float sg = SigmoidLikeCpu(logits[e]);
      sm.sig[e] = sg;
      v = BiasedFromSigmoid(sg, bias, e);
    }
    // Lanes past num_experts hold -inf and the highest indices: they rank
    // last, so the warp's ranks are a permutation with real experts first.
    sm.score[e] = v;
    __syncwarp();
    const float4* row = reinterpret_cast<const float4*>(sm.score + w * 32);
    int r0 = 0, r1 = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float4 f = row[q];
      const int m = w * 32 + 4 * q;
      r0 += RanksAbove(f.x, m, v, e) ? 1 : 0;
      r1 += RanksAbove(f.y, m + 1, v, e) ? 1 : 0;
      r0 += RanksAbove(f.z, m + 2, v, e) ? 1 : 0;
      r1 += RanksAbove(f.w, m + 3, v, e) ? 1 : 0;
    }
    const int r = r0 + r1;
    if (r < kc) {
      const bool real = e < num_experts;
      // INT_MAX ranks below every real candidate.
      sm.cand[w * kc + r] = make_float2(real ? v : -INFINITY, __int_as_float(real ? e : INT_MAX));
    }
  }
  const int cands = expert_warps * kc;
  if (threadIdx.x == 0 && (cands & 1) != 0) {
    sm.cand[cands] = make_float2(-INFINITY, __int_as_float(INT_MAX));  // ranks above none
  }
  __syncthreads();
  if (cands * 4 <= block_warps * 32) {
    RankCandidates<4>(cands, top_k, sm);
  } else {
    RankCandidates<1>(cands, top_k, sm);
  }
  __syncthreads();
  if (warp == 0 && lane < top_k) {
    // Each lane sums the picks' scores itself, in pick order (the reference's
    // and WriteSigmoidPicks' order): independent loads instead of a chain of
    // shuffles.
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) total = __fadd_rn(total, sm.sig[sm.pick[j]]);
    const int my_pick = sm.pick[lane];
    idx_out[lane] = my_pick;
    w_out[lane] = SigmoidPickWeight(sm.sig[my_pick], total, renormalize, routed_scaling);
  }
}

}  // namespace strata::cuda::route

#endif  // STRATA_BACKEND_CUDA_MOE_ROUTE_CUH_
