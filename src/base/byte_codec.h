// Little-endian byte encoding for the formats Strata writes itself (saved
// sessions, stored state objects): a Writer appending fixed-width integers,
// length-prefixed strings and arrays, and a Reader that trusts no length
// before the bytes it claims exist and names the source, the offset and the
// field in every error (DataLoss).
#ifndef STRATA_BASE_BYTE_CODEC_H_
#define STRATA_BASE_BYTE_CODEC_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace strata {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Raw(b, 8);
  }
  void Str(std::string_view s) {
    U64(s.size());
    Raw(s.data(), s.size());
  }
  // Arrays of trivially copyable values (token ids, fp32 logits, bytes).
  template <typename T>
  void Array(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(T));
  }

 private:
  std::vector<uint8_t>* out_;
};

class ByteReader {
 public:
  // `base`: the offset of bytes[0] in the file, for messages.
  ByteReader(std::span<const uint8_t> bytes, std::string source, size_t base)
      : bytes_(bytes), source_(std::move(source)), base_(base) {}

  Status Fail(const std::string& field, const std::string& what) const {
    return absl::DataLossError(
        absl::StrCat(source_, ": offset ", base_ + at_, ": ", field, ": ", what));
  }
  Status Take(const std::string& field, size_t n, const uint8_t** p) {
    if (n > bytes_.size() - at_) {
      return Fail(field, absl::StrCat("needs ", n, " bytes, ", bytes_.size() - at_, " left"));
    }
    *p = bytes_.data() + at_;
    at_ += n;
    return OkStatus();
  }
  Status U64(const std::string& field, uint64_t* v) {
    const uint8_t* p = nullptr;
    STRATA_RETURN_IF_ERROR(Take(field, 8, &p));
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{p[i]} << (8 * i);
    return OkStatus();
  }
  Status Bool(const std::string& field, bool* v) {
    uint64_t x = 0;
    STRATA_RETURN_IF_ERROR(U64(field, &x));
    if (x > 1) return Fail(field, absl::StrCat("is ", x, ", not 0 or 1"));
    *v = x == 1;
    return OkStatus();
  }
  Status Str(const std::string& field, std::string* s) {
    uint64_t n = 0;
    const uint8_t* p = nullptr;
    STRATA_RETURN_IF_ERROR(U64(field, &n));
    STRATA_RETURN_IF_ERROR(Take(field, n, &p));
    s->assign(reinterpret_cast<const char*>(p), n);
    return OkStatus();
  }
  template <typename T>
  Status Array(const std::string& field, std::vector<T>* v) {
    uint64_t n = 0;
    const uint8_t* p = nullptr;
    STRATA_RETURN_IF_ERROR(U64(field, &n));
    if (n > (bytes_.size() - at_) / sizeof(T)) {
      return Fail(field, absl::StrCat(n, " elements of ", sizeof(T), " bytes, ",
                                      bytes_.size() - at_, " bytes left"));
    }
    STRATA_RETURN_IF_ERROR(Take(field, n * sizeof(T), &p));
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), p, n * sizeof(T));
    return OkStatus();
  }
  bool done() const { return at_ == bytes_.size(); }
  size_t offset() const { return base_ + at_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string source_;
  size_t base_;
  size_t at_ = 0;
};

}  // namespace strata

#endif  // STRATA_BASE_BYTE_CODEC_H_
