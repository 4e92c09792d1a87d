// ParseSafetensorsHeader: the only code that reads untrusted checkpoint bytes
// before anything else looks at them, so every field is checked for type, range
// and overflow, and the tensors must tile the data section exactly (as the
// reference implementation demands) so no byte is read by two tensors and a
// truncated file cannot go unnoticed.
#include "model/safetensors.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_join.h"
#include "model/strict_json.h"

namespace strata {
namespace {

using nlohmann::json;

// The reference implementation refuses headers over 100 MB; real ones are a
// few hundred KB even for thousands of tensors. Refusing early avoids building
// a huge DOM from a hostile length field.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// A safetensors header is object -> tensor object -> shape array.
constexpr int kMaxJsonDepth = 8;
constexpr char kMetadataKey[] = "__metadata__";

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Reads a JSON integer that must lie in [0, INT64_MAX]. Floats are refused even
// when integral: the format stores shapes and offsets as integers.
bool GetNonNegative(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

// A short rendering of a JSON value for messages; bounded so a hostile header
// cannot make an error message megabytes long.
std::string Brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

class HeaderParser {
 public:
  HeaderParser(std::string file, uint64_t data_size)
      : file_(std::move(file)), data_size_(data_size) {}

  Status TensorError(const std::string& name, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": tensor '", name, "': ", what));
  }

  StatusOr<SafetensorsTensor> ParseTensor(const std::string& name, const json& entry) const {
    if (!entry.is_object()) {
      return TensorError(name, absl::StrCat("expected an object with dtype, shape and "
                                            "data_offsets, got ",
                                            Brief(entry)));
    }
    SafetensorsTensor t;
    t.name = name;

    const auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end()) return TensorError(name, "missing 'dtype'");
    if (!dtype_it->is_string()) {
      return TensorError(name, absl::StrCat("'dtype' must be a string, got ", Brief(*dtype_it)));
    }
    const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
    if (!ParseDTypeName(dtype_name, &t.dtype)) {
      return TensorError(
          name, absl::StrCat("unknown or unsupported dtype '", dtype_name.substr(0, 40), "'"));
    }

    const auto shape_it = entry.find("shape");
    if (shape_it == entry.end()) return TensorError(name, "missing 'shape'");
    if (!shape_it->is_array()) {
      return TensorError(name, absl::StrCat("'shape' must be an array, got ", Brief(*shape_it)));
    }
    uint64_t elements = 1;
    for (size_t i = 0; i < shape_it->size(); ++i) {
      uint64_t d;
      if (!GetNonNegative((*shape_it)[i], &d)) {
        return TensorError(name, absl::StrCat("shape[", i, "] must be a non-negative integer, got ",
                                              Brief((*shape_it)[i])));
      }
      t.shape.push_back(static_cast<int64_t>(d));
      // A zero dimension makes the product 0 whatever follows, so later huge
      // dimensions cannot overflow it; still each one must fit in int64.
      if (__builtin_mul_overflow(elements, d, &elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return TensorError(name, absl::StrCat("shape ", Brief(*shape_it),
                                              " has more elements than fit in 64 bits"));
      }
    }

    const auto off_it = entry.find("data_offsets");
    if (off_it == entry.end()) return TensorError(name, "missing 'data_offsets'");
    uint64_t begin = 0, end = 0;
    if (!off_it->is_array() || off_it->size() != 2 || !GetNonNegative((*off_it)[0], &begin) ||
        !GetNonNegative((*off_it)[1], &end)) {
      return TensorError(name, absl::StrCat("'data_offsets' must be [begin, end] with "
                                            "non-negative integers, got ",
                                            Brief(*off_it)));
    }
    if (begin > end) {
      return TensorError(name, absl::StrCat("data_offsets [", begin, ", ", end, "] are reversed"));
    }
    if (end > data_size_) {
      return absl::DataLossError(absl::StrCat(file_, ": tensor '", name, "': data_offsets [", begin,
                                              ", ", end, "] run past the end of the data section (",
                                              data_size_, " bytes); is the file truncated?"));
    }
    uint64_t need;
    if (__builtin_mul_overflow(elements, DTypeSize(t.dtype), &need) || need != end - begin) {
      return TensorError(name, absl::StrCat(std::string(DTypeName(t.dtype)), " shape ",
                                            ShapeString(t.shape), " needs ", elements, " x ",
                                            DTypeSize(t.dtype), " bytes but data_offsets [", begin,
                                            ", ", end, "] span ", end - begin));
    }
    t.begin = begin;
    t.end = end;
    return t;
  }

  Status ParseMetadata(const json& m, std::map<std::string, std::string>* out) const {
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_, ": '__metadata__' must be an object of strings, got ", Brief(m)));
    }
    for (const auto& [key, value] : m.items()) {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(file_, ": '__metadata__' entry '", key,
                                                       "' must be a string, got ", Brief(value)));
      }
      (*out)[key] = value.get<std::string>();
    }
    return OkStatus();
  }

  // The tensors, sorted by offset, must cover [0, data_size) with no byte
  // shared and none left over. Empty tensors may sit anywhere in the sequence.
  Status CheckTiling(const std::vector<SafetensorsTensor>& sorted) const {
    uint64_t covered = 0;
    const SafetensorsTensor* prev = nullptr;
    for (const SafetensorsTensor& t : sorted) {
      if (t.begin < covered) {
        return TensorError(
            t.name, absl::StrCat("data_offsets [", t.begin, ", ", t.end, "] overlap tensor '",
                                 prev->name, "' [", prev->begin, ", ", prev->end, "]"));
      }
      if (t.begin > covered) {
        return TensorError(t.name, absl::StrCat("data_offsets [", t.begin, ", ", t.end,
                                                "] leave a gap: bytes [", covered, ", ", t.begin,
                                                ") of the data section belong to no tensor"));
      }
      covered = t.end;
      if (t.end > t.begin) prev = &t;
    }
    if (covered != data_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_, ": the tensors cover ", covered, " bytes of the data section but it holds ",
          data_size_, " bytes (trailing bytes belong to no tensor)"));
    }
    return OkStatus();
  }

 private:
  std::string file_;
  uint64_t data_size_;
};

}  // namespace

int64_t SafetensorsTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the parser guarantees this cannot overflow
  return n;
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_name,
                                                   const uint8_t* file_bytes, uint64_t file_size) {
  // absl::StrCat takes absl::string_view, which is not std::string_view in
  // every Abseil build; one copy of a short name is the simplest bridge.
  const std::string file(file_name);
  if (file_size < 8) {
    return absl::DataLossError(absl::StrCat(file, ": file is ", file_size,
                                            " bytes, too short for the 8-byte header length"));
  }
  if (file_bytes == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no bytes given"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file_bytes[i];  // little-endian on any host
  if (n > file_size - 8) {
    return absl::DataLossError(absl::StrCat(file, ": header length ", n,
                                            " at offset 0 runs past the end of the file (size ",
                                            file_size, ")"));
  }
  if (n > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }

  SafetensorsHeader header;
  header.header_bytes = n;
  header.data_offset = 8 + n;
  const uint64_t data_size = file_size - header.data_offset;

  StrictJsonOptions opts;
  opts.max_depth = kMaxJsonDepth;
  opts.offset_base = 8;
  opts.reject_duplicate_keys = true;
  const std::string_view text(reinterpret_cast<const char*>(file_bytes + 8),
                              static_cast<size_t>(n));
  // A duplicate top-level key is a tensor named twice; nlohmann alone would
  // silently keep the last one.
  STRATA_ASSIGN_OR_RETURN(const json root, ParseStrictJson(file, text, opts));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": header must be a JSON object, got ", Brief(root)));
  }

  HeaderParser parser(file, data_size);
  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      STRATA_RETURN_IF_ERROR(parser.ParseMetadata(entry, &header.metadata));
      continue;
    }
    if (name.empty()) return parser.TensorError(name, "empty tensor name");
    STRATA_ASSIGN_OR_RETURN(SafetensorsTensor t, parser.ParseTensor(name, entry));
    header.tensors.push_back(std::move(t));
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  STRATA_RETURN_IF_ERROR(parser.CheckTiling(header.tensors));
  return header;
}

}  // namespace strata
