// Kimi Delta Attention on the GPU (model-spec §2.3; exec/cpu/kda_layer.cc is
// the reference for the math):
//   proj = xn·[q|k|v|f_a|g_a|b]ᵀ                  one GEMM
//   qkv = SiLU(conv(proj[:, :3C]))               window carried per slot
//   g = f_b(f_a), z = g_b(g_a)                   rank-dk GEMMs on proj's columns
//   o = KDA(q, k, v, g, β)                       chunked prefill / recurrent decode
//   h += o_proj(GatedRMSNorm(o, z))              GEMM accumulating into h
// The fused input projection's segments after v are padded to 8 rows, so
// every segment starts 16-byte aligned. A decode of at most kFusedMaxBatch
// rows runs conv through the norm as one kernel (KdaDecodeFused); otherwise
// decode steps of few rows run the gate products on the side stream beside
// the conv (f_b) and the recurrent step (g_b) (CudaOps::Branching). State per
// sequence slot and layer: the KDA state [H, dk, dk] and the conv window
// [K−1, 3C] (fp32).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/kda.h"
#include "backend/cuda/norm.h"
#include "exec/cuda/delta_rule_mixer.h"

namespace strata {
namespace cuda_exec {
namespace {

using cuda::ActType;

// Largest decode batch that takes KdaDecodeFused: against the chain with its
// side branches it wins at batch 1 and 2, breaks even at 4 and loses at 8
// (each row's CTAs re-read the gate weights and the step has no branch left
// to overlap).
constexpr int64_t kFusedMaxBatch = 2;

class KdaMixer final : public DeltaRuleMixer {
 public:
  // Value heads have the key width; the conv window holds q, k and v.
  KdaMixer(const exec::KdaSpec& s, const MixerContext& ctx)
      : DeltaRuleMixer(ctx, {s.heads, s.head_dim, s.head_dim},
                       (s.conv_kernel - 1) * 3 * s.heads * s.head_dim),
        s_(s) {
    C_ = s.heads * s.head_dim;
    off_fa_ = Pad8(3 * C_);
    off_ga_ = off_fa_ + Pad8(s.head_dim);
    off_b_ = off_ga_ + Pad8(s.head_dim);
    n_in_ = off_b_ + Pad8(s.heads);
  }

  // Long enough that re-reading the expert weights per slice stays well
  // below the slice's compute at the production shapes.
  int64_t PreferredSlice() const override { return 8192; }
  void CarveMember(size_t i, WeightCarver& c) override;
  void CarveScratch(const SequencePlan& p, Carver& c) override;
  Status UploadMember(size_t i, const TensorSink& sink) override;
  Status FillDummyMember(size_t i, DummyFill& fill) override;
  Status Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                 const MixerPass& pass) const override;

 private:
  struct Weights {
    bf16* in_proj = nullptr;     // [n_in, D]
    bf16* f_b = nullptr;         // [C, dk]
    bf16* g_b = nullptr;         // [C, dk]
    bf16* o = nullptr;           // [D, C]
    float* conv = nullptr;       // [3C, K]
    float* neg_exp_a = nullptr;  // [H]
    float* dt_bias = nullptr;    // [C]
    float* o_norm = nullptr;     // [dk]
  };
  struct Scratch {
    bf16* proj = nullptr;   // [rows, n_in]
    bf16* qkv = nullptr;    // [rows, 3C] conv + SiLU output
    float* graw = nullptr;  // [rows, C] f_b output (gate pre-activation)
    bf16* gate = nullptr;   // [rows, C] g_b output
    bf16* o = nullptr;      // [rows, C] KDA output
    bf16* y = nullptr;      // [rows, C] gated-norm output
    void* ws = nullptr;
  };

  // Decode: conv through the norm in one kernel where it applies; *done says
  // whether it ran (else Chain does the work).
  Status TryFused(const CudaOps& ops, size_t i, int64_t n, const int32_t* slots, bool* done) const;
  // conv, gates, the KDA step (decode or prefill) and the gated output norm:
  // proj → y.
  Status Chain(const CudaOps& ops, size_t i, const MixerPass& pass, const int32_t* slots) const;

  exec::KdaSpec s_;
  int64_t C_ = 0, off_fa_ = 0, off_ga_ = 0, off_b_ = 0, n_in_ = 0;
  std::vector<Weights> w_;
  Scratch x_;
};

void KdaMixer::CarveMember(size_t i, WeightCarver& c) {
  if (w_.size() <= i) w_.resize(i + 1);
  Weights& w = w_[i];
  const int64_t D = ctx_.hidden, dk = s_.head_dim;
  w.in_proj = c.Take<bf16>(n_in_ * D);
  w.f_b = c.Take<bf16>(C_ * dk);
  w.g_b = c.Take<bf16>(C_ * dk);
  w.o = c.Take<bf16>(D * C_);
  w.conv = c.Take<float>(3 * C_ * s_.conv_kernel);
  w.neg_exp_a = c.Take<float>(s_.heads);
  w.dt_bias = c.Take<float>(C_);
  w.o_norm = c.Take<float>(dk);
}

void KdaMixer::CarveScratch(const SequencePlan& p, Carver& c) {
  const int64_t R = p.rows;
  x_.proj = c.Take<bf16>(R * n_in_);
  x_.qkv = c.Take<bf16>(R * 3 * C_);
  x_.graw = c.Take<float>(R * C_);
  x_.gate = c.Take<bf16>(R * C_);
  x_.o = c.Take<bf16>(R * C_);
  x_.y = c.Take<bf16>(R * C_);
  x_.ws = c.Take<char>(static_cast<int64_t>(ws_bytes_));
}

Status KdaMixer::UploadMember(size_t i, const TensorSink& sink) {
  const Weights& w = w_[i];
  const std::string& a = prefix(i);
  const int64_t D = ctx_.hidden, H = s_.heads, dk = s_.head_dim, K = s_.conv_kernel;
  const Mat in{.bf = w.in_proj};
  // One [q|k|v|f_a|g_a|b] matrix: the layer's input is read once.
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "q_proj.weight", C_, D, in, 0));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "k_proj.weight", C_, D, in, C_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "v_proj.weight", C_, D, in, 2 * C_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "f_a_proj.weight", dk, D, in, off_fa_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "g_a_proj.weight", dk, D, in, off_ga_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "b_proj.weight", H, D, in, off_b_));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "f_b_proj.weight", C_, dk, Mat{.bf = w.f_b}, 0));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "g_b_proj.weight", C_, dk, Mat{.bf = w.g_b}, 0));
  STRATA_RETURN_IF_ERROR(sink.matrix(a + "o_proj.weight", D, C_, Mat{.bf = w.o}, 0));
  // Conv taps of q, k, v stacked in the fused channel order.
  const char* convs[3] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
  for (int j = 0; j < 3; ++j) {
    STRATA_RETURN_IF_ERROR(sink.Floats(a + convs[j], {{C_, 1, K}}, w.conv + j * C_ * K));
  }
  // Exports differ in the unit dims of A_log and dt_bias.
  STRATA_RETURN_IF_ERROR(
      sink.Floats(a + "A_log", {{1, 1, H, 1}, {H}, {H, 1}}, w.neg_exp_a, [](std::vector<float>& v) {
        for (float& x : v) x = -std::exp(x);
      }));
  STRATA_RETURN_IF_ERROR(sink.Floats(a + "dt_bias", {{C_}, {H, dk}}, w.dt_bias));
  return sink.Norm(a + "o_norm.weight", dk, w.o_norm);
}

Status KdaMixer::FillDummyMember(size_t i, DummyFill& fill) {
  const Weights& w = w_[i];
  const int64_t D = ctx_.hidden, H = s_.heads, dk = s_.head_dim;
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.in_proj, 3 * C_ * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.in_proj + off_fa_ * D, dk * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.in_proj + off_ga_ * D, dk * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.in_proj + off_b_ * D, H * D));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.f_b, C_ * dk));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.g_b, C_ * dk));
  STRATA_RETURN_IF_ERROR(fill.Matrix(w.o, D * C_));
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.conv, 3 * C_ * s_.conv_kernel, -0.5f, 0.5f));
  // −exp(A_log) with A_log = log U[1, 16] (the usual init), and dt_bias with
  // softplus(dt_bias) in about [0.001, 0.1]: decays like a trained KDA.
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.neg_exp_a, H, -16.f, -1.f));
  STRATA_RETURN_IF_ERROR(fill.Uniform(w.dt_bias, C_, -6.9f, -2.3f));
  return fill.Ones(w.o_norm, dk);
}

Status KdaMixer::Enqueue(const CudaOps& ops, size_t i, const MixerFrame& f,
                         const MixerPass& pass) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, D = ctx_.hidden;
  STRATA_RETURN_IF_ERROR(ops.Mm(ops.stream, f.xn, ActType::kBf16, D, n, w.in_proj, n_in_, D,
                                x_.proj, ActType::kBf16, n_in_, 0.f));
  bool fused = false;
  if (pass.decode) {
    STRATA_RETURN_IF_ERROR(TryFused(ops, i, n, f.slots(), &fused));
  }
  if (!fused) STRATA_RETURN_IF_ERROR(Chain(ops, i, pass, f.slots()));
  return ops.Mm(ops.stream, x_.y, ActType::kBf16, C_, n, w.o, D, C_, f.h, ActType::kF32, D, 1.f);
}

Status KdaMixer::TryFused(const CudaOps& ops, size_t i, int64_t n, const int32_t* slots,
                          bool* done) const {
  const Weights& w = w_[i];
  // Batch-invariant mode keeps the chain, whose rounding the prefill's
  // recurrent form reproduces.
  *done = false;
  if (ctx_.invariant || !ops.On(tuning::Key::kKdaFusedDecode) || n > kFusedMaxBatch) {
    return OkStatus();
  }
  cuda::KdaDecodeFusedArgs a;
  a.shape = shape_;
  a.batch = n;
  a.proj = x_.proj;
  a.ld_proj = n_in_;
  a.off_fa = off_fa_;
  a.off_ga = off_ga_;
  a.off_beta = off_b_;
  a.rank = s_.head_dim;
  a.conv_w = w.conv;
  a.conv_kernel = s_.conv_kernel;
  a.window_pool = Windows(i);
  a.f_b = w.f_b;
  a.g_b = w.g_b;
  a.dt_bias = w.dt_bias;
  a.neg_exp_a = w.neg_exp_a;
  a.o_norm = w.o_norm;
  a.eps = s_.norm_eps;
  a.state_pool = States(i);
  a.slots = slots;
  a.out = x_.y;
  a.state_before_wait = true;  // the kernel before it is in_proj's GEMM (Enqueue)
  if (!cuda::KdaDecodeFusedSupported(a)) return OkStatus();
  STRATA_RETURN_IF_ERROR(cuda::KdaDecodeFused(a, ops.stream));
  *done = true;
  return OkStatus();
}

Status KdaMixer::Chain(const CudaOps& ops, size_t i, const MixerPass& pass,
                       const int32_t* slots) const {
  const Weights& w = w_[i];
  const int64_t n = pass.n, dk = s_.head_dim, K = s_.conv_kernel;
  cudaStream_t st = ops.stream;
  // Decode branches: the rank-dk gate products run on the side stream
  // beside the conv (f_b) and beside the recurrent step (g_b, needed only by
  // the output norm).
  const bool branch = pass.decode && ops.Branching(n);
  cudaStream_t aux = branch ? ops.side : st;
  if (branch) STRATA_RETURN_IF_ERROR(ops.Fork());
  // Gate pre-activations in fp32 (they go through exp and a cumulative sum);
  // the output gate only through a sigmoid, bf16 is plenty.
  STRATA_RETURN_IF_ERROR(ops.Mm(aux, x_.proj + off_fa_, ActType::kBf16, n_in_, n, w.f_b, C_, dk,
                                x_.graw, ActType::kF32, C_, 0.f));
  if (pass.decode) {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluDecode(x_.proj, ActType::kBf16, n_in_, n, 3 * C_,
                                                      w.conv, K, Windows(i), slots, x_.qkv, st));
  } else {
    STRATA_RETURN_IF_ERROR(cuda::CausalConvSiluPrefill(
        x_.proj, ActType::kBf16, n_in_, n, 3 * C_, w.conv, K, Windows(i, pass.slot), x_.qkv, st));
  }
  if (branch) STRATA_RETURN_IF_ERROR(ops.Join());
  STRATA_RETURN_IF_ERROR(ops.Mm(aux, x_.proj + off_ga_, ActType::kBf16, n_in_, n, w.g_b, C_, dk,
                                x_.gate, ActType::kBf16, C_, 0.f));
  cuda::KdaGates gates;
  gates.g_raw = x_.graw;
  gates.g_type = ActType::kF32;
  gates.ld_g = C_;
  gates.beta_raw = x_.proj + off_b_;
  gates.beta_type = ActType::kBf16;
  gates.ld_beta = n_in_;
  gates.neg_exp_a = w.neg_exp_a;
  gates.dt_bias = w.dt_bias;
  STRATA_RETURN_IF_ERROR(Step(ops, i, pass, slots, x_.qkv, C_, 3 * C_, gates, x_.o, x_.ws));
  // The second join: g_b, beside the recurrent step.
  if (branch) STRATA_RETURN_IF_ERROR(ops.Join());
  return cuda::GatedRmsNormSigmoid(x_.o, ActType::kBf16, x_.gate, ActType::kBf16, n * s_.heads, dk,
                                   w.o_norm, s_.norm_eps, x_.y, st);
}

}  // namespace

std::unique_ptr<CudaMixer> MakeCudaMixer(const exec::KdaSpec& spec, const MixerContext& ctx) {
  return std::make_unique<KdaMixer>(spec, ctx);
}

}  // namespace cuda_exec
}  // namespace strata
