// CUDA RMS norms against the CPU backend (cpu::RmsNorm, cpu::GatedRmsNormSigmoid)
// on random inputs, at tiny odd shapes (scalar path) and the production ones
// (D = 2304, KDA heads of 128; vector path):
//  * AddRmsNorm: h += delta exactly as fp32 adds (bf16/fp32/no delta), out
//    (or none) against RmsNorm of the new h; misaligned h takes the scalar path;
//  * RmsNormRows: strided rows, bf16 and fp32, in place, padding untouched;
//  * GatedRmsNormSigmoid: every o/gate type pair;
//  * EmbedRmsNormStart: the bits of UploadWords + EmbeddingGather + AddRmsNorm;
//  * misuse → InvalidArgument naming the field.
// Each case prints max abs / max rel / L2-relative error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/norm.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "base/dtype.h"
#include "op_test_util.h"

namespace strata::cuda {
namespace {

using op_test::Compare;
using op_test::DevBuf;
using op_test::Errors;
using op_test::Uniform;

void Report(const std::string& what, const Errors& e, double tol) {
  std::printf("[norm] %-70s max_abs=%.3e max_rel=%.3e l2_rel=%.3e (tol %.0e)\n", what.c_str(),
              e.max_abs, e.max_rel, e.l2_rel, tol);
  EXPECT_LE(e.l2_rel, tol) << what;
}

// Values as stored in `t` (bf16: rounded) and their bytes for upload.
std::vector<float> RoundTo(ActType t, const std::vector<float>& v) {
  if (t == ActType::kF32) return v;
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = Bf16ToF32(F32ToBf16(v[i]));
  return r;
}
void Upload(ActType t, const std::vector<float>& v, void* dst) {
  if (t == ActType::kF32) {
    ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
    ASSERT_EQ(cudaMemcpy(dst, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
}
std::vector<float> Download(ActType t, const void* src, size_t n) {
  std::vector<float> v(n);
  if (t == ActType::kF32) {
    EXPECT_EQ(cudaMemcpy(v.data(), src, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    std::vector<uint16_t> b(n);
    EXPECT_EQ(cudaMemcpy(b.data(), src, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i) v[i] = Bf16ToF32(b[i]);
  }
  return v;
}

const char* Name(ActType t) { return t == ActType::kF32 ? "f32" : "bf16"; }

constexpr float kEps = 1e-5f;

TEST(CudaNorm, AddRmsNormMatchesCpu) {
  uint64_t seed = 1;
  struct Shape {
    int64_t n, dim;
    size_t h_offset;
  };
  for (const Shape& s :
       {Shape{1, 64, 0}, Shape{3, 129, 0}, Shape{4, 24, 0}, Shape{5, 2304, 0}, Shape{37, 2304, 0},
        Shape{300, 2304, 0}, Shape{2, 2304, 4}, Shape{1, 7168, 0}}) {
    for (int delta_kind = 0; delta_kind < 3; ++delta_kind) {  // none, bf16, fp32
      for (bool with_out : {true, false}) {
        std::mt19937_64 rng(seed++);
        const ActType dt = delta_kind == 2 ? ActType::kF32 : ActType::kBf16;
        const size_t count = static_cast<size_t>(s.n * s.dim);
        std::vector<float> h = Uniform(count, rng, -3.f, 3.f);
        std::vector<float> delta = RoundTo(dt, Uniform(count, rng, -2.f, 2.f));
        std::vector<float> w = Uniform(static_cast<size_t>(s.dim), rng, 0.5f, 1.5f);
        DevBuf hd(count * 4, s.h_offset), dd(count * 4), wd(w.size() * 4), od(count * 2);
        CUDA_OK(cudaMemcpy(hd.get(), h.data(), count * 4, cudaMemcpyHostToDevice));
        Upload(dt, delta, dd.get());
        CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 4, cudaMemcpyHostToDevice));
        const Status st =
            AddRmsNorm(hd.get<float>(), delta_kind ? dd.get() : nullptr, dt, s.n, s.dim,
                       wd.get<float>(), kEps, with_out ? od.get<bf16>() : nullptr, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        CUDA_OK(cudaDeviceSynchronize());

        std::vector<float> h_ref = h;
        if (delta_kind) {
          for (size_t i = 0; i < count; ++i) h_ref[i] += delta[i];
        }
        std::vector<float> h_got = Download(ActType::kF32, hd.get(), count);
        // One fp32 add per element on both sides: bit-identical.
        EXPECT_EQ(std::memcmp(h_got.data(), h_ref.data(), count * 4), 0)
            << "h after add, n=" << s.n << " dim=" << s.dim;
        if (!with_out) continue;
        std::vector<float> ref(count);
        cpu::RmsNorm(h_ref.data(), s.n, s.dim, w.data(), kEps, ref.data(), nullptr);
        const Errors e = Compare(Download(ActType::kBf16, od.get(), count), ref);
        char what[128];
        std::snprintf(what, sizeof(what), "AddRmsNorm n=%lld dim=%lld delta=%s h_off=%zu",
                      static_cast<long long>(s.n), static_cast<long long>(s.dim),
                      delta_kind ? Name(dt) : "none", s.h_offset);
        Report(what, e, 1e-2);
        EXPECT_LE(e.max_rel, 2e-2) << what;
      }
    }
  }
}

// early_trigger lets the next kernel launch before the norm's own wait; the
// next kernel still waits for the norm's writes. A chain of early-triggering
// norms on a stream, each reading the h the one before it wrote (the next
// norm adds its delta into it), gives exactly the bits of the same chain
// without the early trigger, over many repetitions.
TEST(CudaNorm, EarlyTriggerGivesTheNextKernelTheSameInputs) {
  std::mt19937_64 rng(91);
  constexpr int64_t kN = 3, kDim = 2304, kChain = 40;
  const size_t count = kN * kDim;
  const std::vector<float> h0 = Uniform(count, rng, -3.f, 3.f);
  const std::vector<float> delta = Uniform(count, rng, -0.5f, 0.5f);
  const std::vector<float> w = Uniform(kDim, rng, 0.5f, 1.5f);
  DevBuf hd(count * 4), dd(count * 4), wd(kDim * 4), od(count * 2);
  CUDA_OK(cudaMemcpy(dd.get(), delta.data(), count * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(wd.get(), w.data(), kDim * 4, cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> results[2];
  for (int early = 0; early < 2; ++early) {
    CUDA_OK(cudaMemcpy(hd.get(), h0.data(), count * 4, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < kChain; ++i) {
      // Every other norm adds delta, so each one's h depends on its predecessor's.
      const Status st = AddRmsNorm(hd.get<float>(), i % 2 == 0 ? dd.get() : nullptr, ActType::kF32,
                                   kN, kDim, wd.get<float>(), kEps, od.get<bf16>(), s, early == 1);
      ASSERT_TRUE(st.ok()) << st;
    }
    CUDA_OK(cudaStreamSynchronize(s));
    results[early] = Download(ActType::kF32, hd.get(), count);
    const std::vector<float> out = Download(ActType::kBf16, od.get(), count);
    results[early].insert(results[early].end(), out.begin(), out.end());
  }
  EXPECT_EQ(results[0], results[1]);
  // h really changed: 20 deltas were added.
  EXPECT_NE(std::memcmp(results[1].data(), h0.data(), count * 4), 0);
  CUDA_OK(cudaStreamDestroy(s));
}

TEST(CudaNorm, RmsNormRowsStridedAndInPlace) {
  uint64_t seed = 100;
  struct Shape {
    int64_t n, dim, ldx, ldy;
  };
  for (const Shape& s : {Shape{3, 24, 24, 24}, Shape{4, 33, 40, 35}, Shape{5, 512, 576, 520},
                         Shape{64, 512, 576, 512}, Shape{7, 2304, 2304, 2304}}) {
    for (ActType t : {ActType::kBf16, ActType::kF32}) {
      for (bool in_place : {false, true}) {
        std::mt19937_64 rng(seed++);
        const int64_t ldy = in_place ? s.ldx : s.ldy;
        std::vector<float> x =
            RoundTo(t, Uniform(static_cast<size_t>(s.n * s.ldx), rng, -2.f, 2.f));
        std::vector<float> y0 =
            RoundTo(t, Uniform(static_cast<size_t>(s.n * ldy), rng, -9.f, 9.f));  // padding marker
        std::vector<float> w = Uniform(static_cast<size_t>(s.dim), rng, 0.5f, 1.5f);
        const size_t esize = ActBytes(t);
        DevBuf xd(x.size() * esize), yd(y0.size() * esize), wd(w.size() * 4);
        Upload(t, x, xd.get());
        Upload(t, y0, yd.get());
        CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 4, cudaMemcpyHostToDevice));
        void* y = in_place ? xd.get() : yd.get();
        const Status st =
            RmsNormRows(xd.get(), s.ldx, y, ldy, t, s.n, s.dim, wd.get<float>(), kEps, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> xp(static_cast<size_t>(s.n * s.dim));
        for (int64_t r = 0; r < s.n; ++r)
          for (int64_t c = 0; c < s.dim; ++c) xp[r * s.dim + c] = x[r * s.ldx + c];
        std::vector<float> ref(xp.size());
        cpu::RmsNorm(xp.data(), s.n, s.dim, w.data(), kEps, ref.data(), nullptr);
        std::vector<float> yall = Download(t, y, static_cast<size_t>(s.n * ldy));
        const std::vector<float>& before = in_place ? x : y0;
        std::vector<float> got(ref.size());
        for (int64_t r = 0; r < s.n; ++r) {
          for (int64_t c = 0; c < s.dim; ++c) got[r * s.dim + c] = yall[r * ldy + c];
          for (int64_t c = s.dim; c < ldy; ++c) {
            ASSERT_EQ(yall[r * ldy + c], before[r * ldy + c]) << "padding written, row " << r;
          }
        }
        char what[128];
        std::snprintf(what, sizeof(what), "RmsNormRows n=%lld dim=%lld ldx=%lld ldy=%lld %s%s",
                      static_cast<long long>(s.n), static_cast<long long>(s.dim),
                      static_cast<long long>(s.ldx), static_cast<long long>(ldy), Name(t),
                      in_place ? " in-place" : "");
        Report(what, Compare(got, ref), t == ActType::kF32 ? 1e-5 : 1e-2);
      }
    }
  }
}

TEST(CudaNorm, GatedRmsNormSigmoidMatchesCpu) {
  uint64_t seed = 200;
  struct Shape {
    int64_t rows, dim;
  };
  // rows = tokens · heads: tiny fixtures (H 3..5, dk 24..48), an odd width,
  // decode (32 heads of 128) and a prefill chunk.
  for (const Shape& s : {Shape{1, 24}, Shape{15, 48}, Shape{20, 36}, Shape{9, 130}, Shape{32, 128},
                         Shape{32 * 300, 128}}) {
    for (ActType ot : {ActType::kF32, ActType::kBf16}) {
      for (ActType gt : {ActType::kF32, ActType::kBf16}) {
        std::mt19937_64 rng(seed++);
        const size_t count = static_cast<size_t>(s.rows * s.dim);
        std::vector<float> o = RoundTo(ot, Uniform(count, rng, -2.f, 2.f));
        std::vector<float> g = RoundTo(gt, Uniform(count, rng, -4.f, 4.f));
        std::vector<float> w = Uniform(static_cast<size_t>(s.dim), rng, 0.5f, 1.5f);
        DevBuf od(count * 4), gd(count * 4), wd(w.size() * 4), yd(count * 2);
        Upload(ot, o, od.get());
        Upload(gt, g, gd.get());
        CUDA_OK(cudaMemcpy(wd.get(), w.data(), w.size() * 4, cudaMemcpyHostToDevice));
        const Status st = GatedRmsNormSigmoid(od.get(), ot, gd.get(), gt, s.rows, s.dim,
                                              wd.get<float>(), kEps, yd.get<bf16>(), nullptr);
        ASSERT_TRUE(st.ok()) << st;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> ref(count);
        cpu::GatedRmsNormSigmoid(o.data(), g.data(), s.rows, s.dim, w.data(), kEps, ref.data(),
                                 nullptr);
        char what[128];
        std::snprintf(what, sizeof(what), "GatedRmsNormSigmoid rows=%lld dim=%lld o=%s gate=%s",
                      static_cast<long long>(s.rows), static_cast<long long>(s.dim), Name(ot),
                      Name(gt));
        const Errors e = Compare(Download(ActType::kBf16, yd.get(), count), ref);
        Report(what, e, 1e-2);
        EXPECT_LE(e.max_rel, 2e-2) << what;
      }
    }
  }
}

void ExpectInvalid(const Status& st, const char* field) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field << ": " << st;
  EXPECT_NE(std::string(st.message()).find(field), std::string::npos) << st;
}

// EmbedRmsNormStart against the three kernels it replaces (UploadWords,
// EmbeddingGather, AddRmsNorm without delta): the copied words, h and out
// byte for byte, with the tokens read from pinned host memory. Dims: the
// production 2304 (one vector per thread), 8200 (past the held vectors:
// the loop path), 66 (scalar), and 2304 with out misaligned (scalar on a
// vector-sized row).
TEST(CudaNorm, EmbedRmsNormStartGivesTheThreeKernelsBits) {
  std::mt19937_64 rng(23);
  constexpr int64_t kVocab = 37;
  struct Case {
    int64_t dim, n;
    size_t out_offset;  // bytes
  };
  for (const Case c :
       {Case{2304, 1, 0}, Case{2304, 3, 0}, Case{8200, 2, 0}, Case{66, 3, 0}, Case{2304, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "dim=" << c.dim << " n=" << c.n << " out+" << c.out_offset);
    const int64_t D = c.dim, n = c.n;
    const int64_t n0 = 4 * 8, n1 = 13;  // tokens | other step words, then sampling words
    uint32_t* host = nullptr;
    CUDA_OK(cudaMallocHost(&host, sizeof(uint32_t) * static_cast<size_t>(n0 + n1)));
    for (int64_t i = 0; i < n0 + n1; ++i) host[i] = static_cast<uint32_t>(rng());
    for (int64_t b = 0; b < n; ++b) host[b] = static_cast<uint32_t>(rng() % kVocab);
    const std::vector<float> embed = Uniform(static_cast<size_t>(kVocab * D), rng, -2.f, 2.f);
    const std::vector<float> w = Uniform(static_cast<size_t>(D), rng, 0.5f, 1.5f);
    DevBuf d_embed(sizeof(uint16_t) * embed.size()), d_w(sizeof(float) * w.size());
    Upload(ActType::kBf16, embed, d_embed.get());
    Upload(ActType::kF32, w, d_w.get());
    const size_t rows = static_cast<size_t>(n * D);
    DevBuf words_ref(sizeof(uint32_t) * (n0 + n1)), words(sizeof(uint32_t) * (n0 + n1));
    DevBuf h_ref(sizeof(float) * rows), h(sizeof(float) * rows);
    DevBuf out_ref(sizeof(uint16_t) * rows, c.out_offset),
        out(sizeof(uint16_t) * rows, c.out_offset);
    CUDA_OK(cudaMemset(h.get(), 0xff, sizeof(float) * rows));
    CUDA_OK(cudaMemset(out.get(), 0xff, sizeof(uint16_t) * rows));
    cudaStream_t s = nullptr;
    CUDA_OK(cudaStreamCreate(&s));

    uint32_t* wr = words_ref.get<uint32_t>();
    ASSERT_TRUE(UploadWords(host, wr, n0, host + n0, wr + n0, n1, s).ok());
    ASSERT_TRUE(EmbeddingGather(d_embed.get<bf16>(), D, reinterpret_cast<const int32_t*>(wr), n,
                                h_ref.get<float>(), s)
                    .ok());
    ASSERT_TRUE(AddRmsNorm(h_ref.get<float>(), nullptr, ActType::kF32, n, D, d_w.get<float>(), kEps,
                           out_ref.get<bf16>(), s)
                    .ok());

    EmbedRmsNormStartArgs a;
    a.src0 = host;
    a.dst0 = words.get<uint32_t>();
    a.n0 = n0;
    a.src1 = host + n0;
    a.dst1 = words.get<uint32_t>() + n0;
    a.n1 = n1;
    a.n = n;
    a.embed = d_embed.get<bf16>();
    a.dim = D;
    a.w = d_w.get<float>();
    a.eps = kEps;
    a.h = h.get<float>();
    a.out = out.get<bf16>();
    ASSERT_TRUE(EmbedRmsNormStart(a, s).ok());
    CUDA_OK(cudaStreamSynchronize(s));

    auto bytes = [](const DevBuf& d, size_t count) {
      std::vector<uint8_t> v(count);
      EXPECT_EQ(cudaMemcpy(v.data(), d.get(), count, cudaMemcpyDeviceToHost), cudaSuccess);
      return v;
    };
    EXPECT_EQ(bytes(words, 4 * (n0 + n1)), bytes(words_ref, 4 * (n0 + n1))) << "words";
    EXPECT_EQ(bytes(h, 4 * rows), bytes(h_ref, 4 * rows)) << "h";
    EXPECT_EQ(bytes(out, 2 * rows), bytes(out_ref, 2 * rows)) << "out";
    // Not vacuous: out is a normalised row (mean square ≈ mean w²), not the poison.
    const std::vector<float> o = Download(ActType::kBf16, out.get(), rows);
    double ms = 0;
    for (float v : o) ms += static_cast<double>(v) * v;
    ms /= static_cast<double>(rows);
    EXPECT_GT(ms, 0.2);
    EXPECT_LT(ms, 3.0);
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFreeHost(host));
  }
}

TEST(CudaNorm, MisuseIsInvalidArgument) {
  DevBuf a(1 << 16), b(1 << 16), w(1 << 16);
  float* h = a.get<float>();
  const float* wp = w.get<float>();
  bf16* out = b.get<bf16>();
  ASSERT_TRUE(AddRmsNorm(h, nullptr, ActType::kBf16, 2, 64, wp, kEps, out, nullptr).ok());
  ExpectInvalid(AddRmsNorm(nullptr, nullptr, ActType::kBf16, 2, 64, wp, kEps, out, nullptr), "h");
  ExpectInvalid(AddRmsNorm(h, nullptr, ActType::kBf16, 2, 64, nullptr, kEps, out, nullptr), "w");
  ExpectInvalid(AddRmsNorm(h, nullptr, ActType::kBf16, -1, 64, wp, kEps, out, nullptr), "n");
  ExpectInvalid(AddRmsNorm(h, nullptr, ActType::kBf16, 2, 0, wp, kEps, out, nullptr), "dim");
  ExpectInvalid(AddRmsNorm(h, nullptr, ActType::kBf16, 2, 64, wp, -1.f, out, nullptr), "eps");
  ExpectInvalid(AddRmsNorm(h, b.get(), static_cast<ActType>(5), 2, 64, wp, kEps, out, nullptr),
                "delta_type");
  EXPECT_TRUE(AddRmsNorm(h, nullptr, ActType::kBf16, 0, 64, wp, kEps, out, nullptr).ok());

  {
    EmbedRmsNormStartArgs e;
    uint32_t* words = w.get<uint32_t>() + 8192;
    e.src0 = words;
    e.dst0 = words + 64;
    e.n0 = 4;
    e.n = 2;
    e.embed = b.get<bf16>();
    e.dim = 64;
    e.w = wp;
    e.eps = kEps;
    e.h = h;
    e.out = out;
    EmbedRmsNormStartArgs bad = e;
    bad.n = 5;
    ExpectInvalid(EmbedRmsNormStart(bad, nullptr), "n0");
    bad = e;
    bad.embed = nullptr;
    ExpectInvalid(EmbedRmsNormStart(bad, nullptr), "embed");
    bad = e;
    bad.w = nullptr;
    ExpectInvalid(EmbedRmsNormStart(bad, nullptr), "w");
    bad = e;
    bad.n1 = 3;  // words without a span
    ExpectInvalid(EmbedRmsNormStart(bad, nullptr), "null");
    bad = e;
    bad.dim = 0;
    ExpectInvalid(EmbedRmsNormStart(bad, nullptr), "dim");
  }

  void* x = a.get();
  ASSERT_TRUE(RmsNormRows(x, 64, x, 64, ActType::kF32, 2, 64, wp, kEps, nullptr).ok());
  ExpectInvalid(RmsNormRows(nullptr, 64, x, 64, ActType::kF32, 2, 64, wp, kEps, nullptr), "x");
  ExpectInvalid(RmsNormRows(x, 64, nullptr, 64, ActType::kF32, 2, 64, wp, kEps, nullptr), "y");
  ExpectInvalid(RmsNormRows(x, 63, b.get(), 64, ActType::kF32, 2, 64, wp, kEps, nullptr), "ldx");
  ExpectInvalid(RmsNormRows(x, 64, b.get(), 32, ActType::kF32, 2, 64, wp, kEps, nullptr), "ldy");
  ExpectInvalid(RmsNormRows(x, 64, x, 80, ActType::kF32, 2, 64, wp, kEps, nullptr), "in place");
  ExpectInvalid(RmsNormRows(x, 64, b.get(), 64, static_cast<ActType>(3), 2, 64, wp, kEps, nullptr),
                "type");

  const void* g = b.get();
  bf16* y = w.get<bf16>() + 4096;
  ASSERT_TRUE(
      GatedRmsNormSigmoid(x, ActType::kF32, g, ActType::kBf16, 4, 32, wp, kEps, y, nullptr).ok());
  ExpectInvalid(
      GatedRmsNormSigmoid(nullptr, ActType::kF32, g, ActType::kBf16, 4, 32, wp, kEps, y, nullptr),
      "o");
  ExpectInvalid(
      GatedRmsNormSigmoid(x, ActType::kF32, nullptr, ActType::kBf16, 4, 32, wp, kEps, y, nullptr),
      "gate");
  ExpectInvalid(
      GatedRmsNormSigmoid(x, ActType::kF32, g, ActType::kBf16, 4, 32, wp, kEps, nullptr, nullptr),
      "out");
  ExpectInvalid(GatedRmsNormSigmoid(x, static_cast<ActType>(9), g, ActType::kBf16, 4, 32, wp, kEps,
                                    y, nullptr),
                "o_type");
  ExpectInvalid(GatedRmsNormSigmoid(x, ActType::kF32, g, static_cast<ActType>(9), 4, 32, wp, kEps,
                                    y, nullptr),
                "gate_type");
  ExpectInvalid(
      GatedRmsNormSigmoid(x, ActType::kF32, g, ActType::kBf16, 4, -2, wp, kEps, y, nullptr), "dim");
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace strata::cuda
