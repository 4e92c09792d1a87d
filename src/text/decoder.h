// Decoders of tokenizer.json (ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace, Sequence) as the reference tokenizers library applies them: each
// step maps the list of token strings to a new list (its decode_chain), and the
// decoded text is the concatenation of the final list.
#ifndef STRATA_TEXT_DECODER_H_
#define STRATA_TEXT_DECODER_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace strata::text {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // tokenizers' decode_chain. Every string is valid UTF-8 before and after.
  virtual Status DecodeChain(std::vector<std::string>* tokens) const = 0;

  // What one token contributes when tokens are decoded one at a time (for
  // streaming, Tokenizer::TokenBytes): the per-token part of the chain.
  // ByteLevel and ByteFallback give raw bytes (possibly part of a UTF-8
  // sequence), Replace and Metaspace map characters; what depends on a
  // token's neighbours or position is left out (ByteFallback's replacement of
  // an invalid byte run, Fuse, Strip, Metaspace's first-token rule), so for
  // Llama-style chains the concatenation can differ from DecodeChain in a
  // leading space.
  virtual void StreamBytes(std::string* token) const = 0;

  // True when the chain is ByteLevel alone: decoding is then the
  // concatenation of StreamBytes, made valid UTF-8 (the fast path).
  virtual bool IsByteLevelOnly() const { return false; }

  // `where` names the file and JSON path for error messages. A null JSON
  // value gives nullptr (no decoder: tokens are joined with spaces).
  static StatusOr<std::unique_ptr<Decoder>> FromJson(const nlohmann::json& j,
                                                     const std::string& where);
};

}  // namespace strata::text

#endif  // STRATA_TEXT_DECODER_H_
