// WeightStore over single-file and sharded model directories: lookups,
// zero-copy views, shape/dtype checks, and the errors a broken directory gives.
#include "model/weight_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "loader_test_util.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace strata {
namespace {

using ::strata::testing_util::ReadBytes;
using ::strata::testing_util::ScopedTestDir;
using ::strata::testing_util::WriteBytes;
using ::strata::testing_util::WriteText;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Msg(const Status& s) { return std::string(s.message()); }

std::vector<float> Iota(int n, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i) * 0.5f;
  return v;
}

// Two shards and an index in Hugging Face layout.
void WriteShardedModel(const ScopedTestDir& dir) {
  SafetensorsWriter s1;
  s1.AddF32("model.embed_tokens.weight", DType::kBF16, {4, 2}, Iota(8));
  s1.AddF32("model.layers.0.input_layernorm.weight", DType::kF32, {2}, {1.0f, 2.0f});
  ASSERT_TRUE(s1.WriteFile(dir.File("model-00001-of-00002.safetensors")).ok());
  SafetensorsWriter s2;
  s2.AddF32("model.norm.weight", DType::kF16, {2}, {0.5f, -0.25f});
  s2.AddF32("lm_head.weight", DType::kF32, {3, 2}, Iota(6, 10.0f));
  ASSERT_TRUE(s2.WriteFile(dir.File("model-00002-of-00002.safetensors")).ok());
  WriteText(dir.File("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 64},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.input_layernorm.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors"
    }})");
}

TEST(WeightStore, OpensSingleFileModel) {
  ScopedTestDir dir;
  SafetensorsWriter w;
  w.AddF32("b", DType::kF32, {2, 3}, Iota(6));
  w.AddF32("a", DType::kBF16, {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  ASSERT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());

  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->Names(), ElementsAre("a", "b"));
  EXPECT_TRUE((*store)->Has("a"));
  EXPECT_FALSE((*store)->Has("c"));
  EXPECT_EQ((*store)->TotalBytes(), 6u * 4 + 4u * 2);
  EXPECT_EQ((*store)->TotalElements(), 10);
  EXPECT_EQ((*store)->dir(), dir.path());

  StatusOr<TensorView> b = (*store)->Get("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->name, "b");
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->rank(), 2);
  EXPECT_EQ(b->dim(1), 3);
  EXPECT_EQ(b->NumElements(), 6);
  EXPECT_EQ(b->bytes, 24u);
  EXPECT_THAT(std::string(b->file), HasSubstr("model.safetensors"));
}

TEST(WeightStore, ViewsAreZeroCopyIntoTheMappedFile) {
  ScopedTestDir dir;
  SafetensorsWriter w;
  w.AddF32("first", DType::kF32, {3}, {1.0f, 2.0f, 3.0f});
  w.AddF32("second", DType::kF16, {5}, Iota(5));
  w.AddF32("third", DType::kF32, {2}, {7.0f, 8.0f});
  ASSERT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());
  const std::vector<uint8_t> file = ReadBytes(dir.File("model.safetensors"));
  StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader("f", file.data(), file.size());
  ASSERT_TRUE(header.ok()) << header.status();

  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const auto* base = static_cast<const uint8_t*>((*store)->Get("first")->data);
  for (const SafetensorsTensor& t : header->tensors) {
    StatusOr<TensorView> v = (*store)->Get(t.name);
    ASSERT_TRUE(v.ok()) << v.status();
    const auto* p = static_cast<const uint8_t*>(v->data);
    // Same bytes as the file at the header's offset...
    ASSERT_EQ(v->bytes, t.end - t.begin);
    EXPECT_EQ(std::memcmp(p, file.data() + header->data_offset + t.begin, v->bytes), 0) << t.name;
    // ...and laid out exactly as in the file, i.e. one mapping, not copies.
    EXPECT_EQ(static_cast<uint64_t>(p - base), t.begin) << t.name;
    // Repeated lookups return the same memory.
    EXPECT_EQ((*store)->Get(t.name)->data, v->data);
  }
}

TEST(WeightStore, OpensShardedModelAndReportsProgressPerShard) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  std::vector<float> fractions;
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path(), [&](float f) {
    fractions.push_back(f);
    return true;
  });
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(fractions, ElementsAre(0.5f, 1.0f));
  EXPECT_THAT((*store)->Names(),
              ElementsAre("lm_head.weight", "model.embed_tokens.weight",
                          "model.layers.0.input_layernorm.weight", "model.norm.weight"));
  EXPECT_THAT(std::string((*store)->Get("model.norm.weight")->file),
              HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(std::string((*store)->Get("model.embed_tokens.weight")->file),
              HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_EQ((*store)->TotalElements(), 8 + 2 + 2 + 6);
  // Each shard is one mapping: tensors of a shard sit at their file distance.
  const auto* embed = static_cast<const uint8_t*>((*store)->Get("model.embed_tokens.weight")->data);
  const auto* norm =
      static_cast<const uint8_t*>((*store)->Get("model.layers.0.input_layernorm.weight")->data);
  EXPECT_EQ(norm - embed, 8 * 2);

  StatusOr<std::vector<float>> head = (*store)->GetF32Copy("lm_head.weight", {3, 2});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, Iota(6, 10.0f));
}

TEST(WeightStore, CancelsWhenProgressReturnsFalse) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  int calls = 0;
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path(), [&](float) {
    ++calls;
    return false;
  });
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::IsCancelled(store.status())) << store.status();
  EXPECT_EQ(calls, 1);  // stops after the first shard
}

TEST(WeightStore, SingleFileProgressCanCancel) {
  ScopedTestDir dir;
  SafetensorsWriter w;
  w.AddF32("x", DType::kF32, {1}, {1.0f});
  ASSERT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());
  StatusOr<std::unique_ptr<WeightStore>> store =
      WeightStore::Open(dir.path(), [](float f) { return f < 1.0f; });
  EXPECT_TRUE(absl::IsCancelled(store.status())) << store.status();
}

TEST(WeightStore, IndexNamingMissingShardIsNotFound) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  std::filesystem::remove(dir.File("model-00002-of-00002.safetensors"));
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::IsNotFound(store.status())) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(Msg(store.status()), HasSubstr("model.safetensors.index.json"));
}

TEST(WeightStore, IndexNamingTensorAbsentFromItsShardFails) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  // Points lm_head at shard 1, which does not hold it (shard 2 does).
  WriteText(dir.File("model.safetensors.index.json"), R"({"weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"}})");
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(Msg(store.status()), HasSubstr("tensor 'lm_head.weight'"));
  EXPECT_THAT(Msg(store.status()), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(Msg(store.status()), HasSubstr("does not contain it"));

  // A name that is in no shard at all.
  WriteText(dir.File("model.safetensors.index.json"), R"({"weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.9.ghost": "model-00002-of-00002.safetensors"}})");
  store = WeightStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(Msg(store.status()), HasSubstr("tensor 'model.layers.9.ghost'"));
}

TEST(WeightStore, TensorStoredInTwoShardsIsAnError) {
  ScopedTestDir dir;
  SafetensorsWriter s1;
  s1.AddF32("shared.weight", DType::kF32, {1}, {1.0f});
  ASSERT_TRUE(s1.WriteFile(dir.File("a.safetensors")).ok());
  SafetensorsWriter s2;
  s2.AddF32("shared.weight", DType::kF32, {1}, {2.0f});
  s2.AddF32("other.weight", DType::kF32, {1}, {3.0f});
  ASSERT_TRUE(s2.WriteFile(dir.File("b.safetensors")).ok());
  WriteText(
      dir.File("model.safetensors.index.json"),
      R"({"weight_map": {"shared.weight": "a.safetensors", "other.weight": "b.safetensors"}})");
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(Msg(store.status()), HasSubstr("tensor 'shared.weight' is stored in both"));
  EXPECT_THAT(Msg(store.status()), HasSubstr("a.safetensors"));
  EXPECT_THAT(Msg(store.status()), HasSubstr("b.safetensors"));
}

TEST(WeightStore, RejectsMalformedIndex) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  const std::string index = dir.File("model.safetensors.index.json");
  WriteText(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",})");
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  EXPECT_TRUE(absl::IsInvalidArgument(store.status())) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr(index));
  EXPECT_THAT(Msg(store.status()), HasSubstr("invalid JSON at byte"));

  WriteText(index, R"({"metadata": {}})");
  EXPECT_THAT(Msg(WeightStore::Open(dir.path()).status()), HasSubstr("'weight_map'"));
  WriteText(index, R"({"weight_map": {"a": 3}})");
  EXPECT_THAT(Msg(WeightStore::Open(dir.path()).status()), HasSubstr("weight_map entry 'a'"));
  WriteText(index, R"({"weight_map": {}})");
  EXPECT_THAT(Msg(WeightStore::Open(dir.path()).status()), HasSubstr("names no tensors"));
}

TEST(WeightStore, RejectsShardPathsOutsideTheDirectory) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  for (const char* shard : {"../model-00001-of-00002.safetensors", "/etc/passwd"}) {
    WriteText(dir.File("model.safetensors.index.json"),
              std::string(R"({"weight_map": {"x": ")") + shard + "\"}}");
    StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
    ASSERT_FALSE(store.ok()) << shard;
    EXPECT_THAT(Msg(store.status()), HasSubstr("not a file inside the model directory")) << shard;
  }
}

TEST(WeightStore, CorruptShardErrorNamesTheShard) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  std::vector<uint8_t> bytes = ReadBytes(dir.File("model-00002-of-00002.safetensors"));
  bytes.resize(bytes.size() - 3);
  WriteBytes(dir.File("model-00002-of-00002.safetensors"), bytes);
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::IsDataLoss(store.status())) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(WeightStore, MissingDirectoryOrWeightsIsNotFound) {
  ScopedTestDir dir;
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.File("nope"));
  EXPECT_TRUE(absl::IsNotFound(store.status())) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr(dir.File("nope")));

  store = WeightStore::Open(dir.path());  // exists, but empty
  EXPECT_TRUE(absl::IsNotFound(store.status())) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr("model.safetensors"));

  WriteText(dir.File("plain_file"), "x");
  store = WeightStore::Open(dir.File("plain_file"));
  EXPECT_FALSE(store.ok());
  EXPECT_THAT(Msg(store.status()), HasSubstr("not a directory"));
}

TEST(WeightStore, GetOfMissingTensorNamesTensorAndDirectory) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  StatusOr<TensorView> v = (*store)->Get("model.layers.7.self_attn.q_proj.weight");
  EXPECT_TRUE(absl::IsNotFound(v.status()));
  EXPECT_THAT(Msg(v.status()), HasSubstr("'model.layers.7.self_attn.q_proj.weight'"));
  EXPECT_THAT(Msg(v.status()), HasSubstr(dir.path()));
  EXPECT_TRUE(absl::IsNotFound((*store)->GetFloat("nope", {1}).status()));
}

TEST(WeightStore, GetFloatChecksShapeAndDtype) {
  ScopedTestDir dir;
  SafetensorsWriter w;
  w.AddF32("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {8, 4}, Iota(32));
  w.Add("ids", DType::kI32, {2}, std::vector<uint8_t>(8));
  ASSERT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();

  EXPECT_TRUE((*store)->GetFloat("model.layers.0.self_attn.q_proj.weight", {8, 4}).ok());
  StatusOr<TensorView> v = (*store)->GetFloat("model.layers.0.self_attn.q_proj.weight", {4, 8});
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(v.status()));
  EXPECT_THAT(Msg(v.status()), HasSubstr("'model.layers.0.self_attn.q_proj.weight'"));
  EXPECT_THAT(Msg(v.status()), HasSubstr("expected shape [4, 8], got [8, 4]"));
  EXPECT_THAT(Msg((*store)->GetFloat("model.layers.0.self_attn.q_proj.weight", {32}).status()),
              HasSubstr("expected shape [32], got [8, 4]"));

  StatusOr<TensorView> ids = (*store)->GetFloat("ids", {2});
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(Msg(ids.status()), HasSubstr("tensor 'ids'"));
  EXPECT_THAT(Msg(ids.status()), HasSubstr("dtype I32, expected F32, F16 or BF16"));
  EXPECT_TRUE((*store)->Get("ids").ok());  // plain Get takes any dtype
}

TEST(WeightStore, GetF32CopyConvertsHalfPrecision) {
  ScopedTestDir dir;
  SafetensorsWriter w;
  w.AddF32("h", DType::kF16, {3}, {0.5f, -1.5f, 65504.0f});
  w.AddF32("b", DType::kBF16, {2}, {3.0f, -0.125f});
  // One odd-sized U8 tensor first, so the float tensors after it are misaligned.
  SafetensorsWriter odd;
  odd.Add("pad", DType::kU8, {3}, {1, 2, 3});
  odd.AddF32("f", DType::kF32, {2}, {1.25f, -4.0f});
  odd.AddF32("h", DType::kF16, {1}, {2.0f});
  ASSERT_TRUE(w.WriteFile(dir.File("model.safetensors")).ok());
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->GetF32Copy("h", {3}), (std::vector<float>{0.5f, -1.5f, 65504.0f}));
  EXPECT_EQ(*(*store)->GetF32Copy("b", {2}), (std::vector<float>{3.0f, -0.125f}));
  EXPECT_THAT(Msg((*store)->GetF32Copy("b", {3}).status()), HasSubstr("expected shape [3]"));

  ScopedTestDir odd_dir_holder;
  ASSERT_TRUE(odd.WriteFile(odd_dir_holder.File("model.safetensors")).ok());
  store = WeightStore::Open(odd_dir_holder.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->GetF32Copy("f", {2}), (std::vector<float>{1.25f, -4.0f}));
  EXPECT_EQ(*(*store)->GetF32Copy("h", {1}), (std::vector<float>{2.0f}));
}

// The parity fixtures were written by the Python safetensors package, i.e. the
// reference implementation: our stricter parser must accept its output.
TEST(WeightStore, OpensCheckpointsWrittenByTheReferenceImplementation) {
  int opened = 0;
  for (const char* fixture : {"kimi_a", "kimi_b", "kimi_c"}) {
    const std::string dir = std::string(STRATA_TEST_DATA_DIR) + "/" + fixture;
    if (!std::filesystem::exists(dir + "/model.safetensors")) continue;
    StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_GT((*store)->Names().size(), 10u) << fixture;
    EXPECT_GT((*store)->TotalBytes(), 0u) << fixture;
    for (const std::string& name : (*store)->Names()) {
      StatusOr<TensorView> v = (*store)->Get(name);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->bytes, static_cast<uint64_t>(v->NumElements()) * DTypeSize(v->dtype)) << name;
    }
    ++opened;
  }
  EXPECT_GT(opened, 0) << "no fixtures under " << STRATA_TEST_DATA_DIR;
}

TEST(WeightStore, ConcurrentLookupsAgree) {
  ScopedTestDir dir;
  WriteShardedModel(dir);
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const WeightStore& ws = **store;
  const void* expected = ws.Get("lm_head.weight")->data;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        StatusOr<TensorView> v = ws.Get("lm_head.weight");
        StatusOr<std::vector<float>> c = ws.GetF32Copy("model.norm.weight", {2});
        if (!v.ok() || v->data != expected || !c.ok() || (*c)[1] != -0.25f) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace strata
