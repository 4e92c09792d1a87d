// MLA on the GPU against the CPU backend (cpu::MlaPrefill / cpu::MlaAbsorbed)
// and plain fp64 host references, on random bf16-exact inputs: the paged
// cache copies, absorbed decode (generic and tensor-core kernels, single and
// split passes, CUDA-graph capture) and flash-style prefill (the wgmma kernel
// and, with mla.prefill=mma, the mma.sync one; odd lengths, a long
// cache, several head counts, CUDA-graph capture), at the fixtures' odd sizes
// and Kimi-Linear-48B's production shape; misuse is InvalidArgument.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/attention.h"
#include "backend/cuda/mla.h"
#include "base/thread_pool.h"
#include "base/tuning.h"

namespace strata::cuda {
namespace {

using ::testing::HasSubstr;

// Evaluates `expr` once (it may be a launch) and fails the test on an error.
#define CUDA_ASSERT_OK(expr)                                                             \
  do {                                                                                   \
    const cudaError_t cuda_err_ = (expr);                                                \
    ASSERT_EQ(cuda_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_err_); \
  } while (0)

// ---------------------------------------------------------------------------
// Host helpers.

uint16_t ToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16Bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float RoundBf16(float f) { return FromBf16Bits(ToBf16Bits(f)); }

constexpr uint16_t kBf16NaN = 0x7fc0;

// n uniform values in [-amp, amp], rounded to bf16 so host and device see the
// same numbers.
std::vector<float> RandomBf16(size_t n, float amp, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = RoundBf16(dist(rng));
  return v;
}

std::vector<uint16_t> Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = ToBf16Bits(v[i]);
  return b;
}

// Owns a device allocation; ptr() is null when cudaMalloc failed.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess)
      ptr_ = static_cast<T*>(p);
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* ptr() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

template <typename T, typename H>
cudaError_t Upload(const DeviceArray<T>& d, const std::vector<H>& h) {
  static_assert(sizeof(T) == sizeof(H), "element sizes must match");
  return cudaMemcpy(d.ptr(), h.data(), h.size() * sizeof(H), cudaMemcpyHostToDevice);
}

template <typename T, typename H>
cudaError_t Download(std::vector<H>* h, const DeviceArray<T>& d) {
  static_assert(sizeof(T) == sizeof(H), "element sizes must match");
  h->resize(d.size());
  return cudaMemcpy(h->data(), d.ptr(), d.size() * sizeof(H), cudaMemcpyDeviceToHost);
}

struct ErrorStats {
  double max_abs = 0, max_rel = 0, l2_rel = 0;
};

// max |a − ref|, the largest error relative to max(|ref|, 10% of the rms of
// ref) (so near-zero references do not blow it up), and ‖a − ref‖₂ / ‖ref‖₂.
ErrorStats Compare(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrorStats e;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) den += ref[i] * ref[i];
  const double floor = 0.1 * std::sqrt(den / std::max<size_t>(ref.size(), 1));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(got[i] - ref[i]);
    num += d * d;
    e.max_abs = std::max(e.max_abs, d);
    e.max_rel = std::max(e.max_rel, d / std::max(std::fabs(ref[i]), floor));
  }
  e.l2_rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

void Report(const std::string& what, const ErrorStats& e) {
  std::printf("%-58s max_abs %.3e  max_rel %.3e  l2_rel %.3e\n", what.c_str(), e.max_abs, e.max_rel,
              e.l2_rel);
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

std::vector<double> Bf16ToDouble(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = FromBf16Bits(v[i]);
  return d;
}

float DefaultScale(const MlaShape& s) {
  return 1.f / std::sqrt(static_cast<float>(s.nope_dim + s.rope_dim));
}

// A paged cache on the host: blocks of every sequence scattered over the pool
// by a random permutation, every row not holding a token set to NaN so a
// kernel that lets unwritten rows into its sums fails loudly.
struct HostPagedCache {
  int64_t cd = 0;
  int64_t max_blocks = 0;
  int64_t num_blocks = 0;
  std::vector<uint16_t> pool;  // [num_blocks, 64, cd]
  std::vector<int32_t> table;  // [batch, max_blocks]

  HostPagedCache(int64_t batch, int64_t max_blocks_in, int64_t cd_in, std::mt19937& rng)
      : cd(cd_in), max_blocks(max_blocks_in), num_blocks(batch * max_blocks_in + 5) {
    pool.assign(static_cast<size_t>(num_blocks * kKvBlockTokens * cd), kBf16NaN);
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(ids.begin(), ids.begin() + batch * max_blocks);
  }
  uint16_t* Row(int64_t b, int64_t s) {
    const int64_t blk = table[static_cast<size_t>(b * max_blocks + s / kKvBlockTokens)];
    return pool.data() + (blk * kKvBlockTokens + s % kKvBlockTokens) * cd;
  }
  void Put(int64_t b, const std::vector<float>& rows) {  // rows [len, cd]
    const int64_t len = static_cast<int64_t>(rows.size()) / cd;
    for (int64_t s = 0; s < len; ++s) {
      uint16_t* dst = Row(b, s);
      for (int64_t i = 0; i < cd; ++i) dst[i] = ToBf16Bits(rows[static_cast<size_t>(s * cd + i)]);
    }
  }
};

// ---------------------------------------------------------------------------
// Decode.

struct DecodeCase {
  const char* name;
  MlaShape shape;  // dn and dv only matter for the CPU chain
  std::vector<int32_t> seq_lens;
  int64_t max_seq_len;
  bool cpu_chain;  // also compare W_UV·out_latent with cpu::MlaAbsorbed
};

// fp64 Σ_s softmax(q̃·row_s · scale) row_s[:r] for one (sequence, head).
void ReferenceLatent(const MlaShape& s, const float* q, const std::vector<float>& rows, int64_t len,
                     double* out) {
  const int64_t cd = s.cache_dim(), r = s.kv_rank;
  const double scale = s.scale != 0.f ? s.scale : DefaultScale(s);
  std::vector<double> sc(static_cast<size_t>(len));
  double mx = -INFINITY;
  for (int64_t t = 0; t < len; ++t) {
    double dot = 0;
    for (int64_t i = 0; i < cd; ++i) dot += static_cast<double>(q[i]) * rows[t * cd + i];
    sc[t] = dot * scale;
    mx = std::max(mx, sc[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t < len; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
  for (int64_t i = 0; i < r; ++i) out[i] = 0;
  for (int64_t t = 0; t < len; ++t) {
    const double p = sc[t] / sum;
    for (int64_t i = 0; i < r; ++i) out[i] += p * rows[t * cd + i];
  }
}

class DecodeFixture {
 public:
  // Builds random caches, q̃ (directly, or from q_nope and W_UK for the CPU
  // chain) and uploads them.
  explicit DecodeFixture(const DecodeCase& c, uint32_t seed) : c_(c), rng_(seed) {
    const MlaShape& s = c.shape;
    batch_ = static_cast<int64_t>(c.seq_lens.size());
    H_ = s.num_heads;
    cd_ = s.cache_dim();
    const int64_t max_blocks = (c.max_seq_len + kKvBlockTokens - 1) / kKvBlockTokens + 1;
    cache_ = std::make_unique<HostPagedCache>(batch_, max_blocks, cd_, rng_);
    for (int64_t b = 0; b < batch_; ++b) {
      rows_.push_back(RandomBf16(static_cast<size_t>(c.seq_lens[b] * cd_), 1.f, rng_));
      cache_->Put(b, rows_.back());
    }
    // Score std ≈ 2 whatever the width: std(q̃·row) = amp·(cd/9)^½ for
    // uniform q̃ in ±amp and rows in ±1.
    const float scale = s.scale != 0.f ? s.scale : DefaultScale(s);
    if (c.cpu_chain) {
      const int64_t dn = s.nope_dim, dv = s.v_dim, r = s.kv_rank;
      const float w_amp = 1.f / std::sqrt(static_cast<float>(dn));
      kv_b_ = RandomBf16(static_cast<size_t>(H_ * (dn + dv) * r), w_amp, rng_);
      const float q_amp = 2.f / (std::sqrt(cd_ / 9.f) * scale) / (w_amp * std::sqrt(dn / 3.f));
      q_full_ = RandomBf16(static_cast<size_t>(batch_ * H_ * (dn + s.rope_dim)), q_amp, rng_);
      q_abs_.resize(static_cast<size_t>(batch_ * H_ * cd_));
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t h = 0; h < H_; ++h) {
          const float* qh = &q_full_[(b * H_ + h) * (dn + s.rope_dim)];
          float* qa = &q_abs_[(b * H_ + h) * cd_];
          for (int64_t j = 0; j < r; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < dn; ++i) {
              acc += static_cast<double>(qh[i]) * kv_b_[(h * (dn + dv) + i) * r + j];
            }
            qa[j] = RoundBf16(static_cast<float>(acc));
          }
          for (int64_t i = 0; i < s.rope_dim; ++i) qa[r + i] = qh[dn + i];
        }
      }
    } else {
      const float q_amp = 2.f / (std::sqrt(cd_ / 9.f) * scale);
      q_abs_ = RandomBf16(static_cast<size_t>(batch_ * H_ * cd_), q_amp, rng_);
    }
  }

  ::testing::AssertionResult Upload() {
    pool_d_ = std::make_unique<DeviceArray<bf16>>(cache_->pool.size());
    table_d_ = std::make_unique<DeviceArray<int32_t>>(cache_->table.size());
    lens_d_ = std::make_unique<DeviceArray<int32_t>>(c_.seq_lens.size());
    q_d_ = std::make_unique<DeviceArray<bf16>>(q_abs_.size());
    out_d_ =
        std::make_unique<DeviceArray<float>>(static_cast<size_t>(batch_ * H_ * c_.shape.kv_rank));
    ws_bytes_ = MlaDecodeWorkspaceBytes(c_.shape, batch_, c_.max_seq_len);
    ws_d_ = std::make_unique<DeviceArray<uint8_t>>(ws_bytes_);
    if (!pool_d_->ptr() || !table_d_->ptr() || !lens_d_->ptr() || !q_d_->ptr() || !out_d_->ptr() ||
        !ws_d_->ptr()) {
      return ::testing::AssertionFailure() << "cudaMalloc failed";
    }
    if (cuda::Upload(*pool_d_, cache_->pool) != cudaSuccess ||
        cuda::Upload(*table_d_, cache_->table) != cudaSuccess ||
        cuda::Upload(*lens_d_, c_.seq_lens) != cudaSuccess ||
        cuda::Upload(*q_d_, Bits(q_abs_)) != cudaSuccess) {
      return ::testing::AssertionFailure() << "upload failed";
    }
    return ::testing::AssertionSuccess();
  }

  MlaDecodeArgs Args(ActType out_type) const {
    MlaDecodeArgs a;
    a.shape = c_.shape;
    a.batch = batch_;
    a.q_abs = q_d_->ptr();
    a.cache.pool = pool_d_->ptr();
    a.cache.block_table = table_d_->ptr();
    a.cache.max_blocks = cache_->max_blocks;
    a.seq_lens = lens_d_->ptr();
    a.max_seq_len = c_.max_seq_len;
    a.out_latent = out_d_->ptr();
    a.out_type = out_type;
    return a;
  }

  // The same query with its rope part moved out (MlaDecodeArgs::q_rope):
  // q_abs's rope columns become NaN on the device, the rope rows go to their
  // own buffer with `stride` elements per (sequence, head).
  ::testing::AssertionResult UploadRopeSplit(int64_t stride) {
    const int64_t r = c_.shape.kv_rank, dr = c_.shape.rope_dim;
    std::vector<float> q_nan = q_abs_;
    std::vector<float> rope(static_cast<size_t>(batch_ * H_ * stride), 0.f);
    for (int64_t bh = 0; bh < batch_ * H_; ++bh) {
      for (int64_t i = 0; i < dr; ++i) {
        rope[bh * stride + i] = q_abs_[bh * cd_ + r + i];
        q_nan[bh * cd_ + r + i] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    q_nan_d_ = std::make_unique<DeviceArray<bf16>>(q_nan.size());
    rope_d_ = std::make_unique<DeviceArray<bf16>>(rope.size());
    rope_stride_ = stride;
    if (!q_nan_d_->ptr() || !rope_d_->ptr()) return ::testing::AssertionFailure() << "cudaMalloc";
    if (cuda::Upload(*q_nan_d_, Bits(q_nan)) != cudaSuccess ||
        cuda::Upload(*rope_d_, Bits(rope)) != cudaSuccess) {
      return ::testing::AssertionFailure() << "upload failed";
    }
    return ::testing::AssertionSuccess();
  }
  MlaDecodeArgs RopeSplitArgs(ActType out_type) const {
    MlaDecodeArgs a = Args(out_type);
    a.q_abs = q_nan_d_->ptr();
    a.q_rope = rope_d_->ptr();
    a.q_rope_stride = rope_stride_;
    return a;
  }
  // The device output's raw bytes.
  std::vector<uint8_t> RawOut(ActType out_type) const {
    const size_t n =
        static_cast<size_t>(batch_ * H_ * c_.shape.kv_rank) * (out_type == ActType::kF32 ? 4 : 2);
    std::vector<uint8_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), out_d_->ptr(), n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

  // The device output as doubles (fp32 or bf16 elements).
  ::testing::AssertionResult Result(ActType out_type, std::vector<double>* out) const {
    const size_t n = static_cast<size_t>(batch_ * H_ * c_.shape.kv_rank);
    if (out_type == ActType::kF32) {
      std::vector<float> h(n);
      if (cudaMemcpy(h.data(), out_d_->ptr(), n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        return ::testing::AssertionFailure() << "download failed";
      }
      *out = ToDouble(h);
    } else {
      std::vector<uint16_t> h(n);
      if (cudaMemcpy(h.data(), out_d_->ptr(), n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
        return ::testing::AssertionFailure() << "download failed";
      }
      *out = Bf16ToDouble(h);
    }
    return ::testing::AssertionSuccess();
  }

  std::vector<double> ReferenceLatents() const {
    const int64_t r = c_.shape.kv_rank;
    std::vector<double> ref(static_cast<size_t>(batch_ * H_ * r));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < H_; ++h) {
        ReferenceLatent(c_.shape, &q_abs_[(b * H_ + h) * cd_], rows_[b], c_.seq_lens[b],
                        &ref[(b * H_ + h) * r]);
      }
    }
    return ref;
  }

  // W_UV applied to the device latents vs cpu::MlaAbsorbed on q (which makes
  // its own q̃ in fp32): the whole absorbed chain against the CPU backend.
  ErrorStats CompareCpuChain(const std::vector<double>& latents, ThreadPool* pool) const {
    const MlaShape& s = c_.shape;
    cpu::MlaDims d;
    d.num_heads = H_;
    d.nope_dim = s.nope_dim;
    d.rope_dim = s.rope_dim;
    d.v_dim = s.v_dim;
    d.kv_rank = s.kv_rank;
    const int64_t r = s.kv_rank, dn = s.nope_dim, dv = s.v_dim;
    cpu::WeightMatrix kv_b{DType::kF32, kv_b_.data(), H_ * (dn + dv), r};
    std::vector<double> got, ref;
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t len = c_.seq_lens[b];
      std::vector<float> out(static_cast<size_t>(H_ * dv));
      std::vector<float> scratch(cpu::MlaAbsorbedScratchFloats(d, 1));
      cpu::MlaAbsorbed(d, &q_full_[b * H_ * (dn + s.rope_dim)], 1, rows_[b].data(), len - 1, kv_b,
                       out.data(), scratch.data(), pool);
      for (int64_t h = 0; h < H_; ++h) {
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          const float* w = &kv_b_[(h * (dn + dv) + dn + j) * r];
          for (int64_t i = 0; i < r; ++i) acc += w[i] * latents[(b * H_ + h) * r + i];
          got.push_back(acc);
          ref.push_back(out[h * dv + j]);
        }
      }
    }
    return Compare(got, ref);
  }

  // Poisons each sequence's newest cache row on the device (NaN) and
  // enqueues MlaCacheWrite of the true rows on `stream` (a decode step's
  // order), so that the MlaDecode after it sees them only if it reads that
  // block after its PDL wait. Sequences of length ≥ 1 only.
  ::testing::AssertionResult RewriteNewestRows(cudaStream_t stream) {
    std::vector<uint16_t> newest(static_cast<size_t>(batch_ * cd_));
    std::vector<int32_t> positions(static_cast<size_t>(batch_));
    const std::vector<uint16_t> nan(static_cast<size_t>(cd_), kBf16NaN);
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t pos = c_.seq_lens[b] - 1;
      positions[b] = static_cast<int32_t>(pos);
      const uint16_t* row = cache_->Row(b, pos);
      std::copy(row, row + cd_, newest.begin() + b * cd_);
      const size_t at = static_cast<size_t>(row - cache_->pool.data());
      if (cudaMemcpy(pool_d_->ptr() + at, nan.data(), 2 * cd_, cudaMemcpyHostToDevice) !=
          cudaSuccess) {
        return ::testing::AssertionFailure() << "poison failed";
      }
    }
    newest_d_ = std::make_unique<DeviceArray<bf16>>(newest.size());
    pos_d_ = std::make_unique<DeviceArray<int32_t>>(positions.size());
    if (cuda::Upload(*newest_d_, newest) != cudaSuccess ||
        cuda::Upload(*pos_d_, positions) != cudaSuccess) {
      return ::testing::AssertionFailure() << "upload failed";
    }
    const MlaDecodeArgs a = Args(ActType::kF32);
    const Status st =
        MlaCacheWrite(c_.shape, a.cache, newest_d_->ptr(), cd_, batch_, 0, pos_d_->ptr(), stream);
    if (!st.ok()) return ::testing::AssertionFailure() << st;
    return ::testing::AssertionSuccess();
  }

  size_t workspace_bytes() const { return ws_bytes_; }
  size_t out_bytes_f32() const { return out_d_->size() * sizeof(float); }
  void* workspace() const { return ws_d_->ptr(); }

 private:
  DecodeCase c_;
  std::mt19937 rng_;
  int64_t batch_ = 0, H_ = 0, cd_ = 0;
  std::unique_ptr<HostPagedCache> cache_;
  std::vector<std::vector<float>> rows_;  // per sequence [len, cd]
  std::vector<float> kv_b_, q_full_, q_abs_;
  std::unique_ptr<DeviceArray<bf16>> pool_d_, q_d_, q_nan_d_, rope_d_;
  int64_t rope_stride_ = 0;
  std::unique_ptr<DeviceArray<int32_t>> table_d_, lens_d_;
  std::unique_ptr<DeviceArray<float>> out_d_;
  std::unique_ptr<DeviceArray<uint8_t>> ws_d_;
  std::unique_ptr<DeviceArray<bf16>> newest_d_;
  std::unique_ptr<DeviceArray<int32_t>> pos_d_;
  size_t ws_bytes_ = 0;
};

MlaShape TinyShape() {
  MlaShape s;
  s.num_heads = 3;
  s.nope_dim = 16;
  s.rope_dim = 8;
  s.v_dim = 16;
  s.kv_rank = 32;
  return s;
}

MlaShape ProductionShape(int64_t heads = 32) {
  MlaShape s;
  s.num_heads = heads;
  s.nope_dim = 128;
  s.rope_dim = 64;
  s.v_dim = 128;
  s.kv_rank = 512;
  return s;
}

void RunDecodeCase(const DecodeCase& c, uint32_t seed) {
  DecodeFixture f(c, seed);
  const std::vector<double> ref = f.ReferenceLatents();
  ThreadPool pool(0);
  if (c.cpu_chain) {
    // The fp64 latents through W_UV against the CPU backend: the two
    // references differ only by q̃'s bf16 rounding (a check of the harness).
    const ErrorStats eh = f.CompareCpuChain(ref, &pool);
    Report(std::string(c.name) + " [harness] fp64 ref vs cpu::MlaAbsorbed", eh);
    EXPECT_LE(eh.l2_rel, 5e-3);
  }
  ASSERT_TRUE(f.Upload());
  std::printf("%s: workspace %zu bytes\n", c.name, f.workspace_bytes());
  for (ActType t : {ActType::kF32, ActType::kBf16}) {
    const bool f32 = t == ActType::kF32;
    Status st = MlaDecode(f.Args(t), f.workspace(), f.workspace_bytes(), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    std::vector<double> got;
    ASSERT_TRUE(f.Result(t, &got));
    const ErrorStats e = Compare(got, ref);
    Report(std::string(c.name) + (f32 ? " out_latent f32 vs fp64" : " out_latent bf16 vs fp64"), e);
    // P is rounded to bf16 for the tensor cores (and bf16 output rounds once
    // more); fp32 paths are otherwise exact to accumulation order.
    EXPECT_LE(e.l2_rel, f32 ? 4e-3 : 1e-2);
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](double v) { return std::isfinite(v); }));
    if (c.cpu_chain && f32) {
      const ErrorStats ec = f.CompareCpuChain(got, &pool);
      Report(std::string(c.name) + " W_UV·out vs cpu::MlaAbsorbed", ec);
      EXPECT_LE(ec.l2_rel, 1e-2);
    }
  }
  // The rope part read from its own buffer (q_abs's copy poisoned with NaN)
  // gives the same bytes: a stride with padding, as the executor's q rows.
  ASSERT_TRUE(f.UploadRopeSplit(c.shape.rope_dim + 24));
  for (ActType t : {ActType::kF32, ActType::kBf16}) {
    ASSERT_TRUE(MlaDecode(f.Args(t), f.workspace(), f.workspace_bytes(), nullptr).ok());
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> whole = f.RawOut(t);
    const Status st = MlaDecode(f.RopeSplitArgs(t), f.workspace(), f.workspace_bytes(), nullptr);
    ASSERT_TRUE(st.ok()) << st;
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(f.RawOut(t) == whole)
        << c.name << ": q_rope from its own buffer changes the output";
  }
}

TEST(CudaMlaDecode, TinyOddShapeMatchesCpu) {
  // Generic kernel: r + dr = 40, three heads, a scrambled table and lengths
  // 1 (single token), 65 (one past a block) and 150.
  RunDecodeCase({"decode tiny H3 r32 dr8 lens{1,65,150}", TinyShape(), {1, 65, 150}, 160, true}, 1);
}

TEST(CudaMlaDecode, ProductionShapeSplitMatchesCpu) {
  // Tensor-core kernel with flash-decoding splits and the merge: lengths 1,
  // 65 and 4100 (a 4-token tail block) through a scrambled block table.
  RunDecodeCase({"decode prod H32 lens{1,65,4100}", ProductionShape(), {1, 65, 4100}, 4100, true},
                2);
}

TEST(CudaMlaDecode, ProductionShapeSingleSplitPartialHeadGroupAndEmptySequence) {
  // max_seq_len ≤ 64 gives one split (direct output, no merge); H = 20 leaves
  // 12 padding rows in the 32-head group; a length-0 sequence yields zeros.
  RunDecodeCase({"decode prod H20 lens{17,0,64}", ProductionShape(20), {17, 0, 64}, 64, false}, 3);
}

TEST(CudaMlaDecode, ProductionShapeTwoHeadGroupsLongContext) {
  // 64 heads (two CTAs' head groups per sequence), uneven long sequences, a
  // non-default scale, and max_seq_len above every actual length.
  MlaShape s = ProductionShape(64);
  s.scale = 0.05f;
  RunDecodeCase({"decode prod H64 lens{700,3000,129}", s, {700, 3000, 129}, 3100, false}, 4);
}

// MlaDecodeArgs::cache_before_wait: the first cache block is requested
// before the PDL wait only when it holds older rows. Right behind the
// MlaCacheWrite of each sequence's newest row (poisoned before), on one
// stream, the output is the plain call's byte for byte: a block read before
// the write would carry the NaN. Lengths put the newest row in the first
// block of a split (1, 65, 4097) and elsewhere (4100, 700).
TEST(CudaMlaDecode, CacheBeforeWaitReadsTheNewestRowAfterItsWrite) {
  for (const DecodeCase& c :
       {DecodeCase{"prod lens{1,65,4100}", ProductionShape(), {1, 65, 4100}, 4100, false},
        DecodeCase{"prod lens{4097,700}", ProductionShape(), {4097, 700}, 4097, false}}) {
    SCOPED_TRACE(c.name);
    DecodeFixture f(c, 11);
    ASSERT_TRUE(f.Upload());
    cudaStream_t stream;
    CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (ActType t : {ActType::kF32, ActType::kBf16}) {
      ASSERT_TRUE(MlaDecode(f.Args(t), f.workspace(), f.workspace_bytes(), stream).ok());
      CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
      const std::vector<uint8_t> plain = f.RawOut(t);
      for (int rep = 0; rep < 3; ++rep) {
        ASSERT_TRUE(f.RewriteNewestRows(stream));
        MlaDecodeArgs a = f.Args(t);
        a.cache_before_wait = true;
        ASSERT_TRUE(MlaDecode(a, f.workspace(), f.workspace_bytes(), stream).ok());
        CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
        EXPECT_TRUE(f.RawOut(t) == plain) << "rep " << rep;
      }
    }
    CUDA_ASSERT_OK(cudaStreamDestroy(stream));
  }
}

TEST(CudaMlaDecode, CapturedInCudaGraphMatchesReference) {
  // Decode must enqueue only on its stream: capture it (split path), replay
  // twice, compare.
  const DecodeCase c{
      "decode prod H32 graph lens{2000,333}", ProductionShape(), {2000, 333}, 2048, false};
  DecodeFixture f(c, 5);
  ASSERT_TRUE(f.Upload());
  cudaStream_t stream;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Warm-up outside capture (first-launch module loading).
  Status st = MlaDecode(f.Args(ActType::kF32), f.workspace(), f.workspace_bytes(), stream);
  ASSERT_TRUE(st.ok()) << st;
  CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
  // NaN everywhere, so the replay must rewrite every element.
  CUDA_ASSERT_OK(cudaMemset(f.Args(ActType::kF32).out_latent, 0xff, f.out_bytes_f32()));
  cudaGraph_t graph;
  CUDA_ASSERT_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  st = MlaDecode(f.Args(ActType::kF32), f.workspace(), f.workspace_bytes(), stream);
  CUDA_ASSERT_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  CUDA_ASSERT_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 2; ++rep) CUDA_ASSERT_OK(cudaGraphLaunch(exec, stream));
  CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
  std::vector<double> got;
  ASSERT_TRUE(f.Result(ActType::kF32, &got));
  const ErrorStats e = Compare(got, f.ReferenceLatents());
  Report("decode prod H32 graph replay out_latent f32 vs fp64", e);
  EXPECT_LE(e.l2_rel, 4e-3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---------------------------------------------------------------------------
// Prefill.

struct PrefillCase {
  const char* name;
  MlaShape shape;
  int64_t num_tokens;
  int64_t past;
};

void RunPrefillCase(const PrefillCase& c, uint32_t seed, ThreadPool* pool) {
  std::mt19937 rng(seed);
  const MlaShape& s = c.shape;
  const int64_t H = s.num_heads, dn = s.nope_dim, dr = s.rope_dim, dv = s.v_dim, r = s.kv_rank;
  const int64_t cd = s.cache_dim(), dqk = dn + dr, T = c.num_tokens, S = c.past + T;
  const int64_t kvw = H * (dn + dv);

  // Latent rows [c | k_r], kv_b, q. kv = c·kv_bᵀ is made here in fp32 (the
  // caller's GEMM), rounded to bf16 for the GPU; the CPU expands it itself.
  const std::vector<float> cache = RandomBf16(static_cast<size_t>(S * cd), 1.f, rng);
  const float w_amp = 1.f / std::sqrt(static_cast<float>(r));
  const std::vector<float> kv_b = RandomBf16(static_cast<size_t>(kvw * r), w_amp, rng);
  const std::vector<float> q = RandomBf16(static_cast<size_t>(T * H * dqk), 6.f, rng);
  std::vector<float> kv(static_cast<size_t>(S * kvw));
  ParallelFor(pool, S, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t j = 0; j < kvw; ++j) {
        float acc = 0;
        for (int64_t i = 0; i < r; ++i) acc += cache[t * cd + i] * kv_b[j * r + i];
        kv[t * kvw + j] = RoundBf16(acc);
      }
    }
  });

  // CPU backend reference (fp32, its own expansion).
  cpu::MlaDims d;
  d.num_heads = H;
  d.nope_dim = dn;
  d.rope_dim = dr;
  d.v_dim = dv;
  d.kv_rank = r;
  cpu::WeightMatrix w{DType::kF32, kv_b.data(), kvw, r};
  std::vector<float> cpu_out(static_cast<size_t>(T * H * dv));
  std::vector<float> scratch(cpu::MlaPrefillScratchFloats(d, T, pool->num_threads()));
  cpu::MlaPrefill(d, q.data(), T, cache.data(), c.past, w, cpu_out.data(), scratch.data(), pool);
  const std::vector<double> cpu_ref = ToDouble(cpu_out);

  // fp64 reference on exactly the GPU's bf16 inputs.
  const double scale = s.scale != 0.f ? s.scale : DefaultScale(s);
  std::vector<double> ref(static_cast<size_t>(T * H * dv));
  ParallelFor(pool, T * H, 4, [&](int64_t b, int64_t e) {
    std::vector<double> sc(static_cast<size_t>(S));
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / H, h = th % H, keys = c.past + t + 1;
      const float* qh = &q[th * dqk];
      double mx = -INFINITY;
      for (int64_t k = 0; k < keys; ++k) {
        double dot = 0;
        const float* kn = &kv[k * kvw + h * (dn + dv)];
        for (int64_t i = 0; i < dn; ++i) dot += static_cast<double>(qh[i]) * kn[i];
        for (int64_t i = 0; i < dr; ++i)
          dot += static_cast<double>(qh[dn + i]) * cache[k * cd + r + i];
        sc[k] = dot * scale;
        mx = std::max(mx, sc[k]);
      }
      double sum = 0;
      for (int64_t k = 0; k < keys; ++k) sum += (sc[k] = std::exp(sc[k] - mx));
      double* o = &ref[th * dv];
      for (int64_t k = 0; k < keys; ++k) {
        const double p = sc[k] / sum;
        const float* v = &kv[k * kvw + h * (dn + dv) + dn];
        for (int64_t j = 0; j < dv; ++j) o[j] += p * v[j];
      }
    }
  });
  // The two references differ only by kv's bf16 rounding: a check of the
  // harness itself.
  const ErrorStats eh = Compare(ref, cpu_ref);
  Report(std::string(c.name) + " [harness] fp64 ref vs cpu::MlaPrefill", eh);
  EXPECT_LE(eh.l2_rel, 5e-3);

  // Device: q, kv and the gathered cache rows (k_rope points into them with
  // row stride r + dr, as the executor does). The output has two poisoned
  // guard rows behind it that no kernel may touch.
  const size_t out_n = static_cast<size_t>(T * H * dv);
  const size_t guard_n = static_cast<size_t>(2 * H * dv);
  DeviceArray<bf16> q_d(q.size()), kv_d(kv.size()), rows_d(cache.size());
  DeviceArray<bf16> out_d(out_n + guard_n);
  ASSERT_TRUE(q_d.ptr() && kv_d.ptr() && rows_d.ptr() && out_d.ptr());
  CUDA_ASSERT_OK(Upload(q_d, Bits(q)));
  CUDA_ASSERT_OK(Upload(kv_d, Bits(kv)));
  CUDA_ASSERT_OK(Upload(rows_d, Bits(cache)));
  MlaPrefillArgs a;
  a.shape = s;
  a.num_tokens = T;
  a.past = c.past;
  a.q = q_d.ptr();
  a.kv = kv_d.ptr();
  a.k_rope = rows_d.ptr() + r;
  a.ld_krope = cd;
  a.out = out_d.ptr();

  // Both prefill paths: the default (the wgmma kernel on sm_90 at the
  // production dims) and mla.prefill=mma (the mma.sync kernel); other shapes
  // take the generic kernel either way.
  std::vector<double> first;
  for (const char* path : {"mla.prefill=wgmma", "mla.prefill=mma"}) {
    const std::string name = absl::StrCat(c.name, " [", path, "]");
    CUDA_ASSERT_OK(cudaMemset(out_d.ptr(), 0xff, out_d.size() * 2));  // NaN if left unwritten
    Status st;
    {
      const tuning::ScopedOptions arm(path);
      ASSERT_TRUE(arm.status().ok()) << arm.status();
      st = MlaPrefill(a, nullptr);
    }
    ASSERT_TRUE(st.ok()) << st;
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> out_bits;
    CUDA_ASSERT_OK(Download(&out_bits, out_d));
    EXPECT_TRUE(std::all_of(out_bits.begin() + out_n, out_bits.end(),
                            [](uint16_t b) { return b == 0xffff; }))
        << name << ": wrote past the last token's row";
    out_bits.resize(out_n);
    const std::vector<double> got = Bf16ToDouble(out_bits);

    const ErrorStats ec = Compare(got, cpu_ref);
    Report(name + " vs cpu::MlaPrefill", ec);
    EXPECT_LE(ec.l2_rel, 1e-2) << name;
    const ErrorStats e = Compare(got, ref);
    Report(name + " vs fp64 on bf16 inputs", e);
    EXPECT_LE(e.l2_rel, 1e-2) << name;
    EXPECT_LE(e.max_rel, 0.25) << name;  // no single wrong row hiding in the l2 norm
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](double v) { return std::isfinite(v); }))
        << name;
    if (first.empty()) {
      first = got;
    } else {
      // Same inputs, two kernels: they differ only in bf16 rounding of P and
      // the order of the fp32 sums.
      const ErrorStats ab = Compare(got, first);
      Report(std::string(c.name) + " mma vs wgmma", ab);
      EXPECT_LE(ab.l2_rel, 1e-2) << name;
    }
  }
}

TEST(CudaMlaPrefill, TinyOddShapeMatchesCpu) {
  ThreadPool pool(0);
  RunPrefillCase({"prefill tiny H3 dn16 dr8 dv16 T150 past0", TinyShape(), 150, 0}, 11, &pool);
  RunPrefillCase({"prefill tiny H3 T71 past130", TinyShape(), 71, 130}, 12, &pool);
  MlaShape odd = TinyShape();
  odd.num_heads = 5;
  odd.nope_dim = 48;
  odd.rope_dim = 16;
  odd.v_dim = 24;
  odd.kv_rank = 40;
  RunPrefillCase({"prefill odd H5 dn48 dr16 dv24 r40 T33 past7", odd, 33, 7}, 13, &pool);
}

TEST(CudaMlaPrefill, ProductionShapeMatchesCpu) {
  // Tensor-core kernel: 1000 fresh tokens (a partial last query tile), then a
  // continuation whose past is not a multiple of the 64-key tile.
  ThreadPool pool(0);
  RunPrefillCase({"prefill prod H32 T1000 past0", ProductionShape(), 1000, 0}, 21, &pool);
  RunPrefillCase({"prefill prod H32 T200 past100", ProductionShape(), 200, 100}, 22, &pool);
}

TEST(CudaMlaPrefill, ProductionShapeOddLengthsMatchCpu) {
  // Lengths around the 64/128-row query tiles and 128-key tiles.
  ThreadPool pool(0);
  RunPrefillCase({"prefill prod H32 T1 past0", ProductionShape(), 1, 0}, 31, &pool);
  RunPrefillCase({"prefill prod H32 T63 past0", ProductionShape(), 63, 0}, 32, &pool);
  RunPrefillCase({"prefill prod H32 T65 past0", ProductionShape(), 65, 0}, 33, &pool);
  RunPrefillCase({"prefill prod H32 T200 past0", ProductionShape(), 200, 0}, 34, &pool);
  RunPrefillCase({"prefill prod H32 T129 past127", ProductionShape(), 129, 127}, 35, &pool);
  RunPrefillCase({"prefill prod H32 T1 past300", ProductionShape(), 1, 300}, 36, &pool);
}

TEST(CudaMlaPrefill, OtherHeadCountsAndLongCacheMatchCpu) {
  // The fast kernels take any head count; a 300-token chunk after 8192
  // cached tokens (the sliced long-prompt prefill) at 4 heads keeps the host
  // references cheap.
  ThreadPool pool(0);
  RunPrefillCase({"prefill prod H1 T200 past0", ProductionShape(1), 200, 0}, 41, &pool);
  RunPrefillCase({"prefill prod H3 T65 past130", ProductionShape(3), 65, 130}, 42, &pool);
  RunPrefillCase({"prefill prod H4 T300 past8192", ProductionShape(4), 300, 8192}, 43, &pool);
}

TEST(CudaMlaPrefill, CapturedInCudaGraphMatchesDirectLaunch) {
  // Prefill must enqueue only on its stream and allocate nothing: capture it,
  // replay into a NaN-filled output, compare bit for bit with a direct launch.
  const MlaShape s = ProductionShape();
  const int64_t T = 300, past = 500, S = past + T, H = s.num_heads;
  const int64_t dqk = s.nope_dim + s.rope_dim, cd = s.cache_dim();
  std::mt19937 rng(51);
  const std::vector<float> q = RandomBf16(static_cast<size_t>(T * H * dqk), 6.f, rng);
  const std::vector<float> kv =
      RandomBf16(static_cast<size_t>(S * H * (s.nope_dim + s.v_dim)), 1.f, rng);
  const std::vector<float> rows = RandomBf16(static_cast<size_t>(S * cd), 1.f, rng);
  DeviceArray<bf16> q_d(q.size()), kv_d(kv.size()), rows_d(rows.size());
  DeviceArray<bf16> out_d(static_cast<size_t>(T * H * s.v_dim));
  ASSERT_TRUE(q_d.ptr() && kv_d.ptr() && rows_d.ptr() && out_d.ptr());
  CUDA_ASSERT_OK(Upload(q_d, Bits(q)));
  CUDA_ASSERT_OK(Upload(kv_d, Bits(kv)));
  CUDA_ASSERT_OK(Upload(rows_d, Bits(rows)));
  MlaPrefillArgs a;
  a.shape = s;
  a.num_tokens = T;
  a.past = past;
  a.q = q_d.ptr();
  a.kv = kv_d.ptr();
  a.k_rope = rows_d.ptr() + s.kv_rank;
  a.ld_krope = cd;
  a.out = out_d.ptr();
  cudaStream_t stream;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Status st = MlaPrefill(a, stream);
  ASSERT_TRUE(st.ok()) << st;
  CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> direct;
  CUDA_ASSERT_OK(Download(&direct, out_d));
  ASSERT_TRUE(std::none_of(direct.begin(), direct.end(), [](uint16_t b) { return b == 0xffff; }));
  CUDA_ASSERT_OK(cudaMemset(out_d.ptr(), 0xff, out_d.size() * 2));
  cudaGraph_t graph;
  CUDA_ASSERT_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  st = MlaPrefill(a, stream);
  CUDA_ASSERT_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  CUDA_ASSERT_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_ASSERT_OK(cudaGraphLaunch(exec, stream));
  CUDA_ASSERT_OK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> replay;
  CUDA_ASSERT_OK(Download(&replay, out_d));
  EXPECT_EQ(replay, direct);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---------------------------------------------------------------------------
// Cache write / gather.

void RunCacheCase(const MlaShape& s, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t cd = s.cache_dim(), max_blocks = 4, batch = 3;
  HostPagedCache host(batch, max_blocks, cd, rng);
  DeviceArray<bf16> pool_d(host.pool.size());
  DeviceArray<int32_t> table_d(host.table.size());
  ASSERT_TRUE(pool_d.ptr() && table_d.ptr());
  CUDA_ASSERT_OK(Upload(pool_d, host.pool));
  CUDA_ASSERT_OK(Upload(table_d, host.table));
  MlaCache cache;
  cache.pool = pool_d.ptr();
  cache.block_table = table_d.ptr();
  cache.max_blocks = max_blocks;

  // Prefill form: 150 rows of sequence 0 at positions 20..169 (three blocks).
  const int64_t n = 150, start = 20;
  std::vector<float> rows(static_cast<size_t>(n * ld), 0.f);
  const std::vector<float> vals = RandomBf16(static_cast<size_t>(n * cd), 1.f, rng);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(vals.begin() + i * cd, vals.begin() + (i + 1) * cd, rows.begin() + i * ld);
    uint16_t* dst = host.Row(0, start + i);
    for (int64_t j = 0; j < cd; ++j) dst[j] = ToBf16Bits(vals[static_cast<size_t>(i * cd + j)]);
  }
  DeviceArray<bf16> rows_d(rows.size());
  ASSERT_TRUE(rows_d.ptr());
  CUDA_ASSERT_OK(Upload(rows_d, Bits(rows)));
  Status st = MlaCacheWrite(s, cache, rows_d.ptr(), ld, n, start, nullptr, nullptr);
  ASSERT_TRUE(st.ok()) << st;

  // Decode form: row b to position positions[b] of sequence b; −1 skips.
  const std::vector<int32_t> positions = {170, 5, -1};
  const std::vector<float> dec = RandomBf16(static_cast<size_t>(batch * cd), 1.f, rng);
  std::vector<float> dec_rows(static_cast<size_t>(batch * ld), 0.f);
  for (int64_t b = 0; b < batch; ++b) {
    std::copy(dec.begin() + b * cd, dec.begin() + (b + 1) * cd, dec_rows.begin() + b * ld);
    if (positions[b] < 0) continue;
    uint16_t* dst = host.Row(b, positions[b]);
    for (int64_t j = 0; j < cd; ++j) dst[j] = ToBf16Bits(dec[static_cast<size_t>(b * cd + j)]);
  }
  DeviceArray<bf16> dec_d(dec_rows.size());
  DeviceArray<int32_t> pos_d(positions.size());
  ASSERT_TRUE(dec_d.ptr() && pos_d.ptr());
  CUDA_ASSERT_OK(Upload(dec_d, Bits(dec_rows)));
  CUDA_ASSERT_OK(Upload(pos_d, positions));
  st = MlaCacheWrite(s, cache, dec_d.ptr(), ld, batch, 0, pos_d.ptr(), nullptr);
  ASSERT_TRUE(st.ok()) << st;

  // Gather sequence 0's first 171 rows.
  const int64_t g = 171;
  DeviceArray<bf16> gathered_d(static_cast<size_t>(g * cd));
  ASSERT_TRUE(gathered_d.ptr());
  st = MlaCacheGather(s, cache, g, gathered_d.ptr(), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  CUDA_ASSERT_OK(cudaDeviceSynchronize());

  std::vector<uint16_t> pool_after, gathered;
  CUDA_ASSERT_OK(Download(&pool_after, pool_d));
  CUDA_ASSERT_OK(Download(&gathered, gathered_d));
  // The whole pool equals the host model: written rows land in their blocks,
  // nothing else is touched.
  size_t pool_mismatch = 0;
  for (size_t i = 0; i < host.pool.size(); ++i) pool_mismatch += pool_after[i] != host.pool[i];
  size_t gather_mismatch = 0;
  for (int64_t t = 0; t < g; ++t) {
    const uint16_t* want = host.Row(0, t);
    for (int64_t j = 0; j < cd; ++j) gather_mismatch += gathered[t * cd + j] != want[j];
  }
  std::printf("cache cd=%lld ld=%lld: pool mismatches %zu, gather mismatches %zu\n",
              static_cast<long long>(cd), static_cast<long long>(ld), pool_mismatch,
              gather_mismatch);
  EXPECT_EQ(pool_mismatch, 0u);
  EXPECT_EQ(gather_mismatch, 0u);
}

TEST(CudaMlaCache, WriteAndGatherThroughScrambledBlockTable) {
  RunCacheCase(TinyShape(), 43, 31);          // odd row stride: element-wise copies
  RunCacheCase(TinyShape(), 40, 32);          // r + dr = 40: 16-byte copies
  RunCacheCase(ProductionShape(), 576, 33);   // production rows
  RunCacheCase(ProductionShape(), 6144, 34);  // rows inside a wider projection output
}

// ---------------------------------------------------------------------------
// Misuse.

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(field));
}

TEST(CudaMla, RejectsBadArgumentsWithTheFieldName) {
  DeviceArray<bf16> buf(1 << 16);
  DeviceArray<int32_t> ints(64);
  ASSERT_TRUE(buf.ptr() && ints.ptr());
  const MlaShape prod = ProductionShape();
  MlaCache cache;
  cache.pool = buf.ptr();
  cache.block_table = ints.ptr();
  cache.max_blocks = 64;

  // Decode.
  MlaDecodeArgs d;
  d.shape = prod;
  d.batch = 1;
  d.q_abs = buf.ptr();
  d.cache = cache;
  d.seq_lens = ints.ptr();
  d.max_seq_len = 4096;
  d.out_latent = buf.ptr();
  const size_t ws = MlaDecodeWorkspaceBytes(prod, 1, 4096);
  EXPECT_GT(ws, 0u);  // batch 1 at 4K splits the sequence
  DeviceArray<uint8_t> ws_d(ws);
  ASSERT_TRUE(ws_d.ptr());
  auto dec = [&](auto mutate) {
    MlaDecodeArgs a = d;
    size_t bytes = ws;
    void* w = ws_d.ptr();
    mutate(a, bytes, w);
    return MlaDecode(a, w, bytes, nullptr);
  };
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.q_abs = nullptr; }), "q_abs");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.seq_lens = nullptr; }), "seq_lens");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.out_latent = nullptr; }),
                "out_latent");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.cache.pool = nullptr; }),
                "cache.pool");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.cache.block_table = nullptr; }),
                "cache.block_table");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.cache.max_blocks = 0; }),
                "cache.max_blocks");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.max_seq_len = 0; }), "max_seq_len");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.max_seq_len = 64 * 64 + 1; }),
                "max_seq_len");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.batch = -1; }), "batch");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.shape.num_heads = 0; }),
                "shape.num_heads");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.shape.kv_rank = 0; }),
                "shape.kv_rank");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.shape.rope_dim = -1; }),
                "shape.rope_dim");
  ExpectInvalid(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.shape.scale = -1.f; }),
                "shape.scale");
  ExpectInvalid(
      dec([](MlaDecodeArgs& a, size_t&, void*&) { a.out_type = static_cast<ActType>(7); }),
      "out_type");
  ExpectInvalid(dec([](MlaDecodeArgs&, size_t& b, void*&) { b = 0; }), "workspace_bytes");
  ExpectInvalid(dec([](MlaDecodeArgs&, size_t&, void*& w) { w = nullptr; }), "workspace");
  // A valid call still works after all that (no sticky error left behind).
  EXPECT_TRUE(dec([](MlaDecodeArgs& a, size_t&, void*&) { a.batch = 0; }).ok());

  // Prefill.
  MlaPrefillArgs p;
  p.shape = prod;
  p.num_tokens = 4;
  p.q = buf.ptr();
  p.kv = buf.ptr();
  p.k_rope = buf.ptr();
  p.out = buf.ptr();
  auto pre = [&](auto mutate) {
    MlaPrefillArgs a = p;
    mutate(a);
    return MlaPrefill(a, nullptr);
  };
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.q = nullptr; }), "q");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.kv = nullptr; }), "kv");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.k_rope = nullptr; }), "k_rope");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.out = nullptr; }), "out");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.ld_q = 100; }), "ld_q");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.ld_krope = 10; }), "ld_krope");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.num_tokens = -1; }), "num_tokens");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.past = -1; }), "past");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.shape.v_dim = 0; }), "shape.v_dim");
  ExpectInvalid(pre([](MlaPrefillArgs& a) { a.shape.num_heads = 0; }), "shape.num_heads");

  // Cache copies.
  ExpectInvalid(MlaCacheWrite(prod, cache, nullptr, 576, 1, 0, nullptr, nullptr), "rows");
  ExpectInvalid(MlaCacheWrite(prod, cache, buf.ptr(), 575, 1, 0, nullptr, nullptr), "ld");
  ExpectInvalid(MlaCacheWrite(prod, cache, buf.ptr(), 576, -1, 0, nullptr, nullptr), "n");
  ExpectInvalid(MlaCacheWrite(prod, cache, buf.ptr(), 576, 1, -1, nullptr, nullptr), "start");
  ExpectInvalid(MlaCacheWrite(prod, cache, buf.ptr(), 576, 2, 64 * 64 - 1, nullptr, nullptr),
                "start");
  ExpectInvalid(MlaCacheGather(prod, cache, 64 * 64 + 1, buf.ptr(), nullptr), "n");
  ExpectInvalid(MlaCacheGather(prod, cache, 1, nullptr, nullptr), "rows");
  MlaCache no_pool = cache;
  no_pool.pool = nullptr;
  ExpectInvalid(MlaCacheGather(prod, no_pool, 1, buf.ptr(), nullptr), "cache.pool");
  CUDA_ASSERT_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace strata::cuda
