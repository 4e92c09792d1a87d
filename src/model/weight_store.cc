// WeightStore: maps each shard once, validates every header up front, and
// indexes tensors by name so that lookups are a map search with no I/O.
#include "model/weight_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_join.h"
#include "base/mmap_file.h"
#include "model/safetensors.h"
#include "model/safetensors_index.h"

namespace strata {
namespace {

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct WeightStore::Impl {
  struct Entry {
    SafetensorsTensor info;
    const uint8_t* data = nullptr;
    const MappedFile* file = nullptr;
  };
  std::vector<std::unique_ptr<MappedFile>> files;
  // std::less<> so lookups by string_view need no temporary string.
  std::map<std::string, Entry, std::less<>> tensors;
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;

  // Maps `path`, validates its header and adds its tensors; a name already
  // added from another shard is an error (which copy would be meant?).
  Status AddShard(const std::string& path) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
    STRATA_ASSIGN_OR_RETURN(SafetensorsHeader header,
                            ParseSafetensorsHeader(path, file->data(), file->size()));
    const uint8_t* data_section = file->data() + header.data_offset;
    for (SafetensorsTensor& t : header.tensors) {
      auto it = tensors.find(t.name);
      if (it != tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is stored in both ",
                                                       it->second.file->path(), " and ", path));
      }
      total_bytes += t.end - t.begin;
      total_elements += t.NumElements();
      Entry e;
      e.data = data_section + t.begin;
      e.file = file.get();
      std::string name = t.name;
      e.info = std::move(t);
      tensors.emplace(std::move(name), std::move(e));
    }
    files.push_back(std::move(file));
    return OkStatus();
  }
};

WeightStore::~WeightStore() = default;

StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(
    const std::string& model_dir, const std::function<bool(float)>& progress) {
  if (!IsDirectory(model_dir)) {
    if (Exists(model_dir)) {
      return absl::FailedPreconditionError(absl::StrCat(model_dir, ": not a directory"));
    }
    return absl::NotFoundError(absl::StrCat(model_dir, ": model directory not found"));
  }
  std::unique_ptr<WeightStore> store(new WeightStore);
  store->dir_ = model_dir;
  store->impl_ = std::make_unique<Impl>();
  Impl& impl = *store->impl_;
  const auto cancelled = [&] {
    return absl::CancelledError(absl::StrCat(model_dir, ": loading weights cancelled"));
  };

  const std::string index_path = JoinPath(model_dir, kIndexFile);
  const std::string single_path = JoinPath(model_dir, kSingleFile);
  if (!Exists(index_path)) {
    if (!Exists(single_path)) {
      return absl::NotFoundError(absl::StrCat(model_dir, ": no ", kSingleFile, " or ", kIndexFile,
                                              " in the model directory"));
    }
    STRATA_RETURN_IF_ERROR(impl.AddShard(single_path));
    if (progress && !progress(1.0f)) return cancelled();
    return store;
  }

  // Sharded checkpoint: the index maps every tensor name to its shard file.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> index_file, MappedFile::Open(index_path));
  const std::string_view text(reinterpret_cast<const char*>(index_file->data()),
                              static_cast<size_t>(index_file->size()));
  STRATA_ASSIGN_OR_RETURN(SafetensorsIndex index, ParseSafetensorsIndex(index_path, text));
  const auto& shards = index.shards;

  size_t done = 0;
  for (const auto& [shard_name, names] : shards) {
    const std::string shard_path = JoinPath(model_dir, shard_name);
    Status s = impl.AddShard(shard_path);
    if (absl::IsNotFound(s)) {
      return absl::NotFoundError(absl::StrCat(shard_path, ": shard file not found (named by ",
                                              index_path, " for tensor '", names.front(), "')"));
    }
    STRATA_RETURN_IF_ERROR(s);
    const MappedFile* loaded = impl.files.back().get();
    for (const std::string& name : names) {
      auto it = impl.tensors.find(name);
      // A tensor from an earlier shard would already be present; it must come
      // from this one.
      if (it == impl.tensors.end() || it->second.file != loaded) {
        return absl::DataLossError(absl::StrCat(index_path, ": tensor '", name, "' is mapped to ",
                                                shard_name, " but that shard does not contain it"));
      }
    }
    ++done;
    if (progress && !progress(static_cast<float>(done) / static_cast<float>(shards.size()))) {
      return cancelled();
    }
  }
  return store;
}

bool WeightStore::Has(std::string_view name) const {
  return impl_->tensors.find(name) != impl_->tensors.end();
}

StatusOr<TensorView> WeightStore::Get(std::string_view name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in ", dir_));
  }
  const Impl::Entry& e = it->second;
  TensorView v;
  v.name = it->first;
  v.dtype = e.info.dtype;
  v.shape = e.info.shape;
  v.data = e.data;
  v.bytes = e.info.end - e.info.begin;
  v.file = e.file->path();
  return v;
}

StatusOr<TensorView> WeightStore::GetFloat(std::string_view name,
                                           const std::vector<int64_t>& shape) const {
  STRATA_ASSIGN_OR_RETURN(TensorView v, Get(name));
  if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", std::string(name), "' in ", std::string(v.file), ": dtype ",
                     std::string(DTypeName(v.dtype)), ", expected F32, F16 or BF16"));
  }
  if (v.shape != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", std::string(name), "' in ", std::string(v.file),
                     ": expected shape ", ShapeString(shape), ", got ", ShapeString(v.shape)));
  }
  return v;
}

StatusOr<std::vector<float>> WeightStore::GetF32Copy(std::string_view name,
                                                     const std::vector<int64_t>& shape) const {
  STRATA_ASSIGN_OR_RETURN(TensorView v, GetFloat(name, shape));
  const size_t n = static_cast<size_t>(v.NumElements());
  std::vector<float> out(n);
  const size_t elem = DTypeSize(v.dtype);
  if (reinterpret_cast<uintptr_t>(v.data) % elem == 0) {
    ConvertToF32(v.dtype, v.data, out.data(), n);
  } else {
    // The format does not promise alignment (a U8 tensor of odd length can
    // precede this one); converting through typed pointers would be UB.
    std::vector<uint32_t> words((v.bytes + 3) / 4);
    std::memcpy(words.data(), v.data, v.bytes);
    ConvertToF32(v.dtype, words.data(), out.data(), n);
  }
  return out;
}

StatusOr<std::vector<float>> WeightStore::GetF32CopyOfShapes(
    std::string_view name, const std::vector<std::vector<int64_t>>& shapes) const {
  STRATA_ASSIGN_OR_RETURN(TensorView v, Get(name));
  for (const auto& s : shapes) {
    if (v.shape == s) return GetF32Copy(name, s);
  }
  return GetF32Copy(name, shapes.front());
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, e] : impl_->tensors) names.push_back(name);
  return names;
}

uint64_t WeightStore::TotalBytes() const { return impl_->total_bytes; }
int64_t WeightStore::TotalElements() const { return impl_->total_elements; }

}  // namespace strata
