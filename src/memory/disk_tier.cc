#include "memory/disk_tier.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/file_error.h"
#include "base/read_file.h"
#include "base/write_file.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
constexpr std::string_view kSuffix = ".kv";

// Keys are file names: lowercase hex only, so no key can leave the directory.
bool IsKey(std::string_view key) {
  return !key.empty() && key.size() <= 128 &&
         std::all_of(key.begin(), key.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
}  // namespace

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, uint64_t capacity) {
  if (capacity == 0) return absl::InvalidArgumentError("the disk tier needs a capacity above 0 bytes");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FileError(absl::StrCat("creating the disk tier directory ", dir), ec);
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));
  }
  auto tier = std::unique_ptr<DiskTier>(new DiskTier(dir, capacity));
  // What is there already, oldest first, so that the newest end up in front.
  struct Found {
    std::string key;
    uint64_t bytes;
    fs::file_time_type when;
  };
  std::vector<Found> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    const std::string key = name.substr(0, name.size() - kSuffix.size());
    std::error_code e;
    if (!IsKey(key) || !it->is_regular_file(e)) continue;
    found.push_back({key, it->file_size(e), it->last_write_time(e)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.when < b.when; });
  std::lock_guard<std::mutex> lock(tier->mu_);
  for (const Found& f : found) tier->TouchLocked(f.key, f.bytes);
  return tier;
}

std::string DiskTier::PathOf(std::string_view key) const {
  return (fs::path(dir_) / (std::string(key) + std::string(kSuffix))).string();
}

void DiskTier::TouchLocked(std::string_view key, uint64_t bytes) {
  if (auto it = by_key_.find(std::string(key)); it != by_key_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front({std::string(key), bytes});
  by_key_.emplace(std::string(key), lru_.begin());
  bytes_ += bytes;
}

void DiskTier::EraseLocked(std::string_view key) {
  auto it = by_key_.find(std::string(key));
  if (it == by_key_.end()) return;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  by_key_.erase(it);
}

Status DiskTier::Put(std::string_view key, std::span<const uint8_t> bytes) {
  if (!IsKey(key)) return absl::InvalidArgumentError("disk tier: '" + std::string(key) + "' is not a key");
  if (bytes.size() > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("disk tier: an object of ", bytes.size(),
                                                     " bytes exceeds the capacity of ", capacity_));
  }
  std::vector<std::string> evict;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_key_.contains(std::string(key))) return OkStatus();  // write-once
    uint64_t room = bytes_;
    for (auto it = lru_.rbegin(); it != lru_.rend() && room + bytes.size() > capacity_; ++it) {
      evict.push_back(it->key);
      room -= it->bytes;
    }
    for (const std::string& k : evict) EraseLocked(k);
  }
  for (const std::string& k : evict) {
    std::error_code ec;
    fs::remove(PathOf(k), ec);
  }
  STRATA_RETURN_IF_ERROR(WriteFileAtomically(PathOf(key), bytes, /*durable=*/false));
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked(key, bytes.size());
  return OkStatus();
}

Status DiskTier::Get(std::string_view key, std::vector<uint8_t>* out) {
  if (!IsKey(key)) return absl::NotFoundError("disk tier: '" + std::string(key) + "' is not a key");
  StatusOr<std::string> data = ReadFileToString(PathOf(key));
  if (!data.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    EraseLocked(key);  // evicted by another process, or never there
    return absl::NotFoundError("disk tier: no object " + std::string(key));
  }
  out->assign(data->begin(), data->end());
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked(key, out->size());
  return OkStatus();
}

bool DiskTier::Contains(std::string_view key) const {
  if (!IsKey(key)) return false;
  std::error_code ec;
  return fs::is_regular_file(PathOf(key), ec);
}

void DiskTier::Erase(std::string_view key) {
  if (!IsKey(key)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    EraseLocked(key);
  }
  std::error_code ec;
  fs::remove(PathOf(key), ec);
}

uint64_t DiskTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace strata
