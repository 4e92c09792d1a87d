#include "engine/session_file.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'N'};
constexpr size_t kHeaderBytes = 56;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
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
  // Arrays of 4-byte values (token ids, fp32 logits) and bytes.
  template <typename T>
  void Array(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(T));
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads the body front to back; every error names the source, the offset
// and the field, and no length is trusted before the bytes it claims exist.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& source, size_t base)
      : bytes_(bytes), source_(source), base_(base) {}

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

 private:
  std::span<const uint8_t> bytes_;
  const std::string& source_;
  size_t base_;
  size_t at_ = 0;
};

void WritePoint(Writer& w, const SavedPoint& p) {
  w.U64(p.id);
  w.Array<int32_t>(p.tokens);
  w.U64(p.num_tokens);
  w.U64(p.messages);
  w.Array<float>(p.logits);
  w.Array<uint8_t>(p.state);
}

Status ReadPoint(Reader& r, const std::string& what, SavedPoint* p) {
  STRATA_RETURN_IF_ERROR(r.U64(what + ".id", &p->id));
  STRATA_RETURN_IF_ERROR(r.Array(what + ".tokens", &p->tokens));
  STRATA_RETURN_IF_ERROR(r.U64(what + ".num_tokens", &p->num_tokens));
  STRATA_RETURN_IF_ERROR(r.U64(what + ".messages", &p->messages));
  STRATA_RETURN_IF_ERROR(r.Array(what + ".logits", &p->logits));
  return r.Array(what + ".state", &p->state);
}

// The first field in which `got` differs from `want`, for the refusal.
std::string FingerprintDifference(const ModelFingerprint& got, const ModelFingerprint& want) {
  if (got.architecture != want.architecture) {
    return absl::StrCat("architecture: saved from '", got.architecture, "', this model is '",
                        want.architecture, "'");
  }
  if (got.vocab_size != want.vocab_size) {
    return absl::StrCat("vocab_size: saved with ", got.vocab_size, ", this model has ",
                        want.vocab_size);
  }
  if (got.weights_digest != want.weights_digest) {
    return absl::StrCat("weights_digest: saved from weights ", got.weights_digest.substr(0, 16),
                        "..., this model's are ", want.weights_digest.substr(0, 16),
                        "... (another checkpoint, config or dummy seed)");
  }
  if (got.state_layout != want.state_layout) {
    return absl::StrCat("state_layout: saved as '", got.state_layout, "', this model's is '",
                        want.state_layout, "' (another executor or device)");
  }
  return "";
}

}  // namespace

std::vector<uint8_t> EncodeSession(const ModelFingerprint& model, const SessionImage& s) {
  std::vector<uint8_t> body;
  Writer w(&body);
  w.Str(model.architecture);
  w.Str(model.weights_digest);
  w.Str(model.state_layout);
  w.U64(static_cast<uint64_t>(model.vocab_size));
  w.U64(static_cast<uint64_t>(s.max_context));
  w.Array<int32_t>(s.tokens);
  w.U64(s.evaluated);
  w.Array<float>(s.logits);
  w.Array<uint8_t>(s.state);
  w.U64(s.has_conversation);
  w.Str(s.messages);
  w.Str(s.tools);
  w.U64(s.has_turn_checkpoint);
  WritePoint(w, s.turn_checkpoint);
  w.U64(s.marks.size());
  for (const SavedPoint& m : s.marks) WritePoint(w, m);
  w.U64(s.next_mark);

  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + body.size());
  Writer h(&out);
  h.Raw(kMagic, sizeof(kMagic));
  const uint32_t version[2] = {kSessionFormatVersion, 0};
  h.Raw(version, sizeof(version));
  h.U64(body.size());
  const Sha256Digest sum = Sha256Of(body);
  h.Raw(sum.data(), sum.size());
  h.Raw(body.data(), body.size());
  return out;
}

StatusOr<SessionImage> DecodeSessionBody(std::span<const uint8_t> body,
                                         ModelFingerprint* fp, const std::string& source) {
  Reader r(body, source, kHeaderBytes);
  uint64_t u = 0;
  STRATA_RETURN_IF_ERROR(r.Str("model.architecture", &fp->architecture));
  STRATA_RETURN_IF_ERROR(r.Str("model.weights_digest", &fp->weights_digest));
  STRATA_RETURN_IF_ERROR(r.Str("model.state_layout", &fp->state_layout));
  STRATA_RETURN_IF_ERROR(r.U64("model.vocab_size", &u));
  fp->vocab_size = static_cast<int64_t>(u);
  SessionImage s;
  STRATA_RETURN_IF_ERROR(r.U64("max_context", &u));
  s.max_context = static_cast<int64_t>(u);
  STRATA_RETURN_IF_ERROR(r.Array("tokens", &s.tokens));
  STRATA_RETURN_IF_ERROR(r.U64("evaluated", &s.evaluated));
  STRATA_RETURN_IF_ERROR(r.Array("logits", &s.logits));
  STRATA_RETURN_IF_ERROR(r.Array("state", &s.state));
  STRATA_RETURN_IF_ERROR(r.Bool("has_conversation", &s.has_conversation));
  STRATA_RETURN_IF_ERROR(r.Str("messages", &s.messages));
  STRATA_RETURN_IF_ERROR(r.Str("tools", &s.tools));
  STRATA_RETURN_IF_ERROR(r.Bool("has_turn_checkpoint", &s.has_turn_checkpoint));
  STRATA_RETURN_IF_ERROR(ReadPoint(r, "turn_checkpoint", &s.turn_checkpoint));
  uint64_t marks = 0;
  STRATA_RETURN_IF_ERROR(r.U64("marks", &marks));
  // A mark takes at least its six length and count fields.
  if (marks > body.size() / 48) {
    return r.Fail("marks", absl::StrCat(marks, " marks cannot fit in ", body.size(), " bytes"));
  }
  s.marks.resize(marks);
  for (uint64_t i = 0; i < marks; ++i) {
    STRATA_RETURN_IF_ERROR(ReadPoint(r, absl::StrCat("marks[", i, "]"), &s.marks[i]));
  }
  STRATA_RETURN_IF_ERROR(r.U64("next_mark", &s.next_mark));
  if (!r.done()) return r.Fail("end", "bytes after the last field");
  // Counts that must agree with each other; the model checks the rest.
  if (s.max_context <= 0 || s.tokens.size() > static_cast<uint64_t>(s.max_context)) {
    return absl::DataLossError(absl::StrCat(source, ": max_context ", s.max_context, " for ",
                                            s.tokens.size(), " history tokens"));
  }
  if (s.evaluated > s.tokens.size() || s.tokens.size() - s.evaluated > 1) {
    return absl::DataLossError(absl::StrCat(source, ": evaluated ", s.evaluated, " of ",
                                            s.tokens.size(), " history tokens"));
  }
  if (s.has_turn_checkpoint && s.turn_checkpoint.num_tokens > s.evaluated) {
    return absl::DataLossError(absl::StrCat(source, ": turn checkpoint at ",
                                            s.turn_checkpoint.num_tokens, " of ", s.evaluated,
                                            " evaluated tokens"));
  }
  for (size_t i = 0; i < s.marks.size(); ++i) {
    if (s.marks[i].id == 0 || s.marks[i].id >= s.next_mark ||
        (i > 0 && s.marks[i].id <= s.marks[i - 1].id)) {
      return absl::DataLossError(absl::StrCat(source, ": marks[", i, "].id ", s.marks[i].id,
                                              " (ids ascend, below next_mark ", s.next_mark, ")"));
    }
    if (s.marks[i].tokens.size() > static_cast<uint64_t>(s.max_context)) {
      return absl::DataLossError(absl::StrCat(source, ": marks[", i, "] holds ",
                                              s.marks[i].tokens.size(), " tokens, over max_context ",
                                              s.max_context));
    }
  }
  return s;
}

StatusOr<SessionImage> DecodeSession(std::span<const uint8_t> bytes,
                                     const ModelFingerprint& expected, const std::string& source) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(
        source, ": not a Strata session (", bytes.size() < kHeaderBytes ? "shorter than the "
                                                                         : "no magic in its ",
        kHeaderBytes, "-byte header)"));
  }
  uint32_t version[2];
  std::memcpy(version, bytes.data() + 8, sizeof(version));
  if (version[0] != kSessionFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(source, ": format version ", version[0],
                                                      "; this build reads version ",
                                                      kSessionFormatVersion));
  }
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{bytes[16 + static_cast<size_t>(i)]} << (8 * i);
  if (length != bytes.size() - kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(source, ": offset 16: body length ", length, ", but ",
                                            bytes.size() - kHeaderBytes,
                                            " bytes follow the header (truncated or extended)"));
  }
  const std::span<const uint8_t> body = bytes.subspan(kHeaderBytes);
  const Sha256Digest sum = Sha256Of(body);
  if (std::memcmp(sum.data(), bytes.data() + 24, sum.size()) != 0) {
    return absl::DataLossError(
        absl::StrCat(source, ": offset 24: SHA-256 of the body does not match (corrupted)"));
  }
  ModelFingerprint got;
  StatusOr<SessionImage> image = DecodeSessionBody(body, &got, source);
  // A checksummed body that fails to parse was written by something else.
  STRATA_RETURN_IF_ERROR(image.status());
  if (const std::string diff = FingerprintDifference(got, expected); !diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": saved from another model: ", diff));
  }
  return image;
}

}  // namespace strata
