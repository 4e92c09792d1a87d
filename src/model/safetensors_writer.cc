// SafetensorsWriter. The header text is assembled by hand rather than through a
// JSON object so that entries keep insertion order and so that tests can build
// deliberately broken files (a name added twice, bytes that do not match the
// shape) that the parser must then reject.
#include "model/safetensors_writer.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_join.h"

namespace strata {
namespace {

// JSON string literal for `s`; invalid UTF-8 is replaced rather than thrown on.
std::string Quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

template <typename T>
void AppendRaw(std::vector<uint8_t>* out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->insert(out->end(), b, b + sizeof(T));
}

}  // namespace

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::AddF32(std::string name, DType dtype, std::vector<int64_t> shape,
                               const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  bytes.reserve(values.size() * DTypeSize(dtype));
  for (float v : values) {
    switch (dtype) {
      case DType::kF32:
        AppendRaw(&bytes, v);
        break;
      case DType::kF16:
        AppendRaw(&bytes, F32ToF16(v));
        break;
      case DType::kBF16:
        AppendRaw(&bytes, F32ToBf16(v));
        break;
      // Integer types are not what AddF32 is for, but rounding is the only
      // sensible meaning if a test asks for them.
      case DType::kI32:
        AppendRaw(&bytes, static_cast<int32_t>(std::lrint(v)));
        break;
      case DType::kI64:
        AppendRaw(&bytes, static_cast<int64_t>(std::llrint(v)));
        break;
      case DType::kU8:
        AppendRaw(&bytes, static_cast<uint8_t>(std::lrint(v)));
        break;
      case DType::kF8E4M3:
        AppendRaw(&bytes, F32ToF8E4M3(v));
        break;
    }
  }
  Add(std::move(name), dtype, std::move(shape), std::move(bytes));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<uint8_t> SafetensorsWriter::Serialize() const {
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata_) {
      if (!first) header += ",";
      first = false;
      absl::StrAppend(&header, Quote(key), ":", Quote(value));
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    if (!header.empty() && header.back() != '{') header += ",";
    const uint64_t end = offset + e.bytes.size();
    absl::StrAppend(&header, Quote(e.name), ":{\"dtype\":\"", std::string(DTypeName(e.dtype)),
                    "\",\"shape\":[", absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", offset,
                    ",", end, "]}");
    offset = end;
  }
  header += "}";
  // Spaces are valid trailing JSON whitespace; padding puts the data section
  // on an 8-byte boundary so mapped F32/I64 tensors are naturally aligned.
  while (header.size() % 8 != 0) header += ' ';

  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (const Entry& e : entries_) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

Status SafetensorsWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = Serialize();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat(path, ": cannot create: ", std::strerror(err)));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_err = errno;
  // fclose flushes, so its failure is a failed write too (e.g. disk full).
  if (std::fclose(f) != 0 || written != bytes.size()) {
    return absl::DataLossError(absl::StrCat(path, ": write failed after ", written, " of ",
                                            bytes.size(), " bytes: ", std::strerror(write_err)));
  }
  return OkStatus();
}

}  // namespace strata
