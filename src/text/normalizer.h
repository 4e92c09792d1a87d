// Normalizers of tokenizer.json (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents,
// Nmt, ByteLevel, Sequence, Replace, Prepend, Strip): applied to the text
// between added tokens before pre-tokenization.
#ifndef STRATA_TEXT_NORMALIZER_H_
#define STRATA_TEXT_NORMALIZER_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace strata::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `s` is valid UTF-8 and stays so.
  Status Normalize(std::string* s) const {
    bool start_kept = true;
    return Apply(s, &start_kept);
  }
  // The same, also tracking whether the text still begins where the input
  // began: *start_kept is cleared when leading characters were deleted (or
  // replaced as a run), so that the reference's alignments would put the
  // normalized text after offset 0. The Metaspace pre-tokenizer's "first"
  // prepend scheme looks at that.
  Status Normalize(std::string* s, bool* start_kept) const { return Apply(s, start_kept); }

  // `where` names the file and JSON path for error messages. A null JSON
  // value gives nullptr (no normalizer).
  static StatusOr<std::unique_ptr<Normalizer>> FromJson(const nlohmann::json& j,
                                                        const std::string& where);

 protected:
  virtual Status Apply(std::string* s, bool* start_kept) const = 0;
};

}  // namespace strata::text

#endif  // STRATA_TEXT_NORMALIZER_H_
