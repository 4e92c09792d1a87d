// deepseek_v32 parity against transformers: for every fixture directory
// tests/data/dsv32_* (built by tools/reference/make_dsv32_fixtures.py from
// transformers 5.17 in fp32, eager attention; index_topk well below the
// prompt length, so the lightning indexer's selection decides what MLA
// reads), the CPU executor must reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces,
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). Further checks:
// the rotary tables and softmax scale equal the reference's; selecting every
// key instead (dense MLA) moves the logits far beyond the tolerance, so the
// sparse path is what is being matched; and scaling any layer's o_proj by
// 1.1 moves them by more than 100x the tolerance (for FP8 fixtures through
// the block scales).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/rope_yarn.h"
#include "base/dtype.h"
#include "base/npy.h"
#include "model/config_reader.h"
#include "model/model.h"
#include "model/models/deepseek_v32_config.h"
#include "model/safetensors.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;
constexpr double kPerturbFactor = 1.1;
constexpr double kMinSensitivity = 100 * kTolerance;

std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STRATA_TEST_DATA_DIR, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("dsv32_", 0) == 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Fixture {
  std::string dir;
  std::vector<int32_t> prompt;
  std::vector<float> logits;  // [T, vocab]
  int64_t vocab = 0;
  std::vector<int32_t> generate;  // prompt[:G] + continuation
  int64_t generate_prompt_len = 0;
  nlohmann::json meta;
};

Fixture LoadFixture(const std::string& name) {
  Fixture f;
  f.dir = std::string(STRATA_TEST_DATA_DIR) + "/" + name;
  auto prompt = ReadNpyInt32(f.dir + "/prompt.npy");
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  if (prompt.ok()) f.prompt = *prompt;
  std::vector<int64_t> shape;
  auto logits = ReadNpyFloat32(f.dir + "/logits.npy", &shape);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (logits.ok()) {
    f.logits = *logits;
    EXPECT_EQ(shape.size(), 2u);
    EXPECT_EQ(shape[0], static_cast<int64_t>(f.prompt.size()));
    f.vocab = shape[1];
  }
  auto gen = ReadNpyInt32(f.dir + "/generate.npy");
  EXPECT_TRUE(gen.ok()) << gen.status();
  if (gen.ok()) f.generate = *gen;
  std::ifstream meta(f.dir + "/meta.json");
  f.meta = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(f.meta.is_discarded()) << f.dir << "/meta.json";
  if (!f.meta.is_discarded()) f.generate_prompt_len = f.meta["generate"]["prompt_len"].get<int64_t>();
  return f;
}

struct Comparison {
  double rel = 0;
  double max_abs = 0;
  int64_t worst_pos = -1;
  double worst_pos_rel = 0;
  int64_t first_bad_pos = -1;
};

Comparison Compare(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab) {
  Comparison c;
  double num = 0, den = 0;
  const int64_t T = static_cast<int64_t>(ref.size()) / vocab;
  for (int64_t t = 0; t < T; ++t) {
    double pn = 0, pd = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = static_cast<double>(ours[t * vocab + v]) - ref[t * vocab + v];
      pn += d * d;
      pd += static_cast<double>(ref[t * vocab + v]) * ref[t * vocab + v];
      c.max_abs = std::max(c.max_abs, std::abs(d));
    }
    num += pn;
    den += pd;
    const double pr = std::sqrt(pn / std::max(pd, 1e-30));
    if (pr > c.worst_pos_rel) {
      c.worst_pos_rel = pr;
      c.worst_pos = t;
    }
    if (c.first_bad_pos < 0 && pr > kTolerance) c.first_bad_pos = t;
  }
  c.rel = std::sqrt(num / std::max(den, 1e-30));
  return c;
}

std::string Describe(const Comparison& c) {
  std::ostringstream s;
  s << "rel=" << c.rel << " max_abs=" << c.max_abs << " worst position " << c.worst_pos
    << " (rel " << c.worst_pos_rel << ")";
  if (c.first_bad_pos >= 0) s << ", first position over tolerance: " << c.first_bad_pos;
  return s.str();
}

std::unique_ptr<Model> Load(const std::string& dir) {
  auto m = LoadModel(dir);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Prefill the first n tokens as one Forward, then one token per Forward.
std::vector<float> RunSplit(const Model& model, const std::vector<int32_t>& tokens, int64_t n) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<float> out(static_cast<size_t>(T * vocab));
  auto state = model.NewState(T + 8);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return {};
  Status st = model.Forward(std::span(tokens.data(), static_cast<size_t>(n)), **state, out.data(),
                            /*all_logits=*/true);
  EXPECT_TRUE(st.ok()) << st;
  for (int64_t t = n; t < T && st.ok(); ++t) {
    st = model.Forward(std::span(tokens.data() + t, 1), **state, out.data() + t * vocab,
                       /*all_logits=*/false);
    EXPECT_TRUE(st.ok()) << "token " << t << ": " << st;
  }
  return out;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A per-test scratch directory, removed afterwards.
std::string TempDir(const std::string& tag) {
  return (fs::temp_directory_path() / ("strata_dsv32_" + tag + "_" + std::to_string(::getpid())))
      .string();
}

class Dsv32ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = LoadFixture(GetParam());
    ASSERT_FALSE(fixture_.prompt.empty());
    model_ = Load(fixture_.dir);
    ASSERT_NE(model_, nullptr);
    ASSERT_EQ(model_->info().vocab_size, fixture_.vocab);
    ASSERT_EQ(model_->info().architecture, "deepseek_v32");
  }
  Fixture fixture_;
  std::unique_ptr<Model> model_;
};

TEST_P(Dsv32ParityTest, FixtureExercisesTheSparsePath) {
  // The indexer keeps fewer keys than most queries have, so selection matters.
  const nlohmann::json& spec = fixture_.meta["spec"];
  const int64_t topk = spec["index_topk"].get<int64_t>();
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  EXPECT_LT(2 * topk, T);
  EXPECT_GT(T, 128);
  EXPECT_NE(T % 64, 0);
  EXPECT_EQ(spec["heads"].get<int64_t>() % 2, 1) << "odd head count";
  EXPECT_GT(fixture_.meta["sparse_vs_dense"]["rel_logit_difference_all_layers_dense"].get<double>(),
            100 * kTolerance);
}

TEST_P(Dsv32ParityTest, RotaryTablesAndScaleMatchTransformers) {
  auto reader = ConfigReader::FromFile(fixture_.dir + "/config.json");
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto cfg = ParseDeepseekV32Config(*reader);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const nlohmann::json& rope = fixture_.meta["rope"];
  const std::vector<float> inv = cpu::RopeInvFreq(cfg->rope);
  const std::vector<double> want = rope["inv_freq"].get<std::vector<double>>();
  ASSERT_EQ(inv.size(), want.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    // Same fp32 operations as the reference: equal up to the last bit of powf.
    EXPECT_NEAR(inv[i], want[i], 2e-7 * want[i]) << "inv_freq[" << i << "]";
  }
  EXPECT_NEAR(cpu::RopeAttentionFactor(cfg->rope), rope["attention_scaling"].get<double>(), 1e-12);
  EXPECT_NEAR(cfg->softmax_scale, rope["softmax_scale"].get<double>(), 1e-12);
}

TEST_P(Dsv32ParityTest, FullPrefillLogitsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  std::vector<float> ours = RunSplit(*model_, fixture_.prompt, T);
  ASSERT_EQ(ours.size(), fixture_.logits.size());
  const Comparison c = Compare(ours, fixture_.logits, fixture_.vocab);
  RecordProperty("rel_error", std::to_string(c.rel));
  std::printf("[parity] %s full prefill T=%lld: %s\n", GetParam().c_str(), static_cast<long long>(T),
              Describe(c).c_str());
  EXPECT_LE(c.rel, kTolerance) << Describe(c);
}

TEST_P(Dsv32ParityTest, PrefillThenDecodeSplitsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  std::set<int64_t> splits;
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, T - 1}) {
    if (n >= 1 && n < T) splits.insert(n);
  }
  for (int64_t n : splits) {
    std::vector<float> ours = RunSplit(*model_, fixture_.prompt, n);
    ASSERT_EQ(ours.size(), fixture_.logits.size());
    const Comparison c = Compare(ours, fixture_.logits, fixture_.vocab);
    std::printf("[parity] %s prefill %lld + %lld decode steps: %s\n", GetParam().c_str(),
                static_cast<long long>(n), static_cast<long long>(T - n), Describe(c).c_str());
    EXPECT_LE(c.rel, kTolerance) << "prefill " << n << ": " << Describe(c);
  }
}

// Multi-token continuations from a non-empty state (the indexer scores new
// queries against cached keys; MLA picks the expanded or absorbed form).
TEST_P(Dsv32ParityTest, ChunkedContinuationsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const int64_t vocab = fixture_.vocab;
  for (const std::vector<int64_t>& pieces :
       {std::vector<int64_t>{50, 70}, std::vector<int64_t>{1, 64, 3}, std::vector<int64_t>{33, 33, 33},
        std::vector<int64_t>{2, 2, 2, 2}}) {
    auto state = model_->NewState(T);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<float> ours(static_cast<size_t>(T * vocab));
    int64_t pos = 0;
    std::string desc;
    for (size_t i = 0; pos < T; ++i) {
      const int64_t n = i < pieces.size() ? std::min(pieces[i], T - pos) : T - pos;
      desc += (desc.empty() ? "" : "+") + std::to_string(n);
      ASSERT_TRUE(model_->Forward(std::span(fixture_.prompt.data() + pos, static_cast<size_t>(n)), **state,
                                  ours.data() + pos * vocab, /*all_logits=*/true)
                      .ok());
      pos += n;
    }
    const Comparison c = Compare(ours, fixture_.logits, vocab);
    std::printf("[parity] %s forward pieces %s: %s\n", GetParam().c_str(), desc.c_str(), Describe(c).c_str());
    EXPECT_LE(c.rel, kTolerance) << "pieces " << desc << ": " << Describe(c);
  }
}

TEST_P(Dsv32ParityTest, GreedyContinuationMatchesTransformers) {
  const int64_t g = fixture_.generate_prompt_len;
  ASSERT_GT(g, 0);
  ASSERT_GT(static_cast<int64_t>(fixture_.generate.size()), g);
  const int64_t vocab = fixture_.vocab;
  auto state = model_->NewState(static_cast<int64_t>(fixture_.generate.size()) + 1);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<float> logits(static_cast<size_t>(vocab));
  ASSERT_TRUE(model_->Forward(std::span(fixture_.generate.data(), static_cast<size_t>(g)), **state,
                              logits.data(), /*all_logits=*/false)
                  .ok());
  std::vector<int32_t> ours;
  for (size_t i = static_cast<size_t>(g); i < fixture_.generate.size(); ++i) {
    const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ours.push_back(tok);
    // Feed the reference token (not ours) so one early mismatch does not hide later ones.
    const int32_t next = fixture_.generate[i];
    ASSERT_TRUE(model_->Forward(std::span(&next, 1), **state, logits.data(), false).ok());
  }
  const std::vector<int32_t> want(fixture_.generate.begin() + g, fixture_.generate.end());
  EXPECT_EQ(ours, want);
}

// With an indexer that keeps everything, our logits must be far from the
// reference: the sparse selection is what the parity above depends on.
TEST_P(Dsv32ParityTest, DenseAttentionDiffersFromTheReference) {
  const std::string dir = TempDir("dense_" + GetParam());
  fs::create_directories(dir);
  fs::copy_file(fixture_.dir + "/model.safetensors", dir + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  std::ifstream in(fixture_.dir + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["index_topk"] = 1 << 20;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::unique_ptr<Model> dense = Load(dir);
  ASSERT_NE(dense, nullptr);
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const Comparison c = Compare(RunSplit(*dense, fixture_.prompt, T), fixture_.logits, fixture_.vocab);
  std::printf("[parity] %s with dense attention: %s\n", GetParam().c_str(), Describe(c).c_str());
  EXPECT_GT(c.rel, 100 * kTolerance);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Copies the fixture to `dst` with `tensor` multiplied by `factor` in place.
void WriteScaledCopy(const std::string& src, const std::string& dst, const std::string& tensor,
                     float factor) {
  fs::create_directories(dst);
  fs::copy_file(src + "/config.json", dst + "/config.json", fs::copy_options::overwrite_existing);
  std::vector<uint8_t> bytes = ReadBytes(src + "/model.safetensors");
  auto header = ParseSafetensorsHeader("model.safetensors", bytes.data(), bytes.size());
  ASSERT_TRUE(header.ok()) << header.status();
  bool found = false;
  for (const auto& t : header->tensors) {
    if (t.name != tensor) continue;
    found = true;
    uint8_t* p = bytes.data() + header->data_offset + t.begin;
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      if (t.dtype == DType::kF32) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        v *= factor;
        std::memcpy(p + 4 * i, &v, 4);
      } else if (t.dtype == DType::kBF16) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        h = F32ToBf16(Bf16ToF32(h) * factor);
        std::memcpy(p + 2 * i, &h, 2);
      } else {
        FAIL() << tensor << ": unexpected dtype";
      }
    }
  }
  ASSERT_TRUE(found) << tensor << " not in " << src;
  WriteBytes(dst + "/model.safetensors", bytes);
}

TEST_P(Dsv32ParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const std::vector<float> base = RunSplit(*model_, fixture_.prompt, T);
  const std::string tmp = TempDir("perturb_" + GetParam());
  const nlohmann::json& tensors = fixture_.meta["tensors"];
  for (int32_t layer = 0; layer < model_->info().num_layers; ++layer) {
    const std::string dir = tmp + "/layer" + std::to_string(layer);
    std::string name = "model.layers." + std::to_string(layer) + ".self_attn.o_proj.weight";
    // An FP8 matrix is scaled through its block scales.
    if (tensors.contains(name) && tensors[name][0].get<std::string>() == "float8_e4m3fn") {
      name += "_scale_inv";
    }
    WriteScaledCopy(fixture_.dir, dir, name, static_cast<float>(kPerturbFactor));
    if (HasFatalFailure()) break;
    std::unique_ptr<Model> perturbed = Load(dir);
    ASSERT_NE(perturbed, nullptr);
    const Comparison c = Compare(RunSplit(*perturbed, fixture_.prompt, T), base, fixture_.vocab);
    std::printf("[parity] %s layer %d %s x%.2f: relative logit change %.4g\n", GetParam().c_str(), layer,
                name.c_str(), kPerturbFactor, c.rel);
    EXPECT_GT(c.rel, kMinSensitivity) << "layer " << layer << " barely affects the logits";
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Dsv32ParityTest, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The fixtures are committed; finding too few means the data directory is
// wrong. At least one of them is stored in FP8.
TEST(Dsv32ParityFixtures, AtLeastTwoFixturesOneOfThemFp8) {
  const std::vector<std::string> names = FixtureNames();
  EXPECT_GE(names.size(), 2u) << "no dsv32_* fixtures under " << STRATA_TEST_DATA_DIR;
  int fp8 = 0;
  for (const std::string& n : names) {
    std::ifstream f(std::string(STRATA_TEST_DATA_DIR) + "/" + n + "/config.json");
    const nlohmann::json cfg = nlohmann::json::parse(f, nullptr, false);
    fp8 += !cfg.is_discarded() && cfg.contains("quantization_config");
  }
  EXPECT_GE(fp8, 1);
}

// dsv32_g1 / dsv32_g2 are the GPU test's tight-bound fixtures: their recorded
// margins must be the ones bf16 cannot flip, and transformers' own bf16 error
// (measured when they were built) at most 5e-3. The parity cases above check
// that the CPU executor reproduces them at 1e-4 like every other fixture.
TEST(Dsv32ParityFixtures, TwoFixturesCarryMarginsBuiltForBf16) {
  int built_for_bf16 = 0;
  for (const std::string& n : FixtureNames()) {
    std::ifstream f(std::string(STRATA_TEST_DATA_DIR) + "/" + n + "/meta.json");
    const nlohmann::json meta = nlohmann::json::parse(f, nullptr, false);
    ASSERT_FALSE(meta.is_discarded()) << n;
    if (!meta["spec"].value("gpu", false)) continue;
    ++built_for_bf16;
    const nlohmann::json& worst = meta["margins"]["worst"];
    EXPECT_GE(worst["index"].get<double>(), 2e-2) << n;
    EXPECT_GE(worst["routing"].get<double>(), 5e-2) << n;
    EXPECT_GE(worst["group"].get<double>(), 5e-2) << n;
    EXPECT_GE(meta["margins"]["greedy_gap_min"].get<double>(), 0.1) << n;
    EXPECT_LE(meta["bf16_floor_l2_rel"].get<double>(), 5e-3) << n;
  }
  EXPECT_GE(built_for_bf16, 2) << "dsv32_g1 / dsv32_g2 missing under " << STRATA_TEST_DATA_DIR;
}

}  // namespace
}  // namespace strata
