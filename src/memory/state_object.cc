#include "memory/state_object.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/sealed_bytes.h"
#include "memory/prefix_key.h"

namespace strata {
namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
}  // namespace

std::vector<uint8_t> EncodeStateObject(const ModelFingerprint& model, const StoredPrefix& p) {
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  WriteFingerprint(w, model);
  const Sha256Digest key = PrefixKey(model, p.tokens);
  w.Raw(key.data(), key.size());
  w.U64(0);  // the token range: [0, n)
  w.Array<int32_t>(p.tokens);
  w.U64(static_cast<uint64_t>(p.max_context));
  w.Array<float>(p.logits);
  w.Array<uint8_t>(p.checkpoint);
  return Seal(kMagic, kStateObjectVersion, body);
}

StatusOr<StoredPrefix> DecodeStateObjectBody(std::span<const uint8_t> body, ModelFingerprint* model,
                                             Sha256Digest* key, const std::string& source) {
  ByteReader r(body, source, kSealHeaderBytes);
  STRATA_RETURN_IF_ERROR(ReadFingerprint(r, model));
  const uint8_t* k = nullptr;
  STRATA_RETURN_IF_ERROR(r.Take("key", key->size(), &k));
  std::memcpy(key->data(), k, key->size());
  uint64_t first = 0, context = 0;
  STRATA_RETURN_IF_ERROR(r.U64("first_token", &first));
  if (first != 0) return r.Fail("first_token", absl::StrCat(first, ": objects start at token 0"));
  StoredPrefix p;
  STRATA_RETURN_IF_ERROR(r.Array("tokens", &p.tokens));
  STRATA_RETURN_IF_ERROR(r.U64("max_context", &context));
  if (context == 0 || context < p.tokens.size() || context > (uint64_t{1} << 40)) {
    return r.Fail("max_context", absl::StrCat(context, " for ", p.tokens.size(), " tokens"));
  }
  p.max_context = static_cast<int64_t>(context);
  STRATA_RETURN_IF_ERROR(r.Array("logits", &p.logits));
  STRATA_RETURN_IF_ERROR(r.Array("checkpoint", &p.checkpoint));
  if (!r.done()) return r.Fail("end", "bytes after the last field");
  return p;
}

StatusOr<StoredPrefix> DecodeStateObject(std::span<const uint8_t> bytes,
                                         const ModelFingerprint& expected,
                                         const Sha256Digest& key, const std::string& source) {
  STRATA_ASSIGN_OR_RETURN(
      const std::span<const uint8_t> body,
      Unseal(bytes, kMagic, kStateObjectVersion, "a Strata state object", source));
  ModelFingerprint got;
  Sha256Digest stored{};
  STRATA_ASSIGN_OR_RETURN(StoredPrefix p, DecodeStateObjectBody(body, &got, &stored, source));
  if (const std::string diff = FingerprintDifference(got, expected); !diff.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(source, ": made by another model: ", diff));
  }
  if (stored != key) {
    return absl::DataLossError(absl::StrCat(source, ": holds the key ", ToHex(stored).substr(0, 16),
                                            "..., not the one asked for"));
  }
  if (PrefixKey(got, p.tokens) != key) {
    return absl::DataLossError(
        absl::StrCat(source, ": its ", p.tokens.size(), " tokens do not hash to its key"));
  }
  if (!p.logits.empty() && p.logits.size() != static_cast<size_t>(expected.vocab_size)) {
    return absl::DataLossError(absl::StrCat(source, ": ", p.logits.size(),
                                            " logits; the vocabulary has ", expected.vocab_size));
  }
  return p;
}

}  // namespace strata
