// qwen3_next parity against transformers: for every fixture directory
// tests/data/qwen3next_* (built by tools/reference/make_qwen3next_fixtures.py
// from transformers 5.17 in fp32, eager attention), the CPU executor must
// reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces (chunked
//     continuation from a non-empty state),
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). The fixtures cover
// GVA (value heads 2x and 3x the key heads), odd head counts, dk != dv, GQA
// with one KV head, partial and full rotary, interval 2/3/4 layer patterns,
// dense layers by mlp_only_layers and by decoder_sparse_step, top-k with and
// without renormalisation, bf16 / fp32 / mixed storage and both config
// spellings (checkpoint and save_pretrained). A perturbation test shows the
// tolerance is meaningful: scaling any one layer's mixer output projection by
// 1.1 moves our logits by more than 100x the tolerance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/npy.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;
// Relative logit change a 10% change of one layer's output projection must cause at least.
constexpr double kPerturbFactor = 1.1;
constexpr double kMinSensitivity = 100 * kTolerance;

std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STRATA_TEST_DATA_DIR, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("qwen3next_", 0) == 0) names.push_back(n);
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
  std::string layer_kinds;  // meta.json: 'L' (GDN) / 'F' (attention) per layer
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
  nlohmann::json j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << f.dir << "/meta.json";
  if (!j.is_discarded()) {
    f.generate_prompt_len = j["generate"]["prompt_len"].get<int64_t>();
    f.layer_kinds = j["layer_kinds"].get<std::string>();
  }
  return f;
}

// ‖ours − ref‖ / ‖ref‖ over all elements, plus the worst position for the report.
struct Comparison {
  double rel = 0;
  double max_abs = 0;
  int64_t worst_pos = -1;
  double worst_pos_rel = 0;    // that position's own ‖Δ‖/‖ref‖
  int64_t first_bad_pos = -1;  // first position whose own relative error exceeds the tolerance
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
  s << "rel=" << c.rel << " max_abs=" << c.max_abs << " worst position " << c.worst_pos << " (rel "
    << c.worst_pos_rel << ")";
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

class Qwen3NextParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = LoadFixture(GetParam());
    ASSERT_FALSE(fixture_.prompt.empty());
    model_ = Load(fixture_.dir);
    ASSERT_NE(model_, nullptr);
    ASSERT_EQ(model_->info().vocab_size, fixture_.vocab);
  }
  Fixture fixture_;
  std::unique_ptr<Model> model_;
};

TEST_P(Qwen3NextParityTest, LayerKindsMatchTheReferenceModel) {
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.architecture, "qwen3_next");
  ASSERT_EQ(static_cast<size_t>(info.num_layers), fixture_.layer_kinds.size());
  for (size_t i = 0; i < fixture_.layer_kinds.size(); ++i) {
    const bool attention = fixture_.layer_kinds[i] == 'F';
    EXPECT_EQ(info.layer_kinds[i].rfind(attention ? "attention+" : "gdn+", 0), 0u)
        << "layer " << i << ": " << info.layer_kinds[i];
  }
}

TEST_P(Qwen3NextParityTest, FullPrefillLogitsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  std::vector<float> ours = RunSplit(*model_, fixture_.prompt, T);
  ASSERT_EQ(ours.size(), fixture_.logits.size());
  const Comparison c = Compare(ours, fixture_.logits, fixture_.vocab);
  RecordProperty("rel_error", std::to_string(c.rel));
  std::printf("[parity] %s full prefill T=%lld: %s\n", GetParam().c_str(),
              static_cast<long long>(T), Describe(c).c_str());
  EXPECT_LE(c.rel, kTolerance) << Describe(c);
}

TEST_P(Qwen3NextParityTest, PrefillThenDecodeSplitsMatchTransformers) {
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

// Multi-token continuations (a prefill that starts from a non-empty state),
// with chunk boundaries falling inside the continuation.
TEST_P(Qwen3NextParityTest, ChunkedContinuationsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const int64_t vocab = fixture_.vocab;
  for (const std::vector<int64_t>& pieces :
       {std::vector<int64_t>{50, 70}, std::vector<int64_t>{1, 64, 3},
        std::vector<int64_t>{33, 33, 33}, std::vector<int64_t>{2, 2, 2, 129}}) {
    auto state = model_->NewState(T);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<float> ours(static_cast<size_t>(T * vocab));
    int64_t pos = 0;
    std::string desc;
    for (size_t i = 0; pos < T; ++i) {
      // The listed pieces, then whatever is left as one last piece.
      const int64_t n = i < pieces.size() ? std::min(pieces[i], T - pos) : T - pos;
      desc += (desc.empty() ? "" : "+") + std::to_string(n);
      ASSERT_TRUE(model_
                      ->Forward(std::span(fixture_.prompt.data() + pos, static_cast<size_t>(n)),
                                **state, ours.data() + pos * vocab, /*all_logits=*/true)
                      .ok());
      pos += n;
    }
    const Comparison c = Compare(ours, fixture_.logits, vocab);
    std::printf("[parity] %s forward pieces %s: %s\n", GetParam().c_str(), desc.c_str(),
                Describe(c).c_str());
    EXPECT_LE(c.rel, kTolerance) << "pieces " << desc << ": " << Describe(c);
  }
}

// A cloned state continues exactly like the original (recurrent states, conv
// windows and K/V caches are all copied).
TEST_P(Qwen3NextParityTest, ClonedStateContinuesLikeTheOriginal) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const int64_t vocab = fixture_.vocab;
  const int64_t n = 70;
  auto state = model_->NewState(T);
  ASSERT_TRUE(state.ok());
  std::vector<float> scratch(static_cast<size_t>(n * vocab));
  ASSERT_TRUE(
      model_->Forward(std::span(fixture_.prompt.data(), n), **state, scratch.data(), true).ok());
  std::unique_ptr<SequenceState> clone = (*state)->Clone();
  std::vector<float> a(static_cast<size_t>((T - n) * vocab)), b(a.size());
  const std::span rest(fixture_.prompt.data() + n, static_cast<size_t>(T - n));
  ASSERT_TRUE(model_->Forward(rest, **state, a.data(), true).ok());
  ASSERT_TRUE(model_->Forward(rest, *clone, b.data(), true).ok());
  EXPECT_EQ(a, b);
  const std::vector<float> ref(fixture_.logits.begin() + n * vocab, fixture_.logits.end());
  const Comparison c = Compare(b, ref, vocab);
  EXPECT_LE(c.rel, kTolerance) << Describe(c);
}

TEST_P(Qwen3NextParityTest, GreedyContinuationMatchesTransformers) {
  const int64_t g = fixture_.generate_prompt_len;
  ASSERT_GT(g, 0);
  ASSERT_GT(static_cast<int64_t>(fixture_.generate.size()), g);
  const int64_t vocab = fixture_.vocab;
  auto state = model_->NewState(static_cast<int64_t>(fixture_.generate.size()) + 1);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<float> logits(static_cast<size_t>(vocab));
  ASSERT_TRUE(model_
                  ->Forward(std::span(fixture_.generate.data(), static_cast<size_t>(g)), **state,
                            logits.data(), /*all_logits=*/false)
                  .ok());
  std::vector<int32_t> ours;
  for (size_t i = static_cast<size_t>(g); i < fixture_.generate.size(); ++i) {
    const int32_t tok =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ours.push_back(tok);
    // Feed the reference token (not ours) so one early mismatch does not hide later ones.
    const int32_t next = fixture_.generate[i];
    ASSERT_TRUE(model_->Forward(std::span(&next, 1), **state, logits.data(), false).ok());
  }
  const std::vector<int32_t> want(fixture_.generate.begin() + g, fixture_.generate.end());
  EXPECT_EQ(ours, want);
}

// --- perturbation: every layer matters at 100x the tolerance ----------------

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Copies the fixture to `dst` with `tensor` multiplied by `factor` in place
// (the file layout is unchanged; bf16 values are re-rounded).
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
    const int64_t n = t.NumElements();
    for (int64_t i = 0; i < n; ++i) {
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

TEST_P(Qwen3NextParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const std::vector<float> base = RunSplit(*model_, fixture_.prompt, T);
  const std::string tmp = (fs::temp_directory_path() /
                           ("strata_qn_parity_" + GetParam() + "_" + std::to_string(::getpid())))
                              .string();
  for (int32_t layer = 0; layer < model_->info().num_layers; ++layer) {
    const std::string dir = tmp + "/layer" + std::to_string(layer);
    const bool attention = fixture_.layer_kinds[static_cast<size_t>(layer)] == 'F';
    const std::string tensor =
        "model.layers." + std::to_string(layer) +
        (attention ? ".self_attn.o_proj.weight" : ".linear_attn.out_proj.weight");
    WriteScaledCopy(fixture_.dir, dir, tensor, static_cast<float>(kPerturbFactor));
    if (HasFatalFailure()) break;
    std::unique_ptr<Model> perturbed = Load(dir);
    ASSERT_NE(perturbed, nullptr);
    const std::vector<float> moved = RunSplit(*perturbed, fixture_.prompt, T);
    const Comparison c = Compare(moved, base, fixture_.vocab);
    std::printf("[parity] %s layer %d %s x%.2f: relative logit change %.4g\n", GetParam().c_str(),
                layer, tensor.c_str(), kPerturbFactor, c.rel);
    EXPECT_GT(c.rel, kMinSensitivity) << "layer " << layer << " barely affects the logits";
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3NextParityTest, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The fixtures are committed; finding fewer means the data directory is wrong.
TEST(Qwen3NextParityFixtures, AtLeastThreeFixturesArePresent) {
  EXPECT_GE(FixtureNames().size(), 3u) << "no qwen3next_* fixtures under " << STRATA_TEST_DATA_DIR;
}

// --- the command-line tool on one fixture ------------------------------------

TEST(Qwen3NextParityCli, StrataLogitsMatchesTransformers) {
  const std::string exe = std::string(STRATA_BINARY_DIR) + "/tools/strata";
  // The CLI is built with this test (tests/CMakeLists.txt); missing means a broken build.
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built (target strata_cli)";
  const std::vector<std::string> names = FixtureNames();
  ASSERT_FALSE(names.empty());
  const Fixture f = LoadFixture(names.front());
  const std::string out =
      (fs::temp_directory_path() / ("strata_qn_parity_cli_" + std::to_string(::getpid()) + ".npy"))
          .string();
  const std::string cmd = exe + " logits --model " + f.dir + " --tokens " + f.dir +
                          "/prompt.npy --prefill 65 --out " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<int64_t> shape;
  auto ours = ReadNpyFloat32(out, &shape);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(shape, (std::vector<int64_t>{static_cast<int64_t>(f.prompt.size()), f.vocab}));
  const Comparison c = Compare(*ours, f.logits, f.vocab);
  EXPECT_LE(c.rel, kTolerance) << Describe(c);
  std::remove(out.c_str());
}

}  // namespace
}  // namespace strata
