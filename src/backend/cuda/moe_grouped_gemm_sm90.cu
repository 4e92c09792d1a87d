// MoE prefill expert GEMMs on CUTLASS's Hopper ptr-array grouped GEMM (see
// the header). Sequence on the stream, all sized from device data:
//   1. prepare   one kernel: block 0 writes, per expert e, both GEMMs'
//                problem shapes (m_e = offsets[e+1] − offsets[e], N, K),
//                A/B/D pointers and strides; every block gathers x rows into
//                xs in expert order (TMA cannot gather, so A must be dense).
//                Experts with m_e = 0 are groups of zero tiles: the
//                persistent scheduler walks past them.
//   2. gate|up   h13[rows, 2I] = xs · w13[e]ᵀ  (bf16 out)
//   3. SwiGLU    h[rows, I] = silu(h13[:, :I]) ⊙ h13[:, I:]   (SiluMul)
//   4. down      yrows[rows, D] = h · w2[e]ᵀ   (fp32 out, for moe_decode.cu's combine)
// Both GEMMs: A row-major (K contiguous), B = the weight matrix as stored
// ([N, K], K contiguous: CUTLASS's column-major B), D row-major; cooperative
// kernel (two consumer warpgroups on a 128×256 tile, one TMA producer),
// 64-deep K blocks, stages filling the shared memory. gate|up runs 1×2
// clusters (the x tile multicast to both N halves; 2I/256 is even for the
// production shape); down keeps 1×1 (D/256 = 9 is odd and the scheduler would
// pad to whole clusters).
//
// Cost at the production shape (E=256, k=8, D=2304, I=1024), n = 8192 tokens
// (65536 rows, ≈256 per expert): gate|up 618 GFLOP, down 309 GFLOP; with
// 128-row tiles the last tile of each expert is on average half empty (≈25%
// padding at 256 rows/expert, ≈6% at 1024), so ≈1.16 PFLOP of wgmma work →
// ≈2.4 ms at 480 TFLOP/s (70% of the measured 686 peak). Side traffic
// ≈0.3 ms: the gather (0.3 GB each way), h13 (0.27 GB written and read), h,
// yrows (0.6 GB).
#include "backend/cuda/moe_grouped_gemm_sm90.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/vec.cuh"

#if defined(STRATA_HAVE_CUTLASS)
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#endif

namespace strata::cuda {

#if defined(STRATA_HAVE_CUTLASS)
namespace {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using GroupShape = ProblemShape::UnderlyingProblemShape;

template <typename ElementD, typename TileShape, typename ClusterShape>
struct GroupedGemm {
  using ElementAB = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD*, kAlignD,  // no source operand (beta = 0)
      ElementD, LayoutD*, kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA*, kAlignAB,
      ElementAB, LayoutB*, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-group arrays the kernel reads (device, in the workspace).
  struct Arrays {
    GroupShape* shapes;
    const ElementAB** a;
    const ElementAB** b;
    ElementD** d;
    StrideA* sa;
    StrideB* sb;
    StrideD* sd;
  };

  static typename Gemm::Arguments MakeArguments(const Arrays& arr, int groups, int sm_count) {
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {groups, arr.shapes, nullptr};  // shapes on the device only
    args.mainloop = {arr.a, arr.sa, arr.b, arr.sb};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.f;
    fusion.beta = 0.f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = nullptr;
    args.epilogue.ptr_D = arr.d;
    args.epilogue.dD = arr.sd;
    args.hw_info.device_id = 0;
    args.hw_info.sm_count = sm_count;
    return args;
  }
};

using GateUpGemm =
    GroupedGemm<cutlass::bfloat16_t, cute::Shape<cute::_128, cute::_256, cute::_64>,
                cute::Shape<cute::_1, cute::_2, cute::_1>>;
using DownGemm = GroupedGemm<float, cute::Shape<cute::_128, cute::_256, cute::_64>,
                             cute::Shape<cute::_1, cute::_1, cute::_1>>;

// Byte offsets of everything in the workspace for E groups.
struct WsLayout {
  size_t up_shapes, up_a, up_b, up_d, up_sa, up_sb, up_sd;
  size_t dn_shapes, dn_a, dn_b, dn_d, dn_sa, dn_sb, dn_sd;
  size_t up_cutlass, dn_cutlass;
  size_t up_cutlass_bytes, dn_cutlass_bytes;
  size_t total;
};

int SmCount() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return count;
}

template <typename G>
typename G::Arrays ArraysAt(char* ws, const WsLayout& l, bool up) {
  typename G::Arrays a;
  a.shapes = reinterpret_cast<GroupShape*>(ws + (up ? l.up_shapes : l.dn_shapes));
  a.a = reinterpret_cast<const typename G::ElementAB**>(ws + (up ? l.up_a : l.dn_a));
  a.b = reinterpret_cast<const typename G::ElementAB**>(ws + (up ? l.up_b : l.dn_b));
  a.d = reinterpret_cast<decltype(a.d)>(ws + (up ? l.up_d : l.dn_d));
  a.sa = reinterpret_cast<typename G::StrideA*>(ws + (up ? l.up_sa : l.dn_sa));
  a.sb = reinterpret_cast<typename G::StrideB*>(ws + (up ? l.up_sb : l.dn_sb));
  a.sd = reinterpret_cast<typename G::StrideD*>(ws + (up ? l.up_sd : l.dn_sd));
  return a;
}

WsLayout MakeWsLayout(int64_t num_experts, int sm_count) {
  const size_t e = static_cast<size_t>(num_experts);
  WsLayout l{};
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += AlignUp(bytes);
    return at;
  };
  l.up_shapes = take(sizeof(GroupShape) * e);
  l.up_a = take(sizeof(void*) * e);
  l.up_b = take(sizeof(void*) * e);
  l.up_d = take(sizeof(void*) * e);
  l.up_sa = take(sizeof(GateUpGemm::StrideA) * e);
  l.up_sb = take(sizeof(GateUpGemm::StrideB) * e);
  l.up_sd = take(sizeof(GateUpGemm::StrideD) * e);
  l.dn_shapes = take(sizeof(GroupShape) * e);
  l.dn_a = take(sizeof(void*) * e);
  l.dn_b = take(sizeof(void*) * e);
  l.dn_d = take(sizeof(void*) * e);
  l.dn_sa = take(sizeof(DownGemm::StrideA) * e);
  l.dn_sb = take(sizeof(DownGemm::StrideB) * e);
  l.dn_sd = take(sizeof(DownGemm::StrideD) * e);
  // CUTLASS's workspace depends on the group count and the SM count only
  // (problem shapes are device-side); the arrays above are passed as dummies.
  char* const null_ws = nullptr;
  l.up_cutlass_bytes = GateUpGemm::Gemm::get_workspace_size(GateUpGemm::MakeArguments(
      ArraysAt<GateUpGemm>(null_ws, l, true), static_cast<int>(num_experts), sm_count));
  l.dn_cutlass_bytes = DownGemm::Gemm::get_workspace_size(DownGemm::MakeArguments(
      ArraysAt<DownGemm>(null_ws, l, false), static_cast<int>(num_experts), sm_count));
  l.up_cutlass = take(l.up_cutlass_bytes);
  l.dn_cutlass = take(l.dn_cutlass_bytes);
  l.total = off;
  return l;
}

template <typename S>
__device__ __forceinline__ S LeadingStride(int64_t ld) {
  S s{};
  cute::get<0>(s) = ld;
  return s;
}

struct PrepareParams {
  int num_experts, hidden, inter, rows;
  const int32_t* offsets;
  const int32_t* row_token;
  const bf16* x;
  const bf16* w13;
  const bf16* w2;
  bf16* xs;
  bf16* h13;
  const bf16* h;
  float* yrows;
  GateUpGemm::Arrays up;
  DownGemm::Arrays dn;
};

constexpr int kPrepareThreads = 256;
constexpr int kPrepareRowsPerBlock = kPrepareThreads / 32;  // one warp per row

// Grid ceil(rows / 8): warp w of block b copies row 8b + w (D/8 16-byte
// chunks, D % 8 == 0); block 0 also writes the group arrays.
__global__ void __launch_bounds__(kPrepareThreads) MoeSm90PrepareKernel(PrepareParams p) {
  const size_t D = static_cast<size_t>(p.hidden);
  const size_t I = static_cast<size_t>(p.inter);
  if (blockIdx.x == 0) {
    for (int e = threadIdx.x; e < p.num_experts; e += blockDim.x) {
      const int first = p.offsets[e];
      const int m = p.offsets[e + 1] - first;
      const size_t row0 = static_cast<size_t>(first);
      p.up.shapes[e] = cute::make_shape(m, static_cast<int>(2 * I), static_cast<int>(D));
      p.up.a[e] = reinterpret_cast<const cutlass::bfloat16_t*>(p.xs + row0 * D);
      p.up.b[e] = reinterpret_cast<const cutlass::bfloat16_t*>(p.w13 + e * 2 * I * D);
      p.up.d[e] = reinterpret_cast<cutlass::bfloat16_t*>(p.h13 + row0 * 2 * I);
      p.up.sa[e] = LeadingStride<GateUpGemm::StrideA>(static_cast<int64_t>(D));
      p.up.sb[e] = LeadingStride<GateUpGemm::StrideB>(static_cast<int64_t>(D));
      p.up.sd[e] = LeadingStride<GateUpGemm::StrideD>(static_cast<int64_t>(2 * I));
      p.dn.shapes[e] = cute::make_shape(m, static_cast<int>(D), static_cast<int>(I));
      p.dn.a[e] = reinterpret_cast<const cutlass::bfloat16_t*>(p.h + row0 * I);
      p.dn.b[e] = reinterpret_cast<const cutlass::bfloat16_t*>(p.w2 + e * D * I);
      p.dn.d[e] = p.yrows + row0 * D;
      p.dn.sa[e] = LeadingStride<DownGemm::StrideA>(static_cast<int64_t>(I));
      p.dn.sb[e] = LeadingStride<DownGemm::StrideB>(static_cast<int64_t>(I));
      p.dn.sd[e] = LeadingStride<DownGemm::StrideD>(static_cast<int64_t>(D));
    }
  }
  const int row = blockIdx.x * kPrepareRowsPerBlock + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int lane = threadIdx.x & 31;
  const uint4* src = reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(p.row_token[row]) * D);
  uint4* dst = reinterpret_cast<uint4*>(p.xs + static_cast<size_t>(row) * D);
  for (size_t c = lane; c < D / 8; c += 32) dst[c] = __ldg(src + c);
}

template <typename G>
Status RunGemm(const typename G::Arrays& arr, int groups, int sm_count, void* cutlass_ws,
               const char* what, cudaStream_t stream) {
  const typename G::Gemm::Arguments args = G::MakeArguments(arr, groups, sm_count);
  typename G::Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat(what, ": CUTLASS can_implement: ",
                                            cutlass::cutlassGetStatusString(st)));
  }
  st = gemm.initialize(args, cutlass_ws, stream);
  if (st != cutlass::Status::kSuccess) {
    return absl::InternalError(
        absl::StrCat(what, ": CUTLASS initialize: ", cutlass::cutlassGetStatusString(st)));
  }
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) {
    const cudaError_t err = cudaGetLastError();
    return absl::InternalError(absl::StrCat(what, ": CUTLASS run: ",
                                            cutlass::cutlassGetStatusString(st), " (",
                                            cudaGetErrorString(err), ")"));
  }
  return OkStatus();
}

// Cached: the SM count of the device the first call ran on (one process,
// one device in practice; a different device with more SMs would need a
// bigger CUTLASS workspace, which MoeSm90GroupedGemms checks).
int CachedSmCount() {
  static const int count = SmCount();
  return count;
}

}  // namespace

bool MoeSm90GemmAvailable() { return true; }

size_t MoeSm90WorkspaceBytes(int64_t num_experts) {
  const int sm_count = CachedSmCount();
  if (num_experts <= 0 || sm_count <= 0) return 0;  // 0: the path is off
  return MakeWsLayout(num_experts, sm_count).total;
}

Status MoeSm90GroupedGemms(const MoeSm90Args& a, cudaStream_t stream) {
  if (a.rows <= 0) return OkStatus();
  const int sm_count = CachedSmCount();
  if (sm_count <= 0) return absl::InternalError("MoeSm90GroupedGemms: no SM count for the device");
  const WsLayout l = MakeWsLayout(a.num_experts, sm_count);
  if (a.workspace == nullptr || a.workspace_bytes < l.total || a.act == nullptr ||
      !MoeSm90GemmShapeOk(a.hidden, a.inter)) {
    return absl::InternalError(absl::StrCat("MoeSm90GroupedGemms: workspace ", a.workspace_bytes,
                                            " bytes, needs ", l.total, " (or bad shape)"));
  }
  char* ws = static_cast<char*>(a.workspace);
  PrepareParams p{};
  p.num_experts = a.num_experts;
  p.hidden = a.hidden;
  p.inter = a.inter;
  p.rows = a.rows;
  p.offsets = a.offsets;
  p.row_token = a.row_token;
  p.x = a.x;
  p.w13 = a.w13;
  p.w2 = a.w2;
  p.xs = static_cast<bf16*>(a.act);
  p.h13 = p.xs + AlignUp(sizeof(bf16) * static_cast<size_t>(a.rows) * a.hidden) / sizeof(bf16);
  p.h = a.h;
  p.yrows = a.yrows;
  p.up = ArraysAt<GateUpGemm>(ws, l, true);
  p.dn = ArraysAt<DownGemm>(ws, l, false);
  const unsigned blocks = static_cast<unsigned>(CeilDiv(a.rows, kPrepareRowsPerBlock));
  MoeSm90PrepareKernel<<<blocks, kPrepareThreads, 0, stream>>>(p);
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  STRATA_RETURN_IF_ERROR(RunGemm<GateUpGemm>(p.up, a.num_experts, sm_count, ws + l.up_cutlass,
                                             "MoeSm90 gate|up", stream));
  STRATA_RETURN_IF_ERROR(SiluMul(p.h13, ActType::kBf16, a.rows, a.inter, a.h, stream));
  return RunGemm<DownGemm>(p.dn, a.num_experts, sm_count, ws + l.dn_cutlass, "MoeSm90 down",
                           stream);
}

#else  // !STRATA_HAVE_CUTLASS

bool MoeSm90GemmAvailable() { return false; }
size_t MoeSm90WorkspaceBytes(int64_t) { return 0; }
Status MoeSm90GroupedGemms(const MoeSm90Args&, cudaStream_t) {
  return absl::UnimplementedError("MoeSm90GroupedGemms: built without CUTLASS");
}

#endif  // STRATA_HAVE_CUTLASS

bool MoeSm90GemmShapeOk(int64_t hidden, int64_t inter) {
  return hidden > 0 && inter > 0 && hidden % 8 == 0 && inter % 8 == 0;
}

size_t MoeSm90ActivationBytes(int64_t rows, int64_t hidden, int64_t inter) {
  const size_t r = static_cast<size_t>(std::max<int64_t>(rows, 0));
  return AlignUp(sizeof(bf16) * r * static_cast<size_t>(hidden)) +
         AlignUp(sizeof(bf16) * r * 2 * static_cast<size_t>(inter));
}

}  // namespace strata::cuda
