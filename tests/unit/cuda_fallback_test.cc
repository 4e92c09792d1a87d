// Device selection and the model-level pieces around the CUDA executor that
// every build has (runs in CPU-only CI):
//   * device=cpu loads on the CPU with no notice; device=cuda/auto loads on
//     the GPU when this build has CUDA and a usable device, and otherwise
//     gives the CPU model plus a notice saying why, never an error;
//   * --load-format dummy on the CPU (random host weights from config.json
//     alone), deterministic per seed, and refused clearly for 48B shapes;
//   * Model::DecodeBatch / DecodeBatchSample defaults (a loop of Forward);
//   * the shared kimi_linear tensor list names every tensor of each fixture;
//   * the cost model the benchmarks report against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/npy.h"
#include "exec/cost_model.h"
#include "exec/cpu/cpu_executor.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/builtin.h"
#include "model/weight_store.h"
#if defined(STRATA_HAVE_CUDA)
#include "backend/cuda/device_info.h"
#endif

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) { return std::string(STRATA_TEST_DATA_DIR) + "/" + name; }

// The bench preset: the published Kimi-Linear-48B-A3B-Instruct config.
const std::string kPreset48B =
    std::string(STRATA_SOURCE_DIR) + "/models/presets/kimi-linear-48b-a3b";

// Whether this build and machine should put a kimi_linear model on the GPU.
bool GpuUsable() {
#if defined(STRATA_HAVE_CUDA)
  auto d = cuda::ListDevices();
  return d.ok() && !d->empty() && d->front().compute_major == 9 && d->front().compute_minor == 0;
#else
  return false;
#endif
}

std::vector<int32_t> Prompt(const std::string& fixture) {
  auto p = ReadNpyInt32(Fixture(fixture) + "/prompt.npy");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : std::vector<int32_t>{};
}

std::vector<float> PrefillLogits(const Model& m, const std::vector<int32_t>& tokens) {
  auto st = m.NewState(static_cast<int64_t>(tokens.size()) + 1);
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return {};
  std::vector<float> logits(tokens.size() * static_cast<size_t>(m.info().vocab_size));
  Status s = m.Forward(tokens, **st, logits.data(), /*all_logits=*/true);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// A private directory removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() /
              (tag + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
               std::to_string(reinterpret_cast<uintptr_t>(this)))) {
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

TEST(DeviceSelection, CpuRequestLoadsOnTheCpuWithoutNotice) {
  LoadOptions o;
  o.device = Device::kCpu;
  auto m = LoadModel(Fixture("kimi_a"), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->info().device, "cpu");
  EXPECT_EQ((*m)->info().notice, "");
}

TEST(DeviceSelection, CudaOrAutoGivesTheGpuOrTheCpuWithANoticeNeverAnError) {
  auto cpu = LoadModel(Fixture("kimi_a"));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const std::vector<int32_t> prompt = Prompt("kimi_a");
  ASSERT_FALSE(prompt.empty());
  const std::vector<float> want = PrefillLogits(**cpu, prompt);
  for (Device d : {Device::kCuda, Device::kAuto}) {
    LoadOptions o;
    o.device = d;
    auto m = LoadModel(Fixture("kimi_a"), o);
    ASSERT_TRUE(m.ok()) << m.status();
    const ModelInfo& info = (*m)->info();
    std::printf("[fallback] device=%s -> info.device='%s' notice='%s'\n",
                d == Device::kCuda ? "cuda" : "auto", info.device.c_str(), info.notice.c_str());
    if (GpuUsable()) {
      EXPECT_EQ(info.device.rfind("cuda:", 0), 0u) << info.notice;
      EXPECT_EQ(info.notice, "");
      continue;
    }
    EXPECT_EQ(info.device, "cpu");
    EXPECT_NE(info.notice.find("running on the CPU"), std::string::npos) << info.notice;
    EXPECT_NE(info.notice.find(d == Device::kCuda ? "CUDA requested" : "device auto"), std::string::npos)
        << info.notice;
    // The fallback is the CPU executor itself: the same logits, bit for bit.
    EXPECT_EQ(PrefillLogits(**m, prompt), want);
    EXPECT_EQ(info.num_layers, (*cpu)->info().num_layers);
    EXPECT_EQ(info.vocab_size, (*cpu)->info().vocab_size);
  }
}

TEST(DeviceSelection, BenchmarkFillIsAGpuFeatureAndUnimplementedAfterAFallback) {
  LoadOptions o;
  o.device = Device::kAuto;
  auto m = LoadModel(Fixture("kimi_b"), o);
  ASSERT_TRUE(m.ok()) << m.status();
  auto st = (*m)->NewState(16);
  ASSERT_TRUE(st.ok());
  const Status s = (*m)->FillContextForBenchmark(**st, 8, 1);
  if (GpuUsable()) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ((*st)->num_tokens(), 8);
  } else {
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_EQ((*st)->num_tokens(), 0);
  }
}

// --- dummy weights on the CPU -------------------------------------------------

TEST(DummyWeights, EveryArchitectureLoadsFromConfigAloneAndIsDeterministicPerSeed) {
  // (dsv32_b stores FP8 matrices with their scales; the dummies are bf16.)
  for (const char* fixture : {"kimi_b", "dsv32_a", "qwen3next_b", "strata_hybrid_b"}) {
    SCOPED_TRACE(fixture);
    TempDir dir("strata_dummy_cfg");
    fs::copy_file(Fixture(fixture) + "/config.json", dir.str() + "/config.json");
    const std::vector<int32_t> tokens = {1, 5, 9, 200, 3, 77, 0, 211};
    std::vector<std::vector<float>> runs;
    int64_t parameters = 0;
    for (uint64_t seed : {7u, 7u, 8u}) {
      LoadOptions o;
      o.load_format = LoadFormat::kDummy;
      o.dummy_seed = seed;
      auto m = LoadModel(dir.str(), o);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ((*m)->info().device, "cpu");
      parameters = (*m)->info().num_parameters;
      runs.push_back(PrefillLogits(**m, tokens));
      double sum_sq = 0;
      for (float v : runs.back()) {
        ASSERT_TRUE(std::isfinite(v));
        sum_sq += static_cast<double>(v) * v;
      }
      EXPECT_GT(sum_sq, 0.0) << "dummy logits are all zero";
    }
    EXPECT_EQ(runs[0], runs[1]) << "same seed, different weights";
    EXPECT_NE(runs[0], runs[2]) << "different seeds, same weights";
    // The dummy checkpoint holds what the real one does.
    auto real = WeightStore::Open(Fixture(fixture));
    ASSERT_TRUE(real.ok()) << real.status();
    EXPECT_EQ(parameters, (*real)->TotalElements());
  }
}

TEST(DummyWeights, CpuRefuses48BShapesWithAClearMessage) {
  TempDir dir("strata_dummy_48b");
  {
    std::ofstream f(dir.str() + "/config.json");
    std::ifstream in(kPreset48B + "/config.json");
    f << in.rdbuf();
  }
  LoadOptions o;
  o.load_format = LoadFormat::kDummy;
  o.device = Device::kCpu;
  auto m = LoadModel(dir.str(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
  EXPECT_NE(m.status().message().find("dummy weights on the CPU"), std::string::npos) << m.status();
}

// --- the default batched decode ------------------------------------------------

class DefaultDecodeBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModel(Fixture("kimi_a"));
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    prompt_ = Prompt("kimi_a");
    ASSERT_GE(prompt_.size(), 60u);
  }
  std::unique_ptr<SequenceState> Prefilled(size_t begin, size_t n) {
    auto st = model_->NewState(128);
    EXPECT_TRUE(st.ok());
    EXPECT_TRUE(model_->Forward(std::span(prompt_.data() + begin, n), **st, nullptr, false).ok());
    return std::move(*st);
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(DefaultDecodeBatch, EqualsOneForwardPerSequence) {
  const int64_t V = model_->info().vocab_size;
  std::vector<std::unique_ptr<SequenceState>> batch, alone;
  const size_t begins[3] = {0, 7, 30}, lens[3] = {5, 17, 29};
  for (int i = 0; i < 3; ++i) {
    batch.push_back(Prefilled(begins[i], lens[i]));
    alone.push_back(Prefilled(begins[i], lens[i]));
  }
  std::vector<SequenceState*> states = {batch[0].get(), batch[1].get(), batch[2].get()};
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> tokens = {prompt_[static_cast<size_t>(40 + step)],
                                         prompt_[static_cast<size_t>(45 + step)],
                                         prompt_[static_cast<size_t>(50 + step)]};
    std::vector<float> got(static_cast<size_t>(3 * V));
    ASSERT_TRUE(model_->DecodeBatch(tokens, states, got.data()).ok());
    for (int i = 0; i < 3; ++i) {
      std::vector<float> want(static_cast<size_t>(V));
      ASSERT_TRUE(model_->Forward(std::span(&tokens[static_cast<size_t>(i)], 1), *alone[static_cast<size_t>(i)],
                                  want.data(), false)
                      .ok());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * V)) << "step " << step << " row " << i;
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(batch[static_cast<size_t>(i)]->num_tokens(), static_cast<int64_t>(lens[i] + 4));
}

TEST_F(DefaultDecodeBatch, RejectsMismatchedSizesNullAndRepeatedStates) {
  auto a = Prefilled(0, 3), b = Prefilled(3, 3);
  const std::vector<int32_t> two = {1, 2}, one = {1};
  std::vector<SequenceState*> ab = {a.get(), b.get()}, aa = {a.get(), a.get()}, an = {a.get(), nullptr};
  EXPECT_TRUE(absl::IsInvalidArgument(model_->DecodeBatch(one, ab, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(model_->DecodeBatch(two, aa, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(model_->DecodeBatch(two, an, nullptr)));
  EXPECT_EQ(a->num_tokens(), 3);
  EXPECT_EQ(b->num_tokens(), 3);
}

TEST_F(DefaultDecodeBatch, GreedySampleIsTheArgmaxAndOtherSamplingIsUnimplemented) {
  const int64_t V = model_->info().vocab_size;
  auto a = Prefilled(0, 9), a2 = Prefilled(0, 9), b = Prefilled(9, 4), b2 = Prefilled(9, 4);
  const std::vector<int32_t> tokens = {prompt_[20], prompt_[21]};
  std::vector<SequenceState*> s1 = {a.get(), b.get()}, s2 = {a2.get(), b2.get()};
  std::vector<float> logits(static_cast<size_t>(2 * V));
  ASSERT_TRUE(model_->DecodeBatch(tokens, s1, logits.data()).ok());
  std::vector<DecodeSampling> greedy(2);
  int32_t out[2] = {-1, -1};
  ASSERT_TRUE(model_->DecodeBatchSample(tokens, s2, greedy, out).ok());
  for (int i = 0; i < 2; ++i) {
    const float* row = logits.data() + i * V;
    EXPECT_EQ(out[i], std::max_element(row, row + V) - row) << "row " << i;
  }
  greedy[1].temperature = 0.7f;
  EXPECT_TRUE(absl::IsUnimplemented(model_->DecodeBatchSample(tokens, s2, greedy, out)));
}

// --- the tensor list ----------------------------------------------------------

StatusOr<exec::ArchSpec> Describe(const std::string& dir, const WeightStore* weights) {
  STRATA_ASSIGN_OR_RETURN(ConfigReader reader, ConfigReader::FromFile(dir + "/config.json"));
  STRATA_ASSIGN_OR_RETURN(std::string type, reader.GetString("model_type"));
  if (type == "kimi_linear") return DescribeKimiLinear(reader, weights);
  if (type == "deepseek_v32") return DescribeDeepseekV32(reader, weights);
  if (type == "qwen3_next") return DescribeQwen3Next(reader, weights);
  return DescribeStrataHybrid(reader, weights);
}

TEST(TensorList, NamesEveryTensorOfEachFixtureWithItsSize) {
  for (const char* name :
       {"kimi_a", "kimi_b", "kimi_c", "dsv32_a", "qwen3next_a", "strata_hybrid_a"}) {
    SCOPED_TRACE(name);
    auto store = WeightStore::Open(Fixture(name));
    ASSERT_TRUE(store.ok()) << store.status();
    auto spec = Describe(Fixture(name), store->get());
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto listed = exec::ListTensors(*spec);
    ASSERT_TRUE(listed.ok()) << listed.status();
    for (const exec::BoundTensor& t : *listed) {
      auto v = (*store)->Get(t.name);
      ASSERT_TRUE(v.ok()) << v.status();
      // Small vectors may be stored with other unit dims (A_log as [1,1,H,1] or [H]).
      if (t.kind == exec::BoundTensor::Kind::kMatrix) {
        EXPECT_EQ(v->shape, t.shape) << t.name;
      } else {
        EXPECT_EQ(v->NumElements(), t.NumElements()) << t.name;
      }
    }
    EXPECT_EQ(listed->size(), (*store)->Names().size())
        << "the fixture holds tensors the list misses";
  }
}

// --- the cost model ----------------------------------------------------------

exec::ArchSpec Spec48B() {
  auto spec = DescribeConfigFile(kPreset48B + "/config.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : exec::ArchSpec{};
}

TEST(CostModel, The48BModelReadsAbout6GBPerBatch1DecodeStep) {
  const exec::ArchSpec c = Spec48B();
  auto p = exec::CountParameters(c);
  ASSERT_TRUE(p.ok()) << p.status();
  const double active = p->dense_path + p->lm_head + p->routed_active;
  std::printf("[cost] 48B: %.3g parameters, %.3g active per token\n", p->Total(), active);
  EXPECT_NEAR(active, 3.11e9, 0.1e9);  // "3.11 B active parameters" (issue 4)
  EXPECT_NEAR(p->Total(), 49e9, 2e9);
  auto bytes = [&](int64_t batch, int64_t context) {
    auto b = exec::DecodeStepBytes(c, batch, context);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : exec::DecodeBytes{};
  };
  const exec::DecodeBytes b1 = bytes(1, 4096);
  std::printf(
      "[cost] batch 1 @4K: weights %.3g + experts %.3g + state %.3g = %.3g bytes -> %.3f ms at "
      "4.27 TB/s\n",
      b1.weights, b1.experts, b1.state, b1.Total(), b1.Total() / 4.27e12 * 1e3);
  EXPECT_NEAR(b1.Total(), 6.2e9, 0.3e9);
  // More sequences touch more experts, up to all of them.
  EXPECT_NEAR(exec::ExpectedDistinctExperts(256, 8, 1), 8.0, 1e-9);
  EXPECT_NEAR(exec::ExpectedDistinctExperts(256, 8, 64), 256 * (1 - std::pow(1 - 8.0 / 256, 64)),
              1e-6);
  EXPECT_LT(exec::ExpectedDistinctExperts(256, 8, 100000), 256.0 + 1e-9);
  EXPECT_GT(bytes(64, 32768).experts, 25 * b1.experts);
  // State bytes scale with batch and context.
  EXPECT_NEAR(bytes(2, 4096).state, 2 * b1.state, 1e-6 * b1.state);
  // At 128K the latent caches (7 layers × 1152 B per token) dominate the state.
  EXPECT_NEAR(bytes(1, 131072).state - b1.state, 7.0 * 1152 * (131072 - 4096), 1e6);
}

TEST(CostModel, PrefillFlopsAreTheMatmulsPlusQuadraticAttention) {
  const exec::ArchSpec c = Spec48B();
  const double f4k = exec::PrefillFlops(c, 4096).value_or(0);
  const double f32k = exec::PrefillFlops(c, 32768).value_or(0);
  std::printf("[cost] prefill FLOPs: 4K %.3g (%.1f ms at 686 TFLOP/s), 32K %.3g (%.1f ms)\n", f4k,
              f4k / 686e12 * 1e3, f32k, f32k / 686e12 * 1e3);
  const double linear = 2.0 * 3.11e9 * 32768;
  EXPECT_GT(f32k, linear * 0.95);
  EXPECT_LT(f32k, linear * 1.6);
  EXPECT_GT(f32k / f4k, 8.0);  // superlinear: the attention term
}

TEST(CostModel, SparseAttentionCapsTheRowsReadAndTheAttentionPairs) {
  // DSA reads index_topk latent rows per step plus every indexer key; its
  // prefill attends index_topk keys per query plus the indexer's scoring of
  // all of them. Dense MLA over the same layers reads and attends all rows.
  auto sparse = Describe(Fixture("dsv32_a"), nullptr);
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  exec::ArchSpec dense = *sparse;
  const exec::MlaSpec mla = std::get<exec::MlaSpec>(sparse->layers[0].mixer);
  for (exec::LayerSpec& l : dense.layers) std::get<exec::MlaSpec>(l.mixer).indexer.reset();
  const double L = static_cast<double>(dense.layers.size()),
               k = static_cast<double>(mla.indexer->top_k);
  const double T = 10 * k + 3;  // the context, then the prompt length
  const double width = static_cast<double>(mla.kv_lora_rank + mla.rope_dim);
  const double keys = static_cast<double>(mla.indexer->head_dim);
  const double dense_state = exec::DecodeStepBytes(dense, 1, static_cast<int64_t>(T))->state;
  const double sparse_state = exec::DecodeStepBytes(*sparse, 1, static_cast<int64_t>(T))->state;
  EXPECT_DOUBLE_EQ(dense_state - sparse_state, L * 2.0 * (width * (T + 1 - k) - keys * (T + 2)));
  const double pairs = T * (T + 1) / 2, sparse_pairs = k * (k + 1) / 2 + (T - k) * k;
  const double per_pair =
      2.0 * static_cast<double>(mla.heads * (mla.nope_dim + mla.rope_dim + mla.v_dim));
  const double index_per_pair = 2.0 * static_cast<double>(mla.indexer->heads) * keys;
  // The indexer's own projections run for every token too.
  const double index_params =
      exec::CountParameters(*sparse)->dense_path - exec::CountParameters(dense)->dense_path;
  EXPECT_GT(index_params, 0);
  const int64_t n = static_cast<int64_t>(T);
  EXPECT_NEAR(
      exec::PrefillFlops(dense, n).value_or(0) - exec::PrefillFlops(*sparse, n).value_or(0),
      L * (per_pair * (pairs - sparse_pairs) - index_per_pair * pairs) - 2 * T * index_params, 1.0);
}

}  // namespace
}  // namespace strata
