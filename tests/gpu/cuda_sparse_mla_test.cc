// Gather-based sparse MLA (DeepSeek-V3.2 DSA) on the GPU: MlaDecode with
// MlaDecodeArgs::sparse and MlaSparsePrefill, against
//  * an fp64 reference over exactly the selected rows (the latent output),
//  * the CPU backend: W_UV applied to the device latents vs cpu::MlaAbsorbed
//    with the same cpu::MlaSelection (the whole absorbed chain).
// Random inputs: cache rows ~ U(±1) in bf16 in a paged cache with a shuffled
// block table and NaN in every row that holds no token (a gather that reads
// a wrong row fails loudly); per-query selections are random ascending
// causal subsets of min(top_k, causal length) positions (not the indexer's,
// so this test covers the attention alone), padded with −1 past the count.
// DeepSeek-V3.2's shape (128 heads, r = 512, dr = 64, dn = dv = 128, scale
// with an mscale factor) on the tensor-core kernel, and a tiny odd shape on
// the generic kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cuda/mla.h"
#include "base/thread_pool.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::DeviceArray;
using op_test::RoundBf16;
using op_test::RoundedUniform;
using op_test::ToBf16;

double RelL2(const std::vector<double>& got, const std::vector<double>& ref, bool* finite) {
  double num = 0, den = 0;
  *finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) *finite = false;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void ExpectClose(const std::string& label, const std::vector<double>& got,
                 const std::vector<double>& ref, double tol) {
  ASSERT_EQ(got.size(), ref.size()) << label;
  bool finite = true;
  const double rel = RelL2(got, ref, &finite);
  std::printf("[sparse-mla] %-60s rel_l2 %.3e (tol %.0e)\n", label.c_str(), rel, tol);
  EXPECT_TRUE(finite) << label;
  EXPECT_LE(rel, tol) << label;
}

MlaShape DeepSeekShape(int64_t heads = 128) {
  MlaShape s;
  s.num_heads = heads;
  s.nope_dim = 128;
  s.rope_dim = 64;
  s.v_dim = 128;
  s.kv_rank = 512;
  s.scale = 1.25f / std::sqrt(192.f);  // (dn + dr)^-1/2 · mscale²-like factor
  return s;
}

MlaShape TinyShape() {
  MlaShape s;
  s.num_heads = 3;
  s.nope_dim = 16;
  s.rope_dim = 8;
  s.v_dim = 16;
  s.kv_rank = 32;
  return s;
}

float ScaleOf(const MlaShape& s) {
  return s.scale != 0.f ? s.scale
                        : 1.f / std::sqrt(static_cast<float>(s.nope_dim + s.rope_dim));
}

// A random ascending subset of min(k, n) of the positions 0..n−1.
std::vector<int32_t> RandomSelection(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  if (k < n) {
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(k);
    std::sort(all.begin(), all.end());
  }
  return all;
}

// Sequences with their rows in a paged cache (NaN where no token is), the
// selections of `queries` query rows, q and W_UK/W_UV.
struct Problem {
  MlaShape s;
  int64_t top_k = 0;
  int64_t cd = 0, max_blocks = 0;
  std::vector<std::vector<float>> seq_rows;  // per sequence [len, cd]
  std::vector<uint16_t> pool_bits;
  std::vector<int32_t> table;                // [sequences, max_blocks]
  std::vector<int32_t> sel, counts;          // [queries, top_k], [queries]
  std::vector<float> kv_b, q_full, q_abs;    // q_abs [queries, H, cd]

  Problem(const MlaShape& shape, const std::vector<int64_t>& lens, int64_t k, std::mt19937& rng)
      : s(shape), top_k(k), cd(shape.cache_dim()) {
    for (int64_t l : lens) max_blocks = std::max<int64_t>(max_blocks, (l + 63) / 64);
    const int64_t nseq = static_cast<int64_t>(lens.size());
    const int64_t num_blocks = nseq * max_blocks + 3;
    const uint16_t nan_bits = 0x7fc0;
    pool_bits.assign(num_blocks * 64 * cd, nan_bits);
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(ids.begin(), ids.begin() + nseq * max_blocks);
    for (int64_t b = 0; b < nseq; ++b) {
      seq_rows.push_back(RoundedUniform(lens[b] * cd, 1.f, rng));
      for (int64_t p = 0; p < lens[b]; ++p) {
        const int64_t blk = table[b * max_blocks + p / 64];
        for (int64_t i = 0; i < cd; ++i) {
          const bf16 v = __float2bfloat16_rn(seq_rows[b][p * cd + i]);
          pool_bits[(blk * 64 + p % 64) * cd + i] = *reinterpret_cast<const uint16_t*>(&v);
        }
      }
    }
  }

  // Adds query rows: causal lengths `causal[i]`, each with a random selection.
  void MakeQueries(const std::vector<int64_t>& causal, std::mt19937& rng) {
    const int64_t nq = static_cast<int64_t>(causal.size());
    const int64_t H = s.num_heads, dn = s.nope_dim, dr = s.rope_dim, dv = s.v_dim, r = s.kv_rank;
    sel.assign(nq * top_k, -1);
    counts.resize(nq);
    for (int64_t i = 0; i < nq; ++i) {
      const std::vector<int32_t> picked = RandomSelection(causal[i], top_k, rng);
      std::copy(picked.begin(), picked.end(), sel.begin() + i * top_k);
      counts[i] = static_cast<int32_t>(picked.size());
    }
    // Score std ≈ 2 (as cuda_mla_test): q̃ = W_UKᵀ q_nope made in fp64, bf16.
    const float w_amp = 1.f / std::sqrt(static_cast<float>(dn));
    kv_b = RoundedUniform(H * (dn + dv) * r, w_amp, rng);
    const float q_amp =
        2.f / (std::sqrt(cd / 9.f) * ScaleOf(s)) / (w_amp * std::sqrt(dn / 3.f));
    q_full = RoundedUniform(nq * H * (dn + dr), q_amp, rng);
    q_abs.resize(nq * H * cd);
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = &q_full[(t * H + h) * (dn + dr)];
        float* qa = &q_abs[(t * H + h) * cd];
        for (int64_t j = 0; j < r; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dn; ++i) {
            acc += static_cast<double>(qh[i]) * kv_b[(h * (dn + dv) + i) * r + j];
          }
          qa[j] = RoundBf16(static_cast<float>(acc));
        }
        for (int64_t i = 0; i < dr; ++i) qa[r + i] = qh[dn + i];
      }
    }
  }

  // fp64 latents of query i over its selected rows of sequence `seq`.
  void ReferenceLatent(int64_t i, int64_t seq, double* out) const {
    const int64_t H = s.num_heads, r = s.kv_rank;
    const double scale = ScaleOf(s);
    const std::vector<float>& rows = seq_rows[seq];
    for (int64_t h = 0; h < H; ++h) {
      const float* q = &q_abs[(i * H + h) * cd];
      std::vector<double> sc(counts[i]);
      double mx = -INFINITY;
      for (int32_t j = 0; j < counts[i]; ++j) {
        const float* row = &rows[sel[i * top_k + j] * cd];
        double dot = 0;
        for (int64_t c = 0; c < cd; ++c) dot += static_cast<double>(q[c]) * row[c];
        sc[j] = dot * scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      double* o = out + (i * H + h) * r;
      std::fill(o, o + r, 0.0);
      for (int32_t j = 0; j < counts[i]; ++j) {
        const float* row = &rows[sel[i * top_k + j] * cd];
        for (int64_t c = 0; c < r; ++c) o[c] += sc[j] / sum * row[c];
      }
    }
  }

  // W_UV·latent of queries [i0, i0 + n) → [n, H, dv].
  std::vector<double> ApplyWuv(const std::vector<double>& lat, int64_t i0, int64_t n) const {
    const int64_t H = s.num_heads, dn = s.nope_dim, dv = s.v_dim, r = s.kv_rank;
    std::vector<double> out(n * H * dv);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < dv; ++j) {
          const float* w = &kv_b[(h * (dn + dv) + dn + j) * r];
          const double* l = &lat[((i0 + t) * H + h) * r];
          double acc = 0;
          for (int64_t c = 0; c < r; ++c) acc += w[c] * l[c];
          out[(t * H + h) * dv + j] = acc;
        }
      }
    }
    return out;
  }

  // cpu::MlaAbsorbed for queries [i0, i0 + n) of sequence `seq` at positions
  // past..past+n−1, restricted to their selections.
  std::vector<double> CpuAbsorbed(int64_t i0, int64_t n, int64_t seq, int64_t past) const {
    cpu::MlaDims d;
    d.num_heads = s.num_heads;
    d.nope_dim = s.nope_dim;
    d.rope_dim = s.rope_dim;
    d.v_dim = s.v_dim;
    d.kv_rank = s.kv_rank;
    d.softmax_scale = s.scale;
    const int64_t H = s.num_heads, dn = s.nope_dim, dv = s.v_dim, r = s.kv_rank;
    cpu::WeightMatrix w{DType::kF32, kv_b.data(), H * (dn + dv), r};
    cpu::MlaSelection selection;
    selection.rows = sel.data() + i0 * top_k;
    selection.counts = counts.data() + i0;
    selection.stride = top_k;
    std::vector<float> out(n * H * dv);
    std::vector<float> scratch(cpu::MlaAbsorbedScratchFloats(d, n));
    cpu::MlaAbsorbed(d, q_full.data() + i0 * H * (dn + s.rope_dim), n, seq_rows[seq].data(), past,
                     w, out.data(), scratch.data(), ThreadPool::Default(), &selection);
    return std::vector<double>(out.begin(), out.end());
  }
};

struct DeviceProblem {
  explicit DeviceProblem(const Problem& p)
      : pool(p.pool_bits.size()),
        table(p.table.size()),
        sel(p.sel.size()),
        counts(p.counts.size()),
        q(p.q_abs.size()) {
    std::vector<bf16> pool_host(p.pool_bits.size());
    for (size_t i = 0; i < pool_host.size(); ++i) {
      __nv_bfloat16_raw raw;
      raw.x = p.pool_bits[i];
      pool_host[i] = bf16(raw);
    }
    ok = pool.Upload(pool_host) && table.Upload(p.table) && sel.Upload(p.sel) &&
         counts.Upload(p.counts) && q.Upload(ToBf16(p.q_abs));
  }
  MlaCache Cache(const Problem& p) const {
    MlaCache c;
    c.pool = pool.get();
    c.block_table = table.get();
    c.max_blocks = p.max_blocks;
    return c;
  }
  DeviceArray<bf16> pool;
  DeviceArray<int32_t> table, sel, counts;
  DeviceArray<bf16> q;
  bool ok = false;
};

std::vector<double> DownloadLatents(const void* ptr, ActType type, size_t n) {
  std::vector<double> out(n);
  if (type == ActType::kF32) {
    std::vector<float> h(n);
    if (cudaMemcpy(h.data(), ptr, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return {};
    std::copy(h.begin(), h.end(), out.begin());
  } else {
    std::vector<bf16> h(n);
    if (cudaMemcpy(h.data(), ptr, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return {};
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Decode: sequence b's query at position len−1 over its selection.

void RunDecode(const std::string& name, const MlaShape& shape, const std::vector<int64_t>& lens,
               int64_t top_k, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p(shape, lens, top_k, rng);
  p.MakeQueries(lens, rng);
  DeviceProblem dev(p);
  ASSERT_TRUE(dev.ok);
  const int64_t B = static_cast<int64_t>(lens.size());
  const int64_t H = shape.num_heads, r = shape.kv_rank;
  std::vector<double> ref(B * H * r);
  for (int64_t b = 0; b < B; ++b) p.ReferenceLatent(b, b, ref.data());
  std::vector<double> cpu;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> o = p.CpuAbsorbed(b, 1, b, lens[b] - 1);
    cpu.insert(cpu.end(), o.begin(), o.end());
  }
  ExpectClose(name + " [harness] W_UV·fp64 ref vs cpu::MlaAbsorbed", p.ApplyWuv(ref, 0, B), cpu,
              5e-3);
  for (ActType t : {ActType::kF32, ActType::kBf16}) {
    const bool f32 = t == ActType::kF32;
    DeviceArray<float> out(B * H * r);
    MlaDecodeArgs a;
    a.shape = shape;
    a.batch = B;
    a.q_abs = dev.q.get();
    a.cache = dev.Cache(p);
    a.seq_lens = nullptr;  // unused with a selection
    a.max_seq_len = top_k;
    a.out_latent = out.get();
    a.out_type = t;
    a.sparse.rows = dev.sel.get();
    a.sparse.counts = dev.counts.get();
    a.sparse.stride = top_k;
    const size_t ws_bytes = MlaDecodeWorkspaceBytes(shape, B, top_k);
    DeviceArray<char> ws(ws_bytes);
    const Status st = MlaDecode(a, ws.get(), ws_bytes, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<double> got = DownloadLatents(out.get(), t, B * H * r);
    ASSERT_EQ(got.size(), ref.size());
    ExpectClose(name + (f32 ? " latent f32 vs fp64" : " latent bf16 vs fp64"), got, ref,
                f32 ? 4e-3 : 1e-2);
    if (f32) {
      ExpectClose(name + " W_UV·latent vs cpu::MlaAbsorbed(selection)", p.ApplyWuv(got, 0, B), cpu,
                  1e-2);
    }
  }
}

TEST(CudaSparseMlaDecode, DeepSeekShapeMatchesCpuOnSelectedRows) {
  // Long, at top_k, and shorter than top_k (every causal row selected).
  RunDecode("deepseek B3", DeepSeekShape(), {20000, 2048, 700}, 2048, 11);
}

TEST(CudaSparseMlaDecode, DeepSeekShapeSingleSequenceSmallTopK) {
  // A selection that is not a multiple of the 64-row tile.
  RunDecode("deepseek B1 k=301", DeepSeekShape(), {5000}, 301, 12);
}

TEST(CudaSparseMlaDecode, TinyOddShapeMatchesCpu) {
  RunDecode("tiny", TinyShape(), {1, 50, 300, 129}, 37, 13);
}

// ---------------------------------------------------------------------------
// Prefill: T query tokens of one sequence at past..past+T−1, each over its
// own selection, through MlaSparsePrefill.

void RunPrefill(const std::string& name, const MlaShape& shape, int64_t past, int64_t T,
                int64_t top_k, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p(shape, {past + T}, top_k, rng);
  std::vector<int64_t> causal(T);
  for (int64_t t = 0; t < T; ++t) causal[t] = past + t + 1;
  p.MakeQueries(causal, rng);
  DeviceProblem dev(p);
  ASSERT_TRUE(dev.ok);
  const int64_t H = shape.num_heads, r = shape.kv_rank;
  std::vector<double> ref(T * H * r);
  for (int64_t t = 0; t < T; ++t) p.ReferenceLatent(t, 0, ref.data());
  const std::vector<double> cpu = p.CpuAbsorbed(0, T, 0, past);
  ExpectClose(name + " [harness] W_UV·fp64 ref vs cpu::MlaAbsorbed", p.ApplyWuv(ref, 0, T), cpu,
              5e-3);
  DeviceArray<float> out(T * H * r);
  MlaSparsePrefillArgs a;
  a.shape = shape;
  a.num_tokens = T;
  a.q_abs = dev.q.get();
  a.cache = dev.Cache(p);
  a.rows = dev.sel.get();
  a.counts = dev.counts.get();
  a.top_k = top_k;
  a.out_latent = out.get();
  a.out_type = ActType::kF32;
  const size_t ws_bytes = MlaSparsePrefillWorkspaceBytes(shape, T, top_k);
  DeviceArray<char> ws(ws_bytes);
  const Status st = MlaSparsePrefill(a, ws.get(), ws_bytes, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> got = DownloadLatents(out.get(), ActType::kF32, T * H * r);
  ASSERT_EQ(got.size(), ref.size());
  ExpectClose(name + " latent f32 vs fp64", got, ref, 4e-3);
  ExpectClose(name + " W_UV·latent vs cpu::MlaAbsorbed(selection)", p.ApplyWuv(got, 0, T), cpu,
              1e-2);
}

TEST(CudaSparseMlaPrefill, DeepSeekShapeEachTokenItsOwnSelection) {
  // DeepSeek-V3.2's head dims with 16 heads (a partial 32-head group; the
  // fp64 reference over 128 heads would take minutes). Tokens before
  // position 2047 have fewer than top_k causal rows and select them all.
  RunPrefill("deepseek H16 past=2020 T=45", DeepSeekShape(16), 2020, 45, 2048, 21);
}

TEST(CudaSparseMlaPrefill, DeepSeekShapeAllHeadsShortChunk) {
  RunPrefill("deepseek H128 past=3000 T=3 k=512", DeepSeekShape(), 3000, 3, 512, 23);
}

TEST(CudaSparseMlaPrefill, TinyOddShapeFreshPrompt) {
  RunPrefill("tiny past=0 T=130", TinyShape(), 0, 130, 37, 22);
}

TEST(CudaSparseMla, RejectsSelectionWithoutCountsOrShortStride) {
  DeviceArray<bf16> x(4096);
  DeviceArray<int32_t> table(4), sel(64);
  MlaDecodeArgs a;
  a.shape = TinyShape();
  a.batch = 1;
  a.q_abs = x.get();
  a.cache.pool = x.get();
  a.cache.block_table = table.get();
  a.cache.max_blocks = 4;
  a.max_seq_len = 64;
  a.out_latent = x.get();
  a.sparse.rows = sel.get();
  a.sparse.stride = 64;
  Status st = MlaDecode(a, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("sparse.counts"), std::string::npos) << st;
  a.sparse.counts = sel.get();
  a.sparse.stride = 32;
  st = MlaDecode(a, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("sparse.stride"), std::string::npos) << st;
}

}  // namespace
}  // namespace strata::cuda
