// The disk tier under the prefix cache (EngineOptions::kv_disk_dir), on
// every architecture: greedy outputs are the same with the tier on and off;
// an engine that starts on a directory another engine filled (another load
// of the model, as another process would) restores prefixes from it, with
// the same outputs; the `reused` policy writes fewer objects that still
// serve the next engine; and flipped, truncated, foreign (another model's,
// filed under this model's keys) objects and a tier too small to take any
// object leave the outputs the same, counted, without a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/session.h"
#include "harness/parity.h"
#include "harness/session_runs.h"
#include "memory/prefix_key.h"
#include "memory/state_object.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using parity::RandomTokens;

struct Served {
  std::vector<std::vector<int32_t>> outputs;
  TierStats disk;
};

// Three prompts, each alone on a fresh session of a fresh engine on `dir`
// ("" for none): a 200-token prompt, one sharing its first 150 tokens, one
// sharing its first 70.
Served Serve(std::shared_ptr<const Model> model, const std::string& dir, uint64_t disk_bytes = 1 << 30,
             EngineOptions::DiskPolicy policy = EngineOptions::DiskPolicy::kAll) {
  const int32_t vocab = model->info().vocab_size;
  std::vector<int32_t> a = RandomTokens(200, vocab, 11);
  std::vector<int32_t> b(a.begin(), a.begin() + 150), c(a.begin(), a.begin() + 70);
  for (int32_t t : RandomTokens(60, vocab, 12)) b.push_back(t);
  for (int32_t t : RandomTokens(90, vocab, 13)) c.push_back(t);
  EngineOptions o;
  o.num_threads = 2;
  o.kv_disk_dir = dir;
  o.kv_disk_bytes = disk_bytes;
  o.kv_disk_policy = policy;
  Served run;
  {
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return run;
    for (const std::vector<int32_t>* p : {&a, &b, &c}) {
      SessionOptions so;
      so.max_context_tokens = 256;
      auto s = Session::Create(e->get(), model, so);
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) return run;
      run.outputs.push_back(parity::GenerateGreedy(**e, **s, *p, 6));
    }
    run.disk = (*e)->Metrics().kv_disk;
  }  // the engine's writes are in once it is gone
  return run;
}

std::vector<fs::path> Objects(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir)) out.push_back(f.path());
  return out;
}

class KvDisk : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("strata_kv_disk_" + std::to_string(::getpid()) + "_" + GetParam());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Dir(const char* name) const { return (root_ / name).string(); }
  fs::path root_;
};

TEST_P(KvDisk, SameOutputsAcrossEnginesAndFaults) {
  const std::string fixture = parity::FixtureDir(GetParam());
  std::shared_ptr<const Model> m(parity::LoadCpu(fixture)), m2(parity::LoadCpu(fixture));
  ASSERT_NE(m, nullptr);
  ASSERT_NE(m2, nullptr);
  const Served plain = Serve(m, "");
  ASSERT_EQ(plain.outputs.size(), 3u);

  const Served first = Serve(m, Dir("d"));
  EXPECT_EQ(first.outputs, plain.outputs);
  EXPECT_GT(first.disk.objects_written, 0);
  EXPECT_EQ(first.disk.errors, 0);

  // A new engine on another load of the model: prefixes come from disk.
  const Served second = Serve(m2, Dir("d"));
  EXPECT_EQ(second.outputs, plain.outputs);
  EXPECT_GE(second.disk.hit_tokens, 128);
  EXPECT_EQ(second.disk.rejected_objects, 0);

  // Every object damaged: a byte flipped in its middle, or cut short.
  for (const char* fault : {"flipped", "truncated"}) {
    SCOPED_TRACE(fault);
    fs::copy(Dir("d"), Dir(fault));
    for (const fs::path& f : Objects(Dir(fault))) {
      const uintmax_t size = fs::file_size(f);
      if (std::string(fault) == "truncated") {
        fs::resize_file(f, size / 2);
      } else {
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        io.seekg(static_cast<std::streamoff>(size / 2));
        const char c = static_cast<char>(io.get());
        io.seekp(static_cast<std::streamoff>(size / 2));
        io.put(static_cast<char>(c ^ 0x5a));
      }
    }
    const Served bad = Serve(m2, Dir(fault));
    EXPECT_EQ(bad.outputs, plain.outputs);
    EXPECT_GT(bad.disk.rejected_objects, 0);
    EXPECT_EQ(bad.disk.hit_tokens, 0);
  }

  // Another model's objects under this model's keys: refused by fingerprint.
  parity::ScratchDir scaled("kv_disk_scaled");
  parity::WriteScaledCopy(fixture, scaled.str(), "model.norm.weight", 1.5f);
  std::shared_ptr<const Model> other(parity::LoadCpu(scaled.str()));
  ASSERT_NE(other, nullptr);
  fs::copy(Dir("d"), Dir("foreign"));
  const ModelFingerprint theirs = FingerprintOf(*other);
  for (const fs::path& f : Objects(Dir("foreign"))) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    ModelFingerprint fp;
    Sha256Digest key{};
    auto body = DecodeStateObjectBody(std::span(bytes).subspan(56), &fp, &key, f.string());
    ASSERT_TRUE(body.ok()) << body.status();
    fs::rename(f, fs::path(Dir("foreign")) / (ToHex(PrefixKey(theirs, body->tokens)) + ".kv"));
  }
  const Served plain_other = Serve(other, "");
  const Served foreign = Serve(other, Dir("foreign"));
  EXPECT_EQ(foreign.outputs, plain_other.outputs);
  EXPECT_GT(foreign.disk.rejected_objects, 0);
  EXPECT_EQ(foreign.disk.hit_tokens, 0);

  // Only what was reused goes down: fewer objects, and still hits for the next engine.
  const Served reused = Serve(m, Dir("reused"), 1 << 30, EngineOptions::DiskPolicy::kReused);
  EXPECT_EQ(reused.outputs, plain.outputs);
  EXPECT_GT(reused.disk.objects_written, 0);
  EXPECT_LT(reused.disk.objects_written, first.disk.objects_written);
  const Served after_reused = Serve(m2, Dir("reused"), 1 << 30, EngineOptions::DiskPolicy::kReused);
  EXPECT_EQ(after_reused.outputs, plain.outputs);
  EXPECT_GE(after_reused.disk.hit_tokens, 64);

  // A tier too small for any object: every write fails, counted.
  const Served tiny = Serve(m, Dir("tiny"), 1000);
  EXPECT_EQ(tiny.outputs, plain.outputs);
  EXPECT_GT(tiny.disk.errors, 0);
  EXPECT_EQ(tiny.disk.objects_written, 0);
}

TEST(KvDiskOptions, TheOptionStringSetsTheTierAndBadValuesAreRefused) {
  EngineOptions o;
  ASSERT_TRUE(ApplyEngineOptionString("kv.disk_dir=/tmp/x,kv.disk_bytes=4096", "options", &o).ok());
  EXPECT_EQ(o.kv_disk_dir, "/tmp/x");
  EXPECT_EQ(o.kv_disk_bytes, 4096u);
  const Status zero = ApplyEngineOptionString("kv.disk_bytes=0", "options", &o);
  EXPECT_TRUE(absl::IsInvalidArgument(zero)) << zero;
  EXPECT_EQ(o.kv_disk_bytes, 4096u);  // unchanged on error
  ASSERT_TRUE(ApplyEngineOptionString("kv.disk_shutdown_ms=0,kv.disk_policy=reused", "options", &o).ok());
  EXPECT_EQ(o.kv_disk_policy, EngineOptions::DiskPolicy::kReused);
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyEngineOptionString("kv.disk_policy=some", "options", &o)));
  EXPECT_EQ(o.kv_disk_shutdown_ms, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyEngineOptionString("kv.disk_shutdown_ms=-1", "options", &o)));
  EngineOptions negative;
  negative.kv_disk_shutdown_ms = -5;
  EXPECT_TRUE(absl::IsInvalidArgument(Engine::Create(negative).status()));
  // Without the prefix cache above it the tier is refused, not silently idle.
  EngineOptions uncached;
  uncached.kv_disk_dir = "/tmp/unused";
  uncached.prefix_cache_bytes = 0;
  const Status no_cache = Engine::Create(uncached).status();
  EXPECT_TRUE(absl::IsInvalidArgument(no_cache)) << no_cache;
  EXPECT_NE(no_cache.message().find("prefix_cache_bytes"), std::string::npos) << no_cache;
  // A file where the directory belongs fails the engine, naming it.
  const fs::path file = fs::temp_directory_path() / ("strata_kv_disk_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  o.kv_disk_dir = file.string();
  auto e = Engine::Create(o);
  EXPECT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(file.string()), std::string::npos) << e.status();
  fs::remove(file);
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, KvDisk,
                         ::testing::Values("kimi_a", "dsv32_a", "qwen3next_a", "strata_hybrid_a"));

}  // namespace
}  // namespace strata
