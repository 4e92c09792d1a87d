// Normalizers of tokenizer.json (NFC, NFD, Sequence, Replace, Prepend, Strip):
// applied to the text between added tokens before pre-tokenization.
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
  virtual Status Normalize(std::string* s) const = 0;

  // `where` names the file and JSON path for error messages. A null JSON
  // value gives nullptr (no normalizer).
  static StatusOr<std::unique_ptr<Normalizer>> FromJson(const nlohmann::json& j,
                                                        const std::string& where);
};

}  // namespace strata::text

#endif  // STRATA_TEXT_NORMALIZER_H_
