// The parity harness (parity.h).
#include "harness/parity.h"

#include <random>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>

#include "base/dtype.h"
#include "base/npy.h"
#include "model/safetensors.h"

namespace strata {
namespace parity {

namespace fs = std::filesystem;

std::vector<std::string> FixtureNames(const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STRATA_TEST_DATA_DIR, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind(prefix, 0) == 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string FixtureDir(const std::string& name) {
  return std::string(STRATA_TEST_DATA_DIR) + "/" + name;
}

nlohmann::json ReadMeta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

void LoadFixture(const std::string& name, Fixture* f) {
  f->name = name;
  f->dir = FixtureDir(name);
  auto prompt = ReadNpyInt32(f->dir + "/prompt.npy");
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  if (prompt.ok()) f->prompt = *prompt;
  std::vector<int64_t> shape;
  auto logits = ReadNpyFloat32(f->dir + "/logits.npy", &shape);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (logits.ok()) {
    EXPECT_EQ(shape.size(), 2u) << f->dir << "/logits.npy";
    if (shape.size() == 2) {
      EXPECT_EQ(shape[0], f->T()) << f->dir << "/logits.npy";
      f->logits = *logits;
      f->vocab = shape[1];
    }
  }
  auto gen = ReadNpyInt32(f->dir + "/generate.npy");
  EXPECT_TRUE(gen.ok()) << gen.status();
  if (gen.ok()) f->generate = *gen;
  f->meta = ReadMeta(f->dir);
  EXPECT_FALSE(f->meta.is_discarded()) << f->dir << "/meta.json";
  if (!f->meta.is_discarded() && f->meta.contains("generate")) {
    f->generate_prompt_len = f->meta["generate"]["prompt_len"].get<int64_t>();
  }
}

void LoadFirstFixture(const std::string& prefix, Fixture* f) {
  const std::vector<std::string> names = FixtureNames(prefix);
  ASSERT_FALSE(names.empty()) << "no " << prefix << "* fixtures under " << STRATA_TEST_DATA_DIR;
  LoadFixture(names.front(), f);
}

// ---------------------------------------------------------------------------

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Comparison Compare(const float* ours, const float* ref, int64_t rows, int64_t vocab,
                   double position_tolerance) {
  Comparison c;
  double num = 0, den = 0, ref_max = 0;
  std::vector<double> per_pos;
  for (int64_t t = 0; t < rows; ++t) {
    double pn = 0, pd = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double r = ref[t * vocab + v];
      const double d = static_cast<double>(ours[t * vocab + v]) - r;
      if (!std::isfinite(d)) {
        c.rel = c.median = c.max_abs = c.max_rel = c.worst_pos_rel = NAN;
        c.worst_pos = c.first_over_pos = t;
        return c;
      }
      pn += d * d;
      pd += r * r;
      c.max_abs = std::max(c.max_abs, std::abs(d));
      ref_max = std::max(ref_max, std::abs(r));
    }
    num += pn;
    den += pd;
    const double pr = std::sqrt(pn / std::max(pd, 1e-30));
    per_pos.push_back(pr);
    if (pr > c.worst_pos_rel) {
      c.worst_pos_rel = pr;
      c.worst_pos = t;
    }
    if (position_tolerance > 0 && c.first_over_pos < 0 && pr > position_tolerance) {
      c.first_over_pos = t;
    }
  }
  c.rel = std::sqrt(num / std::max(den, 1e-30));
  c.median = Median(per_pos);
  c.max_rel = c.max_abs / std::max(ref_max, 1e-30);
  return c;
}

Comparison Compare(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab,
                   double position_tolerance) {
  EXPECT_EQ(ours.size(), ref.size());
  return Compare(ours.data(), ref.data(),
                 static_cast<int64_t>(std::min(ours.size(), ref.size())) / vocab, vocab,
                 position_tolerance);
}

std::string Describe(const Comparison& c) {
  std::ostringstream s;
  s << "L2 rel=" << c.rel << " median position rel=" << c.median << " max_abs=" << c.max_abs
    << " max_abs/max|ref|=" << c.max_rel << " worst position " << c.worst_pos << " (rel "
    << c.worst_pos_rel << ")";
  if (c.first_over_pos >= 0) s << ", first position over tolerance: " << c.first_over_pos;
  return s.str();
}

void ExpectWithin(const Comparison& c, const Bounds& b, const std::string& what) {
  if (!std::isinf(b.median)) {
    EXPECT_LE(c.median, b.median) << what << ": " << Describe(c) << b.note;
  }
  EXPECT_LE(c.rel, b.l2) << what << ": " << Describe(c) << b.note;
}

// ---------------------------------------------------------------------------

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = dist(rng);
  return t;
}

std::unique_ptr<Model> LoadCpu(const std::string& dir) {
  auto m = LoadModel(dir);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

LoadOptions CudaOptions() {
  LoadOptions o;
  o.device = Device::kCuda;
  o.max_batch = 8;
  o.max_sequences = 16;
  return o;
}

std::unique_ptr<Model> LoadCuda(const std::string& dir, const LoadOptions& o) {
  auto m = LoadModel(dir, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  const ModelInfo& info = (*m)->info();
  EXPECT_EQ(info.device.rfind("cuda:", 0), 0u) << dir << " fell back: " << info.notice;
  if (info.device.rfind("cuda:", 0) != 0) return nullptr;
  return std::move(*m);
}

std::unique_ptr<Model> LoadCudaSliced(const std::string& dir, int64_t slice_tokens, LoadOptions o) {
  o.prefill_slice_tokens = slice_tokens;
  return LoadCuda(dir, o);
}

std::string PresetConfigJson(const std::string& name) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/models/presets/" + name + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(in.good()) << "preset " << name;
  return text.str();
}

std::unique_ptr<Model> LoadDummyOnCuda(const std::string& dir, const std::string& config_json,
                                       int64_t max_batch, int64_t max_sequences,
                                       int64_t max_context_tokens) {
  std::ofstream(dir + "/config.json") << config_json;
  LoadOptions o;
  o.device = Device::kCuda;
  o.load_format = LoadFormat::kDummy;
  o.max_batch = max_batch;
  o.max_sequences = max_sequences;
  o.max_context_tokens = max_context_tokens;
  return LoadCuda(dir, o);
}

std::set<int64_t> StandardSplits(int64_t T) {
  std::set<int64_t> splits;
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, T - 1}) {
    if (n >= 1 && n < T) splits.insert(n);
  }
  return splits;
}

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

void RunPieces(const Model& model, const std::vector<int32_t>& tokens,
               const std::vector<int64_t>& pieces, std::vector<float>* logits, std::string* desc) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t vocab = model.info().vocab_size;
  desc->clear();
  auto state = model.NewState(T);
  ASSERT_TRUE(state.ok()) << state.status();
  logits->assign(static_cast<size_t>(T * vocab), 0.f);
  int64_t pos = 0;
  for (size_t i = 0; pos < T; ++i) {
    const int64_t n = i < pieces.size() ? std::min(pieces[i], T - pos) : T - pos;
    *desc += (desc->empty() ? "" : "+") + std::to_string(n);
    const Status s = model.Forward(std::span(tokens.data() + pos, static_cast<size_t>(n)), **state,
                                   logits->data() + pos * vocab, /*all_logits=*/true);
    ASSERT_TRUE(s.ok()) << "pieces " << *desc << ": " << s;
    pos += n;
  }
}

void GreedyTokens(const Model& model, const std::vector<int32_t>& sequence, int64_t prompt_len,
                  Feed feed, std::vector<int32_t>* tokens) {
  tokens->clear();
  ASSERT_GT(prompt_len, 0);
  ASSERT_GT(static_cast<int64_t>(sequence.size()), prompt_len);
  const int64_t vocab = model.info().vocab_size;
  auto state = model.NewState(static_cast<int64_t>(sequence.size()) + 1);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<float> logits(static_cast<size_t>(vocab));
  ASSERT_TRUE(model
                  .Forward(std::span(sequence.data(), static_cast<size_t>(prompt_len)), **state,
                           logits.data(), /*all_logits=*/false)
                  .ok());
  for (size_t i = static_cast<size_t>(prompt_len); i < sequence.size(); ++i) {
    const int32_t tok =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens->push_back(tok);
    const int32_t next = feed == Feed::kReference ? sequence[i] : tok;
    ASSERT_TRUE(model.Forward(std::span(&next, 1), **state, logits.data(), false).ok())
        << "step " << i - static_cast<size_t>(prompt_len);
  }
}

std::string StrataCliPath() { return std::string(STRATA_BINARY_DIR) + "/tools/strata"; }

void RunCliLogits(const Fixture& f, const std::string& flags, std::vector<float>* logits) {
  const std::string exe = StrataCliPath();
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built (target strata_cli)";
  const std::string out = (fs::temp_directory_path() / ("strata_parity_cli_" + f.name + "_" +
                                                        std::to_string(::getpid()) + ".npy"))
                              .string();
  const std::string cmd = exe + " logits --model " + f.dir + " --tokens " + f.dir + "/prompt.npy " +
                          flags + " --out " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<int64_t> shape;
  auto ours = ReadNpyFloat32(out, &shape);
  std::remove(out.c_str());
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(shape, (std::vector<int64_t>{f.T(), f.vocab}));
  *logits = std::move(*ours);
}

void ExpectCliLogitsWithin(const Fixture& f, const std::string& flags, double tolerance) {
  std::vector<float> ours;
  RunCliLogits(f, flags, &ours);
  if (::testing::Test::HasFatalFailure()) return;
  const Comparison c = Compare(ours, f.logits, f.vocab);
  EXPECT_LE(c.rel, tolerance) << "strata logits " << flags << ": " << Describe(c);
}

// ---------------------------------------------------------------------------

ScratchDir::ScratchDir(const std::string& tag)
    : path_(fs::temp_directory_path() / (tag + "_" + std::to_string(::getpid()))) {
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

namespace {

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

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

void WriteConfigVariant(const std::string& src, const std::string& dst,
                        const nlohmann::json& overrides) {
  fs::create_directories(dst);
  std::error_code ec;
  fs::create_symlink(fs::absolute(src + "/model.safetensors"), dst + "/model.safetensors", ec);
  ASSERT_FALSE(ec) << ec.message();
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(cfg.is_discarded()) << src << "/config.json";
  cfg.merge_patch(overrides);
  std::ofstream(dst + "/config.json") << cfg.dump(2);
}

// ---------------------------------------------------------------------------

std::string OutputProjection(int32_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.o_proj.weight";
}

void ParityChecks::ExpectPrefillWithin(const Model& model, const Bounds& b,
                                       const std::string& what) {
  const Fixture& f = *base_;
  const std::vector<float> ours = RunSplit(model, f.prompt, f.T());
  ASSERT_EQ(ours.size(), f.logits.size());
  const Comparison c = Compare(ours, f.logits, f.vocab, b.l2);
  std::printf("%s %s %s on %s: %s%s\n", tag_.c_str(), f.name.c_str(), what.c_str(),
              model.info().device.c_str(), Describe(c).c_str(), b.note.c_str());
  ExpectWithin(c, b, what);
}

void ParityChecks::ExpectFullPrefillWithin(const Bounds& b) {
  const Fixture& f = *base_;
  const std::vector<float> ours = RunSplit(*model_, f.prompt, f.T());
  ASSERT_EQ(ours.size(), f.logits.size());
  const Comparison c = Compare(ours, f.logits, f.vocab, b.l2);
  ::testing::Test::RecordProperty("rel_error", std::to_string(c.rel));
  std::printf("%s %s full prefill T=%lld on %s: %s%s\n", tag_.c_str(), f.name.c_str(),
              static_cast<long long>(f.T()), model_->info().device.c_str(), Describe(c).c_str(),
              b.note.c_str());
  ExpectWithin(c, b, "full prefill");
}

void ParityChecks::ExpectSplitsWithin(const std::set<int64_t>& splits, const Bounds& b) {
  const Fixture& f = *base_;
  for (int64_t n : splits) {
    const std::vector<float> ours = RunSplit(*model_, f.prompt, n);
    ASSERT_EQ(ours.size(), f.logits.size());
    const Comparison c = Compare(ours, f.logits, f.vocab, b.l2);
    std::printf("%s %s prefill %lld + %lld decode steps: %s%s\n", tag_.c_str(), f.name.c_str(),
                static_cast<long long>(n), static_cast<long long>(f.T() - n), Describe(c).c_str(),
                b.note.c_str());
    ExpectWithin(c, b, "prefill " + std::to_string(n) + " then decode");
  }
}

void ParityChecks::ExpectPiecesWithin(const std::vector<std::vector<int64_t>>& piece_lists,
                                      const Bounds& b) {
  const Fixture& f = *base_;
  for (const std::vector<int64_t>& pieces : piece_lists) {
    std::vector<float> ours;
    std::string desc;
    RunPieces(*model_, f.prompt, pieces, &ours, &desc);
    if (::testing::Test::HasFatalFailure()) return;
    const Comparison c = Compare(ours, f.logits, f.vocab, b.l2);
    std::printf("%s %s forward pieces %s: %s%s\n", tag_.c_str(), f.name.c_str(), desc.c_str(),
                Describe(c).c_str(), b.note.c_str());
    ExpectWithin(c, b, "pieces " + desc);
  }
}

void ParityChecks::ExpectGreedyContinuationIsTheReference() {
  const Fixture& f = *base_;
  std::vector<int32_t> ours;
  GreedyTokens(*model_, f.generate, f.generate_prompt_len, Feed::kReference, &ours);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<int32_t> want(f.generate.begin() + f.generate_prompt_len, f.generate.end());
  EXPECT_EQ(ours, want);
}

void ParityChecks::ExpectEveryLayerMatters(
    const std::function<std::string(int32_t layer)>& tensor_of, double factor, double min_change) {
  const Fixture& f = *base_;
  const std::vector<float> base = RunSplit(*model_, f.prompt, f.T());
  ScratchDir tmp("strata_parity_perturb_" + f.name);
  for (int32_t layer = 0; layer < model_->info().num_layers; ++layer) {
    const std::string dir = tmp.str() + "/layer" + std::to_string(layer);
    const std::string tensor = tensor_of(layer);
    WriteScaledCopy(f.dir, dir, tensor, static_cast<float>(factor));
    if (::testing::Test::HasFatalFailure()) return;
    std::unique_ptr<Model> perturbed = LoadCpu(dir);
    ASSERT_NE(perturbed, nullptr);
    const Comparison c = Compare(RunSplit(*perturbed, f.prompt, f.T()), base, f.vocab);
    const std::vector<std::string>& kinds = model_->info().layer_kinds;
    std::printf("%s %s layer %d (%s) %s x%.2f: relative logit change %.4g\n", tag_.c_str(),
                f.name.c_str(), layer,
                static_cast<size_t>(layer) < kinds.size() ? kinds[layer].c_str() : "?",
                tensor.c_str(), factor, c.rel);
    EXPECT_GT(c.rel, min_change) << "layer " << layer << " barely affects the logits";
  }
}

void ParityChecks::CompareDenseAttention(int64_t index_topk, Comparison* c) {
  const Fixture& f = *base_;
  ScratchDir dir("strata_parity_dense_" + f.name);
  WriteConfigVariant(f.dir, dir.str(), {{"index_topk", index_topk}});
  if (::testing::Test::HasFatalFailure()) return;
  std::unique_ptr<Model> dense = LoadCpu(dir.str());
  ASSERT_NE(dense, nullptr);
  *c = Compare(RunSplit(*dense, f.prompt, f.T()), f.logits, f.vocab);
  std::printf("%s %s with dense attention (CPU, index_topk %lld) vs reference: %s\n", tag_.c_str(),
              f.name.c_str(), static_cast<long long>(index_topk), Describe(*c).c_str());
}

void ParityChecks::ExpectShortSlicesWithin(int64_t slice_tokens, const std::string& what) {
  std::unique_ptr<Model> sliced = LoadCudaSliced(base_->dir, slice_tokens, gpu_.options);
  ASSERT_NE(sliced, nullptr);
  EXPECT_EQ(gpu_.graph_counts(*sliced).prefill_slice_tokens, slice_tokens);
  ExpectPrefillWithin(*sliced, bounds_, what);
}

void ParityChecks::ExpectGraphReplayEqualsEager() {
  LoadOptions eager_options = gpu_.options;
  eager_options.cuda_graphs = false;
  std::unique_ptr<Model> eager = LoadCuda(base_->dir, eager_options);
  ASSERT_NE(eager, nullptr);
  parity::ExpectGraphReplayEqualsEager(
      *model_, *eager, base_->prompt, std::min<int64_t>(10, T() - 1), gpu_.same_device_tolerance,
      gpu_.graph_min_captures, gpu_.graph_warmups, gpu_.graph_counts, tag_ + " " + base_->name);
}

void ParityChecks::ExpectCloneContinuesAndResetStartsOver() {
  const int64_t n = std::min<int64_t>(70, T() - 4);  // more than one cache block
  const std::vector<float> fresh = parity::ExpectCloneContinuesAndResetStartsOver(
      *model_, base_->prompt, n, gpu_.same_device_tolerance);
  ExpectWithin(Compare(fresh, base_->logits, base_->vocab), bounds_, "after Reset");
}

void ParityChecks::ExpectGpuGreedySamplingIsTheArgmax() {
  parity::ExpectGpuGreedySamplingIsTheArgmax(*model_, base_->prompt, 3, gpu_.sample_len_b);
}

void ParityChecks::ExpectDecodeAndPrefillMatchesSeparateCalls() {
  parity::ExpectDecodeAndPrefillMatchesSeparateCalls(*model_, base_->prompt,
                                                     gpu_.same_device_tolerance);
  std::unique_ptr<Model> sliced = LoadCudaSliced(base_->dir, 32, gpu_.options);
  ASSERT_NE(sliced, nullptr);
  parity::ExpectDecodeAndPrefillMatchesSeparateCalls(*sliced, base_->prompt,
                                                     gpu_.same_device_tolerance);
}

void ParityChecks::ExpectMisuseIsRejectedBeforeAnyWork() {
  parity::ExpectMisuseIsRejectedBeforeAnyWork(*model_, base_->dir, gpu_.misuse_sample_rows,
                                              gpu_.misuse_benchmark_fill);
}

// ---------------------------------------------------------------------------

void ExpectGraphReplayEqualsEager(const Model& graphs, const Model& eager,
                                  const std::vector<int32_t>& prompt, int64_t n, double tolerance,
                                  int64_t min_captures, int64_t warmups,
                                  const GraphCountsOf& counts, const std::string& tag) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  const std::vector<float> a = RunSplit(graphs, prompt, n);
  const std::vector<float> b = RunSplit(eager, prompt, n);
  const Comparison c = Compare(a, b, graphs.info().vocab_size);
  const GraphCounts ga = counts(graphs), gb = counts(eager);
  std::printf(
      "%s graphs vs eager over %lld decode steps: %s; graphs: %lld captured, %lld "
      "replays, %lld eager%s%s\n",
      tag.c_str(), static_cast<long long>(T - n), Describe(c).c_str(),
      static_cast<long long>(ga.captures), static_cast<long long>(ga.launches),
      static_cast<long long>(ga.eager_steps),
      ga.error.empty() ? "" : "; disabled: ", ga.error.c_str());
  EXPECT_EQ(ga.error, "");
  EXPECT_GE(ga.captures, min_captures);
  EXPECT_GE(ga.launches, T - n - warmups);  // all but the warm-up steps of each shape
  EXPECT_EQ(gb.launches, 0);
  EXPECT_LE(c.rel, tolerance) << Describe(c);
}

std::vector<float> ExpectCloneContinuesAndResetStartsOver(const Model& model,
                                                          const std::vector<int32_t>& prompt,
                                                          int64_t n, double tolerance) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  auto st = model.NewState(T + 8);
  EXPECT_TRUE(st.ok());
  if (!st.ok()) return {};
  EXPECT_TRUE(
      model.Forward(std::span(prompt.data(), static_cast<size_t>(n)), **st, nullptr, false).ok());
  std::unique_ptr<SequenceState> copy = (*st)->Clone();
  EXPECT_NE(copy, nullptr);
  if (copy == nullptr) return {};
  EXPECT_EQ(copy->num_tokens(), n);
  std::vector<float> a(static_cast<size_t>(3 * vocab)), b(static_cast<size_t>(3 * vocab));
  const std::span<const int32_t> next(prompt.data() + n, 3);
  EXPECT_TRUE(model.Forward(next, **st, a.data(), true).ok());
  EXPECT_TRUE(model.Forward(next, *copy, b.data(), true).ok());
  EXPECT_LE(Compare(a, b, vocab).rel, tolerance) << Describe(Compare(a, b, vocab));
  (*st)->Reset();
  EXPECT_EQ((*st)->num_tokens(), 0);
  std::vector<float> fresh(static_cast<size_t>(T * vocab));
  EXPECT_TRUE(model.Forward(prompt, **st, fresh.data(), true).ok());
  return fresh;
}

void ExpectGpuGreedySamplingIsTheArgmax(const Model& model, const std::vector<int32_t>& prompt,
                                        int64_t len_a, int64_t len_b) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  std::vector<std::unique_ptr<SequenceState>> a, b;
  for (int64_t len : {len_a, len_b}) {
    for (auto* group : {&a, &b}) {
      auto st = model.NewState(T + 8);
      ASSERT_TRUE(st.ok());
      ASSERT_TRUE(
          model.Forward(std::span(prompt.data(), static_cast<size_t>(len)), **st, nullptr, false)
              .ok());
      group->push_back(std::move(*st));
    }
  }
  std::vector<SequenceState*> sa = {a[0].get(), a[1].get()}, sb = {b[0].get(), b[1].get()};
  const std::vector<int32_t> tokens = {prompt[static_cast<size_t>(len_a)],
                                       prompt[static_cast<size_t>(len_b)]};
  std::vector<float> logits(static_cast<size_t>(2 * vocab));
  ASSERT_TRUE(model.DecodeBatch(tokens, sa, logits.data()).ok());
  const std::vector<DecodeSampling> greedy(2);
  int32_t out[2] = {-1, -1};
  const Status s = model.DecodeBatchSample(tokens, sb, greedy, out);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 2; ++i) {
    const float* row = logits.data() + i * vocab;
    EXPECT_EQ(out[i], std::max_element(row, row + vocab) - row) << "row " << i;
  }
  for (int64_t len : {int64_t{1}, len_a, len_b}) {
    SCOPED_TRACE(testing::Message() << "ForwardSample of " << len << " tokens");
    ExpectForwardSampleSelectsOnTheDevice(model, prompt, len);
  }
}

void ExpectDecodeAndPrefillMatchesSeparateCalls(const Model& model,
                                                const std::vector<int32_t>& prompt,
                                                double tolerance) {
  const int64_t vocab = model.info().vocab_size, T = static_cast<int64_t>(prompt.size());
  ASSERT_GT(T, 60);
  const std::span<const int32_t> all(prompt);
  auto state_after = [&](int64_t n) {
    auto st = model.NewState(T + 8);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return std::unique_ptr<SequenceState>();
    if (n > 0)
      EXPECT_TRUE(model.Forward(all.first(static_cast<size_t>(n)), **st, nullptr, false).ok());
    return *std::move(st);
  };
  const DecodeSampling greedy;
  const std::vector<DecodeSampling> rows(2, greedy);
  const std::vector<int32_t> next = {prompt[3], prompt[40]};
  for (const int64_t past : {int64_t{0}, int64_t{20}}) {
    for (const int64_t len : {T - past - 3, int64_t{37}, int64_t{2}, int64_t{1}}) {
      SCOPED_TRACE(testing::Message() << "chunk of " << len << " after " << past);
      const std::span<const int32_t> chunk =
          all.subspan(static_cast<size_t>(past), static_cast<size_t>(len));
      auto a = state_after(3), b = state_after(40), c = state_after(past);
      auto a2 = state_after(3), b2 = state_after(40), c2 = state_after(past);
      ASSERT_TRUE(a && b && c && a2 && b2 && c2);
      int32_t mixed[2] = {-1, -1}, alone[2] = {-1, -1}, first = -1, first2 = -1;
      std::vector<float> got(static_cast<size_t>(vocab)), want(static_cast<size_t>(vocab));
      SequenceState* const ms[2] = {a.get(), b.get()};
      SequenceState* const ts[2] = {a2.get(), b2.get()};
      ASSERT_TRUE(model
                      .DecodeAndPrefill(next, ms, rows, mixed,
                                        PrefillPart{chunk, c.get(), &greedy, &first, got.data()})
                      .ok());
      ASSERT_TRUE(model.DecodeBatchSample(next, ts, rows, alone).ok());
      ASSERT_TRUE(model.ForwardSample(chunk, *c2, greedy, &first2, want.data()).ok());
      // A token may differ only where the top two logits are within the
      // rounding the two paths may differ by.
      auto a3 = state_after(3), b3 = state_after(40);
      ASSERT_TRUE(a3 && b3);
      SequenceState* const rs[2] = {a3.get(), b3.get()};
      std::vector<float> decoded(static_cast<size_t>(2 * vocab));
      ASSERT_TRUE(model.DecodeBatch(next, rs, decoded.data()).ok());
      auto decided = [&](const float* l) {
        std::vector<float> top(l, l + vocab);
        std::nth_element(top.begin(), top.begin() + 1, top.end(), std::greater<float>());
        return top[0] - top[1] > 10 * tolerance * std::max(1.f, std::fabs(top[0]));
      };
      if (decided(decoded.data())) EXPECT_EQ(mixed[0], alone[0]);
      if (decided(decoded.data() + vocab)) EXPECT_EQ(mixed[1], alone[1]);
      if (decided(want.data())) EXPECT_EQ(first, first2);
      EXPECT_LE(Compare(got, want, vocab).rel, tolerance) << "the chunk's last logits";
      EXPECT_EQ(a->num_tokens(), 4);
      EXPECT_EQ(b->num_tokens(), 41);
      EXPECT_EQ(c->num_tokens(), past + len);
      // What the pass wrote (caches, recurrent state) serves the next step.
      const std::vector<int32_t> then = {alone[0], alone[1], first2};
      SequenceState* const m3[3] = {a.get(), b.get(), c.get()};
      SequenceState* const t3[3] = {a2.get(), b2.get(), c2.get()};
      std::vector<float> lm(static_cast<size_t>(3 * vocab)), lt(static_cast<size_t>(3 * vocab));
      ASSERT_TRUE(model.DecodeBatch(then, m3, lm.data()).ok());
      ASSERT_TRUE(model.DecodeBatch(then, t3, lt.data()).ok());
      EXPECT_LE(Compare(lm.data(), lt.data(), 3, vocab).rel, tolerance) << "the step after";
    }
  }
  // Misuse, before any work.
  auto a = state_after(3), c = state_after(0);
  ASSERT_TRUE(a && c);
  int32_t out = -1, first = -1;
  SequenceState* const one[1] = {a.get()};
  const std::vector<int32_t> t1 = {prompt[3]};
  const std::vector<DecodeSampling> r1(1, greedy);
  EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeAndPrefill(
      t1, one, r1, &out, PrefillPart{all.first(5), a.get(), &greedy, &first, nullptr})));
  EXPECT_TRUE(absl::IsInvalidArgument(
      model.DecodeAndPrefill(t1, one, r1, &out, PrefillPart{all.first(5), nullptr})));
  EXPECT_EQ(a->num_tokens(), 3);
  EXPECT_EQ(c->num_tokens(), 0);
}

void ExpectForwardSampleSelectsOnTheDevice(const Model& model, const std::vector<int32_t>& prompt,
                                           int64_t len) {
  const int64_t vocab = model.info().vocab_size;
  const std::span<const int32_t> feed(prompt.data(), static_cast<size_t>(len));
  auto fresh = [&] {
    auto st = model.NewState(len + 8);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *std::move(st) : nullptr;
  };
  std::vector<float> want(static_cast<size_t>(vocab)), got(static_cast<size_t>(vocab));
  auto ref = fresh();
  ASSERT_NE(ref, nullptr);
  ASSERT_TRUE(model.Forward(feed, *ref, want.data(), false).ok());
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());

  int32_t token = -1;
  auto a = fresh();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(model.ForwardSample(feed, *a, DecodeSampling{}, &token, nullptr).ok());
  EXPECT_EQ(token, argmax);
  EXPECT_EQ(a->num_tokens(), len);
  auto b = fresh();
  ASSERT_NE(b, nullptr);
  token = -1;
  ASSERT_TRUE(model.ForwardSample(feed, *b, DecodeSampling{}, &token, got.data()).ok());
  EXPECT_EQ(token, argmax);
  EXPECT_LE(Compare(got, want, vocab).rel, 1e-6) << "ForwardSample's logits vs Forward's";

  // Top-5 at temperature 1: one of the five largest, the same for the same
  // (seed, step) on another state.
  const DecodeSampling draw{1.f, 5, 1.f, 42, 3};
  std::vector<float> sorted = want;
  std::nth_element(sorted.begin(), sorted.begin() + 4, sorted.end(), std::greater<float>());
  int32_t d1 = -1, d2 = -1;
  auto c = fresh(), d = fresh();
  ASSERT_TRUE(c != nullptr && d != nullptr);
  ASSERT_TRUE(model.ForwardSample(feed, *c, draw, &d1, nullptr).ok());
  ASSERT_TRUE(model.ForwardSample(feed, *d, draw, &d2, nullptr).ok());
  ASSERT_GE(d1, 0);
  ASSERT_LT(d1, vocab);
  EXPECT_GE(want[static_cast<size_t>(d1)], sorted[4]) << "token " << d1 << " is not in the top 5";
  EXPECT_EQ(d1, d2);

  auto e = fresh();
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(
      absl::IsInvalidArgument(model.ForwardSample(feed, *e, DecodeSampling{}, nullptr, nullptr)));
  DecodeSampling bad;
  bad.top_p = 0.f;
  EXPECT_TRUE(absl::IsInvalidArgument(model.ForwardSample(feed, *e, bad, &token, nullptr)));
  EXPECT_EQ(e->num_tokens(), 0);
}

void ExpectMisuseIsRejectedBeforeAnyWork(const Model& model, const std::string& dir,
                                         bool sample_rows, bool benchmark_fill) {
  const int64_t V = model.info().vocab_size;
  auto st = model.NewState(8);
  ASSERT_TRUE(st.ok());
  const int32_t bad[2] = {1, static_cast<int32_t>(V)};
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad, 2), **st, nullptr, false)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad + 1, 1), **st, nullptr, false)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward({}, **st, nullptr, false)));
  const std::vector<int32_t> nine(9, 1);
  EXPECT_TRUE(absl::IsOutOfRange(model.Forward(nine, **st, nullptr, false)));
  EXPECT_EQ((*st)->num_tokens(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(model.NewState(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(model.NewState(model.info().max_context + 1).status()));
  // A CPU state is not a GPU state.
  auto cpu = LoadModel(dir);
  ASSERT_TRUE(cpu.ok());
  auto foreign = (*cpu)->NewState(8);
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model.Forward(std::span(bad, 1), **foreign, nullptr, false)));
  // DecodeBatch: sizes, repeats, nulls.
  auto other = model.NewState(8);
  ASSERT_TRUE(other.ok());
  const std::vector<int32_t> two = {1, 2}, one = {1};
  std::vector<SequenceState*> ab = {st->get(), other->get()}, aa = {st->get(), st->get()};
  EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatch(one, ab, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatch(two, aa, nullptr)));
  if (sample_rows) {
    int32_t out[2];
    std::vector<DecodeSampling> rows(2);
    rows[0].top_p = 0.f;
    EXPECT_TRUE(absl::IsInvalidArgument(model.DecodeBatchSample(two, ab, rows, out)));
    EXPECT_TRUE(absl::IsInvalidArgument(
        model.DecodeBatchSample(two, ab, std::vector<DecodeSampling>(2), nullptr)));
  }
  EXPECT_EQ((*st)->num_tokens(), 0);
  EXPECT_EQ((*other)->num_tokens(), 0);
  if (benchmark_fill) {
    EXPECT_TRUE(absl::IsOutOfRange(model.FillContextForBenchmark(**st, 9, 1)));
    ASSERT_TRUE(model.Forward(std::span(bad, 1), **st, nullptr, false).ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(model.FillContextForBenchmark(**st, 2, 1)));
  }
}

void DecodeBatchAgainstAloneAndCpu(const Model& model, const std::string& dir,
                                   const std::vector<int32_t>& prompt,
                                   const std::vector<std::pair<int64_t, int64_t>>& spans, int steps,
                                   const std::function<void()>& before_steps,
                                   const std::function<void(const BatchRow&)>& check) {
  const int64_t vocab = model.info().vocab_size;
  const int64_t T = static_cast<int64_t>(prompt.size());
  const size_t rows = spans.size();
  auto cpu_loaded = LoadModel(dir);
  ASSERT_TRUE(cpu_loaded.ok()) << cpu_loaded.status();
  const Model& cpu = **cpu_loaded;
  std::vector<std::unique_ptr<SequenceState>> batched, alone, reference;
  for (const auto& [begin, len] : spans) {
    const std::span<const int32_t> p(prompt.data() + begin, static_cast<size_t>(len));
    for (auto* group : {&batched, &alone}) {
      auto st = model.NewState(T + 8);
      ASSERT_TRUE(st.ok()) << st.status();
      ASSERT_TRUE(model.Forward(p, **st, nullptr, false).ok());
      group->push_back(std::move(*st));
    }
    auto st = cpu.NewState(T + 8);
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(cpu.Forward(p, **st, nullptr, false).ok());
    reference.push_back(std::move(*st));
  }
  std::vector<SequenceState*> states;
  for (auto& s : batched) states.push_back(s.get());
  if (before_steps) before_steps();
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> tokens;
    for (const auto& [begin, len] : spans) {
      tokens.push_back(prompt[static_cast<size_t>(begin + len + step) % prompt.size()]);
    }
    std::vector<float> got(rows * static_cast<size_t>(vocab));
    const Status s = model.DecodeBatch(tokens, states, got.data());
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < rows; ++i) {
      std::vector<float> one(static_cast<size_t>(vocab)), ref(static_cast<size_t>(vocab));
      ASSERT_TRUE(model.Forward(std::span(&tokens[i], 1), *alone[i], one.data(), false).ok());
      ASSERT_TRUE(cpu.Forward(std::span(&tokens[i], 1), *reference[i], ref.data(), false).ok());
      const float* row = got.data() + static_cast<int64_t>(i) * vocab;
      check({step, i, Compare(row, one.data(), 1, vocab), Compare(row, ref.data(), 1, vocab)});
    }
  }
  for (size_t i = 0; i < rows; ++i) EXPECT_EQ(batched[i]->num_tokens(), alone[i]->num_tokens());
}

void RunDummySeeds(const std::string& config_dir, const LoadOptions& o,
                   const std::vector<int32_t>& tokens, int64_t n,
                   const std::function<void(const Model&)>& first,
                   std::vector<std::vector<float>>* runs) {
  ScratchDir dir("strata_parity_dummy");
  fs::copy_file(config_dir + "/config.json", dir.str() + "/config.json");
  for (uint64_t seed : {3u, 3u, 4u}) {
    LoadOptions seeded = o;
    seeded.load_format = LoadFormat::kDummy;
    seeded.dummy_seed = seed;
    std::unique_ptr<Model> m = LoadCuda(dir.str(), seeded);
    ASSERT_NE(m, nullptr);
    runs->push_back(RunSplit(*m, tokens, n));
    for (float v : runs->back()) ASSERT_TRUE(std::isfinite(v));
    if (runs->size() == 1 && first) {
      first(*m);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

void ExpectFilledContextBatchDecodes(const Model& model, int batch, int64_t context, int steps,
                                     const std::function<void(int step, double ms)>& on_step) {
  const int64_t V = model.info().vocab_size;
  std::vector<std::unique_ptr<SequenceState>> owned;
  std::vector<SequenceState*> states;
  std::vector<int32_t> tokens;
  for (int b = 0; b < batch; ++b) {
    auto st = model.NewState(context + 16);
    ASSERT_TRUE(st.ok()) << st.status();
    const Status s = model.FillContextForBenchmark(**st, context, static_cast<uint64_t>(b + 1));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ((*st)->num_tokens(), context);
    states.push_back(st->get());
    owned.push_back(std::move(*st));
    tokens.push_back(b + 1);
  }
  std::vector<int32_t> next(static_cast<size_t>(batch));
  const std::vector<DecodeSampling> greedy(static_cast<size_t>(batch));
  for (int step = 0; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = model.DecodeBatchSample(tokens, states, greedy, next.data());
    ASSERT_TRUE(s.ok()) << s;
    if (on_step) {
      on_step(step,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
    }
    for (int32_t t : next) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
    }
    tokens = next;
  }
  std::vector<float> logits(static_cast<size_t>(batch * V));
  const Status s = model.DecodeBatch(tokens, states, logits.data());
  ASSERT_TRUE(s.ok()) << s;
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  for (SequenceState* st : states) EXPECT_EQ(st->num_tokens(), context + steps + 1);
}

void ExpectTooLittleDeviceMemoryFallsBackToTheCpu(const std::string& dir) {
  LoadOptions o = CudaOptions();
  o.gpu_memory_fraction = 1e-9;  // nothing fits
  auto m = LoadModel(dir, o);
  ASSERT_TRUE(m.ok()) << m.status();
  std::printf("[cuda-fallback] notice: %s\n", (*m)->info().notice.c_str());
  EXPECT_EQ((*m)->info().device, "cpu");
  EXPECT_NE((*m)->info().notice.find("free"), std::string::npos) << (*m)->info().notice;
}

}  // namespace parity
}  // namespace strata
