// Google Benchmark of the DeepSeek-V3.2 sparse-attention (DSA) and Qwen3-Next
// gated-DeltaNet CUDA kernels, one layer each, dummy data of the published
// shapes, each against its physical limit on the H200:
//   * BM_CudaGdnPrefill (T tokens): Qwen3-Next-80B's linear attention, 16 q/k
//     heads, 32 value heads, dk = dv = 128, chunked: TFLOP/s vs 686 TFLOP/s
//     and the I/O-only bandwidth bound (q, k, v, gates in, out out).
//   * BM_CudaGdnDecode (B sequences): fp32 state read + written per step,
//     GB/s vs 4270 GB/s.
//   * BM_CudaDsaDecode (B × context): indexer (64 heads, d = 128) + fused
//     top-2048 + sparse absorbed MLA (128 heads, r = 512, dr = 64) over the
//     selected rows; counters split the time between the indexer and the
//     attention (CUDA events around each stage).
//   * BM_CudaDsaDenseMlaDecode: the dense absorbed MLA decode on the same
//     cache (what DSA replaces), GB/s of the latent cache read.
//   * BM_CudaDsaPrefillChunk: a 2048-token chunk at the end of a context:
//     indexer prefill + sparse MLA prefill, with the same split.
// The indexer key cache and the MLA latent cache share one block table (the
// same paging). Small working sets rotate through copies larger than the
// 50 MB L2 so each iteration streams from HBM. Built only with CUDA.
#if defined(STRATA_HAVE_CUDA)

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/mla.h"

namespace strata::cuda {
namespace {

constexpr double kHbmBytesPerSecond = 4270e9;  // H200 measured copy bandwidth
constexpr double kBf16Flops = 686e12;          // H200 measured bf16 matmul
constexpr size_t kRotateBytes = size_t{256} << 20;  // > L2 (50 MB)

// Qwen3-Next-80B-A3B linear attention.
constexpr int64_t kGdnHk = 16, kGdnHv = 32, kGdnD = 128;
constexpr int64_t kGdnQkW = kGdnHk * kGdnD, kGdnVW = kGdnHv * kGdnD;
constexpr int64_t kGdnConvW = 2 * kGdnQkW + kGdnVW;  // conv output row: q | k | v
// DeepSeek-V3.2.
constexpr int64_t kIdxH = 64, kIdxD = 128, kIdxTopK = 2048;
constexpr int64_t kMlaH = 128, kR = 512, kDr = 64, kDn = 128, kDv = 128;

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

bool Check(benchmark::State& state, const Status& s) {
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  return s.ok();
}
bool Check(benchmark::State& state, cudaError_t e) {
  if (e != cudaSuccess) state.SkipWithError(cudaGetErrorString(e));
  return e == cudaSuccess;
}

template <typename Run>
void TimeLoop(benchmark::State& state, cudaStream_t stream, Run run) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int64_t it = 0;
  if (!Check(state, run(it++))) return;
  cudaStreamSynchronize(stream);
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    if (!Check(state, run(it++))) break;
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void ReportBandwidth(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes"] = bytes_per_iter;
  state.counters["pct_of_4270GBs"] = benchmark::Counter(
      100.0 * bytes_per_iter / kHbmBytesPerSecond, benchmark::Counter::kIsIterationInvariantRate);
}

void ReportFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops_per_iter / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_of_686TFs"] = benchmark::Counter(100.0 * flops_per_iter / kBf16Flops,
                                                       benchmark::Counter::kIsIterationInvariantRate);
}

KdaShape GdnShape() {
  KdaShape s;
  s.num_heads = kGdnHv;
  s.num_qk_heads = kGdnHk;
  s.key_dim = kGdnD;
  s.value_dim = kGdnD;
  return s;
}

// Per-head gates from a [rows, 2·Hv] buffer: b at +0, a at +Hv (bf16, as the
// in_proj_ba GEMM writes them after de-grouping).
KdaGates GdnGates(const bf16* ba, const float* nea, const float* dtb) {
  KdaGates g;
  g.per_head = true;
  g.g_raw = ba + kGdnHv;
  g.g_type = ActType::kBf16;
  g.ld_g = 2 * kGdnHv;
  g.beta_raw = ba;
  g.beta_type = ActType::kBf16;
  g.ld_beta = 2 * kGdnHv;
  g.neg_exp_a = nea;
  g.dt_bias = dtb;
  return g;
}

// --- GDN prefill: one layer, T tokens, from a zero state ----------------------
void BM_CudaGdnPrefill(benchmark::State& state) {
  const int64_t T = state.range(0);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  const KdaShape shape = GdnShape();
  const int64_t state_elems = kGdnHv * kGdnD * kGdnD;
  DeviceBuffer qkv(sizeof(bf16) * T * kGdnConvW), ba(sizeof(bf16) * T * 2 * kGdnHv),
      nea(sizeof(float) * kGdnHv), dtb(sizeof(float) * kGdnHv), st(sizeof(float) * state_elems),
      out(sizeof(bf16) * T * kGdnVW);
  const size_t ws_bytes = KdaPrefillWorkspaceBytes(shape, T);
  DeviceBuffer ws(ws_bytes);
  if (!qkv.p || !ba.p || !out.p || !ws.p || !st.p) return state.SkipWithError("cudaMalloc failed");
  if (!Check(state, FillRandomBf16(qkv.as<bf16>(), T * kGdnConvW, 1, 1.f, s)) ||
      !Check(state, FillRandomBf16(ba.as<bf16>(), T * 2 * kGdnHv, 2, 2.f, s)) ||
      !Check(state, FillRandomF32(nea.as<float>(), kGdnHv, 4, -16.f, -1.f, s)) ||
      !Check(state, FillRandomF32(dtb.as<float>(), kGdnHv, 5, -6.9f, -2.3f, s))) {
    return;
  }
  KdaPrefillArgs a;
  a.shape = shape;
  a.num_tokens = T;
  a.q = qkv.as<bf16>();
  a.k = qkv.as<bf16>() + kGdnQkW;
  a.v = qkv.as<bf16>() + 2 * kGdnQkW;
  a.ld_qkv = kGdnConvW;
  a.gates = GdnGates(ba.as<bf16>(), nea.as<float>(), dtb.as<float>());
  a.state = st.as<float>();
  a.out = out.p;
  TimeLoop(state, s, [&](int64_t) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(st.p, 0, sizeof(float) * state_elems, s));
    return KdaPrefill(a, ws.p, ws_bytes, s);
  });
  // The KDA count per 64-token chunk and value head (the per-head decay
  // changes no product).
  const double c = 64, dk = kGdnD;
  const double macs = c * c * 5 * dk + c * c * c / 3 + 3 * c * dk * dk;
  ReportFlops(state, 2 * macs * std::ceil(static_cast<double>(T) / c) * kGdnHv);
  // I/O bound: the conv row and gates in, the output out (bf16).
  const double io = static_cast<double>(T) * (2.0 * kGdnConvW + 2.0 * 2 * kGdnHv + 2.0 * kGdnVW);
  state.counters["io_GB/s"] = benchmark::Counter(io, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["io_pct_of_4270GBs"] = benchmark::Counter(
      100.0 * io / kHbmBytesPerSecond, benchmark::Counter::kIsIterationInvariantRate);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaGdnPrefill)->Arg(4096)->Arg(32768)->UseManualTime()->Unit(benchmark::kMillisecond);

// --- GDN decode: one layer, B sequences, one token each -----------------------
void BM_CudaGdnDecode(benchmark::State& state) {
  const int64_t B = state.range(0);
  const int64_t state_elems = kGdnHv * kGdnD * kGdnD;
  const size_t per_batch = sizeof(float) * static_cast<size_t>(B * state_elems);
  const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kRotateBytes / per_batch));
  const int64_t slots = B * copies;
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DeviceBuffer pool(sizeof(float) * slots * state_elems), qkv(sizeof(bf16) * B * kGdnConvW),
      ba(sizeof(bf16) * B * 2 * kGdnHv), nea(sizeof(float) * kGdnHv), dtb(sizeof(float) * kGdnHv),
      out(sizeof(bf16) * B * kGdnVW), slot_ids(sizeof(int32_t) * slots);
  if (!pool.p || !slot_ids.p) return state.SkipWithError("cudaMalloc failed");
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  if (!Check(state, cudaMemcpy(slot_ids.p, ids.data(), sizeof(int32_t) * ids.size(),
                               cudaMemcpyHostToDevice)) ||
      !Check(state, FillRandomF32(pool.as<float>(), slots * state_elems, 9, -0.1f, 0.1f, s)) ||
      !Check(state, FillRandomBf16(qkv.as<bf16>(), B * kGdnConvW, 1, 1.f, s)) ||
      !Check(state, FillRandomBf16(ba.as<bf16>(), B * 2 * kGdnHv, 2, 2.f, s)) ||
      !Check(state, FillRandomF32(nea.as<float>(), kGdnHv, 4, -16.f, -1.f, s)) ||
      !Check(state, FillRandomF32(dtb.as<float>(), kGdnHv, 5, -6.9f, -2.3f, s))) {
    return;
  }
  KdaDecodeArgs a;
  a.shape = GdnShape();
  a.batch = B;
  a.q = qkv.as<bf16>();
  a.k = qkv.as<bf16>() + kGdnQkW;
  a.v = qkv.as<bf16>() + 2 * kGdnQkW;
  a.ld_qkv = kGdnConvW;
  a.gates = GdnGates(ba.as<bf16>(), nea.as<float>(), dtb.as<float>());
  a.state_pool = pool.as<float>();
  a.out = out.p;
  TimeLoop(state, s, [&](int64_t it) {
    a.slots = slot_ids.as<int32_t>() + (it % copies) * B;  // a cold set of states each time
    return KdaDecode(a, s);
  });
  const double bytes =
      static_cast<double>(B) * (2.0 * 4 * state_elems + 2.0 * kGdnConvW + 2.0 * 2 * kGdnHv +
                                2.0 * kGdnVW);
  ReportBandwidth(state, bytes);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaGdnDecode)->Arg(1)->Arg(8)->Arg(32)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- DSA: shared set-up of both caches ----------------------------------------

MlaShape DsaMlaShape() {
  MlaShape s;
  s.num_heads = kMlaH;
  s.nope_dim = kDn;
  s.rope_dim = kDr;
  s.v_dim = kDv;
  s.kv_rank = kR;
  return s;
}

IndexerShape DsaIndexerShape() {
  IndexerShape s;
  s.num_heads = kIdxH;
  s.head_dim = kIdxD;
  s.top_k = kIdxTopK;
  return s;
}

// B sequences of ctx tokens in both caches, `copies` disjoint sets of blocks
// (one block table per set, shared by the two caches).
struct DsaCaches {
  DsaCaches(int64_t B, int64_t ctx, cudaStream_t s)
      : blocks_per_seq((ctx + kKvBlockTokens - 1) / kKvBlockTokens),
        copies(std::max<int64_t>(
            1, static_cast<int64_t>(kRotateBytes /
                                    (static_cast<size_t>(B * blocks_per_seq * kKvBlockTokens) *
                                     (sizeof(bf16) * (kR + kDr + kIdxD)))))),
        blocks(copies * B * blocks_per_seq),
        mla_pool(sizeof(bf16) * blocks * kKvBlockTokens * (kR + kDr)),
        idx_pool(sizeof(bf16) * blocks * kKvBlockTokens * kIdxD),
        table(sizeof(int32_t) * blocks) {
    if (!mla_pool.p || !idx_pool.p || !table.p) return;
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    for (int64_t i = 0; i < blocks; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    ok = cudaMemcpy(table.p, ids.data(), sizeof(int32_t) * ids.size(), cudaMemcpyHostToDevice) ==
             cudaSuccess &&
         FillRandomBf16(mla_pool.as<bf16>(), blocks * kKvBlockTokens * (kR + kDr), 11, 1.f, s)
             .ok() &&
         FillRandomBf16(idx_pool.as<bf16>(), blocks * kKvBlockTokens * kIdxD, 12, 1.f, s).ok();
  }
  const int32_t* Table(int64_t it, int64_t B) const {
    return table.as<int32_t>() + (it % copies) * B * blocks_per_seq;
  }
  int64_t blocks_per_seq, copies, blocks;
  DeviceBuffer mla_pool, idx_pool, table;
  bool ok = false;
};

// --- DSA decode: indexer + top-k + sparse MLA, one layer ------------------------
void BM_CudaDsaDecode(benchmark::State& state) {
  const int64_t B = state.range(0), ctx = state.range(1);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DsaCaches caches(B, ctx, s);
  const MlaShape mla = DsaMlaShape();
  const IndexerShape idx = DsaIndexerShape();
  DeviceBuffer iq(sizeof(bf16) * B * kIdxH * kIdxD), iw(sizeof(float) * B * kIdxH),
      lens(sizeof(int32_t) * B), rows(sizeof(int32_t) * B * kIdxTopK), counts(sizeof(int32_t) * B),
      q(sizeof(bf16) * B * kMlaH * mla.cache_dim()), out(sizeof(bf16) * B * kMlaH * kR);
  const size_t idx_ws_bytes = IndexerDecodeWorkspaceBytes(idx, B, ctx);
  const size_t mla_ws_bytes = MlaDecodeWorkspaceBytes(mla, B, kIdxTopK);
  DeviceBuffer idx_ws(idx_ws_bytes), mla_ws(mla_ws_bytes);
  if (!caches.ok || !idx_ws.p || !mla_ws.p) return state.SkipWithError("set-up failed");
  std::vector<int32_t> seq_lens(static_cast<size_t>(B), static_cast<int32_t>(ctx));
  if (!Check(state, cudaMemcpy(lens.p, seq_lens.data(), sizeof(int32_t) * B,
                               cudaMemcpyHostToDevice)) ||
      !Check(state, FillRandomBf16(iq.as<bf16>(), B * kIdxH * kIdxD, 1, 1.f, s)) ||
      !Check(state, FillRandomF32(iw.as<float>(), B * kIdxH, 2, -0.125f, 0.125f, s)) ||
      !Check(state, FillRandomBf16(q.as<bf16>(), B * kMlaH * mla.cache_dim(), 3, 1.f, s))) {
    return;
  }
  IndexerDecodeArgs ia;
  ia.shape = idx;
  ia.batch = B;
  ia.q = iq.as<bf16>();
  ia.weights = iw.as<float>();
  ia.cache.pool = caches.idx_pool.as<bf16>();
  ia.cache.max_blocks = caches.blocks_per_seq;
  ia.seq_lens = lens.as<int32_t>();
  ia.max_seq_len = ctx;
  ia.rows = rows.as<int32_t>();
  ia.counts = counts.as<int32_t>();
  MlaDecodeArgs ma;
  ma.shape = mla;
  ma.batch = B;
  ma.q_abs = q.as<bf16>();
  ma.cache.pool = caches.mla_pool.as<bf16>();
  ma.cache.max_blocks = caches.blocks_per_seq;
  ma.max_seq_len = kIdxTopK;
  ma.out_latent = out.p;
  ma.sparse.rows = rows.as<int32_t>();
  ma.sparse.counts = counts.as<int32_t>();
  ma.sparse.stride = kIdxTopK;

  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  auto run = [&](int64_t it) -> Status {
    ia.cache.block_table = caches.Table(it, B);
    ma.cache.block_table = ia.cache.block_table;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, s));
    STRATA_RETURN_IF_ERROR(IndexerDecode(ia, idx_ws.p, idx_ws_bytes, s));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, s));
    STRATA_RETURN_IF_ERROR(MlaDecode(ma, mla_ws.p, mla_ws_bytes, s));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e2, s));
    return OkStatus();
  };
  int64_t it = 0;
  double idx_ms = 0, mla_ms = 0;
  int64_t n = 0;
  if (Check(state, run(it++)) && Check(state, cudaStreamSynchronize(s))) {
    for (auto _ : state) {
      if (!Check(state, run(it++)) || !Check(state, cudaEventSynchronize(e2))) break;
      float a = 0, b = 0;
      cudaEventElapsedTime(&a, e0, e1);
      cudaEventElapsedTime(&b, e1, e2);
      idx_ms += a;
      mla_ms += b;
      ++n;
      state.SetIterationTime((a + b) / 1e3);
    }
  }
  if (n > 0) {
    state.counters["indexer_us"] = 1e3 * idx_ms / n;
    state.counters["sparse_mla_us"] = 1e3 * mla_ms / n;
    state.counters["indexer_share_pct"] = 100.0 * idx_ms / (idx_ms + mla_ms);
  }
  // Bytes that must move: every index key once, the selected latent rows once.
  const double sel = static_cast<double>(std::min<int64_t>(ctx, kIdxTopK));
  ReportBandwidth(state, static_cast<double>(B) * (ctx * kIdxD * 2.0 + sel * (kR + kDr) * 2.0 +
                                                   kMlaH * (kR + kDr + kR) * 2.0));
  // Indexer scoring FLOPs (the compute side of the indexer).
  state.counters["indexer_TFLOP/s_of_stage"] =
      n > 0 ? 2.0 * B * ctx * kIdxH * kIdxD / (1e-3 * idx_ms / n) / 1e12 : 0.0;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaDsaDecode)
    ->ArgsProduct({{1, 32}, {8192, 16384, 32768, 65536, 131072}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- Dense absorbed MLA decode on the same shapes (what DSA replaces) -----------
void BM_CudaDsaDenseMlaDecode(benchmark::State& state) {
  const int64_t B = state.range(0), ctx = state.range(1);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DsaCaches caches(B, ctx, s);
  const MlaShape mla = DsaMlaShape();
  DeviceBuffer lens(sizeof(int32_t) * B), q(sizeof(bf16) * B * kMlaH * mla.cache_dim()),
      out(sizeof(bf16) * B * kMlaH * kR);
  const size_t ws_bytes = MlaDecodeWorkspaceBytes(mla, B, ctx);
  DeviceBuffer ws(ws_bytes);
  if (!caches.ok || !ws.p) return state.SkipWithError("set-up failed");
  std::vector<int32_t> seq_lens(static_cast<size_t>(B), static_cast<int32_t>(ctx));
  if (!Check(state, cudaMemcpy(lens.p, seq_lens.data(), sizeof(int32_t) * B,
                               cudaMemcpyHostToDevice)) ||
      !Check(state, FillRandomBf16(q.as<bf16>(), B * kMlaH * mla.cache_dim(), 3, 1.f, s))) {
    return;
  }
  MlaDecodeArgs a;
  a.shape = mla;
  a.batch = B;
  a.q_abs = q.as<bf16>();
  a.cache.pool = caches.mla_pool.as<bf16>();
  a.cache.max_blocks = caches.blocks_per_seq;
  a.seq_lens = lens.as<int32_t>();
  a.max_seq_len = ctx;
  a.out_latent = out.p;
  TimeLoop(state, s, [&](int64_t it) {
    a.cache.block_table = caches.Table(it, B);
    return MlaDecode(a, ws.p, ws_bytes, s);
  });
  ReportBandwidth(state, static_cast<double>(B) *
                             (static_cast<double>(ctx) * (kR + kDr) * 2 + kMlaH * (kR + kDr + kR) * 2.0));
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaDsaDenseMlaDecode)
    ->ArgsProduct({{1, 32}, {8192, 16384, 32768, 65536, 131072}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- DSA prefill: a chunk of T tokens ending at ctx, one layer ------------------
void BM_CudaDsaPrefillChunk(benchmark::State& state) {
  const int64_t ctx = state.range(0), T = 2048;
  const int64_t past = ctx - T;
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  DsaCaches caches(1, ctx, s);
  const MlaShape mla = DsaMlaShape();
  const IndexerShape idx = DsaIndexerShape();
  DeviceBuffer iq(sizeof(bf16) * T * kIdxH * kIdxD), iw(sizeof(float) * T * kIdxH),
      rows(sizeof(int32_t) * T * kIdxTopK), counts(sizeof(int32_t) * T),
      q(sizeof(bf16) * T * kMlaH * mla.cache_dim()), out(sizeof(bf16) * T * kMlaH * kR);
  const size_t idx_ws_bytes = IndexerPrefillWorkspaceBytes(idx, T, past);
  const size_t mla_ws_bytes = MlaSparsePrefillWorkspaceBytes(mla, T, kIdxTopK);
  DeviceBuffer idx_ws(idx_ws_bytes), mla_ws(mla_ws_bytes);
  if (!caches.ok || !idx_ws.p || !mla_ws.p || !q.p) return state.SkipWithError("set-up failed");
  if (!Check(state, FillRandomBf16(iq.as<bf16>(), T * kIdxH * kIdxD, 1, 1.f, s)) ||
      !Check(state, FillRandomF32(iw.as<float>(), T * kIdxH, 2, -0.125f, 0.125f, s)) ||
      !Check(state, FillRandomBf16(q.as<bf16>(), T * kMlaH * mla.cache_dim(), 3, 1.f, s))) {
    return;
  }
  IndexerPrefillArgs ia;
  ia.shape = idx;
  ia.num_tokens = T;
  ia.past = past;
  ia.q = iq.as<bf16>();
  ia.weights = iw.as<float>();
  ia.cache.pool = caches.idx_pool.as<bf16>();
  ia.cache.max_blocks = caches.blocks_per_seq;
  ia.rows = rows.as<int32_t>();
  ia.counts = counts.as<int32_t>();
  MlaSparsePrefillArgs ma;
  ma.shape = mla;
  ma.num_tokens = T;
  ma.q_abs = q.as<bf16>();
  ma.cache.pool = caches.mla_pool.as<bf16>();
  ma.cache.max_blocks = caches.blocks_per_seq;
  ma.rows = rows.as<int32_t>();
  ma.counts = counts.as<int32_t>();
  ma.top_k = kIdxTopK;
  ma.out_latent = out.p;
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  auto run = [&](int64_t it) -> Status {
    ia.cache.block_table = caches.Table(it, 1);
    ma.cache.block_table = ia.cache.block_table;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, s));
    STRATA_RETURN_IF_ERROR(IndexerPrefill(ia, idx_ws.p, idx_ws_bytes, s));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, s));
    STRATA_RETURN_IF_ERROR(MlaSparsePrefill(ma, mla_ws.p, mla_ws_bytes, s));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(e2, s));
    return OkStatus();
  };
  int64_t it = 0, n = 0;
  double idx_ms = 0, mla_ms = 0;
  if (Check(state, run(it++)) && Check(state, cudaStreamSynchronize(s))) {
    for (auto _ : state) {
      if (!Check(state, run(it++)) || !Check(state, cudaEventSynchronize(e2))) break;
      float a = 0, b = 0;
      cudaEventElapsedTime(&a, e0, e1);
      cudaEventElapsedTime(&b, e1, e2);
      idx_ms += a;
      mla_ms += b;
      ++n;
      state.SetIterationTime((a + b) / 1e3);
    }
  }
  if (n > 0) {
    state.counters["indexer_ms"] = idx_ms / n;
    state.counters["sparse_mla_ms"] = mla_ms / n;
    state.counters["indexer_share_pct"] = 100.0 * idx_ms / (idx_ms + mla_ms);
  }
  // FLOPs: indexer scoring over the causal keys, absorbed attention over
  // min(top_k, causal) rows per query (QK over r + dr, PV over r).
  double idx_flops = 0, mla_flops = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double keys = static_cast<double>(past + t + 1);
    idx_flops += 2.0 * keys * kIdxH * kIdxD;
    mla_flops += 2.0 * std::min<double>(keys, kIdxTopK) * kMlaH * (kR + kDr + kR);
  }
  ReportFlops(state, idx_flops + mla_flops);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CudaDsaPrefillChunk)
    ->Arg(8192)
    ->Arg(32768)
    ->Arg(131072)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::cuda

#endif  // STRATA_HAVE_CUDA
