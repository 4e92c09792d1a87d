// Sigmoid-routed mixture of experts on the GPU, with no host loop over experts
// and no host synchronisation (the whole layer is graph-capturable).
//
// Pipeline (all on `stream`, every kernel reads its sizes from device memory):
//   1. route      one warp per token: sigmoid, top-k by score + bias (ties to
//                 the lower index), weights — bit-compatible with
//                 cpu::RouteSigmoidTopK (see SigmoidLikeCpu), or with a group
//                 limit cpu::RouteSigmoidGroupedTopK. For n ≤ 128
//                 tokens it runs inside the plan kernel (one launch less).
//                 A single sigmoid-routed token without a group limit (a
//                 batch-1 decode step) is ranked by the whole CTA instead
//                 (RouteTokenCta: the same bits, a far shorter chain), and
//                 with MoeArgs::router_w inside the router's kernel
//                 (gemm.h, GemvRoute) instead of a route kernel.
//   2. plan       one CTA: per-expert histogram (shared-memory atomics), an
//                 exclusive scan into offsets, the list of active experts, the
//                 tile schedule of the grouped GEMM, and the permutation: each
//                 (token, k) pair gets a row in expert-sorted order.
//   3. gate|up    h[row, I] = silu(x·w1ᵀ) ⊙ (x·w3ᵀ), bf16, x gathered by row.
//   4. down       yrows[row, D] = h · w2ᵀ, fp32.
//   5. combine    y[t] = Σ_k w_k · yrows[pair_row(t, k)], summed in k order (no
//                 float atomics, so results are reproducible bit for bit).
// Regimes:
//   decode (n·k ≤ 512 rows, or shapes the GEMM cannot take): grouped GEMV on
//     CUDA cores. Grid (expert slot, weight-row tile); a slot past the number
//     of active experts exits at once; every CTA streams its weight rows once
//     (16-byte no-L1-allocate loads, 4 per row in flight per lane) and
//     multiplies them with all of its expert's token rows (8 at a time). For
//     n ≤ 4 steps 4 and 5 are one kernel: a CTA owns kFusedRows features, each
//     warp takes (token, k) pairs, and the k-ordered sum happens in shared
//     memory. A single token with bf16 experts and CTA routing (a batch-1
//     decode step) skips the plan: pick j of the route kernel is slot j and
//     h row j (MoeParams::direct), so route → gate|up → down+combine.
//   prefill: grouped GEMM on tensor cores (mma.sync m16n8k16 bf16, fp32
//     accumulate; 64×128×32 CTA tiles, 4-stage cp.async pipeline, ldmatrix
//     from padded shared memory). The plan kernel writes a device-side tile
//     schedule (expert, first row); the grid is the fixed upper bound
//     ceil(n·k/64) + min(E, n·k) tiles and CTAs past the real count exit. The
//     gate|up CTA's 128 weight rows interleave 16 gate rows and the matching
//     16 up rows, so silu(g)·u is formed in registers.
//   prefill, bf16 experts, builds with CUTLASS: from moe.cutlass_min_rows
//     rows on (MoeGemmImpl), steps 3-4 are CUTLASS's Hopper ptr-array grouped
//     GEMM instead (moe_grouped_gemm_sm90.h: TMA + wgmma, x gathered into
//     expert-sorted rows first); route, plan and combine stay here.
//   batch-invariant (MoeArgs::batch_invariant): the mma.sync grouped GEMM for
//     every n when the shape and alignment allow it, else the grouped GEMV
//     for every n; routing always in its own kernel. See "Batch invariance".
// Kernels are chained with programmatic dependent launch (each waits on
// griddepcontrol.wait before touching its inputs), which hides most of the
// launch gap between the short decode kernels.
//
// Cost model at the production shape (E=256, k=8, D=2304, I=1024, bf16):
//   one expert = w13 2·1024·2304·2 B (9.44 MB) + w2 2304·1024·2 B (4.72 MB)
//              = 14.16 MB.
//   decode, batch 1: 8 experts = 113.2 MB → 26.5 µs at 4.27 TB/s (target
//     ≥ 70%: ≤ 37.9 µs). Each of the three kernels (route, gate|up,
//     down+combine) pays a ramp and a tail on top of its bytes, and the
//     latency-bound route has almost no bytes at all (the per-kernel split
//     of the captured step is in docs/dev/journal/performance.md). The down
//     rows of one SM (37.7 MB / 132 = 286 KB) exceed its register file
//     (256 KB), so a warp needs at least two dependent rounds of loads; with
//     8 warps per CTA it took four. Sixteen warps splitting each row's k
//     range (kSplit = 2) take two, which shortens the kernel at batch 1 and
//     more at batch 4.
//   decode, batch 8: E·(1-(1-k/E)^8) ≈ 57.4 distinct experts = 813 MB → 190 µs.
//   decode, batch 64: ≈ 222.5 experts = 3.15 GB → 738 µs.
//   prefill, n tokens: 2·n·k·3·I·D = n·113.2 MFLOP (n = 2000: 226 GFLOP →
//     330 µs at 686 TFLOP/s) but all 256 experts (3.62 GB → 849 µs) stream
//     once, so a layer stays bandwidth-bound until ≈ 161 rows per expert
//     (686/4.27 FLOP per byte), i.e. n ≳ 5100 tokens. Side traffic: h (bf16)
//     and yrows (fp32) written and read once, ≈ 9% at n = 2000. mma.sync
//     reaches ~50-60% of the wgmma peak in the compute-bound regime.
//
// Files: this one checks the arguments, lays out the workspace and picks the
// path; moe_route.cu routes and plans, moe_decode.cu holds the grouped GEMV
// and the combine, moe_prefill.cu the grouped GEMM, the FP8 dequantisation
// and the CUTLASS path's launch (moe_grouped_gemm_sm90.cu its kernels);
// moe_common.cuh what they share.
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backend/cuda/moe_common.cuh"

namespace strata::cuda {

using namespace moe_detail;  // NOLINT: the MoE files' shared internals

namespace {

// Whether MoeForward takes the planless one-token path (MoeParams::direct).
bool DirectPath(const MoeArgs& a) {
  const MoeShape& s = a.shape;
  const bool vec = IsAligned(a.x, 16) && IsAligned(a.w13, 16) && IsAligned(a.w2, 16) &&
                   s.hidden % 8 == 0 && s.inter % 8 == 0;
  return a.fp8.w13 == nullptr && !a.batch_invariant && UseCtaRoute(a.num_tokens, s) && vec &&
         !GemmShape(s, a.num_tokens * s.top_k) && DirectEnabled();
}

// moe.fold_shared=0 keeps the shared expert out of the one-token path.
bool FoldEnabled() { return tuning::Current().On(tuning::Key::kMoeFoldShared); }

// MoeFoldsSharedExpert for a call whose DirectPath is `direct`.
bool FoldsSharedExpert(const MoeArgs& a, bool direct) {
  const MoeShape& s = a.shape;
  // One group of loads per gate|up row (the kernels' kU > 0), the down
  // kernel's two halves (kSplit = 2), and kFusedRows + 1 rows of I in its
  // shared memory.
  return FoldEnabled() && a.shared_w13 != nullptr && a.shared_w2 != nullptr &&
         IsAligned(a.shared_w13, 16) && IsAligned(a.shared_w2, 16) && OneGroupRows(s.hidden) &&
         DownSplitEnabled() && s.inter <= kMaxFoldInter && !s.fp8_experts && direct;
}

}  // namespace

bool MoeFoldsSharedExpert(const MoeArgs& a) { return FoldsSharedExpert(a, DirectPath(a)); }

size_t MoeWorkspaceBytes(const MoeShape& shape, int64_t max_tokens, bool batch_invariant) {
  if (max_tokens <= 0 || shape.num_experts <= 0 || shape.top_k <= 0 || shape.hidden <= 0 ||
      shape.inter <= 0) {
    return 0;
  }
  return MakeLayout(shape, max_tokens, batch_invariant).total;
}

Status MoeRoute(const MoeShape& shape, const float* router_logits, const float* score_bias,
                int64_t num_tokens, int32_t* idx, float* weight, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(CheckShape(shape, "MoeRoute"));
  if (num_tokens < 0 || num_tokens > INT_MAX / kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoeRoute: num_tokens must be in [0, ", INT_MAX / kMaxTopK, "], got ",
                     num_tokens));
  }
  if (num_tokens == 0) return OkStatus();
  if (router_logits == nullptr) return absl::InvalidArgumentError("MoeRoute: router_logits is null");
  if (idx == nullptr) return absl::InvalidArgumentError("MoeRoute: idx is null");
  if (weight == nullptr) return absl::InvalidArgumentError("MoeRoute: weight is null");
  MoeParams p{};
  p.num_tokens = static_cast<int>(num_tokens);
  p.num_experts = static_cast<int>(shape.num_experts);
  p.top_k = static_cast<int>(shape.top_k);
  p.renormalize = shape.renormalize ? 1 : 0;
  p.routed_scaling = shape.routed_scaling;
  p.num_groups = static_cast<int>(shape.num_groups);
  p.topk_groups = static_cast<int>(shape.topk_groups);
  p.softmax = shape.softmax ? 1 : 0;
  p.cta_route = UseCtaRoute(num_tokens, shape) ? 1 : 0;
  p.logits = router_logits;
  p.bias = score_bias;
  p.idx = idx;
  p.wt = weight;
  return RouteOnly(p, stream);
}

Status MoeForward(const MoeArgs& args, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  const MoeShape& s = args.shape;
  STRATA_RETURN_IF_ERROR(CheckShape(s, "MoeForward"));
  STRATA_RETURN_IF_ERROR(CheckFfnShape(s, "MoeForward"));
  // Rows (n·k) are counted in int (row offsets times D or I are size_t).
  const int64_t max_tokens = INT_MAX / kMaxTopK;
  if (args.num_tokens < 0 || args.num_tokens > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("MoeForward: args.num_tokens must be in [0, ",
                                                   max_tokens, "], got ", args.num_tokens));
  }
  if (args.num_tokens == 0) return OkStatus();
  if (args.x == nullptr) return absl::InvalidArgumentError("MoeForward: args.x is null");
  if (args.router_logits == nullptr) {
    return absl::InvalidArgumentError("MoeForward: args.router_logits is null");
  }
  if (args.router_w != nullptr && args.blas == nullptr) {
    return absl::InvalidArgumentError("MoeForward: args.blas must be set with args.router_w");
  }
  const bool fp8 = args.fp8.w13 != nullptr;
  if (fp8 != s.fp8_experts) {
    return absl::InvalidArgumentError(
        "MoeForward: args.fp8.w13 must be set exactly when shape.fp8_experts is");
  }
  if (fp8) {
    const MoeFp8Experts& f = args.fp8;
    if (args.w13 != nullptr || args.w2 != nullptr) {
      return absl::InvalidArgumentError("MoeForward: args.w13 / args.w2 must be null with FP8 experts");
    }
    if (f.w2 == nullptr || f.w13_scale == nullptr || f.w2_scale == nullptr) {
      return absl::InvalidArgumentError(
          "MoeForward: args.fp8.w2, args.fp8.w13_scale and args.fp8.w2_scale must be set");
    }
    if (f.block_rows < 1 || f.block_cols < 1 || f.block_rows > INT_MAX ||
        f.block_cols > INT_MAX || s.inter % f.block_rows != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoeForward: args.fp8 blocks must be positive with shape.inter a multiple of "
          "block_rows, got ", f.block_rows, " x ", f.block_cols, " with inter ", s.inter));
    }
  } else {
    if (args.w13 == nullptr) return absl::InvalidArgumentError("MoeForward: args.w13 is null");
    if (args.w2 == nullptr) return absl::InvalidArgumentError("MoeForward: args.w2 is null");
  }
  if (args.y == nullptr) return absl::InvalidArgumentError("MoeForward: args.y is null");
  const Layout l = MakeLayout(s, args.num_tokens, args.batch_invariant);
  if (workspace == nullptr || workspace_bytes < l.total) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoeForward: workspace_bytes must be at least MoeWorkspaceBytes = ", l.total,
                     " for ", args.num_tokens, " tokens, got ", workspace_bytes,
                     workspace == nullptr ? " (workspace is null)" : ""));
  }
  if (!IsAligned(workspace, 256)) {
    return absl::InvalidArgumentError("MoeForward: workspace must be 256-byte aligned");
  }
  char* ws = static_cast<char*>(workspace);
  MoeParams p{};
  p.num_tokens = static_cast<int>(args.num_tokens);
  p.num_experts = static_cast<int>(s.num_experts);
  p.hidden = static_cast<int>(s.hidden);
  p.inter = static_cast<int>(s.inter);
  p.top_k = static_cast<int>(s.top_k);
  p.renormalize = s.renormalize ? 1 : 0;
  p.routed_scaling = s.routed_scaling;
  p.num_groups = static_cast<int>(s.num_groups);
  p.topk_groups = static_cast<int>(s.topk_groups);
  p.softmax = s.softmax ? 1 : 0;
  p.cta_route = UseCtaRoute(args.num_tokens, s) ? 1 : 0;
  p.x = args.x;
  p.logits = args.router_logits;
  p.bias = args.score_bias;
  p.w13 = args.w13;
  p.w2 = args.w2;
  p.expert_lo = 0;
  p.expert_hi = p.num_experts;
  if (fp8) {
    const MoeFp8Experts& f = args.fp8;
    p.w13_fp8 = f.w13;
    p.w13_scale = f.w13_scale;
    p.w2_fp8 = f.w2;
    p.w2_scale = f.w2_scale;
    p.fp8_br = static_cast<int>(f.block_rows);
    p.fp8_bc = static_cast<int>(f.block_cols);
    p.sr13 = static_cast<int>(2 * s.inter / f.block_rows);
    p.sc_d = static_cast<int>(CeilDiv(s.hidden, f.block_cols));
    p.sr2 = static_cast<int>(CeilDiv(s.hidden, f.block_rows));
    p.sc_i = static_cast<int>(CeilDiv(s.inter, f.block_cols));
    p.deq13 = reinterpret_cast<bf16*>(ws + l.deq);
    p.deq2 = p.deq13 + static_cast<size_t>(l.deq_experts) * 2 * s.inter * s.hidden;
  }
  p.y = args.y;
  p.accumulate = args.accumulate ? 1 : 0;
  p.idx = reinterpret_cast<int32_t*>(ws + l.idx);
  p.wt = reinterpret_cast<float*>(ws + l.wt);
  p.offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  p.meta = reinterpret_cast<int32_t*>(ws + l.meta);
  p.active = reinterpret_cast<int32_t*>(ws + l.active);
  p.tile_expert = reinterpret_cast<int32_t*>(ws + l.tile_expert);
  p.tile_m0 = reinterpret_cast<int32_t*>(ws + l.tile_m0);
  p.row_token = reinterpret_cast<int32_t*>(ws + l.row_token);
  p.pair_row = reinterpret_cast<int32_t*>(ws + l.pair_row);
  p.h = reinterpret_cast<bf16*>(ws + l.h);
  p.yrows = reinterpret_cast<float*>(ws + l.yrows);

  const int64_t rows = args.num_tokens * s.top_k;
  const bool invariant = args.batch_invariant;
  const bool vec4_y = s.hidden % 4 == 0 && IsAligned(args.y, 16);
  const bool aligned = IsAligned(args.x, 16) && IsAligned(args.w13, 16) && IsAligned(args.w2, 16);
  const bool vec = aligned && s.hidden % 8 == 0 && s.inter % 8 == 0;
  // One token on the bf16 GEMV path (a batch-1 decode step): the route
  // kernel's picks are the slots and h rows, so there is no plan kernel and
  // the GEMVs find their expert with one load.
  // (cta_route holds for one token only.)
  const bool fold = args.shared_w13 != nullptr || args.shared_w2 != nullptr;
  const bool direct = DirectPath(args);
  if (fold && !FoldsSharedExpert(args, direct)) {
    return absl::InvalidArgumentError(
        "MoeForward: args.shared_w13 / args.shared_w2 set for a call that cannot fold the "
        "shared expert (see MoeFoldsSharedExpert)");
  }
  bool routed = false;  // idx / wt written with the logits (GemvRoute)
  if (args.router_w != nullptr) {
    GemmArgs g;
    g.m = args.num_tokens;
    g.n = s.num_experts;
    g.k = s.hidden;
    g.x = args.x;
    g.x_type = ActType::kBf16;
    g.w = args.router_w;
    g.y = args.router_logits;
    g.y_type = ActType::kF32;
    if (direct && p.cta_route && IsAligned(args.router_w, 16) &&
        GemvRouteFuses(*args.blas, s.num_experts, s.hidden)) {
      GemvRouting r;
      r.bias = args.score_bias;
      r.top_k = s.top_k;
      r.renormalize = s.renormalize;
      r.routed_scaling = s.routed_scaling;
      r.idx = p.idx;
      r.weight = p.wt;
      STRATA_RETURN_IF_ERROR(GemvRoute(*args.blas, g, r, stream));
      routed = true;
    } else {
      STRATA_RETURN_IF_ERROR(Gemm(*args.blas, g, stream));
    }
  }
  if (direct) {
    p.direct = 1;
    p.down_preload = DownPreloadEnabled() ? 1 : 0;
    p.shared = fold ? 1 : 0;
    p.sw13 = args.shared_w13;
    p.sw2 = args.shared_w2;
    if (!routed) STRATA_RETURN_IF_ERROR(RouteOnly(p, stream));
    return LaunchGemvPath<8, bf16>(p, vec4_y, stream);
  }
  // Batch-invariant calls route in the route kernel for every n (the plan
  // kernel's copy of RouteToken is the same explicitly rounded arithmetic,
  // but one code path for all n leaves nothing to argue about).
  STRATA_RETURN_IF_ERROR(
      RouteAndPlan(p, !invariant && args.num_tokens <= kFusedRouteMaxTokens, stream));

  if (fp8) {
    // The codes take 8-byte loads; the scratch the GEMM reads is aligned.
    const bool vec8 = IsAligned(args.x, 16) && IsAligned(args.fp8.w13, 8) &&
                      IsAligned(args.fp8.w2, 8) && s.hidden % 8 == 0 && s.inter % 8 == 0 &&
                      args.fp8.block_cols % 8 == 0;
    if (vec8 && (invariant ? GemmTileShape(s) : GemmShape(s, rows))) {
      return LaunchGemmPath(p, vec4_y, static_cast<int>(l.deq_experts), stream);
    }
    if (vec8) return LaunchGemvPath<8, uint8_t>(p, vec4_y, stream);
    return LaunchGemvPath<1, uint8_t>(p, vec4_y, stream);
  }
  if (aligned && (invariant ? GemmTileShape(s) : GemmShape(s, rows))) {
    if (!invariant && l.sm90_bytes > 0 && UseSm90(args.gemm_impl, rows)) {
      return LaunchSm90Path(p, ws, l, vec4_y, stream);
    }
    return LaunchGemmPath(p, vec4_y, 0, stream);
  }
  if (vec) return LaunchGemvPath<8, bf16>(p, vec4_y, stream);
  return LaunchGemvPath<1, bf16>(p, vec4_y, stream);
}

}  // namespace strata::cuda
