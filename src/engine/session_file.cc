#include "engine/session_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/sealed_bytes.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'N'};

void WritePoint(ByteWriter& w, const SavedPoint& p) {
  w.U64(p.id);
  w.Array<int32_t>(p.tokens);
  w.U64(p.num_tokens);
  w.U64(p.messages);
  w.Array<float>(p.logits);
  w.Array<uint8_t>(p.state);
}

Status ReadPoint(ByteReader& r, const std::string& what, SavedPoint* p) {
  STRATA_RETURN_IF_ERROR(r.U64(what + ".id", &p->id));
  STRATA_RETURN_IF_ERROR(r.Array(what + ".tokens", &p->tokens));
  STRATA_RETURN_IF_ERROR(r.U64(what + ".num_tokens", &p->num_tokens));
  STRATA_RETURN_IF_ERROR(r.U64(what + ".messages", &p->messages));
  STRATA_RETURN_IF_ERROR(r.Array(what + ".logits", &p->logits));
  return r.Array(what + ".state", &p->state);
}

}  // namespace

std::vector<uint8_t> EncodeSession(const ModelFingerprint& model, const SessionImage& s) {
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  WriteFingerprint(w, model);
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

  return Seal(kMagic, kSessionFormatVersion, body);
}

StatusOr<SessionImage> DecodeSessionBody(std::span<const uint8_t> body,
                                         ModelFingerprint* fp, const std::string& source) {
  ByteReader r(body, source, kSealHeaderBytes);
  uint64_t u = 0;
  STRATA_RETURN_IF_ERROR(ReadFingerprint(r, fp));
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
  STRATA_ASSIGN_OR_RETURN(const std::span<const uint8_t> body,
                          Unseal(bytes, kMagic, kSessionFormatVersion, "a Strata session", source));
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
