// .npy reader/writer. The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (150, 384), }
// which is parsed with a small strict recursive-descent reader (no eval).
#include "base/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/mmap_file.h"

namespace strata {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// This Abseil build's StrCat does not take std::string_view; copy into a string.
std::string Str(std::string_view v) { return std::string(v); }

static_assert(std::endian::native == std::endian::little,
              ".npy support assumes a little-endian host");

// A value of the header dict.
struct HeaderValue {
  enum Kind { kString, kBool, kTuple } kind = kString;
  std::string str;
  bool boolean = false;
  std::vector<int64_t> tuple;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view label, std::string_view text) : label_(label), s_(text) {}

  StatusOr<std::map<std::string, HeaderValue>> Parse() {
    std::map<std::string, HeaderValue> out;
    SkipSpace();
    if (!Consume('{')) return Error("header does not start with '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      STRATA_ASSIGN_OR_RETURN(std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key '", key, "'"));
      SkipSpace();
      STRATA_ASSIGN_OR_RETURN(HeaderValue value, ParseValue());
      if (!out.emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("duplicate key '", key, "'"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return Error("expected ',' or '}' in the header dict");
    }
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the header dict");
    return out;
  }

 private:
  Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Str(label_), ": malformed .npy header at offset ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }
  StatusOr<std::string> ParseString() {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = s_[pos_++];
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') return Error("escape sequences are not supported");
      ++pos_;
    }
    if (pos_ >= s_.size()) return Error("unterminated string");
    std::string out(s_.substr(start, pos_ - start));
    ++pos_;
    return out;
  }
  StatusOr<int64_t> ParseInt() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int d = s_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) return Error("dimension overflows");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ == start) return Error("expected a non-negative integer dimension");
    // Python 2 era files may carry an 'L' suffix on longs.
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
    return v;
  }
  StatusOr<HeaderValue> ParseValue() {
    HeaderValue v;
    if (pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"')) {
      v.kind = HeaderValue::kString;
      STRATA_ASSIGN_OR_RETURN(v.str, ParseString());
      return v;
    }
    if (ConsumeWord("True")) {
      v.kind = HeaderValue::kBool;
      v.boolean = true;
      return v;
    }
    if (ConsumeWord("False")) {
      v.kind = HeaderValue::kBool;
      v.boolean = false;
      return v;
    }
    if (Consume('(')) {
      v.kind = HeaderValue::kTuple;
      while (true) {
        SkipSpace();
        if (Consume(')')) break;
        STRATA_ASSIGN_OR_RETURN(int64_t d, ParseInt());
        v.tuple.push_back(d);
        SkipSpace();
        if (Consume(',')) continue;
        SkipSpace();
        if (Consume(')')) break;
        return Error("expected ',' or ')' in the shape tuple");
      }
      return v;
    }
    return Error("expected a string, True, False or a tuple");
  }

  std::string_view label_;
  std::string_view s_;
  size_t pos_ = 0;
};

uint32_t ReadLe(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::optional<DType> DTypeFromDescr(std::string_view d) {
  if (d == "<f4") return DType::kF32;
  if (d == "<i4") return DType::kI32;
  if (d == "<i8") return DType::kI64;
  return std::nullopt;
}

std::string_view DescrOf(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    default: return "";
  }
}

// MappedFile: errors name the path, and a directory or FIFO is refused.
StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return std::vector<uint8_t>(file->data(), file->data() + file->size());
}

Status WriteWholeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return OkStatus();
}

}  // namespace

int64_t NpyArray::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<NpyArray> ParseNpy(std::string_view label, const uint8_t* bytes, size_t size) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(Str(label), ": not a valid .npy file: ", what));
  };
  if (size < kMagicLen + 2 || std::memcmp(bytes, kMagic, kMagicLen) != 0) {
    return bad("missing the \\x93NUMPY magic");
  }
  const int major = bytes[6];
  const int minor = bytes[7];
  size_t len_bytes;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    return bad(absl::StrCat("unsupported format version ", major, ".", minor));
  }
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (size < prefix) return bad("truncated before the header length");
  const uint64_t header_len = ReadLe(bytes + 8, static_cast<int>(len_bytes));
  if (header_len > size - prefix) {
    return bad(absl::StrCat("header length ", header_len, " runs past the end of the file (",
                            size, " bytes)"));
  }
  std::string_view header(reinterpret_cast<const char*>(bytes + prefix), header_len);
  STRATA_ASSIGN_OR_RETURN(auto dict, HeaderParser(label, header).Parse());

  auto descr = dict.find("descr");
  auto fortran = dict.find("fortran_order");
  auto shape = dict.find("shape");
  if (descr == dict.end() || descr->second.kind != HeaderValue::kString) {
    return bad("header has no string 'descr'");
  }
  if (fortran == dict.end() || fortran->second.kind != HeaderValue::kBool) {
    return bad("header has no boolean 'fortran_order'");
  }
  if (shape == dict.end() || shape->second.kind != HeaderValue::kTuple) {
    return bad("header has no tuple 'shape'");
  }
  const std::string& d = descr->second.str;
  std::optional<DType> dtype = DTypeFromDescr(d);
  if (!dtype) {
    if (!d.empty() && d[0] == '>') {
      return bad(absl::StrCat("big-endian dtype '", d, "' is not supported (save little-endian)"));
    }
    return bad(absl::StrCat("dtype '", d, "' is not supported (want '<f4', '<i4' or '<i8')"));
  }
  if (fortran->second.boolean) {
    return bad("Fortran-order arrays are not supported (save with C order)");
  }

  NpyArray arr;
  arr.dtype = *dtype;
  arr.shape = shape->second.tuple;
  const size_t item = DTypeSize(arr.dtype);
  const uint64_t data_bytes = size - prefix - header_len;
  // Element count, bounded by the elements the data section can hold so that a
  // hostile shape cannot overflow the multiplication.
  const uint64_t max_elems = data_bytes / item;
  uint64_t count = 1;
  bool zero = false;
  for (int64_t dim : arr.shape) zero = zero || dim == 0;
  if (zero) {
    count = 0;
  } else {
    for (int64_t dim : arr.shape) {
      if (static_cast<uint64_t>(dim) > max_elems / count) {
        return bad(absl::StrCat("shape (", absl::StrJoin(arr.shape, ", "), ") of ", d,
                                " needs more data than the file holds (", data_bytes,
                                " bytes; truncated)"));
      }
      count *= static_cast<uint64_t>(dim);
    }
  }
  const uint64_t want = count * item;
  if (want != data_bytes) {
    return bad(absl::StrCat("shape (", absl::StrJoin(arr.shape, ", "), ") of ", d, " needs ", want,
                            " data bytes but the file holds ", data_bytes,
                            want > data_bytes ? " (truncated)" : " (trailing bytes)"));
  }
  arr.data.assign(bytes + prefix + header_len, bytes + size);
  return arr;
}

StatusOr<NpyArray> ReadNpy(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path));
  return ParseNpy(path, bytes.data(), bytes.size());
}

StatusOr<std::vector<int32_t>> ReadNpyInt32(const std::string& path, std::vector<int64_t>* shape) {
  STRATA_ASSIGN_OR_RETURN(NpyArray arr, ReadNpy(path));
  const int64_t n = arr.NumElements();
  std::vector<int32_t> out(static_cast<size_t>(n));
  if (arr.dtype == DType::kI32) {
    std::memcpy(out.data(), arr.data.data(), out.size() * 4);
  } else if (arr.dtype == DType::kI64) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, arr.data.data() + i * 8, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": element ", i, " = ", v,
                                                       " does not fit in int32"));
      }
      out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an integer array ('<i4' or '<i8'), got ", Str(DescrOf(arr.dtype))));
  }
  if (shape) *shape = arr.shape;
  return out;
}

StatusOr<std::vector<float>> ReadNpyFloat32(const std::string& path, std::vector<int64_t>* shape) {
  STRATA_ASSIGN_OR_RETURN(NpyArray arr, ReadNpy(path));
  if (arr.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a float32 array ('<f4'), got ", Str(DescrOf(arr.dtype))));
  }
  std::vector<float> out(static_cast<size_t>(arr.NumElements()));
  std::memcpy(out.data(), arr.data.data(), out.size() * 4);
  if (shape) *shape = arr.shape;
  return out;
}

StatusOr<std::vector<uint8_t>> SerializeNpy(DType dtype, std::span<const int64_t> shape,
                                            const void* values, size_t num_values) {
  const std::string_view descr = DescrOf(dtype);
  if (descr.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("npy: cannot write dtype ", Str(DTypeName(dtype))));
  }
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("npy: negative dimension");
    count *= static_cast<uint64_t>(d);
  }
  if (count != num_values) {
    return absl::InvalidArgumentError(absl::StrCat("npy: shape has ", count, " elements but ",
                                                   num_values, " values were given"));
  }
  std::string shape_text;
  if (shape.empty()) {
    shape_text = "()";
  } else if (shape.size() == 1) {
    shape_text = absl::StrCat("(", shape[0], ",)");  // Python's one-element tuple
  } else {
    shape_text = absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  }
  std::string header = absl::StrCat("{'descr': '", Str(descr), "', 'fortran_order': False, 'shape': ",
                                    shape_text, ", }");
  // Pad with spaces and a final newline so that magic + version + length + header
  // is a multiple of 64 (NumPy's alignment); version 2.0 only when the header
  // does not fit a 16-bit length.
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  if ((prefix + header.size() + 1 + 63) / 64 * 64 - prefix > 65535) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
  }
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header.push_back('\n');

  const size_t item = DTypeSize(dtype);
  std::vector<uint8_t> out;
  out.reserve(total + count * item);
  out.insert(out.end(), kMagic, kMagic + kMagicLen);
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  const uint32_t hl = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out.push_back(static_cast<uint8_t>(hl >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  const uint8_t* p = static_cast<const uint8_t*>(values);
  out.insert(out.end(), p, p + count * item);
  return out;
}

Status WriteNpyFloat32(const std::string& path, std::span<const int64_t> shape,
                       std::span<const float> values) {
  auto bytes = SerializeNpy(DType::kF32, shape, values.data(), values.size());
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  return WriteWholeFile(path, *bytes);
}

Status WriteNpyInt32(const std::string& path, std::span<const int64_t> shape,
                     std::span<const int32_t> values) {
  auto bytes = SerializeNpy(DType::kI32, shape, values.data(), values.size());
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  return WriteWholeFile(path, *bytes);
}

}  // namespace strata
