// The oracle shared by the shard-index fuzzer and its corpus replay: bytes as
// model.safetensors.index.json. An accepted index must keep its promises
// (every weight_map entry exactly once, under a shard name that stays inside
// the model directory, judged here independently of the parser); then the
// same text opens a model directory beside two fixed shards, which must either
// fail with a message or hold every tensor the index names, read from the
// shard it names. Rejection is always fine; a crash, UB or a broken promise
// is not.
#ifndef STRATA_TESTS_FUZZ_SAFETENSORS_INDEX_CHECK_H_
#define STRATA_TESTS_FUZZ_SAFETENSORS_INDEX_CHECK_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_scratch_dir.h"
#include "model/safetensors_index.h"
#include "model/safetensors_writer.h"
#include "model/weight_store.h"

namespace strata::fuzz {

struct IndexResult {
  bool parsed = false;
  bool opened = false;  // WeightStore::Open succeeded
  std::string violation;
};

// The shards the index is opened beside: names that the seeds and the
// dictionary use, two tensors each. A static object, so that the directory
// goes when the process exits.
inline const ScratchDir& IndexModelDir() {
  static const ScratchDir dir("index");
  static const bool written = [] {
    SafetensorsWriter s1;
    s1.AddF32("model.embed_tokens.weight", DType::kBF16, {2, 2}, {1, 2, 3, 4});
    s1.AddF32("model.norm.weight", DType::kF32, {2}, {1, 1});
    SafetensorsWriter s2;
    s2.AddF32("lm_head.weight", DType::kF16, {2, 2}, {0, 1, 0, 1});
    s2.AddF32("model.layers.0.mlp.gate.weight", DType::kF32, {1}, {0.5f});
    return s1.WriteFile(dir.File("model-00001-of-00002.safetensors")).ok() &&
           s2.WriteFile(dir.File("model-00002-of-00002.safetensors")).ok();
  }();
  if (!written) std::abort();  // no oracle without its fixture
  return dir;
}

// Whether `name` joined to `dir` stays inside it, lexically.
inline bool StaysInside(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  if (name.empty() || name.find('\0') != std::string::npos || fs::path(name).is_absolute()) {
    return false;
  }
  const fs::path rel = (fs::path(dir) / name).lexically_normal().lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

inline IndexResult CheckSafetensorsIndex(const uint8_t* data, size_t size) {
  IndexResult r;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StatusOr<SafetensorsIndex> index = ParseSafetensorsIndex("fuzz.index.json", text);
  if (!index.ok()) {
    if (index.status().code() != absl::StatusCode::kInvalidArgument ||
        index.status().message().rfind("fuzz.index.json: ", 0) != 0) {
      r.violation = "rejection is not a labelled InvalidArgument: " + index.status().ToString();
    }
    return r;
  }
  r.parsed = true;
  // The parser refuses duplicate keys, so a plain parse has the same entries.
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object()) {
    r.violation = "accepted a text without a weight_map object";
    return r;
  }
  const std::string& dir = IndexModelDir().path();
  size_t listed = 0;
  for (const auto& [shard, names] : index->shards) {
    if (!StaysInside(dir, shard))
      r.violation = "accepted a shard name outside the directory: " + shard;
    if (names.empty()) r.violation = "a shard with no tensors";
    for (const std::string& name : names) {
      const auto it = doc["weight_map"].find(name);
      if (it == doc["weight_map"].end() || *it != shard) {
        r.violation = "tensor '" + name + "' is not mapped to '" + shard + "' by the text";
      }
    }
    listed += names.size();
  }
  if (r.violation.empty() && listed != doc["weight_map"].size()) {
    r.violation = "the index does not list every weight_map entry once";
  }
  if (!r.violation.empty()) return r;

  if (!IndexModelDir().Write("model.safetensors.index.json", text)) {
    r.violation = "cannot write the index into the scratch directory";
    return r;
  }
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir);
  if (!store.ok()) {
    if (store.status().message().empty()) r.violation = "open failed without a message";
    return r;
  }
  r.opened = true;
  for (const auto& [shard, names] : index->shards) {
    for (const std::string& name : names) {
      StatusOr<TensorView> t = (*store)->Get(name);
      if (!t.ok() || t->file != IndexModelDir().File(shard)) {
        r.violation = "tensor '" + name + "' is not read from the shard the index names";
        return r;
      }
    }
  }
  return r;
}

}  // namespace strata::fuzz

#endif  // STRATA_TESTS_FUZZ_SAFETENSORS_INDEX_CHECK_H_
