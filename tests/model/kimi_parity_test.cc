// kimi_linear parity against transformers: for every fixture directory
// tests/data/kimi_* (built by tools/reference/make_kimi_fixtures.py from
// transformers 5.17 in fp32, eager attention), the CPU executor must reproduce
//   * the logits of every prompt position from one prefill,
//   * the same logits when the prompt is split into a prefill of N tokens plus
//     single-token decode steps (N in {1, 63, 64, 65, T-1}),
//   * the same logits when it is fed as several multi-token pieces (chunked
//     continuation from a non-empty state),
//   * the greedy continuation,
// within 1e-4 relative (Frobenius norm over all positions). A perturbation test
// shows the tolerance is meaningful: scaling any one layer's o_proj by 1.1 moves
// our logits by more than 100x the tolerance, so no layer can be silently wrong.
// One test drives `strata logits` and `strata generate` on a fixture.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/npy.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;
// Relative logit change a 10% change of one layer's o_proj must cause at least.
constexpr double kPerturbFactor = 1.1;
constexpr double kMinSensitivity = 100 * kTolerance;

std::vector<std::string> FixtureNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STRATA_TEST_DATA_DIR, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("kimi_", 0) == 0) names.push_back(n);
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
  if (!j.is_discarded()) f.generate_prompt_len = j["generate"]["prompt_len"].get<int64_t>();
  return f;
}

// ‖ours − ref‖ / ‖ref‖ over all elements, plus the worst position for the report.
struct Comparison {
  double rel = 0;
  double max_abs = 0;
  int64_t worst_pos = -1;
  double worst_pos_rel = 0;  // that position's own ‖Δ‖/‖ref‖
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

class KimiParityTest : public ::testing::TestWithParam<std::string> {
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

TEST_P(KimiParityTest, FullPrefillLogitsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  std::vector<float> ours = RunSplit(*model_, fixture_.prompt, T);
  ASSERT_EQ(ours.size(), fixture_.logits.size());
  const Comparison c = Compare(ours, fixture_.logits, fixture_.vocab);
  RecordProperty("rel_error", std::to_string(c.rel));
  std::printf("[parity] %s full prefill T=%lld: %s\n", GetParam().c_str(), static_cast<long long>(T),
              Describe(c).c_str());
  EXPECT_LE(c.rel, kTolerance) << Describe(c);
}

TEST_P(KimiParityTest, PrefillThenDecodeSplitsMatchTransformers) {
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
TEST_P(KimiParityTest, ChunkedContinuationsMatchTransformers) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const int64_t vocab = fixture_.vocab;
  for (const std::vector<int64_t>& pieces : {std::vector<int64_t>{50, 70}, std::vector<int64_t>{1, 64, 3},
                                             std::vector<int64_t>{33, 33, 33}}) {
    auto state = model_->NewState(T);
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<float> ours(static_cast<size_t>(T * vocab));
    int64_t pos = 0;
    std::string desc;
    for (size_t i = 0; pos < T; ++i) {
      // The listed pieces, then whatever is left as one last piece.
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

TEST_P(KimiParityTest, GreedyContinuationMatchesTransformers) {
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

// --- perturbation: every layer matters at 100x the tolerance ----------------

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
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

TEST_P(KimiParityTest, ScalingAnyLayersOutputProjectionMovesLogitsFarBeyondTolerance) {
  const int64_t T = static_cast<int64_t>(fixture_.prompt.size());
  const std::vector<float> base = RunSplit(*model_, fixture_.prompt, T);
  const std::string tmp = (fs::temp_directory_path() /
                           ("strata_parity_" + GetParam() + "_" + std::to_string(::getpid())))
                              .string();
  for (int32_t layer = 0; layer < model_->info().num_layers; ++layer) {
    const std::string dir = tmp + "/layer" + std::to_string(layer);
    WriteScaledCopy(fixture_.dir, dir, "model.layers." + std::to_string(layer) + ".self_attn.o_proj.weight",
                    static_cast<float>(kPerturbFactor));
    if (HasFatalFailure()) break;
    std::unique_ptr<Model> perturbed = Load(dir);
    ASSERT_NE(perturbed, nullptr);
    const std::vector<float> moved = RunSplit(*perturbed, fixture_.prompt, T);
    const Comparison c = Compare(moved, base, fixture_.vocab);
    std::printf("[parity] %s layer %d o_proj x%.2f: relative logit change %.4g\n", GetParam().c_str(),
                layer, kPerturbFactor, c.rel);
    EXPECT_GT(c.rel, kMinSensitivity) << "layer " << layer << " barely affects the logits";
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KimiParityTest, ::testing::ValuesIn(FixtureNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The fixtures are committed; finding none means the data directory is wrong.
TEST(KimiParityFixtures, AtLeastThreeFixturesArePresent) {
  EXPECT_GE(FixtureNames().size(), 3u) << "no kimi_* fixtures under " << STRATA_TEST_DATA_DIR;
}

// --- the command-line tool on one fixture ------------------------------------

TEST(KimiParityCli, StrataLogitsAndGenerateMatchTransformers) {
  const std::string exe = std::string(STRATA_BINARY_DIR) + "/tools/strata";
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built (target strata_cli)";
  const std::vector<std::string> names = FixtureNames();
  ASSERT_FALSE(names.empty());
  const Fixture f = LoadFixture(names.front());
  const std::string out =
      (fs::temp_directory_path() / ("strata_parity_cli_" + std::to_string(::getpid()) + ".npy")).string();
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

  // `strata generate` (engine + greedy sampler) reproduces the reference continuation.
  const std::string prompt_path =
      (fs::temp_directory_path() / ("strata_parity_cli_prompt_" + std::to_string(::getpid()) + ".npy")).string();
  const std::vector<int32_t> gen_prompt(f.generate.begin(), f.generate.begin() + f.generate_prompt_len);
  const std::vector<int64_t> gen_shape = {f.generate_prompt_len};
  ASSERT_TRUE(WriteNpyInt32(prompt_path, gen_shape, gen_prompt).ok());
  const int64_t new_tokens = static_cast<int64_t>(f.generate.size()) - f.generate_prompt_len;
  const std::string gen_cmd = exe + " generate --model " + f.dir + " --tokens " + prompt_path +
                              " --ignore-eos --max-new " + std::to_string(new_tokens) + " 2>/dev/null";
  FILE* pipe = popen(gen_cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[256];
  while (fgets(buf, sizeof buf, pipe)) text += buf;
  ASSERT_EQ(pclose(pipe), 0) << gen_cmd;
  std::istringstream in(text);
  std::vector<int32_t> got;
  for (int32_t t; in >> t;) got.push_back(t);
  EXPECT_EQ(got, std::vector<int32_t>(f.generate.begin() + f.generate_prompt_len, f.generate.end())) << text;
  std::remove(prompt_path.c_str());

  // `--device cuda` runs on the GPU when one is usable and otherwise falls back
  // to the CPU with a notice: either way it succeeds and stays close to the
  // reference (bf16 activations on the GPU: 1e-2). An unknown device is a usage
  // error (exit 2), not a crash.
  const std::string cuda = exe + " logits --model " + f.dir + " --tokens " + f.dir +
                           "/prompt.npy --device cuda --out " + out + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cuda.c_str()), 0) << cuda;
  auto placed = ReadNpyFloat32(out, &shape);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(shape, (std::vector<int64_t>{static_cast<int64_t>(f.prompt.size()), f.vocab}));
  const Comparison cc = Compare(*placed, f.logits, f.vocab);
  EXPECT_LE(cc.rel, 1e-2) << Describe(cc);
  std::remove(out.c_str());
  const std::string bad = exe + " logits --model " + f.dir + " --tokens " + f.dir +
                          "/prompt.npy --device tpu --out " + out + " > /dev/null 2>&1";
  const int rc = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace strata
